"""The run's report as JUnit XML (`--junit PATH` on up, check and verify), for CI systems.

One testsuite per run; in it, per host, one testcase for the host's run status
(classname = host, name = "<command> run") and one testcase per check (classname =
host, name = the check's name), so a CI page shows which host failed which check:

- a failed or unreachable host: <failure> carrying the host's failure messages;
- drift (`check`): <failure> listing the changed tasks (and their diffs in the body);
- a check that failed: <failure message=detail>; skipped: <skipped message=detail/>;
- errors not tied to a host, an interrupted run, or a rollout that stopped before its
  last batch: one <error> testcase of classname "provision".

Same report, same bytes: no wall-clock time is written except the report's own start.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from provisioner.reports.report import HostReport, Report

# Characters XML 1.0 cannot carry at all (Ansible output may hold terminal escapes).
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
SUITE_CLASS = "provision"


def _clean(text: str) -> str:
    return _INVALID_XML.sub("\ufffd", str(text))


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(_clean(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", {"classname": _clean(classname), "name": _clean(name), "time": "0"})


def _outcome(case: ET.Element, kind: str, message: str, body: str = "", type_: str | None = None) -> None:
    element = ET.SubElement(case, kind, {"message": _one_line(message)})
    if type_:
        element.set("type", type_)
    if body:
        element.text = _clean(body)


def _status_case(suite: ET.Element, command: str, host: HostReport) -> None:
    case = _case(suite, host.name, f"{command} run")
    if host.broken:
        failures = host.failures or [f"the host is {host.status}"]
        _outcome(case, "failure", f"{host.status}: {failures[0]}", "\n".join(failures), type_=host.status)
    elif host.status == "drift":
        tasks = host.changed_tasks
        body = "\n".join(f"- {t}" for t in tasks)
        diffs = [f"--- {task}\n{diff}" for task, diff in host.diffs.items()]
        if diffs:
            body += "\n\n" + "\n".join(diffs)
        _outcome(case, "failure", f"drift: {len(tasks)} task(s) would change: {', '.join(tasks)}", body, type_="drift")
    elif host.status == "not-verified":  # a stopped rollout never reached it
        _outcome(case, "skipped", "; ".join(host.problems()) or "not verified")
    else:
        summary = f"{host.status}"
        if host.changed_tasks:
            summary += f": {len(host.changed_tasks)} task(s) changed"
        out = ET.SubElement(case, "system-out")
        out.text = _clean("\n".join([summary, *host.changed_tasks]))


def to_xml(report: Report) -> ET.Element:
    name = f"provision {report.command} · profile {report.profile}"
    root = ET.Element("testsuites", {"name": name})
    suite = ET.SubElement(root, "testsuite", {"name": name, "timestamp": report.started.removesuffix("Z"),
                                              "hostname": "provision"})
    properties = ET.SubElement(suite, "properties")
    for key, value in (("command", report.command), ("profile", report.profile),
                       ("profile_sha256", report.profile_sha256), ("inventory", report.inventory),
                       ("run_dir", str(report.run_dir)), ("verdict", report.verdict),
                       ("exit_code", str(report.exit_code))):
        ET.SubElement(properties, "property", {"name": key, "value": _clean(value)})

    for host in report.hosts:
        _status_case(suite, report.command, host)
        for check in host.checks:
            case = _case(suite, host.name, check.name)
            if check.status == "fail":
                _outcome(case, "failure", check.detail, check.detail, type_="check")
            elif check.status == "skip":
                ET.SubElement(case, "skipped", {"message": _one_line(check.detail)})
            else:
                ET.SubElement(case, "system-out").text = _clean(check.detail)
    if report.interrupted:
        _outcome(_case(suite, SUITE_CLASS, "run finished"), "error",
                 f"the {report.command} run was stopped before it finished", type_="interrupted")
    if report.stopped:
        _outcome(_case(suite, SUITE_CLASS, "rollout finished"), "error", report.verdict,
                 "\n".join(report.rollout_lines()), type_="rollout-stopped")
    for n, error in enumerate(report.errors, 1):
        _outcome(_case(suite, SUITE_CLASS, f"ansible error {n}"), "error", error, error, type_="ansible")

    cases = suite.findall("testcase")
    counts = {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "errors": sum(1 for c in cases if c.find("error") is not None),
        "skipped": sum(1 for c in cases if c.find("skipped") is not None),
        "time": "0",
    }
    for element in (root, suite):
        for key, value in counts.items():
            if element is root and key == "skipped":
                continue  # the testsuites element has no skipped attribute in the JUnit schema
            element.set(key, str(value))
    return root


def write(report: Report, path: Path, *, force: bool = False) -> Path:
    """Write the JUnit XML file (its folder is created, atomically); returns the path."""
    from provisioner.outputs import write_file

    tree = ET.ElementTree(to_xml(report))
    ET.indent(tree)
    text = ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=False)
    return write_file(path, "<?xml version='1.0' encoding='utf-8'?>\n" + text + "\n", force=force, what="--junit")
