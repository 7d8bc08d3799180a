"""bench/layout: the same components written the naive way vs ours, on the same converged
lab hosts in the same run: a no-op of bench/naive/driver.yml (full fact gathering, one
apt task per package, one task per hold and file, no pipelining, no ControlPersist)
against a no-op of our converge step (playbooks/site.yml with the inventory, variables
and ansible.cfg that `provision render` writes, i.e. what `provision up` runs between
preflight and verify; its fact cache is emptied before each run, as each `provision up`
starts with a fresh one). --full-up also times the whole `provision up` (preflight +
converge + verify). The machine is noisy: read the ratio, not the seconds.

    .venv/bin/python bench/layout.py [--hosts 2] [--runs 3] [--full-up]

The hosts (prefix benchl, workdir under /tmp) are converged once with
`provision up --profile lab-driver-only` first, and removed at the end whatever happens.
Both playbooks must report changed=0 on every host (the naive one writes the same files
byte for byte; it leaves out the roles' local facts and the sources.list edit).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from provisioner import lab, paths  # noqa: E402

BIN = Path(sys.executable).parent
PROVISION, PLAYBOOK = str(BIN / "provision"), str(BIN / "ansible-playbook")
PROFILE = str(REPO / "tests/data/profiles/lab-driver-only.yml")
NAIVE = REPO / "bench/naive/driver.yml"
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> tuple[float, str]:
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    print(f"  {seconds:7.1f} s  {' '.join(cmd)[-100:]}", file=sys.stderr, flush=True)
    if r.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    return seconds, r.stdout


def no_op(name: str, stdout: str, hosts: int) -> int:
    """Tasks run per host (ok count); refuses a run that changed anything."""
    rows = RECAP.findall(stdout)
    if len(rows) != hosts or any(int(r[2]) or int(r[3]) or int(r[4]) for r in rows):
        changed = [line for line in stdout.splitlines() if line.startswith(("changed:", "failed:", "fatal:", "TASK ["))]
        changed = [t for t, nxt in zip(changed, changed[1:] + ["TASK ["]) if not t.startswith("TASK [") or not nxt.startswith("TASK [")]
        raise SystemExit(f"{name} was not a clean no-op on {hosts} hosts: {rows}\n" + "\n".join(changed[-20:]))
    return max(int(r[1]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--full-up", action="store_true", help="also time a whole no-op `provision up`")
    args = parser.parse_args()
    prefix, workdir = "benchl", Path("/tmp/bench-layout")
    rendered, runs_dir = Path("/tmp/bench-layout-rendered"), Path("/tmp/bench-layout-runs")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    try:
        inv = str(lab.up(args.hosts, prefix, workdir).inventory)
        up = [PROVISION, "up", "--profile", PROFILE, inv, "--runs-dir", str(runs_dir)]
        first, _ = timed(up)
        timed([PROVISION, "render", "--profile", PROFILE, inv, "-o", str(rendered)])
        ours_env = {**base_env, "ANSIBLE_CONFIG": str(rendered / "ansible.cfg")}
        naive_env = {**base_env, "ANSIBLE_PIPELINING": "0", "ANSIBLE_SSH_ARGS": "", "ANSIBLE_GATHERING": "implicit"}
        naive = [PLAYBOOK, "-i", inv, "-e", f"@{rendered / 'group_vars/all/provisioner.yml'}", str(NAIVE)]
        ours = [PLAYBOOK, str(paths.playbook("site"))]
        times: dict[str, list[float]] = {"naive": [], "ours": [], "up": []}
        tasks = {}
        for _ in range(args.runs):
            seconds, out = timed(naive, naive_env, cwd=NAIVE.parent)  # no ansible.cfg there: Ansible's defaults
            times["naive"].append(seconds)
            tasks["naive"] = no_op("naive", out, args.hosts)
            shutil.rmtree(rendered / ".fact-cache", ignore_errors=True)
            seconds, out = timed(ours, ours_env)
            times["ours"].append(seconds)
            tasks["ours"] = no_op("ours", out, args.hosts)
            if args.full_up:
                times["up"].append(timed(up)[0])
    finally:
        lab.down(prefix, workdir)
    base = statistics.median(times["ours"])
    print(f"{args.hosts} converged hosts; first converge (provision up, not a no-op): {first:.0f} s")
    print(f"{'no-op run':52} {'ok/host':>10} {'median s':>9} {'min s':>7} {'x ours':>7}   ({args.runs} runs each)")
    rows = [("naive playbook (bench/naive/driver.yml)", "naive"), ("ours: converge step (playbooks/site.yml)", "ours")]
    if args.full_up:
        rows.append(("ours: whole provision up (preflight+converge+verify)", "up"))
    for name, key in rows:
        median = statistics.median(times[key])
        print(f"{name:52} {tasks.get(key, ''):>10} {median:9.1f} {min(times[key]):7.1f} {median / base:7.2f}")


if __name__ == "__main__":
    main()
