"""bench/bytes: bytes fetched from upstream when N fresh lab hosts converge to
lab-driver-only, with the lab's shared apt cache (apt-cacher-ng) vs without it.

    .venv/bin/python bench/bytes.py [--hosts 2] [--modes cache,nocache]

Each mode starts N fresh hosts (prefix benchb / benchbnc, workdirs under /tmp), runs one
`provision up` on them and removes them again (always, in a finally block).

- "MB received by hosts": the rx bytes of each container's own eth0
  (`podman exec HOST cat /proc/net/dev`, before vs after the run), summed. It counts
  everything the hosts received: the apt lists, the .debs and Ansible's SSH traffic.
- With the cache, "MB from upstream" is what apt-cacher-ng fetched for these hosts in
  this run (its transfer log's 'I' lines, as provisioner.lab.aptcache.stats reads them,
  filtered to this run's host addresses because other labs on the machine share the
  cache and its log); "MB served" is its 'O' lines for these hosts.
- Without the cache every host downloads for itself, so upstream == received.

The cache persists across labs in /var/cache/provisioner-lab, so the "cache" row is
usually a *warm* cache: its upstream bytes are those of this run (≈ only the apt lists
that changed, ~0 for the .debs), not those of a first-ever run. What the cache saves a
fleet in any case is shown by the "cache, what N hosts pulled" figure (bytes served to
the hosts = what they would have pulled from upstream without it); a cold cache would
fetch that once for all hosts, i.e. about 1/N of it. The script prints whether the
driver's .debs were already in the cache before the run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from provisioner import lab  # noqa: E402
from provisioner.lab import aptcache  # noqa: E402

PROVISION = str(Path(sys.executable).parent / "provision")
PROFILE = str(REPO / "tests/data/profiles/lab-driver-only.yml")
MB = 1e6


def rx_bytes(host: str) -> int:
    out = subprocess.run(["podman", "exec", host, "cat", "/proc/net/dev"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "eth0":
            return int(rest.split()[0])
    raise RuntimeError(f"{host}: no eth0 in /proc/net/dev")


def log_lines() -> int:
    log = aptcache.LOG_DIR / "apt-cacher.log"
    return sum(1 for _ in log.open(errors="replace")) if log.exists() else 0


def cache_stats_for(since_line: int, ips: set[str]) -> tuple[int, int]:
    """aptcache.stats, counting only the lines of these clients (field 4: client address)."""
    log = aptcache.LOG_DIR / "apt-cacher.log"
    fetched = served = 0
    for line in log.read_text(errors="replace").splitlines()[since_line:]:
        parts = line.split("|")
        if len(parts) >= 4 and parts[2].isdigit() and parts[3] in ips:
            if parts[1] == "I":
                fetched += int(parts[2])
            elif parts[1] == "O":
                served += int(parts[2])
    return fetched, served


def driver_debs_cached() -> bool:
    return any(aptcache.CACHE_DIR.rglob("nvidia-kernel-dkms_*.deb")) if aptcache.CACHE_DIR.exists() else False


def converge(mode: str, n: int) -> dict:
    cache = mode == "cache"
    prefix = "benchb" if cache else "benchbnc"
    workdir = Path(f"/tmp/bench-bytes-{prefix}")
    runs = Path(f"/tmp/bench-bytes-{prefix}-runs")
    try:
        res = lab.up(n, prefix, workdir, apt_cache=cache)
        names = [h.name for h in res.hosts]
        ips = {h.ip for h in res.hosts}
        warm = driver_debs_cached()
        since = log_lines()
        before = {h: rx_bytes(h) for h in names}
        t0 = time.perf_counter()
        r = subprocess.run([PROVISION, "up", "--profile", PROFILE, str(res.inventory), "--runs-dir", str(runs)],
                           capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"provision up ({mode}) exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}")
        received = sum(rx_bytes(h) - before[h] for h in names)
        if cache:
            upstream, served = cache_stats_for(since, ips)
            total = aptcache.stats(since)
        else:
            upstream, served, total = received, None, None
        return {"mode": mode, "hosts": n, "upstream": upstream, "received": received, "served": served,
                "warm": warm, "seconds": seconds, "unfiltered": total}
    finally:
        lab.down(prefix, workdir)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--modes", default="cache,nocache")
    args = parser.parse_args()
    rows = [converge(mode, args.hosts) for mode in args.modes.split(",")]
    print(f"{'mode':28} {'hosts':>5} {'MB upstream':>12} {'MB rcvd by hosts':>17} {'upstream/rcvd':>14} {'up s':>6}")
    for row in rows:
        label = "cache" + (" (warm: driver .debs cached)" if row["warm"] else " (cold)") if row["mode"] == "cache" else "no cache"
        ratio = row["upstream"] / row["received"] if row["received"] else float("nan")
        print(f"{label:28} {row['hosts']:5} {row['upstream'] / MB:12.1f} {row['received'] / MB:17.1f} {ratio:14.3f} {row['seconds']:6.0f}")
    for row in rows:
        if row["mode"] == "cache":
            n = row["hosts"]
            print(f"cache: served to these {n} hosts {row['served'] / MB:.1f} MB = what they would have pulled from "
                  f"upstream without it; a cold cache fetches it once: ~{row['served'] / n / MB:.1f} MB "
                  f"({1 / n:.2f}x). Unfiltered cache log over the run (other labs included): "
                  f"{row['unfiltered'].fetched_upstream / MB:.1f} MB in, {row['unfiltered'].served_to_hosts / MB:.1f} MB out.")


if __name__ == "__main__":
    main()
