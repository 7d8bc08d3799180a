"""The playbooks, roles and a rendered inventory run under plain ansible-runner exactly as
AWX runs a job: a fresh private data dir, the playbook, an inventory source, nothing from
this package's own runner (no collections path of ours, no extra vars: the profile travels in
the rendered group_vars). See docs/ecosystem.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import ansible_runner
import pytest

from provisioner.render import inventory as inventory_mod
from provisioner import paths, profiles
from provisioner.render import render

from .conftest import REPO

pytestmark = pytest.mark.ansible


def _rendered_inventory(tmp_path: Path, local_inventory: Path, profile: str = "debian12-lab") -> Path:
    out = tmp_path / "inventory"
    render(profiles.load(profile), inventory_mod.load(local_inventory), out)
    return out


def _clean_env(monkeypatch) -> None:
    # AWX's execution environment knows nothing of ours.
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_ROLES_PATH", "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    # Nor has it this package installed: an editable install puts the checkout on sys.path,
    # where Ansible would find ansible_collections/ by itself.
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_SCAN_SYS_PATH", "false")
    # Its ansible-playbook is the one on PATH (an execution environment's); here, this venv's.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


COLLECTION = paths.ansible_root().relative_to(paths.collections_path())


def _project(private: Path) -> Path:
    """A project checkout as AWX makes one: the repository's ansible_collections/ tree (the
    rest of the repository plays no part)."""
    project = private / "project"
    shutil.copytree(paths.ansible_root(), project / COLLECTION, ignore=shutil.ignore_patterns("__pycache__"))
    return project


def test_preflight_runs_as_awx_would(tmp_path, local_inventory, monkeypatch):
    _clean_env(monkeypatch)
    inventory_dir = _rendered_inventory(tmp_path, local_inventory)
    private = tmp_path / "awx-job"
    project = _project(private)
    shutil.copy(REPO / "ansible.cfg", project / "ansible.cfg")
    run = ansible_runner.run(private_data_dir=str(private), project_dir=str(project),
                             playbook=str(COLLECTION / "playbooks" / "preflight.yml"),
                             inventory=str(inventory_dir), quiet=True)
    assert run.status == "successful" and run.rc == 0, run.stdout.read()
    reported = [e["event_data"]["res"] for e in run.events
                if e.get("event") == "runner_on_ok" and "provisioner_preflight" in e.get("event_data", {}).get("res", {})]
    assert len(reported) == 1
    preflight = reported[0]["provisioner_preflight"]
    assert preflight["distribution"] and preflight["kernel"]
    assert int(preflight["vcpus"]) >= 1 and int(preflight["memtotal_mb"]) > 0
    # The profile reached the play through the inventory's group_vars, not extra vars.
    assert run.stats["ok"] == {"localhost": run.stats["ok"]["localhost"]}
    assert not (private / "env" / "extravars").exists()


def test_group_vars_carry_the_profile(tmp_path, local_inventory, monkeypatch):
    """What a job template sees with no extra vars: the profile's role variables, from the inventory source."""
    _clean_env(monkeypatch)
    inventory_dir = _rendered_inventory(tmp_path, local_inventory)
    loaded = profiles.load("debian12-lab")
    out, err, rc = ansible_runner.run_command(
        executable_cmd="ansible-inventory", cmdline_args=["-i", str(inventory_dir), "--host", "localhost"],
        quiet=True, runner_mode="subprocess")
    assert rc == 0, err
    # ansible-core 2.15 prints unsafe values as {"__ansible_unsafe": ...}, 2.19 as plain strings.
    host = {k: v["__ansible_unsafe"] if isinstance(v, dict) and "__ansible_unsafe" in v else v
            for k, v in json.loads(out).items()}
    assert host["provisioner_profile"] == "debian12-lab"
    assert host["provisioner_profile_sha256"] == loaded.digest


def test_site_playbook_finds_its_roles_in_an_awx_project_checkout(tmp_path, local_inventory, monkeypatch):
    """AWX runs from the project checkout (cwd = project root): the collection under
    ansible_collections/ is found through the project-root ansible.cfg the repository ships
    (`collections_path = .`, relative to that file), as docs/ecosystem.md says."""
    _clean_env(monkeypatch)
    inventory_dir = _rendered_inventory(tmp_path, local_inventory)
    private = tmp_path / "awx-job"
    project = _project(private)
    playbook = str(COLLECTION / "playbooks" / "site.yml")

    def syntax_check():
        return ansible_runner.run(private_data_dir=str(private), project_dir=str(project),
                                  playbook=playbook, inventory=str(inventory_dir),
                                  cmdline="--syntax-check", quiet=True)

    without = syntax_check()
    assert without.rc != 0 and "gpu_provisioner.node.common" in without.stdout.read()

    shutil.copy(REPO / "ansible.cfg", project / "ansible.cfg")
    run = syntax_check()
    assert run.rc == 0, run.stdout.read()
