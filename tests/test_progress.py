"""Live progress for a big fleet: the totals and the hosts in trouble stay on screen."""

from __future__ import annotations

import io

from rich.console import Console

from provisioner.engine.progress import Progress


def _events(hosts: int):
    yield {"event": "playbook_on_play_start", "event_data": {"play": "Converge GPU hosts to the profile."}}
    for n in range(hosts):
        host = f"gpu{n:02d}"
        yield {"event": "runner_on_start", "event_data": {"host": host, "role": "nvidia_driver",
                                                          "task": "Install the driver packages at their exact versions"}}
        yield {"event": "runner_on_ok", "event_data": {"host": host, "res": {"changed": n % 2 == 0}}}
    yield {"event": "runner_on_failed", "event_data": {"host": "gpu47", "task": "Install", "res": {}}}
    yield {"event": "runner_on_unreachable", "event_data": {"host": "gpu49", "res": {}}}


def test_fifty_hosts_fit_a_terminal_with_totals_and_the_failing_hosts_first():
    console = Console(file=io.StringIO(), force_terminal=True, width=140, height=30)
    progress = Progress(Console(file=io.StringIO()))  # its own plain lines go elsewhere
    for event in _events(50):
        progress(event)
    console.print(progress._table(), height=30)
    lines = console.file.getvalue().splitlines()
    assert len(lines) <= 30
    text = "\n".join(lines)
    assert "50 host(s): 25 changed, 1 failed, 1 unreachable" in text
    body = [line for line in lines if "gpu" in line]
    assert "gpu47" in body[0] and "gpu49" in body[1]  # trouble first
    assert "more" in text


def test_not_a_terminal_prints_steps_failures_and_host_outcomes_as_they_happen():
    out = io.StringIO()
    with Progress(Console(file=out, force_terminal=False), heartbeat=0) as progress:
        for event in _events(5):
            progress(event)
        progress({"event": "playbook_on_stats", "event_data": {"ok": {"gpu00": 3, "gpu01": 2}, "changed": {"gpu00": 1},
                                                               "failures": {"gpu47": 1}, "dark": {"gpu49": 1}}})
        progress({"event": "provision_hook", "event_data": {"host": "gpu01", "hook": "gate", "rc": 3,
                                                            "detail": "exit 3 after 0.1 s, output in hooks/x.log"}})
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert all(line.startswith("[0m0") for line in out.getvalue().splitlines())  # elapsed time first
    assert lines == ["step: Converge GPU hosts to the profile.", "gpu47: FAILED: Install", "gpu49: UNREACHABLE",
                     "gpu00: step done, changed (ok=3 changed=1)", "gpu01: step done (ok=2 changed=0)",
                     "gpu47: step FAILED (ok=0 changed=0)", "gpu49: UNREACHABLE (ok=0 changed=0)",
                     "gpu01: gate FAILED (exit 3 after 0.1 s, output in hooks/x.log)"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _start(host: str, role: str, task: str) -> dict:
    return {"event": "runner_on_start", "event_data": {"host": host, "role": role, "task": task}}


def _ended(host: str, kind: str = "runner_on_ok") -> dict:
    return {"event": kind, "event_data": {"host": host, "res": {}}}


def test_the_heartbeat_names_each_busy_hosts_task_its_finished_tasks_and_how_long_the_task_has_run():
    clock = Clock()
    progress = Progress(Console(file=io.StringIO(), force_terminal=False), heartbeat=0, clock=clock)
    progress({"event": "playbook_on_play_start", "event_data": {"play": "Converge GPU hosts to the profile."}})
    for n in range(42):  # lab-2 finishes 42 tasks (ok and skipped alike), lab-1 41
        for host in ("lab-1", "lab-2"):
            if host == "lab-1" and n == 41:
                continue
            progress(_start(host, "common", f"task {n}"))
            progress(_ended(host, "runner_on_skipped" if n % 3 else "runner_on_ok"))
    progress(_start("lab-2", "cuda_toolkit", "Install the toolkit packages"))
    clock.now += 60
    progress(_start("lab-1", "common", "task 41"))
    clock.now += 132
    progress(_start("lab-3", "common", "Gathering Facts"))
    progress({"event": "runner_on_unreachable", "event_data": {"host": "lab-3"}})
    assert progress.heartbeat_lines() == [
        "still working: Converge GPU hosts to the profile.; 3 host(s) seen, 0 failed, 1 unreachable",
        "  lab-2  42 tasks done  cuda_toolkit: Install the toolkit packages  3m12s",  # longest first
        "  lab-1  41 tasks done  common: task 41  2m12s",
    ]  # lab-3 is unreachable: in no task
    progress(_ended("lab-2"))  # its task ended: it waits for the others, and is not listed as busy
    assert [line.split()[0] for line in progress.heartbeat_lines()[1:]] == ["lab-1"]


def test_a_big_fleets_heartbeat_lists_the_ten_longest_in_their_task_and_counts_the_rest():
    clock = Clock()
    progress = Progress(Console(file=io.StringIO(), force_terminal=False), heartbeat=0, clock=clock)
    for n in range(25):
        progress(_start(f"gpu{n:02d}", "nvidia_driver", "Install the driver packages"))
        clock.now += 1
    lines = progress.heartbeat_lines()
    assert len(lines) == 12 and lines[1].startswith("  gpu00  0 tasks done") and lines[1].endswith("0m25s")
    assert lines[10].startswith("  gpu09") and lines[-1] == "  ... and 15 more host(s) in a task"


def test_the_live_table_shows_finished_tasks_and_the_current_tasks_time():
    clock = Clock()
    progress = Progress(Console(file=io.StringIO()), clock=clock)
    progress(_start("lab-1", "common", "Install the base packages"))
    progress(_ended("lab-1"))
    progress(_start("lab-1", "cuda_toolkit", "Install the toolkit packages"))
    clock.now += 75
    console = Console(file=io.StringIO(), force_terminal=True, width=160, height=20)
    console.print(progress._table())
    row = next(line for line in console.file.getvalue().splitlines() if "lab-1" in line)
    assert [cell.strip() for cell in row.split("│")[1:5]] == ["lab-1", "1", "cuda_toolkit: Install the toolkit packages",
                                                              "1m15s"]
