"""bench/fleet: how the fleet commands scale with the number of hosts, against a bare
`ansible all -m ping` round on the same hosts in the same run (read the ratios, not the
seconds: the lab hosts share the controller's CPUs).

    .venv/bin/python bench/fleet.py [--hosts 1,10,30,100] [--runs 1]

One lab host is converged with lab-driver-only once, `podman commit`ted, and every size's
hosts are clones of it, so each fleet starts converged and in its recorded state (a fresh
converge of 100 hosts would take hours here). For each size N: start N clones (prefix
bfleet<N>, workdir under /tmp), then --runs rounds of ping / check / verify / no-op up,
interleaved so that load changes hit all alike; every command must exit 0. Prints each
one's ratio to the ping round and to its own 1-host figure (when 1 is among the sizes), and
where the no-op `up` spends its time: its wall time split at the runner's events (before
the play starts: the CLI, validation, rendering, ansible-playbook's start; the play until
its first task; the tasks; after the last task), the playbooks it ran, and for the
largest size seconds per task summed over hosts. Hosts and the image are removed at the end.

Goals (benchmark output, not timed tests): check <= 1.5x ping and no-op up <= 2x ping at
every size; 100 hosts <= 10x one host.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import statistics
import subprocess
import sys
from pathlib import Path

# The same setup, timing and task profile as the no-op benchmark beside it (run as
# `python bench/fleet.py`, so bench/ is on sys.path).
from noop import ANSIBLE, PROFILE, PROVISION, print_tasks, task_seconds, timed  # noqa: E402

from provisioner import lab  # noqa: E402

IMAGE = "localhost/gpu-provisioner-bench-fleet:converged"
COMMANDS = (("ping", "ansible all -m ping (baseline)"), ("check", "provision check"),
            ("verify", "provision verify"), ("up", "provision up, no-op"))


def converged_image() -> str:
    """One host converged with PROFILE, committed as IMAGE."""
    prefix, workdir = "bfleetseed", Path("/tmp/bench-fleet-seed")
    try:
        inv = str(lab.up(1, prefix, workdir).inventory)
        timed([PROVISION, "up", "--profile", PROFILE, inv, "--runs-dir", "/tmp/bench-fleet-seed-runs"])
        subprocess.run(["podman", "commit", "-q", f"{prefix}-1", IMAGE], check=True, capture_output=True)
        return IMAGE
    finally:
        lab.down(prefix, workdir, stop_cache=False)


def timeline(run_dir: Path, started: dt.datetime, seconds: float) -> dict[str, float]:
    """One run's wall time split at its runner events (all its playbooks together)."""
    events = [json.loads(p.read_text()) for p in run_dir.glob("artifacts/*/job_events/*.json")]
    at = collections.defaultdict(list)
    for e in events:
        at[e["event"]].append(dt.datetime.fromisoformat(e["created"]))
    end = started + dt.timedelta(seconds=seconds)
    first_play = min(at["playbook_on_start"])
    first_task = min(at["runner_on_start"], default=first_play)
    last_task = max(at["runner_on_ok"] + at["runner_on_failed"] + at["runner_on_skipped"], default=first_task)

    def span(a, b):
        return round((b - a).total_seconds(), 2)
    return {"before the play": span(started, first_play), "play start to first task": span(first_play, first_task),
            "tasks": span(first_task, last_task), "after the last task": span(last_task, end)}


def bench(n: int, runs: int, image: str) -> tuple[dict[str, list[float]], collections.Counter, dict]:
    prefix, workdir, runs_dir = f"bfleet{n}", Path(f"/tmp/bench-fleet-{n}"), Path(f"/tmp/bench-fleet-{n}-runs")
    try:
        started = lab.up(n, prefix, workdir, image=image)
        print(f"  {started.seconds:7.1f} s  lab up --hosts {n} (clones)", file=sys.stderr, flush=True)
        inv = str(started.inventory)
        common = ["--profile", PROFILE, inv, "--runs-dir", str(runs_dir)]
        argv = {"ping": [ANSIBLE, "all", "-m", "ping", "-i", inv], "check": [PROVISION, "check", *common],
                "verify": [PROVISION, "verify", *common], "up": [PROVISION, "up", *common]}
        times: dict[str, list[float]] = {key: [] for key in argv}
        up_started = dt.datetime.now(dt.timezone.utc)
        for _ in range(runs):
            for key, cmd in argv.items():
                started = dt.datetime.now(dt.timezone.utc)
                times[key].append(timed(cmd))
                up_started = started if key == "up" else up_started
        last_up = sorted(runs_dir.glob("*-up-*"))[-1]
        tasks = collections.Counter()
        playbooks = sorted(p.name for p in (last_up / "artifacts").iterdir())
        for step in playbooks:
            tasks.update({f"{step}: {t}": s for t, s in task_seconds(last_up / "artifacts" / step).items()})
        return times, tasks, {"playbooks": playbooks, **timeline(last_up, up_started, times["up"][-1])}
    finally:
        lab.down(prefix, workdir, stop_cache=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="1,10,30,100", help="comma-separated host counts")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    counts = [int(x) for x in args.hosts.split(",")]
    image = converged_image()
    try:
        results = {n: bench(n, args.runs, image) for n in counts}
    finally:
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True)
    one = {key: statistics.median(results[1][0][key]) for key, _ in COMMANDS} if 1 in results else None
    print(f"{'hosts':>5}  {'command':32} {'median s':>9} {'min s':>7} {'x ping':>7} {'x 1 host':>9}   ({args.runs} run(s) each)")
    for n, (times, _, _) in results.items():
        base = statistics.median(times["ping"])
        for key, name in COMMANDS:
            median = statistics.median(times[key])
            own = f"{median / one[key]:9.1f}" if one else f"{'-':>9}"
            print(f"{n:5}  {name:32} {median:9.1f} {min(times[key]):7.1f} {median / base:7.1f} {own}")
    print("\nwhere the last no-op up spends its wall time (s; split at its runner events):")
    for n, (times, _, split) in results.items():
        parts = ", ".join(f"{k} {v:.1f}" for k, v in split.items() if k != "playbooks")
        print(f"  {n:5} host(s): {times['up'][-1]:.1f} s = {parts}; playbooks run: {' '.join(split['playbooks'])}")
    largest = max(results)
    print_tasks(f"where the no-op up of {largest} host(s) spends its task time", results[largest][1], 8)


if __name__ == "__main__":
    main()
