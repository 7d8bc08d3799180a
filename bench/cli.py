"""bench/cli: wall time of the commands that touch no host, against a bare Python start
measured in the same run (the machine is noisy: read the ratios, not the seconds).

    .venv/bin/python bench/cli.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROVISION = str(Path(sys.executable).parent / "provision")


def timed(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "PROVISION_PACKAGE_INDEX": "snapshot"})
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    out = tempfile.mkdtemp()
    cases = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "python -c 'import ansible' (for scale)": [sys.executable, "-c", "import ansible.inventory.manager"],
        "provision --version": [PROVISION, "--version"],
        "provision profiles": [PROVISION, "profiles"],
        "provision profiles show h100-train": [PROVISION, "profiles", "show", "h100-train"],
        # From the snapshot: NVIDIA's repository may be unreachable here, and a live index
        # read is the network's time, not ours (bench/ measures the CLI).
        "provision render (5 hosts, snapshot)": [PROVISION, "render", "-p", "h100-train",
                                                 str(REPO / "inventories/example/hosts.ini"), "-o", out],
    }
    results = {name: timed(cmd, args.runs) for name, cmd in cases.items()}
    base = statistics.median(results["python -c pass (baseline)"])
    print(f"{'command':42} {'median s':>9} {'min s':>7} {'x baseline':>10}   ({args.runs} runs each)")
    for name, times in results.items():
        median = statistics.median(times)
        print(f"{name:42} {median:9.3f} {min(times):7.3f} {median / base:10.1f}")


if __name__ == "__main__":
    main()
