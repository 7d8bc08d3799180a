"""The lab's shared apt cache: our own apt-cacher-ng, bound to the podman bridge's gateway
address only (never 0.0.0.0). A package installed on N lab hosts comes from upstream once
(apt-cacher-ng shares one download between concurrent clients). The cache persists across
labs in /var/cache/provisioner-lab."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from provisioner.errors import ProvisionError
from provisioner.lab import podman
from provisioner.lab.podman import SETUP_FIX

# Our own instance (own config dir, no remapping: it fetches exactly the URL a host
# asked for, from the mirror the host's sources name).
PORT = int(os.environ.get("PROVISIONER_LAB_CACHE_PORT", "3142"))
CACHE_DIR = Path(os.environ.get("PROVISIONER_LAB_CACHE_DIR", "/var/cache/provisioner-lab/apt-cacher-ng"))
CONF_DIR = Path("/var/lib/provisioner-lab/apt-cacher-ng")
LOG_DIR = Path("/var/log/provisioner-lab")
RUN_DIR = Path("/run/provisioner-lab")
USER = "apt-cacher-ng"


@dataclass
class CacheStats:
    """Bytes apt-cacher-ng fetched from upstream vs served to lab hosts."""

    fetched_upstream: int
    served_to_hosts: int
    log: Path


def _pidfile() -> Path:
    return RUN_DIR / "apt-cacher-ng.pid"


def running_pid() -> int | None:
    try:
        pid = int(_pidfile().read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm.startswith("apt-cacher-ng") else None



def start(gateway: str, progress: Callable[[str], None] | None = None) -> str:
    """Make sure our apt-cacher-ng listens on gateway:PORT; return the proxy URL."""
    url = f"http://{gateway}:{PORT}"
    conf = CONF_DIR / "acng.conf"
    pid = running_pid()
    if pid and f"BindAddress: {gateway}\n" in (conf.read_text() if conf.exists() else "") and podman.port_open(gateway, PORT):
        return url
    if pid:  # running, but for another gateway: restart it
        stop()
    binary = shutil.which("apt-cacher-ng") or "/usr/sbin/apt-cacher-ng"
    if not Path(binary).exists():
        raise ProvisionError("apt-cacher-ng is not installed (the lab's shared apt cache)", where="lab",
                             fix=f"{SETUP_FIX}, or run the lab without the apt cache")
    if podman.port_open(gateway, PORT):
        raise ProvisionError(f"something else already listens on {gateway}:{PORT}", where="lab apt cache",
                             fix="stop it (a packaged apt-cacher-ng service?), set PROVISIONER_LAB_PORT, or run without the apt cache")
    for d in (CACHE_DIR, CONF_DIR, LOG_DIR, RUN_DIR):
        d.mkdir(parents=True, exist_ok=True)
    conf.write_text(
        "# Written by provisioner.lab.aptcache: the lab's shared apt cache. No Remap rules, so it\n"
        "# fetches exactly the URL a lab host asked for.\n"
        f"CacheDir: {CACHE_DIR}\nLogDir: {LOG_DIR}\n"
        f"Port: {PORT}\nBindAddress: {gateway}\n"
        f"PidFile: {_pidfile()}\nSocketPath: {RUN_DIR / 'apt-cacher-ng.socket'}\n"
        "ReportPage: acng-report.html\nExThreshold: 4\n"
    )
    cmd = [binary, "-c", str(CONF_DIR), "ForeGround=0"]
    try:
        import pwd
        pwd.getpwnam(USER)
        for d in (CACHE_DIR, LOG_DIR, RUN_DIR):
            shutil.chown(d, USER, USER)
        cmd = ["runuser", "-u", USER, "--", *cmd]
    except KeyError:
        pass
    if progress:
        progress(f"starting the lab apt cache (apt-cacher-ng) on {url}")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if podman.port_open(gateway, PORT):
            return url
        time.sleep(0.1)
    raise ProvisionError(f"apt-cacher-ng did not start on {url}: {(r.stderr or r.stdout).strip()}",
                         where=str(LOG_DIR / "apt-cacher.err"), fix="read that log; or run the lab without the apt cache")


def stop() -> bool:
    """Stop our apt-cacher-ng (the cached files stay). True if one was running."""
    pid = running_pid()
    if not pid:
        return False
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return False
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    _pidfile().unlink(missing_ok=True)
    return True


def stats(since_line: int = 0) -> CacheStats:
    """Sum apt-cacher-ng's transfer log (from line `since_line`): 'I' lines are bytes
    fetched from upstream, 'O' lines bytes served to lab hosts."""
    log = LOG_DIR / "apt-cacher.log"
    fetched = served = 0
    if log.exists():
        for line in log.read_text(errors="replace").splitlines()[since_line:]:
            parts = line.split("|")
            if len(parts) >= 3 and parts[2].isdigit():
                if parts[1] == "I":
                    fetched += int(parts[2])
                elif parts[1] == "O":
                    served += int(parts[2])
    return CacheStats(fetched, served, log)


