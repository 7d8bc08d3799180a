"""Rolling changes (engine/rolling.py): hooks run on the controller with only the
shell-quoted host name substituted, time out, log to the run folder; batches stop at the
first failed one; the record says where and how to resume. The converge and verify steps
here fold results the way engine/commands.py does; the lab test
(tests/integration/test_rolling_lab.py) runs the real plays."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.engine import resume, rolling
from provisioner.errors import ProvisionError
from provisioner.verdicts.checks import failed, passed
from provisioner.reports import report as report_mod
from provisioner.reports.report import HostReport, Report
from provisioner.reports.table import render_table


def test_only_the_host_name_is_substituted_and_it_is_shell_quoted():
    assert rolling.command_for("scontrol update nodename={host} state=drain", "gpu1") == \
        "scontrol update nodename=gpu1 state=drain"
    assert rolling.command_for("echo {host} {host}", "a b;c") == "echo 'a b;c' 'a b;c'"
    # Other braces (awk, JSON) stay as written: no str.format.
    assert rolling.command_for("awk '{print $1}' {x} {host}", "n1") == "awk '{print $1}' {x} n1"


def test_a_hostile_host_name_stays_one_word(tmp_path: Path):
    host = "n1$(touch pwned);touch pwned2 `touch pwned3`"
    out = tmp_path / "out"
    result = rolling.run_hook("drain", f'cd {tmp_path} && printf "%s\\n" {{host}} "$PROVISION_HOST" > out', host,
                              tmp_path, 1, 30)
    assert result.ok
    assert out.read_text() == f"{host}\n{host}\n"
    assert not list(tmp_path.glob("pwned*")) and not list(Path.cwd().glob("pwned*"))


def test_a_hook_gets_the_environment_and_its_output_goes_to_the_run_folder(tmp_path: Path):
    result = rolling.run_hook("gate", 'echo "host=$PROVISION_HOST hook=$PROVISION_HOOK batch=$PROVISION_BATCH"; '
                                      'echo oops >&2; exit 3', "gpu7", tmp_path, 2, 30)
    assert result.rc == 3 and not result.ok
    assert result.log == tmp_path / "hooks" / "002-gpu7-gate.log"
    assert result.log.read_text() == "host=gpu7 hook=gate batch=2\noops\n"
    assert result.log.stat().st_mode & 0o077 == 0
    assert result.detail(tmp_path).startswith("exit 3 after ") and "output in hooks/002-gpu7-gate.log" in \
        result.detail(tmp_path)


def test_a_hook_past_its_time_out_is_killed_with_what_it_started(tmp_path: Path):
    start = time.monotonic()
    result = rolling.run_hook("drain", f"sleep 60 & echo $! > {tmp_path}/child; wait", "n1", tmp_path, 1, 1)
    assert result.rc is None and time.monotonic() - start < 30
    assert "timed out, killed" in result.detail(tmp_path)
    child = int((tmp_path / "child").read_text())
    for _ in range(50):
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the hook's child outlived its time-out")


def test_batches_of_n_and_of_a_percentage():
    hosts = [f"n{i}" for i in range(1, 11)]
    assert rolling.split(hosts, "3") == [hosts[0:3], hosts[3:6], hosts[6:9], hosts[9:]]
    assert rolling.split(hosts, "20%") == [hosts[i:i + 2] for i in range(0, 10, 2)]
    assert rolling.split(hosts[:3], "10%") == [["n1"], ["n2"], ["n3"]]  # never an empty batch


def _fleet(tmp_path: Path, names: list[str]) -> Report:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return Report("up", "lab", "d" * 64, "hosts.ini", run_dir, started="", hosts=[HostReport(n, "ok") for n in names])


def _roll(tmp_path: Path, report: Report, batch: str, gate: str, max_fail=None, fail_verify=()):
    log = tmp_path / "order.log"
    hooks = rolling.Hooks(drain=f"echo drain {{host}} >> {log}", undrain=f"echo undrain {{host}} >> {log}",
                          gate=f"echo gate {{host}} >> {log}; {gate}")
    by_name = {h.name: h for h in report.hosts}

    def converge(names, number):
        with log.open("a") as f:
            f.write(f"converge {' '.join(names)}\n")
        for n in names:
            by_name[n].status = "changed"

    def verify(names, number):
        with log.open("a") as f:
            f.write(f"verify {' '.join(names)}\n")
        for n in names:
            by_name[n].checks.append(failed("driver version", "535 loaded, profile pins 550") if n in fail_verify
                                     else passed("driver version", "550 loaded"))

    events = []
    rolling.roll(report, [h.name for h in report.hosts], batch, hooks, max_fail, converge=converge, verify=verify,
                 skip_converge=set(), emit=events.append, resume_command="provision up --profile lab hosts.ini --batch 1")
    return log.read_text().splitlines(), events


def test_hooks_run_in_order_per_host_and_a_failed_gate_stops_the_rollout(tmp_path: Path):
    report = _fleet(tmp_path, ["n1", "n2", "n3"])
    order, events = _roll(tmp_path, report, "1", 'test "$PROVISION_HOST" != n2')
    assert order == ["drain n1", "converge n1", "verify n1", "gate n1", "undrain n1",
                     "drain n2", "converge n2", "verify n2", "gate n2"]  # n2 left drained, n3 untouched
    r = report.rollout
    assert r["done"] == ["n1"] and r["failed"] == ["n2"] and r["untouched"] == ["n3"] and r["stopped_at"] == 2
    by_name = {h.name: h for h in report.hosts}
    assert by_name["n2"].outcome == "failed" and "gate" in by_name["n2"].problems()[0]
    assert by_name["n3"].outcome == "not-verified" and by_name["n3"].status == "not-verified"
    assert report.exit_code == 1
    assert [e["event_data"]["hook"] for e in events if e["event_data"]["host"] == "n2"] == ["drain", "gate"]
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    render_table(report, console)
    text = console.file.getvalue()
    assert "3 host(s): 1 ok (1 changed), 0 drifted, 1 failed, 0 unreachable, 1 not verified" in text
    assert "rollout stopped at batch 2 of 3: n1 done; failed (left drained): n2; untouched: n3" in text
    assert f"--resume {report.run_dir}" in text and "--limit n2,n3" in text


def test_a_failed_verify_fails_the_batch_before_its_gate(tmp_path: Path):
    report = _fleet(tmp_path, ["n1", "n2", "n3", "n4"])
    order, _ = _roll(tmp_path, report, "2", "true", fail_verify=("n1",))
    # n2 verified and passed its gate: undrained; n1 failed verify: no gate, left drained.
    assert order == ["drain n1", "drain n2", "converge n1 n2", "verify n1 n2", "gate n2", "undrain n2"]
    assert report.rollout["failed"] == ["n1"] and report.rollout["untouched"] == ["n3", "n4"]


def test_max_fail_lets_the_rollout_go_on(tmp_path: Path):
    report = _fleet(tmp_path, ["n1", "n2", "n3"])
    order, _ = _roll(tmp_path, report, "1", 'test "$PROVISION_HOST" != n2', max_fail=100)
    assert order[-5:] == ["drain n3", "converge n3", "verify n3", "gate n3", "undrain n3"]
    assert report.rollout["stopped_at"] is None and report.rollout["failed"] == ["n2"]
    assert report.exit_code == 2  # finished; n2 failed its gate (a check)


def test_a_failed_drain_leaves_the_host_alone(tmp_path: Path):
    report = _fleet(tmp_path, ["n1", "n2"])
    hooks = rolling.Hooks(drain="exit 7")
    rolling.roll(report, ["n1", "n2"], "1", hooks, None, converge=lambda *a: pytest.fail("converged"),
                 verify=lambda *a: pytest.fail("verified"), skip_converge=set())
    n1 = report.hosts[0]
    assert n1.status == "failed" and n1.failures[0].startswith("drain: exit 7 after")
    assert report.rollout["untouched"] == ["n2"] and report.exit_code == 1


def test_resume_reads_the_hosts_left_and_the_hooks_from_the_record(tmp_path: Path):
    report = _fleet(tmp_path, ["n1", "n2", "n3"])
    _roll(tmp_path, report, "1", 'test "$PROVISION_HOST" != n2')
    report.write()
    record = resume.read(report.run_dir)
    assert record.left == ["n2", "n3"] and record.rollout.batch == "1" and record.rollout.max_fail == 0
    assert record.rollout.hooks.drain.startswith("echo drain {host}")
    loaded = report_mod.load(report.run_dir)
    assert loaded.exit_code == 1 and loaded.rollout == report.rollout
    report.rollout = {**report.rollout, "failed": [], "untouched": []}
    report.write()
    with pytest.raises(ProvisionError, match="nothing to resume"):
        resume.read(report.run_dir)


def test_hooks_are_refused_without_batch_and_resume_with_limit(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nn1 ansible_host=127.0.0.1 ansible_port=1\n")
    runs = tmp_path / "runs"
    cli = CliRunner()
    result = cli.invoke(app, ["up", "-p", "debian12-lab", str(hosts), "--drain", "true", "--runs-dir", str(runs)])
    assert result.exit_code == 1 and "--batch is missing" in result.output and not runs.exists()
    result = cli.invoke(app, ["up", "-p", "debian12-lab", str(hosts), "--resume", str(tmp_path), "--runs-dir", str(runs)])
    assert result.exit_code == 1 and "not a run folder" in result.output
    report = _fleet(tmp_path, ["n1"])
    _roll(tmp_path, report, "1", "false")
    report.write()
    result = cli.invoke(app, ["up", "-p", "debian12-lab", str(hosts), "--resume", str(report.run_dir), "--limit", "n1"])
    assert result.exit_code == 1 and "--resume and --limit both choose the hosts" in result.output
    again = [w for kind in ("drain", "undrain", "gate") for w in (f"--{kind}", report.rollout["hooks"][kind])]
    result = cli.invoke(app, ["up", "-p", "debian12-lab", str(hosts), "--resume", str(report.run_dir), "--runs-dir",
                              str(runs), *again])
    assert result.exit_code == 1 and "the profile changed since the stopped rollout" in result.output
    assert "--limit n1" in result.output and not runs.exists()
    assert json.loads((report.run_dir / "report.json").read_text())["rollout"]["failed"] == ["n1"]
    assert os.environ.get("PROVISION_HOST") is None


def test_junit_marks_the_untouched_hosts_skipped_and_the_gate_failed(tmp_path: Path):
    from provisioner.reports import junit

    report = _fleet(tmp_path, ["n1", "n2", "n3"])
    _roll(tmp_path, report, "1", 'test "$PROVISION_HOST" != n2')
    xml = junit.write(report, tmp_path / "r.xml").read_text()
    assert re.search(r'<testcase classname="n3" name="up run" time="0">\s*<skipped message="untouched: the rollout '
                     r'stopped at batch 2', xml)
    assert re.search(r'<testcase classname="n2" name="gate" time="0">\s*<failure message="exit 1 after', xml)
    assert re.search(r'<testcase classname="provision" name="rollout finished" time="0">\s*<error message="rollout '
                     r'stopped at batch 2 of 3: failed n2; untouched n3" type="rollout-stopped"', xml)
