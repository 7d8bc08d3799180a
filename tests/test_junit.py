"""--junit: one testcase per host per check, plus one per host for its run status."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from provisioner.reports import junit
from provisioner.verdicts.checks import failed, passed, skipped
from provisioner.reports.report import HostReport, Report

WEIRD = 'gpu<1>&"x"'


def _report(tmp_path: Path, command: str = "up") -> Report:
    report = Report(command, "h100-train", "ab" * 32, "hosts.ini", tmp_path, started="2026-12-01T10:00:00Z",
                    finished="2026-12-01T10:05:00Z")
    report.hosts = [
        HostReport("node1", "changed", changed_tasks=["Install the driver."],
                   checks=[passed("driver version", "535.129.03"), skipped("nccl bus bandwidth", "nccl tests off")]),
        HostReport("node2", "ok", checks=[failed("gpu count", "4 GPUs (profile needs 8)"),
                                          passed("driver version", "535.129.03")]),
        HostReport("node3", "unreachable", failures=["ssh: connect to host 10.0.0.7 port 22: No route to host"]),
        HostReport(WEIRD, "drift", changed_tasks=["Hold <nvidia> packages & co."],
                   diffs={"Hold <nvidia> packages & co.": "--- before\n+++ after\n-hold\n+install\x1b[0m"}),
    ]
    return report


def _cases(root: ET.Element) -> dict[tuple[str, str], ET.Element]:
    return {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}


def test_one_case_per_host_per_check_and_per_host_status(tmp_path):
    path = junit.write(_report(tmp_path), tmp_path / "ci" / "junit.xml")
    root = ET.parse(path).getroot()
    cases = _cases(root)
    assert sorted(cases) == sorted([
        ("node1", "up run"), ("node1", "driver version"), ("node1", "nccl bus bandwidth"),
        ("node2", "up run"), ("node2", "gpu count"), ("node2", "driver version"),
        ("node3", "up run"), (WEIRD, "up run"),
    ])
    assert cases[("node1", "up run")].find("failure") is None
    assert cases[("node1", "nccl bus bandwidth")].find("skipped").get("message") == "nccl tests off"
    failure = cases[("node2", "gpu count")].find("failure")
    assert failure.get("message") == "4 GPUs (profile needs 8)"
    unreachable = cases[("node3", "up run")].find("failure")
    assert unreachable.get("type") == "unreachable" and "No route to host" in unreachable.get("message")
    drift = cases[(WEIRD, "up run")].find("failure")
    assert drift.get("type") == "drift" and "Hold <nvidia> packages & co." in drift.get("message")
    assert "+install" in drift.text and "\x1b" not in drift.text  # XML 1.0 cannot carry ESC


def test_counts_and_required_attributes(tmp_path):
    root = ET.parse(junit.write(_report(tmp_path), tmp_path / "junit.xml")).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    # The attributes the Ant/Jenkins JUnit schema requires.
    for attribute in ("name", "tests", "failures", "errors", "time", "timestamp", "hostname"):
        assert suite.get(attribute) is not None, attribute
    for case in suite.iter("testcase"):
        assert case.get("name") and case.get("classname") and case.get("time") is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("8", "3", "0", "1")
    assert root.get("tests") == "8" and root.get("failures") == "3"
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["exit_code"] == "1" and props["profile"] == "h100-train"


def test_run_level_errors_and_interruption(tmp_path):
    report = _report(tmp_path, "check")
    report.interrupted = True
    report.errors = ["ERROR! the playbook could not be found"]
    root = ET.parse(junit.write(report, tmp_path / "junit.xml")).getroot()
    cases = _cases(root)
    assert cases[("provision", "run finished")].find("error").get("type") == "interrupted"
    assert "could not be found" in cases[("provision", "ansible error 1")].find("error").get("message")
    assert ("node1", "check run") in cases
    assert root.find("testsuite").get("errors") == "2"


def test_same_report_same_bytes(tmp_path):
    a = junit.write(_report(tmp_path), tmp_path / "a.xml").read_bytes()
    b = junit.write(_report(tmp_path), tmp_path / "b.xml").read_bytes()
    assert a == b


def test_parses_with_junitparser(tmp_path):
    junitparser = pytest.importorskip("junitparser", reason="junitparser is not installed (add it to the dev extra)")
    path = junit.write(_report(tmp_path), tmp_path / "junit.xml")
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    (suite,) = suites
    assert suite.tests == 8 and suite.failures == 3 and suite.skipped == 1 and suite.errors == 0
    outcomes = {}
    for case in suite:
        kinds = [type(r).__name__ for r in case.result]
        outcomes[(case.classname, case.name)] = kinds
    assert outcomes[("node2", "gpu count")] == ["Failure"]
    assert outcomes[("node1", "nccl bus bandwidth")] == ["Skipped"]
    assert outcomes[("node1", "driver version")] == []
    assert outcomes[(WEIRD, "up run")] == ["Failure"]
    failure = next(r for c in suite if c.classname == "node3" for r in c.result)
    assert "No route to host" in failure.message
