"""Judging a host's kernels and Secure Boot state against the profile's driver.

The host side reads and parses (module_utils/kernels.py, inside the provisioner_state and gpu_probe calls
that preflight, check and verify already make): the installed kernel images, NVIDIA's DKMS
modules as {version: {module, kernels: {kernel: state}}}, and the Secure Boot state. A kernel without the profile's driver module
built and installed would boot without the driver: a failed check naming it and the fix.
"""

from __future__ import annotations

from typing import Any

from provisioner.verdicts.checks import Check, failed, passed, skipped
from provisioner.profiles.models import Profile

NAME = "dkms builds"


def missing(profile: Profile, kernels: dict[str, Any]) -> dict[str, str]:
    """The installed kernels that lack the profile's driver module: kernel -> its DKMS state."""
    if profile.driver.secure_boot == "prebuilt" or not kernels:
        return {}
    mod = (kernels.get("dkms") or {}).get(profile.driver.version)
    states = {k: ((mod or {}).get("kernels") or {}).get(k, "added" if mod else "absent") for k in kernels.get("images") or []}
    return {k: v for k, v in states.items() if v != "installed"}


def judge_modules(profile: Profile, kernels: dict[str, Any] | None, *, before_up: bool = False) -> list[Check]:
    """before_up: preflight as the first step of `provision up`, which builds what is missing:
    a missing module is then what the run is about to fix, not a reason to stop."""
    if not kernels:
        return []
    images = list(kernels.get("images") or [])
    version = profile.driver.version
    if not images:
        where = "a container: it shares its host's kernel" if kernels.get("in_container") else "no /boot/vmlinuz-*"
        return [skipped(NAME, f"no installed kernel image ({where}), so no kernel to build the NVIDIA module for; "
                              "the module for the kernel that boots is not checked here")]
    if profile.driver.secure_boot == "prebuilt":
        return [skipped(NAME, f"driver.secure_boot is prebuilt: the modules are Ubuntu's precompiled packages for "
                              f"{', '.join(images)}, not DKMS builds; verify reads the loaded module")]
    lacking = missing(profile, kernels)
    module = ((kernels.get("dkms") or {}).get(version) or {}).get("module") or "nvidia"
    if kernels.get("dkms_rc") not in (None, 0) and not kernels.get("dkms"):
        why = "dkms is not installed" if kernels.get("dkms_rc") == 127 else f"dkms status failed: {kernels.get('dkms_error')}"
        lacking = dict.fromkeys(images, "absent")
    else:
        why = ""
    if not lacking:
        return [passed(NAME, f"{module}/{version} built and installed for every installed kernel: {', '.join(images)}")]
    checks = []
    for kernel, state in sorted(lacking.items()):
        detail = (f"no {module}/{version} module built and installed for kernel {kernel} (dkms: {state}"
                  f"{'; ' + why if why else ''}): booting it would leave the host without the NVIDIA driver. "
                  f"Fix: provision up (it runs dkms install {module}/{version} -k {kernel}, with linux-headers-{kernel})")
        if before_up:
            checks.append(skipped(f"kernel {kernel}", detail.replace("Fix: provision up (it runs ", "provision up "
                                                                    "builds it now (")))
        else:
            checks.append(failed(f"kernel {kernel}", detail))
    return checks


def judge_secure_boot(profile: Profile, kernels: dict[str, Any] | None) -> list[Check]:
    """Preflight: what the profile's driver.secure_boot does with the host's Secure Boot state."""
    if not kernels:
        return []
    sb = kernels.get("secure_boot") or {}
    state, source = sb.get("state", "unknown"), sb.get("source", "")
    choice = profile.driver.secure_boot
    if kernels.get("in_container"):
        return [skipped("secure boot", f"a container: the Secure Boot state ({state}) is its host's, and a container "
                                       "loads no module itself")]
    if state == "no-efi":
        return [passed("secure boot", f"off: the host did not boot with EFI ({source})")]
    if state == "disabled":
        return [passed("secure boot", f"off ({source})")]
    if state == "unknown":
        return [skipped("secure boot", f"could not read the Secure Boot state ({sb.get('detail') or source}); "
                                       "install mokutil, or read /sys/firmware/efi/efivars")]
    if choice == "refuse":
        return [failed("secure boot", "on, and driver.secure_boot is refuse: the kernel would not load an unsigned "
                                      "NVIDIA module. Set driver.secure_boot: sign (DKMS signs it with a machine owner "
                                      "key the role generates; enroll it at the next boot) or prebuilt (Ubuntu's signed "
                                      "precompiled modules), or turn Secure Boot off")]
    if choice == "sign":
        return [passed("secure boot", "on: the DKMS build is signed with this host's machine owner key; enroll the key "
                                      "at the next boot (MokManager) or the module does not load")]
    return [passed("secure boot", "on: Ubuntu's signed precompiled NVIDIA modules load under it")]
