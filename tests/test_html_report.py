"""provision report RUN_DIR [--html OUT]: a past run's report again, as a table or one HTML page."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from provisioner.engine import commands
from provisioner.reports import html as html_report
from provisioner.verdicts.checks import failed, passed, skipped
from provisioner.errors import ProvisionError
from provisioner.reports import report as report_mod
from provisioner.reports.report import HostReport, Report
from provisioner.reports.table import render_table

EVIL_HOST = 'gpu<script>alert("x")</script>&1'
EVIL_TASK = 'Write "/etc/a<b>.conf" & restart'


def _report(tmp_path: Path) -> Report:
    report = Report("check", "h100-train", "cd" * 32, "hosts & <more>.ini", tmp_path / "run",
                    started="2026-12-01T10:00:00Z", finished="2026-12-01T10:01:10Z")
    report.hosts = [
        HostReport("node1", "ok", checks=[passed("driver version", "535.129.03 as the profile asks"),
                                          skipped("nccl bus bandwidth", "nccl tests are off in this profile")]),
        HostReport(EVIL_HOST, "drift", changed_tasks=[EVIL_TASK, "Hold the NVIDIA packages."],
                   diffs={EVIL_TASK: "--- before: /etc/a<b>.conf\n+++ after: /etc/a<b>.conf\n@@ -1 +1 @@\n-x=1\n+x=2 & y\n"},
                   checks=[failed("recorded profile", 'converged with profile "old<1>", not "h100-train"')]),
        HostReport("node3", "unreachable", failures=["ssh: connect to host 10.0.0.7 port 22: No route to host <eof>"]),
    ]
    report.errors = ["ERROR! a <bad> & broken playbook"]
    return report


class _Collect(HTMLParser):
    """A real HTML tokenizer: tags, their attributes and the page's text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Collect:
    parser = _Collect()
    parser.feed(page)
    parser.close()
    return parser


def test_page_is_self_contained_and_escapes_everything(tmp_path):
    page = html_report.render(_report(tmp_path).as_dict())
    parsed = _parse(page)
    tags = [t for t, _ in parsed.tags]
    # Self-contained: no script, no external asset of any kind, CSS inline.
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    assert "style" in tags
    for _, attrs in parsed.tags:
        for name, value in attrs.items():
            assert name not in ("src", "srcset") and not name.startswith("on")
            if name == "href":
                assert value.startswith("#"), value
    assert not re.search(r"url\(|@import|https?://", page)
    csp = next(a for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp["content"].startswith("default-src 'none'")
    # Escaped: the raw text survives as text, never as markup.
    assert "<script>" not in page and "<b>" not in page and "<more>" not in page
    text = "".join(parsed.text)
    for raw in (EVIL_HOST, EVIL_TASK, "hosts & <more>.ini", "ERROR! a <bad> & broken playbook",
                'converged with profile "old<1>", not "h100-train"', "+x=2 & y", "No route to host <eof>"):
        assert raw in text, raw


def test_page_shows_status_checks_drift_and_failures(tmp_path):
    report = _report(tmp_path)
    page = html_report.render(report.as_dict())
    text = " ".join("".join(_parse(page).text).split())
    assert report.verdict in text
    assert report.verdict.startswith("error: Ansible stopped")  # the run-level error wins
    report.errors = []
    text_without_error = " ".join("".join(_parse(html_report.render(report)).text).split())
    assert "1 of 3 host(s) failed or unreachable: node3" in text_without_error
    assert "Would change (drift)" in text and "Hold the NVIDIA packages." in text
    assert "driver version" in text and "535.129.03 as the profile asks" in text
    assert "1 pass" in text and "1 fail" in text and "1 skip" in text
    assert "provision check --profile h100-train" in text  # the retry command
    # Hosts needing attention come first; the diff is open for a drifted host.
    assert text.index("node3") < text.index("node1")
    assert '<details open><summary>diff: Write &#34;/etc/a&lt;b&gt;.conf&#34; &amp; restart</summary>' in page
    assert '<span class="add">+x=2 &amp; y</span>' in page


def test_render_accepts_a_report_object_and_an_empty_run(tmp_path):
    empty = Report("verify", "t4-infer", "", "hosts.ini", tmp_path, started="2026-12-01T10:00:00Z")
    page = html_report.render(empty)
    assert "No host reported anything." in page
    assert "all 0 host(s) verified against profile t4-infer" in page


def test_unknown_status_gets_a_neutral_class(tmp_path):
    data = _report(tmp_path).as_dict()
    data["hosts"][0]["status"] = 'weird" class="x'
    page = html_report.render(data)
    assert 'class="badge s-skip">weird&#34; class=&#34;x<' in page


def test_load_report_round_trips_report_json(tmp_path):
    report = _report(tmp_path)
    report.run_dir.mkdir()
    report.write()
    loaded = report_mod.load(report.run_dir)
    assert loaded.as_dict() == report.as_dict()
    console = Console(record=True, width=200)
    render_table(loaded, console)
    out = console.export_text()
    assert "provision check · profile h100-train" in out and "node3" in out and "unreachable" in out


def test_load_report_follows_a_moved_run_folder(tmp_path):
    report = _report(tmp_path)
    report.run_dir.mkdir()
    report.write()
    moved = tmp_path / "elsewhere"
    report.run_dir.rename(moved)
    loaded = report_mod.load(moved)
    assert loaded.run_dir == moved.resolve()
    assert report_mod.load(moved / "report.json").hosts[2].failures == report.hosts[2].failures


def test_load_report_errors_are_clear(tmp_path):
    with pytest.raises(ProvisionError, match="the folder holds no report.json") as exc:
        report_mod.load(tmp_path)
    assert "provision-runs" in exc.value.fix
    with pytest.raises(ProvisionError, match="no such folder"):
        report_mod.load(tmp_path / "missing")
    (tmp_path / "report.json").write_text('{"command": "up", "hosts": [')
    with pytest.raises(ProvisionError, match="not valid JSON") as exc:
        report_mod.load(tmp_path)
    assert exc.value.where.endswith("report.json:1")
    (tmp_path / "report.json").write_text(json.dumps({"something": "else"}))
    with pytest.raises(ProvisionError, match="not a provision report"):
        report_mod.load(tmp_path)


@pytest.mark.ansible
def test_a_real_run_renders(tmp_path, local_inventory):
    """A real preflight run (ansible-runner against this machine), then its report again."""
    report = commands.execute("preflight", commands.prepare("debian12-lab", local_inventory), runs_dir=tmp_path / "runs")
    loaded = report_mod.load(report.run_dir)
    assert loaded.as_dict() == json.loads((report.run_dir / "report.json").read_text())
    out = html_report.write(loaded, tmp_path / "report.html")
    page = out.read_text()
    assert "localhost" in page and "provision preflight · profile debian12-lab" in page
    assert [c.name for c in loaded.hosts[0].checks] == [c.name for c in report.hosts[0].checks]
