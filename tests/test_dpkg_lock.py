"""gpu_provisioner.node.dpkg_lock, run for real on this machine (ansible-runner, local
connection) against lock files in a temporary folder: free locks come back with what
`dpkg --audit` says (read-only; the same call, so common needs no second module run), a lock
this test holds comes back as held with this process named and no audit. The real dpkg locks
and a real half-installed package are the lab's (tests/integration/test_up_on_lab.py)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .ansibleplay import LOCAL, play

pytestmark = pytest.mark.ansible


def _lock(paths: list[Path]) -> list:
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "lock", "gpu_provisioner.node.dpkg_lock": {"timeout": 0, "paths": [str(p) for p in paths]}}]}]


def test_free_locks_come_back_with_dpkg_audit_and_a_held_one_names_its_holder(tmp_path: Path):
    if not shutil.which("dpkg"):
        pytest.skip("dpkg_lock's audit needs dpkg (a Debian-family machine)")
    paths = [tmp_path / "lock-frontend", tmp_path / "lock"]
    for p in paths:
        p.write_text("")
    free = play(tmp_path, "free", _lock(paths), LOCAL, check=True)
    assert free.rc == 0, free.stdout[-2000:]
    res = free.results("lock")[0]["event_data"]["res"]
    assert res["held"] is False and res["changed"] is False
    assert res["audit"] == subprocess.run(["dpkg", "--audit"], capture_output=True, text=True).stdout
    fd = os.open(paths[1], os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = play(tmp_path, "held", _lock(paths), LOCAL, check=True)
    finally:
        os.close(fd)
    res = held.results("lock")[0]["event_data"]["res"]
    assert res["held"] is True and f"pid {os.getpid()}" in res["holder"] and "audit" not in res
