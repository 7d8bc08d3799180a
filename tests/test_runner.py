"""Real ansible-runner runs of the read-only plays against this machine (connection local)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.engine import commands
from provisioner.cli import app

pytestmark = pytest.mark.ansible


def test_preflight_against_localhost_parses_per_host_results(local_inventory: Path, tmp_path: Path):
    target = commands.prepare("debian12-lab", local_inventory)
    events = []
    report = commands.execute("preflight", target, runs_dir=tmp_path / "runs", hook=events.append)
    assert [h.name for h in report.hosts] == ["localhost"]
    host = report.hosts[0]
    assert host.status == "ok" and host.failures == []
    checks = {c.name: c for c in host.checks}
    assert checks["cpu cores"].status == "pass"
    assert checks["cpu cores"].detail.startswith(f"{__import__('os').cpu_count()} vCPUs")
    assert checks["os"].detail.startswith(("Debian 12", "Ubuntu"))
    # The record: runner artifacts with the event stream, the rendered inventory, the report.
    assert (report.run_dir / "artifacts" / "preflight" / "job_events").is_dir()
    assert (report.run_dir / "inventory" / "hosts.yml").is_file()
    saved = json.loads((report.run_dir / "report.json").read_text())
    assert saved["interrupted"] is False and saved["hosts"][0]["name"] == "localhost"
    assert any(e.get("event") == "playbook_on_stats" for e in events)


def test_batches_run_one_host_at_a_time(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text('[local]\nlocal-a ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"\n'
                     'local-b ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"\n')
    plays = []
    report = commands.execute("preflight", commands.prepare("debian12-lab", hosts), runs_dir=tmp_path / "runs", batch="1",
                            hook=lambda e: plays.append(e) if e.get("event") == "playbook_on_play_start" else None)
    assert [h.name for h in report.hosts] == ["local-a", "local-b"] and report.exit_code == 0
    assert len(plays) == 2  # serial: 1 runs the play once per host


def test_verify_on_a_gpu_less_host_exits_0_only_for_a_no_gpu_profile(local_inventory: Path, tmp_path: Path):
    runs = str(tmp_path / "runs")
    # This machine was never converged: a profile without a Python environment, so only the GPU checks judge it.
    driver_only = str(Path(__file__).parent / "data" / "profiles" / "lab-driver-only.yml")
    lab = CliRunner().invoke(app, ["verify", "-p", driver_only, str(local_inventory), "--json", "--runs-dir", runs])
    report = json.loads(lab.stdout)
    assert lab.exit_code == 0, lab.output
    assert report["hosts"][0]["checks"][0]["detail"].startswith("no GPU present")
    h100 = CliRunner().invoke(app, ["verify", "-p", "h100-train", str(local_inventory), "--json", "--runs-dir", runs])
    assert h100.exit_code == 2
    assert json.loads(h100.stdout)["hosts"][0]["checks"][0]["status"] == "fail"


def test_unreachable_host_is_reported_with_exit_1_and_a_retry_hint(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    # Loopback on a port nothing listens on: ssh is refused at once, nothing leaves the machine.
    hosts.write_text("[gpu]\nghost ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody\n")
    result = CliRunner().invoke(app, ["preflight", "-p", "debian12-lab", str(hosts), "--runs-dir", str(tmp_path / "r")],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "unreachable" in result.output
    assert f"retry just those: provision preflight --profile debian12-lab {hosts} --limit ghost" in result.output


def test_ssh_keeps_host_key_checking_on(tmp_path: Path):
    """ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False by default; Ansible then puts
    `-o StrictHostKeyChecking=no` first on ssh's command line, where it wins over any
    later option. A stand-in ssh records the arguments Ansible really passes."""
    argv_log = tmp_path / "ssh-argv"
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {argv_log}\necho "ssh: connect: Connection refused" >&2\nexit 255\n')
    fake_ssh.chmod(0o755)
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(f"[gpu]\nghost ansible_host=127.0.0.1 ansible_port=1 ansible_ssh_executable={fake_ssh}\n")
    report = commands.execute("preflight", commands.prepare("debian12-lab", hosts), runs_dir=tmp_path / "runs")
    assert report.hosts[0].status == "unreachable"
    args = argv_log.read_text().splitlines()
    assert "StrictHostKeyChecking=no" not in args, args
