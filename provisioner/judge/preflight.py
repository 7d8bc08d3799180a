"""Judging a host's hardware and OS against the profile, from what preflight.yml reported."""

from __future__ import annotations

from typing import Any

from provisioner.verdicts.checks import Check, at_least, failed, passed, skipped
from provisioner.profiles.models import Profile

# Installed memory reads a little low (the kernel reserves some): 1 TiB shows ~1007 GiB.
MEMORY_SLACK = 0.95
# PCI class codes of NVIDIA GPUs ([0300] VGA, [0302] 3D controller) and NVSwitch device ids.
GPU_CLASSES = ("[0300]", "[0302]")
NVSWITCH_IDS = ("[10de:1af1]", "[10de:22a3]")
OS_NAMES = {"ubuntu-22.04": ("Ubuntu", "22.04"), "ubuntu-24.04": ("Ubuntu", "24.04"), "debian-12": ("Debian", "12")}


def judge(profile: Profile, facts: dict[str, Any]) -> list[Check]:
    hw = profile.hardware
    checks: list[Check] = []

    want_distro, want_version = OS_NAMES[profile.os]
    have = f"{facts.get('distribution')} {facts.get('distribution_version')}"
    same_os = facts.get("distribution") == want_distro and str(facts.get("distribution_version", "")).startswith(want_version)
    checks.append((passed if same_os else failed)("os", f"{have} (profile targets {want_distro} {want_version})"))

    checks.append(at_least("cpu cores", int(facts.get("vcpus") or 0), hw.min_cpu_cores, "vCPUs"))
    ram_gib = int(facts.get("memtotal_mb") or 0) / 1024
    checks.append(at_least("memory", round(ram_gib, 1), hw.min_ram_gib, "GiB", slack=MEMORY_SLACK))

    checks.append(_disk_check(hw.min_free_disk_gib, facts.get("disk_free") or []))

    checks.extend(_pci_checks(profile, facts))

    container = facts.get("virtualization_role") == "guest" and facts.get("virtualization_type") in (
        "podman", "docker", "container", "lxc")
    for flag, label in ((hw.infiniband, "infiniband"), (hw.nvme, "nvme")):
        if flag:
            found = facts.get(label) or []
            if not found and label == "infiniband" and container:
                # A container sees the HCAs only when they are passed in: none here is no verdict on the host.
                checks.append(skipped(label, f"no InfiniBand HCA in this {facts['virtualization_type']} container "
                                             "(/sys/class/infiniband is absent): not checked here"))
                continue
            checks.append((passed if found else failed)(label, f"{len(found)} device(s) found, profile needs at least one"))

    if container:
        checks.append(skipped("kernel modules", f"a {facts['virtualization_type']} container: it runs the machine's kernel, so the "
                                                "running kernel's headers, modprobe and reboot are skipped here (the "
                                                "module is still built for kernel images installed in it)"))
    return checks


def _disk_check(need_gib: float, df_lines: list[str]) -> Check:
    """Every filesystem under /, /usr, /var and /opt (df -B1 --output=target,avail) needs
    the profile's free space: packages land in /usr and /var, environments in /opt."""
    free: dict[str, float] = {}
    for line in df_lines:
        parts = str(line).split()
        if len(parts) == 2 and parts[1].isdigit():
            free[parts[0]] = round(int(parts[1]) / 2**30, 1)
    if not free:
        return skipped("free disk", "could not read the free space (df printed nothing usable)")
    short = {mount: gib for mount, gib in free.items() if gib < need_gib}
    listed = ", ".join(f"{mount} {gib:g} GiB" for mount, gib in sorted(free.items()))
    if short:
        worst = min(short, key=short.get)
        return failed("free disk", f"{worst} has {short[worst]:g} GiB free, the stack needs >= {need_gib:g} GiB "
                                   f"({need_gib - short[worst]:.1f} GiB more); free: {listed}")
    return passed("free disk", f"free: {listed} (profile needs >= {need_gib:g} GiB)")


def _pci_checks(profile: Profile, facts: dict[str, Any]) -> list[Check]:
    hw = profile.hardware
    if int(facts.get("lspci_rc", 0)) != 0:
        reason = "lspci is not installed (apt install pciutils)" if not facts.get("lspci") else "lspci failed"
        return [skipped("gpus", f"{reason}: cannot count GPUs before the driver is installed")]
    lines = facts.get("lspci") or []
    gpus = [line for line in lines if any(cls in line for cls in GPU_CLASSES)]
    nvswitches = [line for line in lines if any(dev in line for dev in NVSWITCH_IDS)]
    if hw.gpu.count == 0:
        unused = " present; the profile expects none and will not use them" if gpus else "; profile expects none"
        checks = [passed("gpus", f"{len(gpus)} NVIDIA GPU(s){unused}")]
    else:
        detail = f"{len(gpus)} NVIDIA GPU(s) on the PCI bus, profile expects {hw.gpu.count}"
        if not gpus:
            detail = f"no GPU present (no NVIDIA device on the PCI bus), profile expects {hw.gpu.count}"
        checks = [(passed if len(gpus) >= hw.gpu.count else failed)("gpus", detail)]
    if hw.interconnect == "nvswitch" and hw.gpu.count == 0:
        # A GPU-less host (the lab) taking an NVSwitch profile's software: nothing to switch.
        checks.append(skipped("nvswitch", f"{len(nvswitches)} NVSwitch device(s) on the PCI bus; "
                                          "the profile expects no GPU, so none are needed"))
    elif hw.interconnect == "nvswitch":
        checks.append((passed if nvswitches else failed)("nvswitch", f"{len(nvswitches)} NVSwitch device(s) on the PCI bus"))
    return checks
