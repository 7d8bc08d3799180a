"""The MIG layout a host reports (module_utils/mig_layout.state, read by gpu_probe for verify
and by provisioner_state for check) against the profile's mig.layout. Pure."""

from __future__ import annotations

from collections import Counter

from provisioner.profiles import mig
from provisioner.profiles.models import Profile
from provisioner.verdicts.checks import Check, failed, passed, skipped


def _names(names: list[str]) -> str:
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in sorted(Counter(names).items())) or "none"


def differences(profile: Profile, now: dict | str | None) -> list[tuple[str, str]]:
    """(item, what differs) per GPU whose MIG mode or instances are not the layout's; [] when
    they all match or the profile declares no layout."""
    want = mig.per_gpu(profile.mig.layout, profile.hardware.gpu.count, profile.hardware.gpu.model or "")
    if not want:
        return []
    if not isinstance(now, dict):
        return [("MIG layout", f"could not be read: {now or 'the host sent no MIG state'}")]
    found = []
    for index, names in want.items():
        gpu = now.get(str(index), now.get(index))
        item = f"MIG layout GPU {index}"
        if not isinstance(gpu, dict):
            found.append((item, "GPU not found"))
        elif gpu.get("current") is not True:
            pending = " (pending: enabled, a reset or reboot makes it current)" if gpu.get("pending") else ""
            found.append((item, f"MIG mode is off{pending}; the profile: {_names(names)}"))
        else:
            have = [i.get("profile", "?") for i in gpu.get("instances") or []]
            no_ci = [str(i.get("gi")) for i in gpu.get("instances") or [] if not i.get("has_ci")]
            if sorted(have) != sorted(names):
                found.append((item, f"instances {_names(have)}; the profile: {_names(names)}"))
            elif no_ci:
                found.append((item, f"GPU instance(s) {', '.join(no_ci)} have no compute instance"))
    return found


def judge(profile: Profile, now: dict | str | None) -> list[Check]:
    """verify's `mig layout` check (only for a profile that declares one)."""
    if not profile.mig.layout:
        return []
    if now is None:
        return [skipped("mig layout", "the probe did not read the MIG instances (nvidia-smi mig -lgi)")]
    wrong = differences(profile, now)
    if wrong:
        return [failed("mig layout", "; ".join(f"{item}: {detail}" for item, detail in wrong)
                       + " (provision up re-applies it)")]
    return [passed("mig layout", f"every GPU holds its instances ({len(now)} GPU(s) read)")]
