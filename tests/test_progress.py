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
