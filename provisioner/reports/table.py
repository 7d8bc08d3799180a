"""The report for people. A fleet's report reads top down: one summary line (N hosts: ok /
drifted / failed / unreachable), then one line per host that is not ok saying what is
wrong, then the retry command and the run record. Hosts that are ok take no line, so 30
hosts with 2 failing print 2 host lines, not 365. `verbose` (how many -v) adds the table of
every host and every check (1), with every changed task (2); --json, --junit and --html
always keep everything."""

from __future__ import annotations

from provisioner.reports.report import EXIT_FAILED_CHECKS, EXIT_OK, Report

STATUS_STYLE = {"ok": "green", "changed": "yellow", "drift": "yellow", "drifted": "yellow", "failed": "red",
                "not-verified": "yellow",
                "unreachable": "red", "unknown": "red", "pass": "green", "fail": "red", "skip": "dim"}
# What one host line holds before it says "… N more": the line stays readable in a CI log.
PROBLEMS_PER_LINE = 3
PROBLEM_CHARS = 200
CHANGES_SHOWN = 8  # changed tasks per host in the -v table; -vv shows them all


def summary_line(report: Report) -> str:
    counts = report.summary()
    changed = f" ({counts['changed']} changed)" if counts["changed"] else ""
    return (f"{counts['hosts']} host(s): {counts['ok']} ok{changed}, {counts['drifted']} drifted, "
            f"{counts['failed']} failed, {counts['unreachable']} unreachable"
            + (f", {counts['not-verified']} not verified" if counts["not-verified"] else "")
            + (f", {counts['unknown']} unknown" if counts["unknown"] else ""))


def source_line(source: dict) -> str:
    """Where the state came from when the hosts were not asked (check --from-prometheus)."""
    ignored = source.get("ignored_series") or 0
    return (f"state from Prometheus {source.get('prometheus')} at {source.get('evaluated')}; a host's data older "
            f"than {source.get('max_age_s')} s is unknown"
            + (f"; {ignored} series named no host of this inventory at its own address and were ignored"
               if ignored else ""))


def host_line(host) -> str:
    """One line: the host, its outcome and what is wrong (the first few problems)."""
    problems = [" ".join(p.split()) for p in host.problems()]
    shown = [p if len(p) <= PROBLEM_CHARS else p[: PROBLEM_CHARS - 1] + "…" for p in problems[:PROBLEMS_PER_LINE]]
    more = f"; … {len(problems) - PROBLEMS_PER_LINE} more (--verbose)" if len(problems) > PROBLEMS_PER_LINE else ""
    return f"{host.name}  {host.outcome}: {'; '.join(shown)}{more}"


def render_table(report: Report, console, *, verbose: int = 0) -> None:
    """Every field of a report may come from a host or a report.json read back: escaped in
    markup, and cleaned by the console (reports/terminal.py)."""
    from rich.markup import escape

    if verbose:
        _full_table(report, console, changes_shown=None if verbose >= 2 else CHANGES_SHOWN)
    colour = {EXIT_OK: "green", EXIT_FAILED_CHECKS: "yellow"}.get(report.exit_code, "red")

    def say(markup: str) -> None:
        console.print(markup, markup=True, highlight=False, soft_wrap=True)

    say(f"provision {escape(report.command)} · profile {escape(report.profile)} · "
        f"[bold {colour}]{escape(summary_line(report))}[/]")
    if report.source:
        say(escape(source_line(report.source)))
    for host in report.hosts:
        if host.outcome != "ok":
            say(f"  [{STATUS_STYLE[host.outcome]}]{escape(host_line(host))}[/]")
    for error in report.errors:
        say(f"[red]error:[/red] {escape(error)}")
    if report.interrupted or report.errors:
        say(f"[bold {colour}]{escape(report.verdict)}[/]")
    for line in report.rollout_lines() + report.accept_lines():
        say(escape(line))
    retry = report.retry_command()
    if retry:
        say(f"retry just those: {escape(retry)}")
    say(f"run record: {escape(str(report.run_dir))}")


def _full_table(report: Report, console, changes_shown: int | None = CHANGES_SHOWN) -> None:
    """--verbose: every host and every check. The result column is the host's outcome, so a
    host that failed a check reads `failed` there even when all its tasks ran. The first
    `changes_shown` changed tasks of a host (None: all of them, -vv). Cells are Text made by
    terminal.text: no field is read as markup."""
    from rich.table import Table
    from rich.text import Text

    from provisioner.reports.terminal import text

    table = Table(title=text(f"provision {report.command} · profile {report.profile}"), title_justify="left")
    table.add_column("host")
    table.add_column("result")
    table.add_column("changed / failures")
    table.add_column("checks")
    lines = Text("\n").join
    for host in report.hosts:
        shown = host.changed_tasks[:changes_shown]
        more = len(host.changed_tasks) - len(shown)
        changes = lines([text(f, "red") for f in host.failures] + [text(t) for t in shown]
                        + ([text(f"… {more} more (-vv)")] if more else []))
        checks = lines(Text.assemble(text(f"{c.status:4}", STATUS_STYLE.get(c.status, "")), " ",
                                     text(f"{c.name}: {c.detail}")) for c in host.checks)
        result = host.outcome + (" (changed)" if host.outcome == "ok" and host.status == "changed" else "")
        table.add_row(text(host.name), text(result, STATUS_STYLE.get(host.outcome, "")), changes or "-", checks or "-")
    console.print(table)
