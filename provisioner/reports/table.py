"""The report as a table for people: one row per host, its checks, the verdict, the retry."""

from __future__ import annotations

from provisioner.reports.report import EXIT_FAILED_CHECKS, EXIT_OK, Report

STATUS_STYLE = {"ok": "green", "changed": "yellow", "drift": "yellow", "failed": "red",
                "unreachable": "red", "pass": "green", "fail": "red", "skip": "dim"}


def render_table(report: Report, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"provision {report.command} · profile {report.profile}", title_justify="left")
    table.add_column("host")
    table.add_column("result")
    table.add_column("changed / failures")
    table.add_column("checks")
    for host in report.hosts:
        style = STATUS_STYLE.get(host.status, "")
        changes = "\n".join([f"[red]{escape(f)}[/red]" for f in host.failures] + [escape(t) for t in host.changed_tasks[:8]]
                            + ([f"… {len(host.changed_tasks) - 8} more"] if len(host.changed_tasks) > 8 else []))
        checks = "\n".join(f"[{STATUS_STYLE.get(c.status, '')}]{escape(c.status):4}[/] {escape(c.name)}: {escape(c.detail)}"
                           for c in host.checks)
        table.add_row(escape(host.name), f"[{style}]{escape(host.status)}[/]", changes or "-", checks or "-")
    console.print(table)
    for error in report.errors:
        console.print(f"[red]error:[/red] {escape(error)}")
    colour = {EXIT_OK: "green", EXIT_FAILED_CHECKS: "yellow"}.get(report.exit_code, "red")
    console.print(f"[bold {colour}]{escape(report.verdict)}[/]")
    retry = report.retry_command()
    if retry:
        console.print(f"retry just those: {escape(retry)}", highlight=False, soft_wrap=True)
    console.print(f"run record: {escape(str(report.run_dir))}")
