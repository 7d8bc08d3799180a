"""The run's report: one shape for people (rich tables) and machines (--json, report.json).

JSON shape (stable; new keys may be added, none removed or renamed):
{
  "command": "up", "profile": "h100-train", "profile_sha256": "...",
  "run_dir": "/abs/path", "started": "ISO-8601 UTC", "finished": "...",
  "interrupted": false, "exit_code": 0, "verdict": "one line for the fleet",
  "errors": ["failures not tied to a host"], "retry": "the command that re-runs only failed hosts, or null",
  "inventory": "the inventory path as given",
  "hosts": [{"name": "node1", "status": "ok|changed|drift|failed|unreachable|not-verified",
             "changed_tasks": [...], "diffs": {"task": "unified diff or message"}, "failures": [...],
             "checks": [{"name": "...", "status": "pass|fail|skip", "detail": "..."}]}]
}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.checks import Check

EXIT_OK, EXIT_ERROR, EXIT_FAILED_CHECKS = 0, 1, 2


@dataclass
class HostReport:
    name: str
    status: str
    changed_tasks: list[str] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        """Ansible could not finish with this host: a task failed or it was unreachable."""
        return self.status in ("failed", "unreachable")

    @property
    def falls_short(self) -> bool:
        """The host was reached but differs from the profile: drift or a failed check."""
        return self.status == "drift" or any(c.status == "fail" for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "changed_tasks": self.changed_tasks,
                "diffs": self.diffs, "failures": self.failures, "checks": [c.as_dict() for c in self.checks]}


@dataclass
class Report:
    command: str
    profile: str
    profile_sha256: str
    inventory: str
    run_dir: Path
    started: str
    finished: str = ""
    interrupted: bool = False
    hosts: list[HostReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.errors or self.interrupted or any(h.broken for h in self.hosts):
            return EXIT_ERROR
        if any(h.falls_short for h in self.hosts):
            return EXIT_FAILED_CHECKS
        return EXIT_OK

    @property
    def verdict(self) -> str:
        total = len(self.hosts)
        bad = [h.name for h in self.hosts if h.broken]
        failing = [h.name for h in self.hosts if h.falls_short]
        if self.interrupted:
            return f"interrupted: the {self.command} run was stopped before it finished"
        if self.errors:
            return f"error: Ansible stopped before reaching the hosts ({len(self.errors)} message(s) above)"
        if bad:
            return f"{len(bad)} of {total} host(s) failed or unreachable: {', '.join(bad)}"
        if failing:
            what = "drifted from" if self.command == "check" else "do not meet"
            return f"{len(failing)} of {total} host(s) {what} profile {self.profile}: {', '.join(failing)}"
        done = {"check": "match", "preflight": "are ready for", "verify": "verified against"}.get(self.command, "converged to")
        return f"all {total} host(s) {done} profile {self.profile}"

    def retry_command(self) -> str | None:
        """The command that re-runs just the hosts that failed or could not be reached."""
        bad = [h.name for h in self.hosts if h.broken]
        if not bad:
            return None
        return f"provision {self.command} --profile {self.profile} {self.inventory} --limit {','.join(bad)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "command": self.command, "profile": self.profile, "profile_sha256": self.profile_sha256,
            "inventory": self.inventory, "run_dir": str(self.run_dir), "started": self.started, "finished": self.finished,
            "interrupted": self.interrupted, "exit_code": self.exit_code, "verdict": self.verdict,
            "errors": self.errors, "retry": self.retry_command(), "hosts": [h.as_dict() for h in self.hosts],
        }

    def write(self) -> Path:
        path = self.run_dir / "report.json"
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n", encoding="utf-8")
        path.chmod(0o600)
        return path


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
        checks = "\n".join(f"[{STATUS_STYLE[c.status]}]{c.status:4}[/] {escape(c.name)}: {escape(c.detail)}"
                           for c in host.checks)
        table.add_row(host.name, f"[{style}]{host.status}[/]", changes or "-", checks or "-")
    console.print(table)
    for error in report.errors:
        console.print(f"[red]error:[/red] {escape(error)}")
    colour = {EXIT_OK: "green", EXIT_FAILED_CHECKS: "yellow"}.get(report.exit_code, "red")
    console.print(f"[bold {colour}]{report.verdict}[/]")
    retry = report.retry_command()
    if retry:
        console.print(f"retry just those: {escape(retry)}", highlight=False, soft_wrap=True)
    console.print(f"run record: {report.run_dir}")
