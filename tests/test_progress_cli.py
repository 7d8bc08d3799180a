"""A real command on a non-terminal (a pipe, as in CI logs and cron mail): progress comes
as plain lines while the run goes (the step, each host's outcome, a heartbeat naming each busy host's task), then the
fleet summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ansible

PROVISION = str(Path(sys.executable).parent / "provision")


def test_preflight_on_a_pipe_prints_step_lines_host_outcomes_and_the_heartbeat(local_inventory: Path, tmp_path: Path):
    # A short heartbeat: ansible-playbook's own start-up alone takes longer than this, so
    # at least one beat comes whatever the machine's load (no timing race in the assertion).
    env = {**os.environ, "PROVISION_HEARTBEAT_SECONDS": "0.2", "COLUMNS": "200"}
    result = subprocess.run([PROVISION, "preflight", "-p", "debian12-lab", str(local_inventory), "--runs-dir",
                             str(tmp_path / "runs")], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    step = next(n for n, line in enumerate(lines) if re.fullmatch(r"\[\d+m\d\ds\] step: .*preflight.*", line, re.I))
    beats = [n for n, line in enumerate(lines) if re.fullmatch(r"\[\d+m\d\ds\] still working: .*", line)]
    outcome = next(n for n, line in enumerate(lines) if re.fullmatch(r"\[\d+m\d\ds\] localhost: step done \(ok=\d+ changed=0\)", line))
    summary = next(n for n, line in enumerate(lines) if "1 host(s): 1 ok, 0 drifted, 0 failed, 0 unreachable" in line)
    assert beats and step < outcome < summary, lines
    # A beat names the host in its task: how many tasks it has finished, the task, how long
    # it has run (every task here runs longer than a beat: a module's start-up alone does).
    assert any(re.fullmatch(r"\[\d+m\d\ds\]   localhost  \d+ tasks done  \S.*  \d+m\d\ds", line) for line in lines), lines
    assert lines[-1].startswith("run record: ")


def test_a_bad_heartbeat_setting_is_refused_before_any_host(local_inventory: Path, tmp_path: Path):
    env = {**os.environ, "PROVISION_HEARTBEAT_SECONDS": "soon"}
    result = subprocess.run([PROVISION, "preflight", "-p", "debian12-lab", str(local_inventory), "--runs-dir",
                             str(tmp_path / "runs")], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert "PROVISION_HEARTBEAT_SECONDS='soon' is not a number of seconds" in result.stderr
    assert not (tmp_path / "runs").exists()
