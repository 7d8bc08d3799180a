# -*- coding: utf-8 -*-
"""What holds a host's NVIDIA device files, read on the host and judged on the controller
(provisioner/judge/holders.py: the one place that reads it, for `provision plan`, the
reboot-free driver activation decision and MIG changes).

Read-only and bounded. The host sends the tools' own text, not a reading of it: `fuser -v`
over every /dev/nvidia* character device (its table goes to stderr and the PIDs to stdout;
fuser flushes each, so one pipe for both gives the table as a terminal shows it), nvidia-smi's
compute applications, each holder's /proc/PID/cgroup (its systemd unit) and the NVIDIA
modules' reference counts. Standard library only, like the rest of module_utils."""

from __future__ import annotations

import glob
import os
import re
import stat
import subprocess

MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
MAX_PIDS = 256          # a host with more holders than this is busy whatever they are
MAX_OUTPUT = 200_000


def _run(argv: list[str], timeout: int) -> dict:
    """rc and output (stdout and stderr in one pipe, as a terminal shows them); never raises."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=timeout, check=False, env=dict(os.environ, LC_ALL="C"))
    except FileNotFoundError:
        return {"rc": 127, "output": f"{argv[0]}: not found"}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "output": f"timed out after {timeout} s"}
    except OSError as exc:
        return {"rc": 126, "output": str(exc)}
    return {"rc": proc.returncode, "output": proc.stdout[:MAX_OUTPUT]}


def devices() -> list[str]:
    """The NVIDIA character devices (/dev/nvidia-caps is a folder: its devices hold nothing
    the driver's unload waits on that /dev/nvidiactl does not show)."""
    found = []
    for path in sorted(glob.glob("/dev/nvidia*")):
        try:
            if stat.S_ISCHR(os.stat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return found


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def collect(timeout: int = 30) -> dict:
    """devices, fuser {rc, output}, compute_apps {rc, output}, cgroups {pid: text}, modules
    {name: refcnt text}; fuser and nvidia-smi are not run where there is no device."""
    found = devices()
    modules = {m: (_read(f"/sys/module/{m}/refcnt") or "").strip() for m in MODULES if os.path.isdir(f"/sys/module/{m}")}
    if not found:
        return {"devices": [], "fuser": None, "compute_apps": None, "cgroups": {}, "modules": modules}
    fuser = _run(["fuser", "-v", "--"] + found, timeout)
    apps = _run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"], timeout)
    pids = []
    for line in fuser["output"].splitlines():  # the PID column: the first number after the user
        m = re.match(r"^(?:/dev/\S+:)?\s+\S+\s+(\d+)\s", line)
        if m and m.group(1) not in pids:
            pids.append(m.group(1))
    cgroups = {pid: _read(f"/proc/{pid}/cgroup") for pid in pids[:MAX_PIDS]}
    return {"devices": found, "fuser": fuser, "compute_apps": apps,
            "cgroups": {pid: text for pid, text in cgroups.items() if text is not None}, "modules": modules}
