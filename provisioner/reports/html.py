"""A past run, again: `provision report RUN_DIR [--html OUT]`.

`render` turns the report's JSON shape (provisioner.reports.report) into one
self-contained HTML page: inline CSS, no script, no external asset (its
Content-Security-Policy forbids loading any), every value escaped.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from provisioner import paths
from provisioner import __version__
from provisioner.reports.report import EXIT_ERROR, EXIT_FAILED_CHECKS, EXIT_OK, Report

TEMPLATES = paths.TEMPLATES_DIR
_STATUSES = ("ok", "changed", "drift", "not-verified", "failed", "unreachable", "unknown")
_CHECKS = ("pass", "fail", "skip")


def _diff_lines(diff: str) -> list[tuple[str, str]]:
    lines = []
    for line in diff.splitlines():
        kind = ""
        if line.startswith(("+++", "---")):
            kind = ""
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        elif line.startswith("@@"):
            kind = "hunk"
        lines.append((kind, line))
    return lines


def _css_class(value: str, known: tuple[str, ...]) -> str:
    # Classes come from a fixed list; anything else (a newer status) gets a neutral one.
    return value if value in known else "skip"


def _host_view(h: dict[str, Any]) -> dict[str, Any]:
    checks = h.get("checks") or []
    counts = Counter(c.get("status") for c in checks)
    status = str(h.get("status", "?"))
    bad = status in ("failed", "unreachable", "unknown") or counts["fail"]
    warn = status in ("drift", "changed", "not-verified")
    if counts["fail"] and status in ("ok", "changed"):
        status = "failed"  # every task ran, but a check failed: never shown as ok
    return {
        "name": str(h.get("name", "?")), "status": status, "status_class": _css_class(status, _STATUSES),
        "tone": "bad" if bad else "warn" if warn else "good",
        "failures": [str(f) for f in h.get("failures") or []],
        "changed_tasks": [str(t) for t in h.get("changed_tasks") or []],
        "diffs": [(str(task), _diff_lines(str(diff))) for task, diff in (h.get("diffs") or {}).items()],
        "checks": [{"name": str(c.get("name", "?")), "status": str(c.get("status", "?")),
                    "status_class": _css_class(str(c.get("status")), _CHECKS), "detail": str(c.get("detail", ""))}
                   for c in checks],
        "n_pass": counts["pass"], "n_fail": counts["fail"], "n_skip": counts["skip"],
    }


def _environment() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]),
                       undefined=StrictUndefined, trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)


def render(report: dict[str, Any] | Report) -> str:
    """The report (its as_dict() shape, or a Report) as one self-contained HTML page."""
    data = report.as_dict() if isinstance(report, Report) else dict(report)
    if "exit_code" not in data or "verdict" not in data:  # older or hand-made shapes: recompute
        rebuilt = Report.from_dict(data).as_dict()
        data = {**rebuilt, **data, "exit_code": rebuilt["exit_code"], "verdict": rebuilt["verdict"]}
    data.setdefault("retry", None)
    for key in ("started", "finished", "inventory", "run_dir", "profile_sha256", "profile"):
        data[key] = "" if data.get(key) is None else str(data[key])
    data.setdefault("errors", [])
    data.setdefault("interrupted", False)
    hosts = [_host_view(h) for h in data.get("hosts", [])]
    exit_code = data["exit_code"]
    verdict_class = exit_code if exit_code in (EXIT_OK, EXIT_FAILED_CHECKS, EXIT_ERROR) else EXIT_ERROR
    status_counts = sorted(Counter(h["status"] for h in hosts).items(),
                           key=lambda kv: _STATUSES.index(kv[0]) if kv[0] in _STATUSES else 99)
    check_counts = [(s, n) for s in _CHECKS
                    if (n := sum(1 for h in hosts for c in h["checks"] if c["status"] == s))]
    # Hosts that need attention first, then by name.
    order = {"failed": 0, "unreachable": 0, "drift": 1}
    hosts.sort(key=lambda h: (order.get(h["status"], 2 if not h["n_fail"] else 1), h["name"]))
    return _environment().get_template("report.html.j2").render(
        r=data, hosts=hosts, version=__version__, verdict_class=verdict_class,
        verdict_word={EXIT_OK: "ok", EXIT_FAILED_CHECKS: "attention"}.get(exit_code, "error"),
        status_counts=[(s, _css_class(s, _STATUSES), n) for s, n in status_counts], check_counts=check_counts,
    )


def write(report: dict[str, Any] | Report, path: Path, *, force: bool = False) -> Path:
    from provisioner.outputs import check_file, write_file

    check_file(path, force=force, what="--html")  # before rendering: a bad path fails fast
    return write_file(path, render(report), force=force, what="--html")
