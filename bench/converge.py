"""bench/converge: a fresh `provision up` against the package floor: the bare `apt-get
install` of exactly the packages that converge installed, plus the `pip install` of the
same Python packages from the same wheels, on the same fresh lab host image, in the same
run (the machine is noisy: read the ratio, not the seconds).

    .venv/bin/python bench/converge.py [--profiles lab-driver-only,debian12-lab] [--runs 1] [--warm-up]

For each profile and run: two fresh lab hosts from the lab's base image, both behind the
lab's shared apt cache (apt-cacher-ng).
- converge host (prefix bconv): `provision up --profile P` (preflight, converge, verify),
  timed from the controller.
- floor host (prefix bfloor), after the converge so that it never pays a colder apt cache
  than the converge did: the converged host's apt sources and keyrings are copied over
  (untimed: the same archive components), then, timed, through `podman exec` (no SSH,
  no Ansible): one `apt-get update`, one `apt-get install --no-install-recommends` of
  every package the converge's apt transactions installed (/var/log/apt/history.log's
  Install lines, exact versions), and for each Python environment the converge built: the
  wheelhouse copied to the host, a venv, and one `pip install --no-deps` of its `pip
  freeze` with the same find-links.

The converge runs first, so it may pay a colder apt cache than the floor after it (a
toolkit's 1.6 GB came at 61 MB/s into the converge, at 160 MB/s into the floor): with
--warm-up a first, untimed round per profile fills the lab's cache for both sides, and the
figures come from the rounds after it. Each side's download time, as apt printed it
("Fetched N MB in S s"), is shown beside its wall time.

Prints per profile: both wall times and their ratio, what each host received (its eth0's
rx bytes: the apt lists, the .debs, the wheels and PyPI downloads, SSH), and where the
converge's extra time goes: per playbook and per role (task seconds from the run
record's runner events; "outside tasks" is the CLI, ansible-playbook's start-ups and
the gaps between tasks), its apt transactions (how many, how long, how many refreshed
the lists) and its slowest tasks. Goal: converge <= 1.3x the floor. Hosts are removed at
the end, whatever happens.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

# bench/ is on sys.path when run as `python bench/converge.py`.
from noop import REPO  # noqa: E402

from provisioner import lab  # noqa: E402
from provisioner.lab import podman  # noqa: E402

PROFILES = {"lab-driver-only": REPO / "tests/data/profiles/lab-driver-only.yml",
            "debian12-lab": REPO / "provisioner/profiles/debian12-lab.yml"}
WHEELHOUSE = Path("/opt/wheels")        # the profiles' mirrors.wheelhouse_source
FIND_LINKS = "/opt/provisioner/wheelhouse"  # and their pip_find_links
MB = 1e6
# This checkout's CLI (cwd=REPO puts it first on sys.path), not whichever `provision` is installed.
PROVISION = [sys.executable, "-m", "provisioner.cli"]
# history.log: "Install: libfoo:amd64 (1.2-3), bar:amd64 (4.5, automatic)"
# Actions that run on the controller: every other task is (at least) one module call on the host.
CONTROLLER_ACTIONS = {"ansible.builtin." + a for a in (
    "set_fact", "assert", "debug", "fail", "include_tasks", "import_tasks", "include_role", "import_role",
    "include_vars", "validate_argument_spec", "meta", "add_host", "group_by")}
APT_ACTIONS = {"ansible.builtin.apt", "gpu_provisioner.node.apt_install"}
# apt-get's own account of its downloads: "Fetched 1628 MB in 27s (60.9 MB/s)", "in 1min 5s".
FETCHED = re.compile(r"Fetched [0-9.,]+ [kMG]?B in ((?:\d+h )?(?:\d+min )?\d+s)")
UNIT_S = {"h": 3600, "min": 60, "s": 1}
HISTORY_ITEM = re.compile(r"([a-z0-9][a-z0-9+.-]*):[a-z0-9]+ \(([^,)]+)(?:, automatic)?\)")


def fetch_seconds(text: str) -> float:
    """Seconds apt-get said its downloads took, summed over its runs in `text`."""
    return float(sum(int(n) * UNIT_S[unit] for span in FETCHED.findall(text)
                     for n, unit in re.findall(r"(\d+)(h|min|s)", span)))


def sh(host: str, script: str, *, check: bool = True) -> str:
    r = subprocess.run(["podman", "exec", host, "sh", "-c", script], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"{host}: `{script[:200]}` exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def rx_bytes(host: str) -> int:
    for line in sh(host, "cat /proc/net/dev").splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "eth0":
            return int(rest.split()[0])
    raise RuntimeError(f"{host}: no eth0 in /proc/net/dev")


def apt_history(host: str) -> tuple[dict[str, str], list[float]]:
    """Every package an apt transaction on the host installed (name -> version), and each
    transaction's own seconds (history.log's Start-Date to End-Date: whole seconds)."""
    packages: dict[str, str] = {}
    seconds: list[float] = []
    start = None
    for line in sh(host, "cat /var/log/apt/history.log 2>/dev/null || true").splitlines():
        key, _, value = line.partition(": ")
        if key == "Install":
            packages.update(HISTORY_ITEM.findall(value))
        elif key in ("Start-Date", "End-Date"):
            at = dt.datetime.strptime(value.strip(), "%Y-%m-%d  %H:%M:%S")
            if key == "Start-Date":
                start = at
            elif start is not None:
                seconds.append((at - start).total_seconds())
    return packages, seconds


def venvs(host: str) -> dict[str, list[str]]:
    """Each venv the converge built (its folder -> its `pip freeze`)."""
    found = sh(host, "ls -d /opt/venvs/*/bin/python 2>/dev/null || true").split()
    return {p.removesuffix("/bin/python"): sh(host, f"{p} -m pip freeze --all --exclude pip --exclude setuptools").split()
            for p in found}


def floor(host: str, source_host: str, packages: dict[str, str],
          envs: dict[str, list[str]]) -> tuple[dict[str, float], float]:
    """The bare installation on `host`: seconds per step, and apt's download seconds."""
    # The same apt sources (the archive's components the converge enabled, any repository
    # it added) and keyrings, untimed; no pins or holds: the floor installs exact versions.
    tar = subprocess.run(["podman", "exec", source_host, "tar", "-C", "/", "-cf", "-", "--ignore-failed-read",
                          "etc/apt/sources.list", "etc/apt/sources.list.d", "etc/apt/keyrings",
                          "usr/share/keyrings"], capture_output=True, check=True).stdout
    subprocess.run(["podman", "exec", "-i", host, "tar", "-C", "/", "-xf", "-"], input=tar, check=True)
    steps: dict[str, float] = {}
    fetched = []

    def step(name: str, script: str) -> None:
        start = time.perf_counter()
        fetched.append(sh(host, script))
        steps[name] = time.perf_counter() - start

    step("apt-get update", "apt-get update -q")
    pins = " ".join(shlex.quote(f"{name}={version}") for name, version in sorted(packages.items()))
    step(f"apt-get install ({len(packages)} packages)",
         f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {pins}")
    if envs:
        start = time.perf_counter()
        subprocess.run(["podman", "exec", host, "mkdir", "-p", FIND_LINKS], check=True)
        for wheel in sorted(WHEELHOUSE.glob("*.whl")):
            subprocess.run(["podman", "cp", str(wheel), f"{host}:{FIND_LINKS}/"], check=True)
        steps["copy the wheelhouse"] = time.perf_counter() - start
    for prefix, freeze in envs.items():
        step(f"venv + pip install ({len(freeze)} packages)",
             f"python3 -m venv {prefix} && {prefix}/bin/python -m pip install -q --no-deps "
             f"--find-links {FIND_LINKS} " + " ".join(shlex.quote(r) for r in freeze))
    return steps, fetch_seconds("\n".join(fetched))


def events(run_dir: Path) -> list[tuple[str, dict]]:
    out = []
    for artifacts in sorted(run_dir.glob("artifacts/*")):
        out += [(artifacts.name, json.loads(p.read_text())) for p in artifacts.glob("job_events/*.json")]
    return out


def where_it_goes(run_dir: Path) -> dict:
    """Task seconds per playbook, per role and per task; the apt transactions."""
    per_play, per_role, per_task = collections.Counter(), collections.Counter(), collections.Counter()
    apt = {"count": 0, "seconds": 0.0, "update_cache": 0, "fetch": 0.0}
    remote = collections.Counter()   # module calls on the host per playbook (a loop's items each)
    starts = {}
    for playbook, e in sorted(events(run_dir), key=lambda pe: (pe[0], pe[1]["counter"])):
        d = e.get("event_data", {})
        key = (playbook, d.get("host"), d.get("task_uuid"))
        if e["event"] == "runner_on_start":
            starts[key] = dt.datetime.fromisoformat(e["created"])
        elif e["event"] in ("runner_on_ok", "runner_on_failed", "runner_on_skipped") and key in starts:
            seconds = (dt.datetime.fromisoformat(e["created"]) - starts.pop(key)).total_seconds()
            role = d.get("role") or "(play's own tasks)"
            per_play[playbook] += seconds
            per_role[f"{playbook}: {role}"] += seconds
            per_task[f"{playbook}: {role}: {d.get('task', '?').strip()}"] += seconds
            if e["event"] != "runner_on_skipped" and d.get("resolved_action") not in CONTROLLER_ACTIONS:
                items = d.get("res", {}).get("results")
                remote[playbook] += 1 if items is None else sum(not i.get("skipped") for i in items)
            if d.get("resolved_action") in APT_ACTIONS and e["event"] == "runner_on_ok":
                apt["count"] += 1
                apt["seconds"] += seconds
                apt["update_cache"] += bool(d.get("res", {}).get("cache_updated"))
                apt["fetch"] += fetch_seconds(str(d.get("res", {}).get("stdout", "")))
    return {"play": per_play, "role": per_role, "task": per_task, "apt": apt, "remote": remote}


def bench_once(name: str, profile: Path, run: int) -> dict:
    conv, flo = f"bconv{run}", f"bfloor{run}"
    workdirs = {p: Path(f"/tmp/bench-converge-{p}") for p in (conv, flo)}
    runs_dir = Path(f"/tmp/bench-converge-{name}-runs")
    try:
        inv = lab.up(1, conv, workdirs[conv]).inventory
        lab.up(1, flo, workdirs[flo])
        a, b = f"{conv}-1", f"{flo}-1"
        rx_a = rx_bytes(a)
        start = time.perf_counter()
        r = subprocess.run([*PROVISION, "up", "--profile", str(profile), str(inv), "--runs-dir", str(runs_dir)],
                           cwd=REPO, capture_output=True, text=True)
        up_s = time.perf_counter() - start
        if r.returncode != 0:
            raise SystemExit(f"provision up ({name}) exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
        print(f"  {up_s:7.1f} s  provision up --profile {name}", file=sys.stderr, flush=True)
        rx_a = rx_bytes(a) - rx_a
        (packages, apt_own), envs = apt_history(a), venvs(a)
        rx_b = rx_bytes(b)
        steps, floor_fetch = floor(b, a, packages, envs)
        rx_b = rx_bytes(b) - rx_b
        floor_apt_own = apt_history(b)[1]
        print(f"  {sum(steps.values()):7.1f} s  floor: {len(packages)} packages, {len(envs)} venv(s)",
              file=sys.stderr, flush=True)
        run_dir = sorted(runs_dir.glob("*-up-*"))[-1]
        return {"up": up_s, "floor": steps, "rx_up": rx_a, "rx_floor": rx_b, "packages": len(packages),
                "apt_own": apt_own, "floor_apt_own": floor_apt_own, "floor_fetch": floor_fetch,
                "where": where_it_goes(run_dir), "run_dir": str(run_dir)}
    finally:
        for p, w in workdirs.items():
            lab.down(p, w, stop_cache=False)


def report(name: str, results: list[dict], warm_up: dict | None) -> None:
    up = statistics.median(r["up"] for r in results)
    fl = statistics.median(sum(r["floor"].values()) for r in results)
    last = results[-1]
    print(f"\n== {name} ({len(results)} run(s); {last['packages']} packages)")
    if warm_up:
        print(f"  warm-up round, not counted: provision up {warm_up['up']:.1f} s, "
              f"floor {sum(warm_up['floor'].values()):.1f} s")
    print(f"  provision up (fresh host)        {up:8.1f} s   received {last['rx_up'] / MB:8.1f} MB"
          f"   apt downloads {last['where']['apt']['fetch']:5.0f} s")
    print(f"  floor (apt-get + pip, bare)      {fl:8.1f} s   received {last['rx_floor'] / MB:8.1f} MB"
          f"   apt downloads {last['floor_fetch']:5.0f} s")
    print(f"  ratio converge / floor           {up / fl:8.2f}x  (goal <= 1.3x)")
    for step, seconds in last["floor"].items():
        print(f"    floor: {seconds:7.1f} s  {step}")
    w = last["where"]
    tasks = sum(w["play"].values())
    print(f"  where the converge's {last['up']:.1f} s go (task seconds, last run):")
    for play, seconds in sorted(w["play"].items()):
        print(f"    {seconds:7.1f} s  playbook {play}: {w['remote'][play]} module calls on the host")
    print(f"    {last['up'] - tasks:7.1f} s  outside tasks (CLI, playbook start-ups, fact cache, gaps)")
    for role, seconds in w["role"].most_common():
        if seconds >= 0.5:
            print(f"      {seconds:7.1f} s  {role}")
    apt = w["apt"]
    print(f"  apt tasks: {apt['count']} ({apt['seconds']:.1f} s), {apt['update_cache']} of them refreshed the lists; "
          f"apt's own transactions (history.log): converge {len(last['apt_own'])}, {sum(last['apt_own']):.0f} s "
          f"({' + '.join(f'{s:.0f}' for s in last['apt_own'])}); "
          f"floor {len(last['floor_apt_own'])}, {sum(last['floor_apt_own']):.0f} s")
    print("  slowest tasks:")
    for task, seconds in w["task"].most_common(10):
        print(f"    {seconds:7.1f} s  {task[:100]}")
    print(f"  run record: {last['run_dir']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profiles", default=",".join(PROFILES), help=f"comma-separated, of {', '.join(PROFILES)}")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--warm-up", action="store_true",
                        help="one untimed round per profile first, so both sides meet a warm apt cache")
    args = parser.parse_args()
    podman.preflight()
    names = args.profiles.split(",")
    warm = {n: bench_once(n, PROFILES[n], 0) if args.warm_up else None for n in names}
    results = {n: [] for n in names}
    for run in range(1, args.runs + 1):
        for n in names:
            results[n].append(bench_once(n, PROFILES[n], run))
    for n in names:
        report(n, results[n], warm[n])


if __name__ == "__main__":
    main()
