# -*- coding: utf-8 -*-
"""What preflight judges about one host (provisioner/judge/preflight.py), read in the
module call that asks for it: no fact gathering, no extra tasks. One call per host is the
floor a fleet pays (DESIGN.md: preflight like check, one probe call per host).

The OS and virtualization facts come from Ansible's own fact collectors (the code the
setup module runs for gather_subset min/virtual), so they read exactly as
ansible_facts.distribution/_version/kernel/architecture/virtualization_* did when
preflight gathered facts; only the collectors preflight needs run. CPUs and memory are
read from /proc like Ansible's hardware collector does, without the rest of that
collector (mounts, devices, DMI: the slow part of gathering hardware facts)."""

from __future__ import annotations

import os
import subprocess

from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible.module_utils.facts.system.platform import PlatformFactCollector
from ansible.module_utils.facts.virtual.linux import LinuxVirtualCollector

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


def collect(module) -> dict:
    """The provisioner_preflight record (its keys are what preflight.judge reads)."""
    facts: dict = {}
    for collector in (DistributionFactCollector, PlatformFactCollector, LinuxVirtualCollector):
        facts.update(collector().collect(module=module, collected_facts=facts))
    lspci_rc, lspci = _command(["lspci", "-nn", "-d", "10de:"])
    _, df = _command(["df", "-B1", "--output=target,avail", *DF_FOLDERS])
    devices = {}
    for label, folder in DEVICE_CLASSES.items():
        try:
            devices[label] = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        except OSError:
            devices[label] = []
    return {
        "distribution": facts.get("distribution", ""),
        "distribution_version": facts.get("distribution_version", ""),
        "kernel": facts.get("kernel", ""),
        "architecture": facts.get("architecture", ""),
        "virtualization_type": facts.get("virtualization_type", ""),
        "virtualization_role": facts.get("virtualization_role", ""),
        "vcpus": vcpus(_read("/proc/cpuinfo")) or os.cpu_count() or 0,
        "memtotal_mb": memtotal_mb(_read("/proc/meminfo")),
        "disk_free": df,
        "lspci_rc": lspci_rc,
        "lspci": lspci,
        **devices,
    }
