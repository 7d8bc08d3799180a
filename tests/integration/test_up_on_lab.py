"""`provision up`, `check` and drift against real lab hosts (podman systemd containers)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner import engine

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)


@pytest.fixture(scope="module")
def lab_hosts(tmp_path_factory):
    from provisioner import lab

    workdir = tmp_path_factory.mktemp("lab")
    prefix = f"t{os.getpid()}up"
    result = lab.up(2, prefix, workdir)
    try:
        yield result
    finally:
        lab.down(prefix, workdir)


def run(command: str, inventory: Path, runs: Path):
    return engine.execute(command, engine.prepare("debian12-lab", inventory), runs_dir=runs)


def test_up_converges_verifies_then_check_finds_exactly_the_drift(lab_hosts, tmp_path: Path):
    inventory = lab_hosts.inventory
    first = run("up", inventory, tmp_path)
    assert first.exit_code == 0, first.as_dict()
    assert [h.status for h in first.hosts] == ["changed", "changed"]
    for host in first.hosts:
        checks = {c.name: c for c in host.checks}
        assert checks["os"].status == "pass"
        assert checks["gpus"].status == "pass" and "no GPU present" in checks["gpus"].detail

    second = run("up", inventory, tmp_path)
    assert second.exit_code == 0
    assert [h.changed_tasks for h in second.hosts] == [[], []], "a second converge must change nothing"

    clean = run("check", inventory, tmp_path)
    assert clean.exit_code == 0, clean.as_dict()
    assert [h.status for h in clean.hosts] == ["ok", "ok"]

    # Someone removes the record on the first host: check names that host and that task only.
    victim = lab_hosts.hosts[0].name
    subprocess.run(["podman", "exec", victim, "rm", "/etc/ansible/facts.d/provisioner.fact"], check=True)
    drift = run("check", inventory, tmp_path)
    assert drift.exit_code == 2
    by_name = {h.name: h for h in drift.hosts}
    assert by_name[victim].status == "drift"
    assert by_name[victim].changed_tasks == ["Record which profile this host was converged with, for drift checks."]
    assert any(c.name == "recorded profile" and c.status == "fail" for c in by_name[victim].checks)
    assert by_name[lab_hosts.hosts[1].name].status == "ok"
    # check mode changed nothing: the file is still gone
    gone = subprocess.run(["podman", "exec", victim, "test", "-e", "/etc/ansible/facts.d/provisioner.fact"])
    assert gone.returncode == 1
