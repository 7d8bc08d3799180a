"""Output for a fleet: a summary line, one line per host that is not ok, then only the
retry and run-record lines; --verbose (and --json, --junit, --html) keep every check. The
hosts' checks come from judge() fed real captures in gpu_probe's output shape, and the
report goes through report.json and back, as `provision report` reads it."""

from __future__ import annotations

import io
import json
import re
import threading
from pathlib import Path

from rich.console import Console

from provisioner.judge import verify
from provisioner.reports import html as html_report
from provisioner.reports import junit as junit_mod
from provisioner.reports import report as report_mod
from provisioner.reports.report import HostReport, Report
from provisioner.reports.table import render_table
from tests.test_verify import A5000_2
from tests.test_verify_contract import CAPTURES, cmd, probe_shape

TORCH = dict(cmd(["python", "-c", "..."], '{"version": "2.5.1", "cuda_available": true, "device_count": 2}'), ran=True)
NVCC = "Cuda compilation tools, release 12.4, V12.4.131"


def _fleet(fixtures: Path, tmp_path: Path) -> Report:
    """30 hosts verified against a 2x RTX A5000 profile: 28 healthy, gpu07 with an Xid 79 in
    its kernel log, gpu23 without a driver; written to report.json and loaded back."""
    xml = (fixtures / "nvidia-smi" / "xml" / "2x-rtx-a5000__590.44.01__telegraf.xml").read_text()
    xid79 = (CAPTURES / "kernel-log__xid-79__gist-kenorb-9b41910f.txt").read_text()
    shapes = {"gpu07": probe_shape(xml, module="590.44.01", nvcc=NVCC, torch=TORCH, log=xid79),
              "gpu23": probe_shape(None, nvcc=NVCC, torch=TORCH)}
    healthy = probe_shape(xml, module="590.44.01", nvcc=NVCC, torch=TORCH)
    run_dir = tmp_path / "20261201T120000Z-verify-a5000"
    run_dir.mkdir()
    report = Report("verify", "a5000", "f" * 64, "hosts.ini", run_dir, started="2026-12-01T12:00:00Z",
                    finished="2026-12-01T12:00:49Z")
    for n in range(1, 31):
        name = f"gpu{n:02d}"
        report.hosts.append(HostReport(name, "ok", checks=verify.judge(A5000_2, shapes.get(name, healthy))))
    report.write()
    return report_mod.load(run_dir)


def _printed(report: Report, verbose: bool = False) -> list[str]:
    console = Console(file=io.StringIO(), width=80, force_terminal=False)
    render_table(report, console, verbose=verbose)
    return console.file.getvalue().splitlines()


def test_thirty_hosts_with_two_failing_print_the_summary_the_two_hosts_then_retry_and_run_record(fixtures, tmp_path):
    report = _fleet(fixtures, tmp_path)
    healthy = [h for h in report.hosts if h.name not in ("gpu07", "gpu23")]
    assert all(c.status != "fail" for h in healthy for c in h.checks)  # the healthy capture really passes
    lines = _printed(report)
    assert lines[0] == "provision verify · profile a5000 · 30 host(s): 28 ok, 0 drifted, 2 failed, 0 unreachable"
    assert lines[1].startswith("  gpu07  failed: xid events: 1 Xid event(s) since boot: Xid 79 (GPU has fallen off "
                               "the bus)")
    assert lines[2].startswith("  gpu23  failed: nvidia-smi: nvidia-smi is not installed")
    assert "driver module: no NVIDIA kernel module is loaded" in lines[2]
    assert lines[3] == "retry just those: provision verify --profile a5000 hosts.ini --limit gpu07,gpu23"
    assert lines[4] == f"run record: {report.run_dir}"
    assert len(lines) == 5, lines
    assert report.exit_code == 2


def test_a_host_that_failed_a_check_is_never_shown_as_ok(fixtures, tmp_path):
    report = _fleet(fixtures, tmp_path)
    failing = [h for h in report.hosts if any(c.status == "fail" for c in h.checks)]
    assert [h.name for h in failing] == ["gpu07", "gpu23"]
    # Ansible ran every task on them (status ok): the outcome still says failed, everywhere.
    assert {h.status for h in failing} == {"ok"} and {h.outcome for h in failing} == {"failed"}
    data = report.as_dict()
    assert data["summary"] == {"hosts": 30, "ok": 28, "changed": 0, "drifted": 0, "failed": 2, "unreachable": 0,
                               "not-verified": 0, "unknown": 0}
    assert {h["name"]: h["outcome"] for h in data["hosts"] if h["outcome"] != "ok"} == {"gpu07": "failed",
                                                                                       "gpu23": "failed"}
    wide = Console(file=io.StringIO(), width=400, force_terminal=False)
    render_table(report, wide, verbose=True)
    rows = {m.group(1): m.group(2) for m in re.finditer(r"│ (gpu\d\d)\s+│ (\S+)", wide.file.getvalue())}
    assert len(rows) == 30 and rows["gpu07"] == rows["gpu23"] == "failed"
    assert {v for k, v in rows.items() if k not in ("gpu07", "gpu23")} == {"ok"}
    page = html_report.render(report)
    for name in ("gpu07", "gpu23"):
        badge = re.search(rf'<span class="mono">{name}</span> <span class="badge s-(\w+)">(\w+)<', page)
        assert badge and badge.groups() == ("failed", "failed"), badge


def test_verbose_json_junit_and_html_keep_every_check(fixtures, tmp_path):
    report = _fleet(fixtures, tmp_path)
    total = sum(len(h.checks) for h in report.hosts)
    persistence = sum(1 for h in report.hosts for c in h.checks if c.name == "persistence mode")
    assert persistence == 29  # every host but gpu23, which has no driver
    verbose = "\n".join(_printed(report, verbose=True))
    assert verbose.count("persistence mode") == persistence  # every host's passing checks too
    assert sum(len(h["checks"]) for h in json.loads(json.dumps(report.as_dict()))["hosts"]) == total
    xml = junit_mod.write(report, tmp_path / "j.xml").read_text()
    assert xml.count("<testcase") >= total
    assert html_report.render(report).count("<td>persistence mode</td>") == persistence


def test_drift_and_unreachable_hosts_say_what_is_wrong(tmp_path):
    report = Report("check", "lab", "", "hosts.ini", tmp_path, started="")
    report.hosts = [HostReport("a", "drift", changed_tasks=["hold removed: nvidia-smi"],
                               diffs={"hold removed: nvidia-smi": "was held at 535.309.01"}),
                    HostReport("b", "unreachable", failures=["unreachable: ssh: connect to host 10.0.0.2 port 22"]),
                    HostReport("c", "changed"), HostReport("d", "ok")]
    lines = _printed(report)
    assert lines[0].endswith("4 host(s): 2 ok (1 changed), 1 drifted, 0 failed, 1 unreachable")
    assert lines[1] == "  a  drifted: hold removed: nvidia-smi: was held at 535.309.01"
    assert lines[2] == "  b  unreachable: unreachable: ssh: connect to host 10.0.0.2 port 22"
    assert lines[3].startswith("error") or lines[3].startswith("retry just those")


def test_a_host_with_many_problems_stays_one_line():
    host = HostReport("x", "failed", failures=[f"task {n}: " + "y" * 400 for n in range(6)])
    report = Report("up", "p", "", "h.ini", Path("/tmp/r"), started="", hosts=[host])
    (line,) = [line for line in _printed(report) if line.startswith("  x ")]
    assert line.endswith("; … 3 more (--verbose)") and len(line) < 700


def test_heartbeat_lines_come_while_work_goes_on():
    from provisioner.engine.progress import Progress

    out = io.StringIO()
    seen = threading.Event()

    class Watch(io.StringIO):
        def write(self, text):
            out.write(text)
            if "still working" in text:
                seen.set()
            return len(text)

    with Progress(Console(file=Watch(), force_terminal=False), heartbeat=0.05) as progress:
        progress({"event": "playbook_on_play_start", "event_data": {"play": "Verify GPU hosts."}})
        assert seen.wait(10), out.getvalue()
    assert re.search(r"^\[0m\d\ds\] still working: Verify GPU hosts\.; 0 host\(s\) seen", out.getvalue(), re.M)
