"""The playbooks, roles and a rendered inventory run under plain ansible-runner exactly as
AWX runs a job: a fresh private data dir, the playbook, an inventory source, nothing from
this package's own runner (no ANSIBLE_ROLES_PATH, no extra vars: the profile travels in
the rendered group_vars). See docs/ecosystem.md.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import ansible_runner
import pytest

from provisioner import inventory as inventory_mod
from provisioner import paths, profiles
from provisioner.render import render

pytestmark = pytest.mark.ansible


def _rendered_inventory(tmp_path: Path, local_inventory: Path, profile: str = "debian12-lab") -> Path:
    out = tmp_path / "inventory"
    render(profiles.load(profile), inventory_mod.load(local_inventory), out)
    return out


def _clean_env(monkeypatch) -> None:
    # AWX's execution environment knows nothing of ours.
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_ROLES_PATH", "ANSIBLE_INVENTORY"):
        monkeypatch.delenv(name, raising=False)
    # Its ansible-playbook is the one on PATH (an execution environment's); here, this venv's.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def test_preflight_runs_as_awx_would(tmp_path, local_inventory, monkeypatch):
    _clean_env(monkeypatch)
    inventory_dir = _rendered_inventory(tmp_path, local_inventory)
    private = tmp_path / "awx-job"
    private.mkdir()
    run = ansible_runner.run(private_data_dir=str(private), playbook=str(paths.playbook("preflight")),
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
    assert '"provisioner_profile": "debian12-lab"' in out
    assert f'"provisioner_profile_sha256": "{loaded.digest}"' in out


def test_site_playbook_finds_its_roles_in_an_awx_project_checkout(tmp_path, local_inventory, monkeypatch):
    """AWX runs from the project checkout (cwd = project root): the roles are found through a
    project-root ansible.cfg with `roles_path = roles`, as docs/ecosystem.md says to add."""
    _clean_env(monkeypatch)
    inventory_dir = _rendered_inventory(tmp_path, local_inventory)
    private = tmp_path / "awx-job"
    project = private / "project"
    for top in ("playbooks", "roles"):
        shutil.copytree(paths.ansible_root() / top, project / top, ignore=shutil.ignore_patterns("molecule", "__pycache__"))

    def syntax_check():
        return ansible_runner.run(private_data_dir=str(private), project_dir=str(project),
                                  playbook="playbooks/site.yml", inventory=str(inventory_dir),
                                  cmdline="--syntax-check", quiet=True)

    without = syntax_check()
    assert without.rc != 0 and "the role 'common' was not found" in without.stdout.read()

    (project / "ansible.cfg").write_text("[defaults]\nroles_path = roles\n")
    run = syntax_check()
    assert run.rc == 0, run.stdout.read()
