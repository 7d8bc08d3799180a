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


def _fixtures() -> Path:
    # ../shared/fixtures beside the checkout (how developers and CI lay it out).
    candidates = [os.environ.get("PROVISION_FIXTURES"), REPO.parent / "shared" / "fixtures"]
    for candidate in filter(None, candidates):
        if Path(candidate).is_dir():
            return Path(candidate)
    pytest.fail("the real tool-output fixtures are missing: expected ../shared/fixtures or $PROVISION_FIXTURES")


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
