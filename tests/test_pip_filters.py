"""What the python_env role puts back after hand changes (plugins/filter/pip.py), on
`pip freeze` lines of the shape the debian12-lab environment has (torch 2.13.0+cpu and its
dependencies; the versions are illustrative). The Molecule python_env scenario's side
effects do the same for real in a lab host's environment."""

from __future__ import annotations

import importlib.util
import sys

from .conftest import COLLECTION, REPO

# The filter imports the collection's module_utils by its FQCN, as Ansible loads it.
sys.path.insert(0, str(REPO))
_spec = importlib.util.spec_from_file_location("pip_filters", COLLECTION / "plugins" / "filter" / "pip.py")
pip_filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pip_filters)

RECORDED = ["filelock==3.20.0", "fsspec==2025.10.0", "Jinja2==3.1.6", "MarkupSafe==3.0.3", "mpmath==1.3.0",
            "networkx==3.5", "sympy==1.14.0", "torch==2.13.0+cpu", "typing_extensions==4.15.0"]


def test_nothing_to_do_when_nothing_moved():
    assert pip_filters.freeze_repair(RECORDED, list(RECORDED)) == {"reinstall": [], "remove": []}


def test_removed_and_changed_packages_go_back_at_their_recorded_versions_and_extras_go():
    now = [line for line in RECORDED if not line.startswith("torch==")]        # pip uninstall torch
    now = [("filelock==3.20.1" if line.startswith("filelock") else line) for line in now]  # pip install -U filelock
    now.append("requests==2.32.5")                                             # pip install requests
    assert pip_filters.freeze_repair(RECORDED, now) == {
        "reinstall": ["filelock==3.20.0", "torch==2.13.0+cpu"], "remove": ["requests"]}


def test_names_compare_as_pip_does():
    # typing_extensions vs typing-extensions, Jinja2 vs jinja2: the same packages.
    now = [line.replace("typing_extensions", "typing-extensions").replace("Jinja2", "jinja2") for line in RECORDED]
    assert pip_filters.freeze_repair(RECORDED, now) == {"reinstall": [], "remove": []}
