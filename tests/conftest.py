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

# ------------------------------------------------------------------ the package index tests resolve in
# provisioner/data/catalogue/ is a dated, cited snapshot of NVIDIA's CUDA repository: true, not
# complete (issue 27), so a built-in profile names versions it does not list. NVIDIA's
# repository cannot be reached from here either. So the tests that are not lab tests resolve
# profiles offline ($PROVISION_PACKAGE_INDEX=snapshot) against CATALOGUE_FIXTURE instead: an
# invented index with every package the built-ins name (its header says so). Tests of the
# snapshot itself read SNAPSHOT_DIR by path; lab tests resolve live against the lab's stand-in
# repository, and tests/test_aptindex.py against real signed indexes.
SNAPSHOT_DIR = REPO / "provisioner" / "data" / "catalogue"
CATALOGUE_FIXTURE = DATA / "catalogue"


@pytest.fixture(autouse=True)
def _packages_from_the_fixture_index(request, monkeypatch):
    if not {"lab", "molecule"} & {m.name for m in request.node.iter_markers()}:
        from provisioner.profiles import catalogue

        monkeypatch.setenv("PROVISION_PACKAGE_INDEX", "snapshot")
        monkeypatch.setattr(catalogue, "CATALOGUE_DIR", CATALOGUE_FIXTURE)
    yield


@pytest.fixture(autouse=True, scope="session")
def _state_of_the_test_run(tmp_path_factory):
    """The profiles `up` keeps for rollbacks (paths.state_dir) and the caches (the inventory
    kept between runs, read indexes) go to folders of this test run, never the user's own;
    lab tests' `provision` subprocesses inherit them."""
    saved = {name: os.environ.get(name) for name in ("XDG_STATE_HOME", "XDG_CACHE_HOME")}
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    for name, old in saved.items():
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


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


# --------------------------------------------------------------------------- markers tell the truth
# A test that runs Ansible (a playbook, an ad-hoc module, ansible-runner) is marked `ansible`
# (or lab/molecule): the unit stage and the fast loop leave those out, and a real Ansible run
# costs seconds. An unmarked test that starts one fails, named. Caught three ways: in this
# process (ansible_runner's entry points, subprocess.Popen of an Ansible program by any path)
# and in its children (a PATH folder whose Ansible programs note the call and exit 97), so a
# `provision` CLI run in a subprocess is caught too.
_ANSIBLE_PROGRAMS = ("ansible", "ansible-playbook", "ansible-runner", "ansible-inventory", "ansible-console")
_RUNNER_ENTRY_POINTS = ("run", "run_async", "run_command", "run_command_async", "init_runner")
_CALLS_ENV = "PROVISION_TEST_ANSIBLE_CALLS"
_SHIM = f"""#!/bin/sh
echo "${{0##*/}}" >> "${_CALLS_ENV}"
echo "ansible started by a test not marked ansible (tests/conftest.py): mark the test" >&2
exit 97
"""


def _ansible_program(args) -> str | None:
    """The Ansible program a Popen call starts (argv list, or a shell string), if it is one."""
    first = args.split()[0] if isinstance(args, str) and args.strip() else (
        args[0] if isinstance(args, (list, tuple)) and args else args)
    name = os.path.basename(os.fsdecode(first)) if isinstance(first, (str, bytes, os.PathLike)) else ""
    return name if name in _ANSIBLE_PROGRAMS else None


@pytest.fixture(scope="session")
def _ansible_shims(tmp_path_factory) -> Path:
    shims = tmp_path_factory.mktemp("no-ansible")
    for program in _ANSIBLE_PROGRAMS:
        (shims / program).write_text(_SHIM)
        (shims / program).chmod(0o755)
    return shims


@pytest.fixture(autouse=True)
def _ansible_only_in_marked_tests(request, monkeypatch):
    if {"ansible", "lab", "molecule"} & {m.name for m in request.node.iter_markers()}:
        yield
        return
    import subprocess

    import ansible_runner
    import ansible_runner.interface

    shims: Path = request.getfixturevalue("_ansible_shims")
    calls = shims / "calls"
    calls.unlink(missing_ok=True)
    started: list[str] = []

    def refuse(what: str):
        started.append(what)
        raise RuntimeError(f"{what} started by a test not marked ansible (tests/conftest.py): mark the test")

    real_init = subprocess.Popen.__init__

    def popen_init(self, args, *a, **kw):
        program = _ansible_program(args)
        if program:
            refuse(program)
        real_init(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)
    for module in (ansible_runner, ansible_runner.interface):
        for name in _RUNNER_ENTRY_POINTS:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, lambda *a, _name=name, **kw: refuse(f"ansible_runner.{_name}"))
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv(_CALLS_ENV, str(calls))
    yield
    if calls.exists():
        started += calls.read_text().split()
    if started:
        pytest.fail(f"{request.node.nodeid} starts Ansible ({', '.join(sorted(set(started)))}) but is not marked "
                    "ansible: mark it @pytest.mark.ansible (the unit stage and the fast loop leave those out)",
                    pytrace=False)


# ------------------------------------------------------------------ a bundle's wheels, offline
@pytest.fixture(scope="session")
def offline_wheels(tmp_path_factory):
    """A `--wheels` folder for a bundle whose node runs Python `python`: one file per pin of
    the controller's ansible-core set, named as pip names wheels, holding placeholder bytes.
    For tests of everything else in a bundle; tests/test_bundle.py's slow test downloads and
    installs the real files."""
    from packaging.utils import canonicalize_name

    from provisioner.render import bundle_wheels

    def make(python: str = "3.11", system: str = "debian-12") -> Path:
        folder = tmp_path_factory.mktemp("wheels")
        for pin in bundle_wheels.pins(python, system):
            name = canonicalize_name(pin.name).replace("-", "_")
            (folder / f"{name}-{pin.version}-py3-none-any.whl").write_bytes(f"placeholder {pin}\n".encode())
        return folder

    return make
