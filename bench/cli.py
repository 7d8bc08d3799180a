"""bench/cli: wall time of the commands that touch no host (`profiles`, `profiles show`,
`profiles validate`, `render` of the example's hosts, `judge` of two captures), against a
bare Python start measured in the same run, interleaved so that load changes hit every
command alike (the machine is noisy: read the medians and the ratios, not one run). Beside
the wall time it prints the CPU time the command used (user + system, its children's
included), which other load on the machine changes far less.

    .venv/bin/python bench/cli.py [--runs 10] [--against CHECKOUT]

It runs `python -m provisioner.cli` from the checkout this file is in; `--against` another
checkout (a `git worktree add --detach` of the commit before a change) runs the same
commands from there too, interleaved with ours, and prints both medians side by side.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# bench/ is on sys.path (run as `python bench/cli.py`).
from noop import bytecode_env  # noqa: E402
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


def run_once(cmd: list[str], repo: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=repo, env={**env, "PYTHONPATH": str(repo)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 2):  # judge exits 2: the A100 capture fails the profile's checks
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr.decode(errors='replace')}")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--against", type=Path, help="another checkout to measure, interleaved (the 'before')")
    args = parser.parse_args()
    repos = {"": REPO, **({"before": args.against.resolve()} if args.against else {})}
    # Each checkout with its own bytecode (noop.bytecode_env); the first round, which compiles,
    # is not counted.
    envs = {tag: bytecode_env(PROVISION_PACKAGE_INDEX="snapshot") for tag in repos}
    out = tempfile.mkdtemp()
    todo = {tag: cases(repo, out) for tag, repo in repos.items()}
    results = {tag: {name: [] for name in todo[tag]} for tag in repos}
    for round_ in range(args.runs + 1):
        for name in todo[""]:
            for tag, repo in repos.items():
                elapsed = run_once(todo[tag][name], repo, envs[tag])
                if round_:
                    results[tag][name].append(elapsed)
    def median(tag: str, name: str, which: int) -> float:
        return statistics.median(t[which] for t in results[tag][name])

    base = median("", "python -c pass (baseline)", 0)
    before = f"  {'before: wall':>12} {'min':>6} {'cpu':>6}" if args.against else ""
    print(f"{'command':44} {'wall s':>7} {'min s':>6} {'cpu s':>6} {'x base':>6}{before}   (medians of {args.runs} runs)")
    for name, times in results[""].items():
        then = (f"  {median('before', name, 0):12.3f} {min(t[0] for t in results['before'][name]):6.3f} "
                f"{median('before', name, 1):6.3f}") if args.against else ""
        print(f"{name:44} {median('', name, 0):7.3f} {min(t[0] for t in times):6.3f} {median('', name, 1):6.3f} "
              f"{median('', name, 0) / base:6.1f}{then}")


if __name__ == "__main__":
    main()
