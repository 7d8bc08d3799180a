"""bench/verify: `provision verify` on N converged lab hosts against a bare `ansible all -m
ping` round on the same hosts in the same run (read the ratios, not the seconds), and how
many module calls verify makes per host (counted in its run record's runner events).

    .venv/bin/python bench/verify.py [--hosts 1,3] [--runs 3]

Also the torch probe on its own: the snippet gpu_verify runs in the profile's environment,
timed in a venv with the CPU torch wheel from /opt/wheels on this machine (the lab hosts
share its CPU and kernel; the driver-only profile the fleet uses has no Python env, so its
verify does not run it). Every verify must exit 0. Hosts are removed at the end of each N.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

# The same setup and timing as the no-op benchmark beside it (run as `python bench/verify.py`,
# so bench/ is on sys.path).
from noop import ANSIBLE, PROFILE, PROVISION, timed  # noqa: E402

from provisioner import lab, paths  # noqa: E402


def module_calls(run_dir: Path) -> dict[str, collections.Counter]:
    """host -> {module: calls} of the tasks that ran (not skipped) in a verify run."""
    calls: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for path in (run_dir / "artifacts" / "verify" / "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        if event.get("event") in ("runner_on_ok", "runner_on_failed"):
            data = event["event_data"]
            calls[data["host"]][data.get("task_action", "?")] += 1
    return calls


def torch_probe_seconds(runs: int) -> list[float]:
    snippet = yaml.safe_load((paths.roles_dir() / "gpu_verify" / "vars" / "main.yml").read_text())["gpu_verify_torch_snippet"]
    wheels = sorted(Path("/opt/wheels").glob("torch-*.whl"))
    if not wheels:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        env = Path(tmp) / "env"
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(env / "bin/pip"), "install", "-q", "--disable-pip-version-check", "--find-links",
                        "/opt/wheels", str(wheels[-1])], check=True)
        return [timed([str(env / "bin/python"), "-c", snippet]) for _ in range(runs)]


def bench(n: int, runs: int) -> tuple[dict[str, list[float]], dict[str, collections.Counter]]:
    prefix, workdir = f"benchv{n}", Path(f"/tmp/bench-verify-{n}")
    runs_dir = Path(f"/tmp/bench-verify-{n}-runs")
    try:
        inv = str(lab.up(n, prefix, workdir).inventory)
        timed([PROVISION, "up", "--profile", PROFILE, inv, "--runs-dir", str(runs_dir)])
        verify = [PROVISION, "verify", "--profile", PROFILE, inv, "--runs-dir", str(runs_dir)]
        ping = [ANSIBLE, "all", "-m", "ping", "-i", inv]
        times: dict[str, list[float]] = {"ping": [], "verify": []}
        for _ in range(runs):
            times["ping"].append(timed(ping))
            times["verify"].append(timed(verify))
        last = sorted(runs_dir.glob("*-verify-*"))[-1]
        return times, module_calls(last)
    finally:
        lab.down(prefix, workdir)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="1,3", help="comma-separated host counts")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = {int(n): bench(int(n), args.runs) for n in args.hosts.split(",")}
    print(f"{'hosts':>5}  {'command':34} {'median s':>9} {'min s':>7} {'x ping':>7}   ({args.runs} runs each)")
    for n, (times, calls) in results.items():
        base = statistics.median(times["ping"])
        for key, name in (("ping", "ansible all -m ping (baseline)"), ("verify", "provision verify")):
            median = statistics.median(times[key])
            print(f"{n:5}  {name:34} {median:9.1f} {min(times[key]):7.1f} {median / base:7.1f}")
        for host, counter in sorted(calls.items()):
            print(f"       {host}: {sum(counter.values())} module call(s): "
                  + ", ".join(f"{module} x{count}" for module, count in counter.most_common()))
    probe = torch_probe_seconds(args.runs)
    if probe:
        print(f"torch probe on its own (CPU wheel, this machine): median {statistics.median(probe):.1f} s, "
              f"min {min(probe):.1f} s")


if __name__ == "__main__":
    main()
