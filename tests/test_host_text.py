"""Host text never reaches the operator's terminal raw (issue 28, item 7): escape sequences
(OSC 52 clipboard writes, OSC 8 links, CSI clear-screen, title setting, an 8-bit CSI) and
bidi controls in a GPU name, a task's failure message, a report.json field or a profile
name a host reports come out as visible escapes, on every path that shows them; Rich reads
no markup and no emoji codes in them. Driven through the real CLI (CliRunner) or the real
rendering code with the CLI's console."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.engine.progress import Progress
from provisioner.reports.report import HostReport, Report
from provisioner.reports.terminal import clean, console
from provisioner.verdicts.checks import failed

from .conftest import DATA
from .test_rollback_trust import NODES, _state, _up
from .test_rollback_trust import setup as rollback_setup  # noqa: F401 (a fixture)

# What an attacker on a node puts in the text it reports, and how each must show.
ATTACKS = {
    "\x1b]52;c;Y3VybCBldmlsfHNo\x07": "\\x1b]52;c;Y3VybCBldmlsfHNo\\x07",  # write the clipboard
    "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\": "\\x1b]8;;https://evil.example/\\x1b\\click",  # a link
    "\x1b[2J\x1b[H": "\\x1b[2J\\x1b[H",  # clear the screen, cursor home
    "\x1b]0;owned\x07": "\\x1b]0;owned\\x07",  # set the window title
    "\x9b2J": "\\x9b2J",  # an 8-bit CSI
    "\u202egpu\u2066": "\\u202egpu\\u2066",  # bidi override / isolate
}
PAYLOAD = "".join(ATTACKS)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def assert_inert(output: str) -> None:
    """No control character reached the output, and each attack shows as its visible escape."""
    assert not RAW.search(output), repr(RAW.search(output).group())
    for shown in ATTACKS.values():
        assert shown in output, (shown, output)


def test_clean_keeps_text_newlines_and_tabs_and_shows_every_control():
    assert clean("H100 80GB HBM3\tok\nnext") == "H100 80GB HBM3\tok\nnext"
    assert clean("a\rb\x00c\x7fd\u200ee\u061c") == "a\\x0db\\x00c\\x7fd\\u200ee\\u061c"
    assert clean(clean(PAYLOAD)) == clean(PAYLOAD)  # cleaning twice changes nothing


def _report(tmp_path: Path, **fields) -> Path:
    host = HostReport("n1", "failed", failures=[f"Install the driver: {PAYLOAD}"],
                      checks=[failed("gpu model", f"{PAYLOAD} is not a H100")], changed_tasks=[f"task {PAYLOAD}"])
    report = Report("verify", "p", "0" * 64, "hosts.ini", tmp_path, started="now", hosts=[host],
                    errors=[f"ERROR! {PAYLOAD}"])
    report.write()
    path = tmp_path / "report.json"
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_report_shows_a_tampered_report_json_inert(tmp_path: Path, verbose: list[str]):
    run = _report(tmp_path, profile=f"prof{PAYLOAD}[link=https://evil.example/]x[/link] :end:")
    result = CliRunner().invoke(app, ["report", str(run), *verbose], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert_inert(result.output)
    # The profile field is text: no markup read (no OSC 8 link made from it), no emoji for :end:.
    assert "[link=https://evil.example/]x[/link] :end:" in result.output


def test_the_live_table_and_the_plain_progress_lines_show_ansible_text_inert():
    events = [{"event": "playbook_on_play_start", "event_data": {"play": f"Converge {PAYLOAD}"}},
              {"event": "runner_on_start", "event_data": {"host": "gpu1", "role": "nvidia_driver",
                                                          "task": f"[bold]x[/] {PAYLOAD}"}},
              {"event": "runner_on_failed", "event_data": {"host": "gpu1", "task": f"Install {PAYLOAD}", "res": {}}},
              {"event": "provision_hook", "event_data": {"host": "gpu1", "hook": "gate", "rc": 1,
                                                         "detail": PAYLOAD}}]
    lines = console(file=io.StringIO(), width=400)  # not a terminal: plain lines as they happen
    with Progress(lines, heartbeat=0) as progress:
        for event in events:
            progress(event)
    assert_inert(lines.file.getvalue())
    screen = console(file=io.StringIO(), width=400, height=40, force_terminal=True, color_system=None)
    screen.print(progress._table())
    assert_inert(screen.file.getvalue())
    assert "[bold]x[/]" in screen.file.getvalue()


def test_judge_shows_a_gpu_name_with_escape_sequences_inert(tmp_path: Path):
    capture = DATA / "captures" / "query-gpu__rtx-2080-super__610.57.04__idle__nvidia-gpu-exporter.csv"
    tampered = tmp_path / "query-gpu.csv"
    tampered.write_text(capture.read_text().replace("NVIDIA GeForce RTX 2080 SUPER", f"NVIDIA {PAYLOAD}"))
    result = CliRunner().invoke(app, ["judge", "-p", "h100-train", str(tampered)], env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert_inert(result.output)
    as_json = CliRunner().invoke(app, ["judge", "-p", "h100-train", str(tampered), "--json"])
    assert not RAW.search(as_json.output)  # JSON escapes them
    assert any(PAYLOAD in c["detail"] for c in json.loads(as_json.output)["files"][0]["checks"])


def test_an_inventory_error_keeps_ansible_range_syntax_literal(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nnode[1:3:end:]\n")
    result = CliRunner().invoke(app, ["render", "-p", "debian12-lab", str(hosts), "-o", str(tmp_path / "out")],
                                env={"COLUMNS": "400"})
    assert result.exit_code == 1
    assert "begin:end:step" in result.output and "\U0001f51a" not in result.output  # not 🔚


def test_the_rollback_lines_never_print_a_host_supplied_profile_name(rollback_setup):  # noqa: F811
    """The rollback plan is shown from the controller's own copy of the profile (item 1): the
    name a host reports, markup and escapes included, is not printed at all."""
    tmp_path, fleet, hosts, old, new = rollback_setup
    for loaded in (old, new):
        assert _up(tmp_path, hosts, "--profile", str(loaded.files[0])).exit_code in (0, 2)
    name = f"[link=https://evil.example/]h100[/link] {PAYLOAD}"
    fleet.states = {h: _state(new, old.digest, "", back_name=name) for h in NODES}
    result = _up(tmp_path, hosts, "--rollback", "--profile", str(new.files[0]))
    assert result.exit_code in (0, 2), result.output
    assert not RAW.search(result.output) and "52;c;" not in result.output
    assert "evil.example" not in result.output and "back to profile 'lab-old'" in result.output
