"""The state record site.yml writes at the end of a converge (what `provision check`
compares a host with) takes the roles' `<role>_managed` facts from one explicit list, so
an inventory variable that happens to end in `_managed` (`rack_managed=true`) neither
breaks the record nor lands in it. Run for real through ansible-runner, against this
machine over the local connection, the record written into a temporary folder."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from provisioner import profiles
from provisioner.render import role_vars

from .ansibleplay import LOCAL, play
from .conftest import PLAYBOOKS, REPO, ROLES

pytestmark = pytest.mark.ansible

DRIVER_ONLY = REPO / "tests" / "data" / "profiles" / "lab-driver-only.yml"


def _site_play() -> dict:
    return yaml.safe_load((PLAYBOOKS / "site.yml").read_text())[0]


def _record_task() -> dict:
    (task,) = [t for t in _site_play()["post_tasks"]
               if (t.get("gpu_provisioner.node.provisioner_state") or {}).get("action") == "record"]
    return task


def test_site_records_every_role_that_declares_what_it_manages():
    # The explicit list must name each role's <role>_managed: a role left out would not be
    # drift-checked at all.
    declared = set()
    for path in ROLES.glob("*/vars/main.yml"):
        declared |= {k for k in yaml.safe_load(path.read_text()) or {} if k == f"{path.parts[-3]}_managed"}
    assert declared, "no role declares <role>_managed any more"
    assert sorted(_site_play()["vars"]["site_managed_state_vars"]) == sorted(declared)


def test_an_inventory_variable_ending_in_managed_leaves_the_state_record_intact(tmp_path: Path):
    """site.yml's own record task (read from the playbook, its path moved into tmp_path),
    for a host whose inventory says `rack_managed=true`, after each role has declared what
    it manages; then check.yml's own compare task reads the record back: no drift."""
    managed_file = tmp_path / "managed.conf"
    managed_file.write_text("setting = 1\n")
    record_path = tmp_path / "provisioner.fact"
    record = _record_task()
    assert record["gpu_provisioner.node.provisioner_state"]["path"] == "/etc/ansible/facts.d/provisioner.fact"
    record["gpu_provisioner.node.provisioner_state"]["path"] = str(record_path)
    (compare,) = yaml.safe_load((PLAYBOOKS / "check.yml").read_text())[0]["tasks"]
    compare["gpu_provisioner.node.provisioner_state"]["path"] = str(record_path)
    compare["register"] = "compared"

    roles = sorted(p.name for p in ROLES.iterdir() if (p / "defaults").is_dir() and p.name != "gpu_verify")
    declare = [{"name": f"Declare what {role} manages, as that role does.",
                "ansible.builtin.set_fact": {f"{role}_managed": {"files": [str(managed_file)], "packages": ["coreutils"]}}}
               for role in roles]
    loaded = profiles.load(str(DRIVER_ONLY))
    vars_ = role_vars(loaded)
    inventory = (f"[lab]\n{LOCAL} rack_managed=true\n[lab:vars]\n"
                 f"provisioner_profile={vars_['provisioner_profile']}\n"
                 f"provisioner_profile_sha256={vars_['provisioner_profile_sha256']}\n")
    run = play(tmp_path, "record", [{
        "name": "Record the state as site.yml does, then compare as check.yml does.",
        "hosts": "lab", "gather_facts": False, "vars": _site_play().get("vars", {}),
        "tasks": [*declare, record, compare,
                  {"name": "Hand the comparison to the test.", "ansible.builtin.debug": {"var": "compared"}}],
    }], inventory)
    assert run.rc == 0, run.stdout[-3000:]
    saved = json.loads(record_path.read_text())
    assert saved["profile"] == loaded.profile.name and saved["profile_sha256"] == loaded.digest
    assert saved["state"]["files"] == {str(managed_file): hashlib.sha256(managed_file.read_bytes()).hexdigest()}
    assert saved["state"]["packages"] == {"coreutils": True}
    (shown,) = run.results("Hand the comparison to the test.")
    state = shown["event_data"]["res"]["compared"]["provisioner_state"]
    assert state["recorded"] is True and state["differences"] == [], state
