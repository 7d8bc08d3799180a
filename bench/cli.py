"""bench/cli: wall time of the commands that touch no host (`profiles`, `profiles show`,
`profiles validate`, `render` of the example's hosts, `judge` of two captures), against a
bare Python start measured in the same run, interleaved so that load changes hit every
command alike (the machine is noisy: read the medians and the ratios, not one run).

    .venv/bin/python bench/cli.py [--runs 10] [--against CHECKOUT]

It runs `python -m provisioner.cli` from the checkout this file is in; `--against` another
checkout (a `git worktree add --detach` of the commit before a change) runs the same
commands from there too, interleaved with ours, and prints both medians side by side.
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
PROVISION = [sys.executable, "-m", "provisioner.cli"]


def cases(repo: Path, out: str) -> dict[str, list[str]]:
    fixtures = repo / "tests" / "data" / "fixtures"
    return {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "python -c 'import ansible' (for scale)": [sys.executable, "-c", "import ansible.inventory.manager"],
        "provision --version": [*PROVISION, "--version"],
        "provision profiles": [*PROVISION, "profiles"],
        "provision profiles show h100-train": [*PROVISION, "profiles", "show", "h100-train"],
        "provision profiles validate a100-train": [*PROVISION, "profiles", "validate",
                                                   str(repo / "provisioner/profiles/a100-train.yml")],
        # From the snapshot: a live index read is the network's time, not ours. debian12-lab
        # renders offline (its packages come from the distribution's archive snapshot).
        "provision render (5 hosts, snapshot)": [*PROVISION, "render", "-p", "debian12-lab",
                                                 str(repo / "inventories/example/hosts.ini"), "-o", out],
        "provision judge (nvidia-smi + nccl-tests)": [
            *PROVISION, "judge", "-p", "a100-train",
            str(fixtures / "nvidia-smi/xml/a100-sxm4-80gb-mig__535.54.03__telegraf.xml"),
            str(fixtures / "nccl-tests/all_reduce_perf__8x-a100-sxm4-40gb__superbench.log")],
    }


def run_once(cmd: list[str], repo: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=repo, env={**env, "PYTHONPATH": str(repo)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 2):  # judge exits 2: the A100 capture fails the profile's checks
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr.decode(errors='replace')}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--against", type=Path, help="another checkout to measure, interleaved (the 'before')")
    args = parser.parse_args()
    repos = {"": REPO, **({"before": args.against.resolve()} if args.against else {})}
    # Bytecode as an installed package has it (compiled once, into a folder of our own so the
    # checkout stays clean), whatever PYTHONDONTWRITEBYTECODE the shell has; the first round,
    # which compiles, is not counted.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.update(PROVISION_PACKAGE_INDEX="snapshot")
    out = tempfile.mkdtemp()
    todo = {tag: cases(repo, out) for tag, repo in repos.items()}
    prefixes = {tag: tempfile.mkdtemp() for tag in repos}
    results = {tag: {name: [] for name in todo[tag]} for tag in repos}
    for round_ in range(args.runs + 1):
        for name in todo[""]:
            for tag, repo in repos.items():
                elapsed = run_once(todo[tag][name], repo, {**env, "PYTHONPYCACHEPREFIX": prefixes[tag]})
                if round_:
                    results[tag][name].append(elapsed)
    base = statistics.median(results[""]["python -c pass (baseline)"])
    before = "  before: median s" if args.against else ""
    print(f"{'command':44} {'median s':>9} {'min s':>7} {'x baseline':>10}{before}   ({args.runs} runs each)")
    for name, times in results[""].items():
        median = statistics.median(times)
        then = f"  {statistics.median(results['before'][name]):17.3f}" if args.against else ""
        print(f"{name:44} {median:9.3f} {min(times):7.3f} {median / base:10.1f}{then}")


if __name__ == "__main__":
    main()
