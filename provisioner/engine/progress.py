"""Live progress from the runner's events.

On a terminal: a per-host table, redrawn in place. On a non-terminal (CI logs, cron mail):
plain lines as things happen, so a log shows progress while the run goes, not only at the
end: one line when a step (play) starts, one per failure or unreachable host at once, one
per host when a step ends (its outcome in that step), one per rollout hook, and a
heartbeat every `heartbeat` seconds while work goes on (a parameter, so a test can use a
short one): a line of totals, then the hosts longest in their current task, each with how
many tasks it has finished, that task and how long it has run ("lab-2  42 tasks done
cuda_toolkit: Install the toolkit packages  3m12s"), so a long unpack says what it is.
Both views read the same per-host rows. Task names, plays and hook details come from
Ansible and the hosts: the table's cells and the plain lines are cleaned Text
(reports/terminal.py), never read as markup."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

from provisioner.reports.terminal import text

HEARTBEAT_SECONDS = 30.0
BUSIEST = 10  # hosts a heartbeat names; a bigger fleet's others are counted, not listed
# A host's task ended: it waits for the others (linear strategy) until its next one starts.
ENDED = {"runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"}


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    def __init__(self, console: Console, heartbeat: float = HEARTBEAT_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.console = console
        self.heartbeat = heartbeat
        self.clock = clock
        self.started = clock()
        self.rows: dict[str, dict[str, Any]] = {}
        self.play = ""
        self.live: Live | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(self._table(), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        elif self.heartbeat > 0:
            self._beat = threading.Thread(target=self._heartbeat, name="provision-heartbeat", daemon=True)
            self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._beat:
            self._beat.join(timeout=5)
        if self.live:
            self.live.__exit__(*exc)

    def _row(self, host: str) -> dict[str, Any]:
        # done: tasks finished on the host; since: when its current task started (None: between tasks)
        return self.rows.setdefault(host, {"task": "", "ok": 0, "changed": 0, "failed": 0, "unreachable": False,
                                           "done": 0, "since": None})

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        host = data.get("host")
        if kind == "playbook_on_play_start":
            self.play = (data.get("play") or data.get("name") or "").strip()
            self._plain(f"step: {self.play}")
        elif kind == "runner_on_start" and host:
            task = (data.get("task") or "").strip()
            row = self._row(host)
            row["task"] = f"{data['role']}: {task}" if data.get("role") else task
            row["since"] = self.clock()
        elif kind == "runner_on_ok" and host:
            row = self._row(host)
            row["changed" if (data.get("res") or {}).get("changed") else "ok"] += 1
        elif kind == "runner_on_failed" and host and not data.get("ignore_errors"):
            self._row(host)["failed"] += 1
            self._plain(f"{host}: FAILED: {(data.get('task') or '').strip()}")
        elif kind == "runner_on_unreachable" and host:
            self._row(host)["unreachable"] = True
            self._plain(f"{host}: UNREACHABLE")
        elif kind == "playbook_on_stats":
            self._step_outcomes(data)
        elif kind == "provision_hook" and host:  # engine/rolling.py: a drain, gate or undrain command ran
            ok = data.get("rc") == 0
            self._plain(f"{host}: {data.get('hook')} {'ok' if ok else 'FAILED'} ({data.get('detail', '')})")
            if not ok:
                self._row(host)["failed"] += 1
        if kind in ENDED and host:
            row = self._row(host)
            row["done"] += 1
            row["since"] = None
        if self.live:
            self.live.update(self._table())

    def _step_outcomes(self, stats: dict[str, Any]) -> None:
        """One line per host as a step ends: how its tasks went in it (the verdict on the
        host, from its checks, comes in the summary at the end)."""
        names = sorted({h for key in ("ok", "changed", "failures", "dark", "skipped") for h in stats.get(key) or {}})
        for name in names:
            if name in (stats.get("dark") or {}):
                outcome = "UNREACHABLE"
            elif (stats.get("failures") or {}).get(name):
                outcome = "step FAILED"
            else:
                outcome = "step done, changed" if (stats.get("changed") or {}).get(name) else "step done"
            self._plain(f"{name}: {outcome} (ok={(stats.get('ok') or {}).get(name, 0)} "
                        f"changed={(stats.get('changed') or {}).get(name, 0)})")

    def _plain(self, line: str) -> None:
        if not self.live:
            self.console.print(text(f"[{duration(self.clock() - self.started)}] {line}"), soft_wrap=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            for line in self.heartbeat_lines():
                self._plain(line)

    def busiest(self) -> list[tuple[str, dict[str, Any]]]:
        """The hosts in a task now, the longest in it first."""
        busy = [(host, row) for host, row in self.rows.items() if row["since"] is not None and not row["unreachable"]]
        return sorted(busy, key=lambda item: (item[1]["since"], item[0]))

    def heartbeat_lines(self) -> list[str]:
        """The totals; then each of the BUSIEST hosts longest in a task: its finished tasks,
        its current task and how long that has run."""
        rows = list(self.rows.values())
        failed = sum(1 for r in rows if r["failed"])
        unreachable = sum(1 for r in rows if r["unreachable"])
        lines = [f"still working: {self.play or 'starting'}; {len(rows)} host(s) seen, {failed} failed, "
                 f"{unreachable} unreachable"]
        busy, now = self.busiest(), self.clock()
        width = max((len(host) for host, _ in busy[:BUSIEST]), default=0)
        lines += [f"  {host:<{width}}  {row['done']} tasks done  {row['task']}  {duration(now - row['since'])}"
                  for host, row in busy[:BUSIEST]]
        if len(busy) > BUSIEST:
            lines.append(f"  ... and {len(busy) - BUSIEST} more host(s) in a task")
        return lines

    def _table(self) -> Table:
        """Totals in the title; one row per host, hosts in trouble first, cut to the screen
        so a 50-host run stays one readable block."""
        now = self.clock()
        failed = sum(1 for r in self.rows.values() if r["failed"])
        unreachable = sum(1 for r in self.rows.values() if r["unreachable"])
        changed = sum(1 for r in self.rows.values() if r["changed"])
        title = (f"{self.play}  ·  {len(self.rows)} host(s): {changed} changed, {failed} failed, "
                 f"{unreachable} unreachable  ·  {now - self.started:.0f}s")
        table = Table(title=text(title), title_justify="left", expand=False)
        for column in ("host", "done", "role: current task", "for", "ok", "changed", "failed"):
            table.add_column(column)
        rows = sorted(self.rows.items(), key=lambda item: (not (item[1]["failed"] or item[1]["unreachable"]), item[0]))
        room = max(3, self.console.size.height - 8)  # title, header, borders, the "more" row
        for host, row in rows[:room]:
            task = text("unreachable", "red") if row["unreachable"] else text(row["task"][:80])
            running = duration(now - row["since"]) if row["since"] is not None and not row["unreachable"] else ""
            table.add_row(text(host), str(row["done"]), task, running, str(row["ok"]), str(row["changed"]),
                          str(row["failed"]))
        if len(rows) > room:
            table.add_row(f"... {len(rows) - room} more", "", "", "", "", "", "")
        return table
