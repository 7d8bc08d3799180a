"""bench/noop: wall time of a no-op `provision up` and of `provision check` on N converged
lab hosts, against a bare `ansible all -m ping` round on the same hosts in the same run
(the machine is noisy: read the ratios, not the seconds). Both forms of each: `up` (skips
the converge of hosts preflight finds in their recorded state) and `up --full` (converges
anyway: the no-op converge itself), `check` (recorded state, one module call) and
`check --deep` (the converge in check mode).

    .venv/bin/python bench/noop.py [--hosts 1,5] [--runs 3]

For each N: start N lab hosts (prefix bench<N>, workdir under /tmp), converge them once
with lab-driver-only ("first converge", timed once, not a no-op), then --runs rounds of
ping / up / check, interleaved so that load changes hit all three alike. Every `up` and
`check` must exit 0 (converged and verified / no drift). The hosts are removed at the
end of each N, whatever happens. Also prints the slowest converge tasks of the last
no-op `up --full` (seconds summed over hosts, from its run record's runner events).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from provisioner import lab  # noqa: E402

BIN = Path(sys.executable).parent
PROVISION, ANSIBLE = str(BIN / "provision"), str(BIN / "ansible")
PROFILE = str(REPO / "tests/data/profiles/lab-driver-only.yml")


def bytecode_env(**extra: str) -> dict[str, str]:
    """The environment a benchmark times the CLI in: bytecode kept as an installed package has
    it (pip compiles on install), in a folder of its own so the checkout stays clean, whatever
    PYTHONDONTWRITEBYTECODE the shell has (compiling every module at each start cost 0.12 s)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": tempfile.mkdtemp(prefix="bench-pyc-"), **extra}


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    print(f"  {seconds:7.1f} s  {' '.join(cmd)[-100:]}", file=sys.stderr, flush=True)
    if r.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    return seconds


def task_seconds(artifacts: Path) -> collections.Counter:
    """Seconds per task name (summed over hosts) from ansible-runner's job events."""
    events = sorted((json.loads(p.read_text()) for p in artifacts.glob("job_events/*.json")),
                    key=lambda e: e["counter"])
    starts, out = {}, collections.Counter()
    for e in events:
        d = e.get("event_data", {})
        key = (d.get("host"), d.get("task_uuid"))
        if e["event"] == "runner_on_start":
            starts[key] = dt.datetime.fromisoformat(e["created"])
        elif e["event"] in ("runner_on_ok", "runner_on_skipped", "runner_on_failed") and key in starts:
            out[d.get("task", "?").strip()] += (dt.datetime.fromisoformat(e["created"]) - starts[key]).total_seconds()
    return out


def bench(n: int, runs: int) -> tuple[dict[str, list[float]], collections.Counter]:
    prefix, workdir = f"bench{n}", Path(f"/tmp/bench-noop-{n}")
    runs_dir = Path(f"/tmp/bench-noop-{n}-runs")
    try:
        inv = str(lab.up(n, prefix, workdir).inventory)
        up = [PROVISION, "up", "--profile", PROFILE, inv, "--runs-dir", str(runs_dir)]
        check = [PROVISION, "check", "--profile", PROFILE, inv, "--runs-dir", str(runs_dir)]
        ping = [ANSIBLE, "all", "-m", "ping", "-i", inv]
        times: dict[str, list[float]] = {"ping": [], "first": [timed(up)], "up": [], "full": [], "check": [], "deep": []}
        for _ in range(runs):
            times["ping"].append(timed(ping))
            times["up"].append(timed(up))
            times["full"].append(timed(up + ["--full"]))
            times["check"].append(timed(check))
            times["deep"].append(timed(check + ["--deep"]))
        last_full = [d for d in sorted(runs_dir.glob("*-up-*")) if (d / "artifacts/site").is_dir()][-1]
        return times, task_seconds(last_full / "artifacts" / "site")
    finally:
        lab.down(prefix, workdir)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="1,5", help="comma-separated host counts")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    counts = [int(x) for x in args.hosts.split(",")]
    results = {n: bench(n, args.runs) for n in counts}
    print(f"{'hosts':>5}  {'command':34} {'median s':>9} {'min s':>7} {'x ping':>7}   ({args.runs} runs each)")
    for n, (times, _) in results.items():
        base = statistics.median(times["ping"])
        for key, name in (("ping", "ansible all -m ping (baseline)"), ("first", "provision up, first converge (1 run)"),
                          ("up", "provision up, no-op"), ("full", "provision up --full, no-op"),
                          ("check", "provision check"), ("deep", "provision check --deep")):
            median = statistics.median(times[key])
            print(f"{n:5}  {name:34} {median:9.1f} {min(times[key]):7.1f} {median / base:7.1f}")
    if 1 in results:
        one = statistics.median(results[1][0]["up"])
        for n, (times, _) in results.items():
            if n != 1:
                print(f"{n} hosts no-op / 1 host no-op: up {statistics.median(times['up']) / one:.2f}x, up --full "
                      f"{statistics.median(times['full']) / statistics.median(results[1][0]['full']):.2f}x")
    for n, (_, tasks) in results.items():
        print_tasks(f"slowest converge tasks of the last no-op up --full, {n} host(s)", tasks, 6)


def print_tasks(title: str, tasks: collections.Counter, top: int) -> None:
    """The `top` slowest tasks, with their share of all task seconds (summed over hosts)."""
    total = sum(tasks.values()) or 1.0
    print(f"\n{title} (s summed over hosts; all tasks {total:.0f} s):")
    for task, seconds in tasks.most_common(top):
        print(f"  {seconds:7.1f}  {seconds / total:4.0%}  {task[:90]}")


if __name__ == "__main__":
    main()
