"""bench/prometheus: `provision check` over SSH beside `provision check --from-prometheus` on
the same lab fleet at the same moment, per fleet size.

    .venv/bin/python bench/prometheus.py [--hosts 30,100] [--runs 3]

Hosts start from the converged lab-state-timer image (provisioner.lab.converged: made once,
reused by the lab tests), so every host runs provision-state.timer and Debian's
prometheus-node-exporter. For each size N: start N hosts (prefix bprom<N>), run every host's
provision-state service once (the image's textfiles are as old as the image), start Debian's
`prometheus` binary on the lab bridge with the scrape config `provision render` writes, wait
until every host is scraped with a fresh record, then --runs rounds of both commands,
interleaved (each must exit 0: the fleet is clean). Both are timed as a user runs them: the
whole CLI process (`python -m provisioner.cli`, this checkout), start to exit.

Goal (benchmark output, not a timed test): the Prometheus path under 1 s at every size.
Needs root, podman and /usr/bin/prometheus (scripts/setup-dev-host).
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from noop import bytecode_env  # noqa: E402 - bench/ is on sys.path (run as `python bench/prometheus.py`)

from provisioner import lab  # noqa: E402
from provisioner.engine import commands  # noqa: E402
from provisioner.lab import converged  # noqa: E402
from provisioner.lab import podman as lab_podman  # noqa: E402
from provisioner.reports import monitoring  # noqa: E402

PROFILE = str(REPO / "tests/data/profiles/lab-state-timer.yml")
PROMETHEUS = "/usr/bin/prometheus"  # Debian's prometheus package
PROVISION = [sys.executable, "-m", "provisioner.cli"]
WAIT_S = 300


ENV = bytecode_env()


CPU: dict[str, list[float]] = {}  # per command kind: user + system seconds of the CLI process


def timed(cmd: list[str], kind: str = "") -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=ENV)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(kind, []).append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    print(f"  {seconds:7.2f} s  {' '.join(cmd)[-110:]}", file=sys.stderr, flush=True)
    if r.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
    return seconds


def _query(url: str, expr: str) -> set[str]:
    """The hosts an instant query returns."""
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as r:
        return {s["metric"].get("host", "") for s in json.load(r)["data"]["result"]}


def _wait(url: str, expr: str, hosts: set[str], what: str) -> None:
    start, got = time.monotonic(), set()
    while time.monotonic() - start < WAIT_S:
        try:
            got = _query(url, expr)
            if got >= hosts:
                print(f"  {time.monotonic() - start:7.1f} s  {what}", file=sys.stderr, flush=True)
                return
        except OSError:
            pass  # not listening yet
        time.sleep(1)
    raise SystemExit(f"{what}: not within {WAIT_S} s ({len(got)} of {len(hosts)} hosts)")


def bench(n: int, runs: int, image: str) -> dict[str, list[float]]:
    prefix = f"bprom{n}"
    with tempfile.TemporaryDirectory(prefix=f"bench-prom-{n}-") as tmp:
        workdir, runs_dir = Path(tmp) / "lab", Path(tmp) / "runs"
        proc = None
        try:
            started = lab.up(n, prefix, workdir, image=image)
            print(f"  {started.seconds:7.1f} s  lab up --hosts {n} (converged image)", file=sys.stderr, flush=True)
            names = {h.name for h in started.hosts}
            with ThreadPoolExecutor(8) as pool:
                ran = list(pool.map(lambda h: lab_podman.run("exec", h, "systemctl", "start",
                                                             "provision-state.service", check=False), sorted(names)))
            if any(r.returncode for r in ran):
                raise SystemExit("provision-state.service failed on a host: " + next(r.stderr for r in ran if r.returncode))
            fresh_since = time.time() - 5
            target = commands.prepare(PROFILE, started.inventory)
            monitoring.render(target.loaded, target.inventory, Path(tmp) / "mon")
            address = lab_podman.network_gateway()
            with socket.socket() as s:
                s.bind((address, 0))
                url = f"http://{address}:{s.getsockname()[1]}"
            log = (Path(tmp) / "prometheus.log").open("w")
            proc = subprocess.Popen([PROMETHEUS, f"--config.file={Path(tmp) / 'mon/prometheus/scrape-node.yml'}",
                                     f"--storage.tsdb.path={Path(tmp) / 'tsdb'}",
                                     f"--web.listen-address={url.removeprefix('http://')}"],
                                    stdout=log, stderr=subprocess.STDOUT)
            _wait(url, f"gpu_provisioner_last_run_timestamp_seconds >= {fresh_since:.0f}", names,
                  f"every host's fresh record in Prometheus ({n} hosts)")
            common = ["--profile", PROFILE, str(started.inventory), "--runs-dir", str(runs_dir)]
            argv = {"ssh": [*PROVISION, "check", *common],
                    "prometheus": [*PROVISION, "check", *common, "--from-prometheus", url]}
            times: dict[str, list[float]] = {key: [] for key in argv}
            subprocess.run([*PROVISION, "--version"], cwd=REPO, env=ENV, capture_output=True, check=True)  # compiles
            for _ in range(runs):
                for key, cmd in argv.items():
                    times[key].append(timed(cmd, key))
            return times
        finally:
            if proc:
                proc.terminate()
                proc.wait(timeout=30)
            lab.down(prefix, workdir, stop_cache=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="30,100", help="comma-separated host counts")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    image = converged.ensure(PROFILE, progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True))
    # Each size's line as soon as it is measured: a later size that fails keeps the earlier ones.
    print(f"{'hosts':>5}  {'check over SSH (s)':>19} {'check --from-prometheus (s)':>28} {'ratio':>7} "
          f"{'its CPU (s)':>12}   (median, min of {args.runs} run(s); CPU: user + system of the CLI process)",
          flush=True)
    for n in args.hosts.split(","):
        CPU.clear()
        times = bench(int(n), args.runs, image)
        ssh, prom = statistics.median(times["ssh"]), statistics.median(times["prometheus"])
        print(f"{n:>5}  {ssh:10.1f} ({min(times['ssh']):5.1f}) {prom:19.2f} ({min(times['prometheus']):5.2f}) "
              f"{ssh / prom:6.0f}x {statistics.median(CPU['prometheus']):12.2f}", flush=True)


if __name__ == "__main__":
    main()
