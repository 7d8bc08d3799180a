from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
# The Ansible content: the collection gpu_provisioner.node (see provisioner/paths.py).
COLLECTION = REPO / "ansible_collections" / "gpu_provisioner" / "node"
ROLES, PLAYBOOKS, MODULES = COLLECTION / "roles", COLLECTION / "playbooks", COLLECTION / "plugins" / "modules"


def load_module(name: str):
    """One of the collection's modules (plugins/modules/NAME.py) imported as Python, to call its functions."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, MODULES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FIXTURES = DATA / "fixtures"


def _fixtures() -> Path:
    # Real tool outputs captured on GPU machines, copied into the repository with their
    # provenance (tests/data/fixtures/SOURCES.md), so a clone runs its tests by itself.
    return FIXTURES


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return _fixtures()


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    """An inventory of this machine over the local connection, with the controller's Python."""
    path = tmp_path / "hosts.ini"
    path.write_text('[local]\nlocalhost ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"\n')
    return path


def require(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


# --------------------------------------------------------------------------- no silent lab skips
# CI sets PROVISION_REQUIRE_LAB=1 (scripts/ci-stages' lab stage): there a lab or Molecule test
# that skips (no root, no podman, no molecule, no torch wheel) fails the run, named with its
# reason, instead of letting a green run hide that the lab never ran.
_LAB_MARKS = {"lab", "molecule"}
_lab_skips: list[tuple[str, str]] = []


def _is_lab(report) -> bool:
    path = str(getattr(report, "fspath", "") or report.nodeid)
    return "tests/integration/" in path.replace(os.sep, "/") or bool(_LAB_MARKS & set(getattr(report, "keywords", {}) or {}))


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _note_lab_skip(report) -> None:
    if report.skipped and _is_lab(report):
        _lab_skips.append((report.nodeid, _skip_reason(report)))


pytest_collectreport = pytest_runtest_logreport = _note_lab_skip  # a module skipped, or one test


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("PROVISION_REQUIRE_LAB") == "1" and _lab_skips:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"PROVISION_REQUIRE_LAB=1: {len(_lab_skips)} lab test(s) skipped, which fails this run:"]
        lines += [f"  {nodeid}: {reason}" for nodeid, reason in _lab_skips]
        if reporter:
            reporter.ensure_newline()
            reporter.write_line("\n".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
