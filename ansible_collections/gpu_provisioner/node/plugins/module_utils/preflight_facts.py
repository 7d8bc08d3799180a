# -*- coding: utf-8 -*-
"""What preflight judges about one host (provisioner/judge/preflight.py), read in the
module call that asks for it: no fact gathering, no extra tasks. One call per host is the
floor a fleet pays (DESIGN.md: preflight like check, one probe call per host).

The OS comes from Ansible's own module_utils.common.sys_info (distro, the library behind
ansible_facts.distribution/_version: "Debian" "12.11", "Ubuntu" "22.04"), the kernel and
architecture from Python's platform module (what Ansible's platform collector reads on
Linux), the virtualization from systemd-detect-virt (container first: "podman", "docker",
"lxc"; else the VM's type), CPUs and memory from /proc as Ansible's hardware collector
reads them. Not the fact collectors themselves: importing any of
ansible.module_utils.facts imports all of them (its __init__ pulls in every collector),
which made this one call cost about as much as a second module call (measured: 11 s vs
6.5 s for the record compare alone on a loaded lab host)."""

from __future__ import annotations

import os
import platform
import subprocess

from ansible.module_utils.common.sys_info import get_distribution, get_distribution_version

# The folders the stack installs into: packages land in /usr and /var, environments in /opt.
DF_FOLDERS = ("/", "/usr", "/var", "/opt")
DEVICE_CLASSES = {"infiniband": "/sys/class/infiniband", "nvme": "/sys/class/nvme"}


def _command(argv: list[str], timeout: int = 60) -> tuple[int, list[str]]:
    """rc and stdout lines; a missing binary is rc 127 (what a shell would say)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False,
                              env=dict(os.environ, LC_ALL="C"))
    except FileNotFoundError:
        return 127, []
    except (OSError, subprocess.TimeoutExpired):
        return 124, []
    return proc.returncode, proc.stdout.splitlines()


def vcpus(cpuinfo: str) -> int:
    """Logical CPUs as /proc/cpuinfo lists them (one `processor` entry each)."""
    return sum(1 for line in cpuinfo.splitlines() if line.split(":", 1)[0].strip() == "processor")


def memtotal_mb(meminfo: str) -> int:
    """MemTotal in MiB, as Ansible's memtotal_mb (kB // 1024)."""
    for line in meminfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "MemTotal" and value.split():
            return int(value.split()[0]) // 1024
    return 0


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def virtualization() -> tuple[str, str]:
    """(type, role) as systemd-detect-virt sees this host: ("podman", "guest"), ("kvm",
    "guest"), or ("", "") on bare metal or where it cannot tell."""
    rc, out = _command(["systemd-detect-virt"], 10)
    kind = out[0].strip() if rc == 0 and out else ""
    return (kind, "guest") if kind and kind != "none" else ("", "")


def collect() -> dict:
    """The provisioner_preflight record (its keys are what preflight.judge reads)."""
    virt_type, virt_role = virtualization()
    lspci_rc, lspci = _command(["lspci", "-nn", "-d", "10de:"])
    _, df = _command(["df", "-B1", "--output=target,avail", *DF_FOLDERS])
    devices = {}
    for label, folder in DEVICE_CLASSES.items():
        try:
            devices[label] = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        except OSError:
            devices[label] = []
    return {
        "distribution": get_distribution() or "",
        "distribution_version": get_distribution_version() or "",
        "kernel": platform.release(),
        "architecture": platform.machine(),
        "virtualization_type": virt_type,
        "virtualization_role": virt_role,
        "vcpus": vcpus(_read("/proc/cpuinfo")) or os.cpu_count() or 0,
        "memtotal_mb": memtotal_mb(_read("/proc/meminfo")),
        "disk_free": df,
        "lspci_rc": lspci_rc,
        "lspci": lspci,
        **devices,
    }
