"""The machine limits many lab hosts run into, checked before `lab up` starts containers
and named when a boot does not finish.

Measured on the development machine (Debian 12, rootful podman, runc; 2026-12-01): every
systemd container holds 6-7 inotify instances once booted (systemd 4-5, systemd-logind 1,
dbus-daemon 1), all owned by root, against `fs.inotify.max_user_instances`, 128 by
default: about 20 hosts, minus what the machine itself uses. A host that cannot get one
never finishes booting (systemd stays "initializing", its `systemd-ask-password-*.path`
units fail). Its memory is about 20 MiB once booted (the container's cgroup, page cache
included; a host with packages installed holds more cache). 100 hosts took 492 more
instances, 1080 more watches and 1.9 GiB of MemAvailable. Everything here reads /proc
only: nothing is changed (scripts/setup-dev-host raises the limits)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

INOTIFY_PER_HOST = 8        # measured 6-7 per booted host; one spare for the boot itself
WATCHES_PER_HOST = 64       # measured 14 per booted host (the containers' fdinfo), with room
MEMORY_PER_HOST_MIB = 40    # measured ~20 MiB per booted host; twice that for the boot and sshd logins
WANT_INSTANCES, WANT_WATCHES = 8192, 524288  # what setup-dev-host sets
PROC = Path("/proc")


@dataclass(frozen=True)
class Usage:
    instances: int   # inotify instances root holds now
    watches: int     # inotify watches in them
    max_instances: int
    max_watches: int
    mem_available_mib: int


def _read_int(path: Path, default: int = 0) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def usage() -> Usage:
    """Root's inotify instances and watches (every process's fds), the limits, free memory."""
    instances = watches = 0
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid != 0:
                continue
            for fd in (proc / "fd").iterdir():
                try:
                    if os.readlink(fd) == "anon_inode:inotify":
                        instances += 1
                        watches += (proc / "fdinfo" / fd.name).read_text().count("inotify wd:")
                except OSError:
                    continue
        except OSError:
            continue  # gone since the listing, or not ours to read
    mem = 0
    try:
        for line in (PROC / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                mem = int(line.split()[1]) // 1024
    except OSError:
        pass
    return Usage(instances, watches, _read_int(PROC / "sys/fs/inotify/max_user_instances", 128),
                 _read_int(PROC / "sys/fs/inotify/max_user_watches", 8192), mem)


def shortfalls(new_hosts: int, now: Usage | None = None) -> list[str]:
    """The limits `new_hosts` more booting lab hosts would exceed, each with its fix."""
    now = now or usage()
    out = []
    need = now.instances + new_hosts * INOTIFY_PER_HOST
    if need > now.max_instances:
        out.append(f"fs.inotify.max_user_instances is {now.max_instances}: {now.instances} in use and {new_hosts} new "
                   f"host(s) need about {new_hosts * INOTIFY_PER_HOST} more (sysctl -w "
                   f"fs.inotify.max_user_instances={WANT_INSTANCES}, or run scripts/setup-dev-host)")
    need = now.watches + new_hosts * WATCHES_PER_HOST
    if need > now.max_watches:
        out.append(f"fs.inotify.max_user_watches is {now.max_watches}: {now.watches} in use and {new_hosts} new "
                   f"host(s) need about {new_hosts * WATCHES_PER_HOST} more (sysctl -w "
                   f"fs.inotify.max_user_watches={WANT_WATCHES}, or run scripts/setup-dev-host)")
    if now.mem_available_mib and new_hosts * MEMORY_PER_HOST_MIB > now.mem_available_mib:
        out.append(f"memory: {now.mem_available_mib} MiB available and {new_hosts} new host(s) need about "
                   f"{new_hosts * MEMORY_PER_HOST_MIB} MiB ({MEMORY_PER_HOST_MIB} MiB each); start fewer hosts")
    return out
