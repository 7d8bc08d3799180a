"""gpu_provisioner.node.role_record, run for real on this machine (ansible-runner, local
connection) into a folder of the test's own: the one way a role records what it applied."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .ansibleplay import LOCAL, play

pytestmark = pytest.mark.ansible


def _task(name: str, folder: Path, fact: dict, role: str = "nccl") -> dict:
    return {"name": name, "gpu_provisioner.node.role_record": {"role": role, "fact": fact, "dir": str(folder)}}


def _play(*tasks: dict) -> list:
    return [{"hosts": "localhost", "gather_facts": False, "tasks": list(tasks)}]


def _res(run, task: str) -> dict:
    return run.results(task)[0]["event_data"]["res"]


def test_writes_the_fact_once_as_to_nice_json_and_then_changes_nothing(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("the fact file is root's: run as root (CI does)")
    facts = tmp_path / "facts.d"   # not there yet: the module makes it
    path = facts / "nccl.fact"
    fact = {"enabled": True, "version": "2.21.5", "packages": {"libnccl2": "2.21.5-1+cuda12.4"}, "held": []}
    check = play(tmp_path, "check", _play(_task("record", facts, fact)), LOCAL, check=True)
    assert check.rc == 0 and _res(check, "record")["changed"] and not facts.exists(), "check mode writes nothing"

    run = play(tmp_path, "real", _play(
        _task("record", facts, fact),
        _task("again", facts, fact),
        {"name": "loosen", "ansible.builtin.file": {"path": str(path), "mode": "0666"}},
        _task("mode", facts, fact),       # a wrong mode alone is a change, put right
        _task("moved", facts, dict(fact, version="2.23.4"))), LOCAL)
    assert run.rc == 0, run.stdout
    assert _res(run, "record")["changed"] and not _res(run, "again")["changed"]
    assert _res(run, "mode")["changed"] and _res(run, "moved")["changed"]
    assert json.loads(path.read_text()) == dict(fact, version="2.23.4")
    # the bytes to_nice_json wrote before this module, so hosts recorded earlier read as unchanged
    assert path.read_text() == json.dumps(dict(fact, version="2.23.4"), indent=4, sort_keys=True,
                                          separators=(",", ": ")) + "\n"
    st = path.stat()
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)) == (0, 0, "0o644")
    assert sorted(p.name for p in facts.iterdir()) == ["nccl.fact"], "no temporary file left"


def test_a_role_name_that_would_leave_the_folder_is_refused(tmp_path: Path):
    run = play(tmp_path, "bad", _play(_task("record", tmp_path, {"a": 1}, role="../etc/passwd")), LOCAL)
    assert run.rc != 0 and "not a role name" in _res(run, "record")["msg"]
    assert not (tmp_path.parent / "etc").exists()
