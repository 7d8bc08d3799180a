"""gpu_provisioner.node.container_runtime run for real (ansible-runner, local connection) on
files in a temporary folder: daemon.json and config.toml registered, a second run changes
nothing, check mode writes nothing, the file's mode kept, absent takes out only ours, a file
that cannot be merged fails with the fix and is left as it was (issue 29)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from .ansibleplay import LOCAL, play

pytestmark = pytest.mark.ansible

LAB_DAEMON = {"iptables": False, "ip-masq": False, "bridge": "none", "storage-driver": "vfs"}


def _play(*steps: tuple[str, dict]) -> list:
    return [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": name, "gpu_provisioner.node.container_runtime": args} for name, args in steps]}]


def _res(run, task: str) -> dict:
    return run.results(task)[0]["event_data"]["res"]


def test_docker_registered_once_kept_and_taken_out(tmp_path: Path):
    daemon = tmp_path / "docker" / "daemon.json"
    daemon.parent.mkdir()
    daemon.write_text(json.dumps(LAB_DAEMON))
    daemon.chmod(0o600)
    args = {"engine": "docker", "path": str(daemon), "default": True}
    check = play(tmp_path, "check", _play(("merge", args)), LOCAL, check=True)
    assert check.rc == 0 and _res(check, "merge")["changed"], check.stdout
    assert json.loads(daemon.read_text()) == LAB_DAEMON, "check mode wrote nothing"

    run = play(tmp_path, "run", _play(("merge", args), ("again", args)), LOCAL)
    assert run.rc == 0, run.stdout
    assert _res(run, "merge")["changed"] and not _res(run, "again")["changed"]
    assert _res(run, "again")["registration"] == {"registered": True, "path": "nvidia-container-runtime",
                                                  "default": True, "cdi": False}
    data = json.loads(daemon.read_text())
    assert {k: data[k] for k in LAB_DAEMON} == LAB_DAEMON and data["default-runtime"] == "nvidia"
    assert stat.S_IMODE(daemon.stat().st_mode) == 0o600

    off = play(tmp_path, "off", _play(("remove", {"engine": "docker", "path": str(daemon), "state": "absent"})), LOCAL)
    assert off.rc == 0 and _res(off, "remove")["changed"]
    assert json.loads(daemon.read_text()) == LAB_DAEMON


def test_containerd_block_appended_and_removed(tmp_path: Path):
    config = tmp_path / "config.toml"
    user = 'version = 2\n# mine\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
    config.write_text(user)
    run = play(tmp_path, "run", _play(("merge", {"engine": "containerd", "path": str(config)}),
                                      ("again", {"engine": "containerd", "path": str(config)})), LOCAL)
    assert run.rc == 0, run.stdout
    assert _res(run, "merge")["changed"] and not _res(run, "again")["changed"]
    assert config.read_text().startswith(user) and "SystemdCgroup = true" in config.read_text().split(user, 1)[1]
    off = play(tmp_path, "off", _play(("remove", {"engine": "containerd", "path": str(config), "state": "absent"})), LOCAL)
    assert off.rc == 0 and config.read_text() == user


def test_a_file_that_cannot_be_merged_fails_with_the_fix_and_is_kept(tmp_path: Path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{broken")
    run = play(tmp_path, "bad", _play(("merge", {"engine": "docker", "path": str(daemon)})), LOCAL)
    assert run.rc != 0 and "daemon.json is not JSON" in _res(run, "merge")["msg"]
    assert daemon.read_text() == "{broken"
    run = play(tmp_path, "ctd", _play(("merge", {"engine": "containerd", "path": str(tmp_path / "c.toml"),
                                                 "default": True})), LOCAL)
    assert run.rc != 0 and "RuntimeClass" in _res(run, "merge")["msg"]
    assert not os.path.exists(tmp_path / "c.toml")
