"""Live progress from the runner's events: a per-host table on a terminal, and on a
non-terminal (CI logs) one plain line per failure as it happens and nothing else."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table


class Progress:
    def __init__(self, console: Console):
        self.console = console
        self.started = time.monotonic()
        self.rows: dict[str, dict[str, Any]] = {}
        self.play = ""
        self.live: Live | None = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.__exit__(*exc)

    def _row(self, host: str) -> dict[str, Any]:
        return self.rows.setdefault(host, {"task": "", "ok": 0, "changed": 0, "failed": 0, "unreachable": False})

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        host = data.get("host")
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
        elif kind == "runner_on_start" and host:
            task = (data.get("task") or "").strip()
            self._row(host)["task"] = f"{data['role']}: {task}" if data.get("role") else task
        elif kind == "runner_on_ok" and host:
            row = self._row(host)
            row["changed" if (data.get("res") or {}).get("changed") else "ok"] += 1
        elif kind == "runner_on_failed" and host and not data.get("ignore_errors"):
            self._row(host)["failed"] += 1
            self._plain(f"{host}: FAILED: {(data.get('task') or '').strip()}")
        elif kind == "runner_on_unreachable" and host:
            self._row(host)["unreachable"] = True
            self._plain(f"{host}: UNREACHABLE")
        if self.live:
            self.live.update(self._table())

    def _plain(self, line: str) -> None:
        if not self.live:
            self.console.print(line, highlight=False, markup=False)

    def _table(self) -> Table:
        """Totals in the title; one row per host, hosts in trouble first, cut to the screen
        so a 50-host run stays one readable block."""
        elapsed = time.monotonic() - self.started
        failed = sum(1 for r in self.rows.values() if r["failed"])
        unreachable = sum(1 for r in self.rows.values() if r["unreachable"])
        changed = sum(1 for r in self.rows.values() if r["changed"])
        title = (f"{self.play}  ·  {len(self.rows)} host(s): {changed} changed, {failed} failed, "
                 f"{unreachable} unreachable  ·  {elapsed:.0f}s")
        table = Table(title=title, title_justify="left", expand=False)
        for column in ("host", "role: current task", "ok", "changed", "failed"):
            table.add_column(column)
        rows = sorted(self.rows.items(), key=lambda item: (not (item[1]["failed"] or item[1]["unreachable"]), item[0]))
        room = max(3, self.console.size.height - 8)  # title, header, borders, the "more" row
        for host, row in rows[:room]:
            task = "[red]unreachable[/]" if row["unreachable"] else escape(row["task"][:80])
            table.add_row(host, task, str(row["ok"]), str(row["changed"]), str(row["failed"]))
        if len(rows) > room:
            table.add_row(f"... {len(rows) - room} more", "", "", "", "")
        return table
