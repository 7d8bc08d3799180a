"""A past run, again: `provision report RUN_DIR [--html OUT]`.

`load_report` rebuilds a provisioner.report.Report from a run folder's report.json (so
`report.render_table` prints it as the run did); `render` turns the report's JSON shape
into one self-contained HTML page: inline CSS, no script, no external asset (its
Content-Security-Policy forbids loading any), every value escaped.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from provisioner import __version__
from provisioner.checks import Check
from provisioner.errors import ProvisionError
from provisioner.report import EXIT_ERROR, EXIT_FAILED_CHECKS, EXIT_OK, HostReport, Report

TEMPLATES = Path(__file__).resolve().parent / "templates"
_STATUSES = ("ok", "changed", "drift", "not-verified", "failed", "unreachable")
_CHECKS = ("pass", "fail", "skip")


def _report_json(run_dir: Path) -> Path:
    run_dir = Path(run_dir).expanduser()
    path = run_dir if run_dir.is_file() and run_dir.name.endswith(".json") else run_dir / "report.json"
    if not path.is_file():
        what = "no such folder" if not run_dir.exists() else "the folder holds no report.json"
        raise ProvisionError(f"not a run folder: {what}", where=str(run_dir),
                             fix="pass a folder printed as `run record:` by up/check/verify/preflight "
                                 "(they live under ./provision-runs or $PROVISION_RUNS_DIR)")
    return path


def read(run_dir: Path) -> dict[str, Any]:
    """The report.json of a run folder (or the path of a report.json) as plain data."""
    path = _report_json(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProvisionError(f"cannot read the report: {exc}", where=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ProvisionError(f"the report is not valid JSON: {exc.msg}", where=f"{path}:{exc.lineno}",
                             fix="the run may have been killed while writing it; re-run the command") from None
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list) or "command" not in data:
        raise ProvisionError("this report.json is not a provision report (no command / hosts)", where=str(path))
    return data


def from_dict(data: dict[str, Any], run_dir: Path | None = None) -> Report:
    """A Report again from its as_dict() shape (exit_code, verdict and retry are recomputed)."""
    try:
        hosts = [
            HostReport(
                name=str(h["name"]), status=str(h["status"]),
                changed_tasks=[str(t) for t in h.get("changed_tasks", [])],
                diffs={str(k): str(v) for k, v in (h.get("diffs") or {}).items()},
                failures=[str(f) for f in h.get("failures", [])],
                checks=[Check(str(c["name"]), c["status"], str(c.get("detail", ""))) for c in h.get("checks", [])],
            )
            for h in data["hosts"]
        ]
        return Report(
            command=str(data["command"]), profile=str(data.get("profile", "?")),
            profile_sha256=str(data.get("profile_sha256", "")), inventory=str(data.get("inventory", "")),
            run_dir=Path(data.get("run_dir") or run_dir or "."), started=str(data.get("started", "")),
            finished=str(data.get("finished", "")), interrupted=bool(data.get("interrupted", False)),
            hosts=hosts, errors=[str(e) for e in data.get("errors", [])],
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProvisionError(f"report.json is missing a field the report needs: {exc}",
                             where=str(run_dir) if run_dir else None) from None


def load_report(run_dir: Path) -> Report:
    """Rebuild the Report of a past run from <run_dir>/report.json.

    The run folder may have moved since: run_dir then names where it is now."""
    report = from_dict(read(run_dir), run_dir)
    path = Path(run_dir).expanduser()
    report.run_dir = (path.parent if path.is_file() else path).resolve()
    return report


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
    bad = status in ("failed", "unreachable") or counts["fail"]
    warn = status in ("drift", "changed", "not-verified")
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
        rebuilt = from_dict(data).as_dict()
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


def write(report: dict[str, Any] | Report, path: Path) -> Path:
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(report), encoding="utf-8")
    return path
