"""Judging a host's local scratch against the profile's storage.scratch.

The host side (module_utils/scratch.py observe, inside the provisioner_state compare that
`check` makes and the gpu_probe call of `verify`) reads the role's record (what it built:
mount point, array, members) and how it is now: the mount point's source, the array's
/proc/mdstat state and its members from mdadm --detail --export. Untrusted data: only
compared, and every string shown cleaned by the report.
"""

from __future__ import annotations

from typing import Any

from provisioner.profiles.models import Profile
from provisioner.verdicts.checks import Check, failed, passed

NAME = "scratch"


def problems(profile: Profile, observed: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What is wrong with the scratch now, as (item, detail) pairs; none when it is off."""
    spec = profile.storage.scratch
    if not spec.enabled:
        return []
    observed = observed if isinstance(observed, dict) else {}
    rec = observed.get("recorded") if isinstance(observed.get("recorded"), dict) else {}
    if not rec:
        return [(f"{NAME} {spec.mount_point}", "not built on this host (no record of it); provision up builds it")]
    found = []
    if rec.get("mount_point") != spec.mount_point:
        found.append((f"{NAME} {spec.mount_point}", f"built at {rec.get('mount_point')!r}, the profile asks for "
                                                     f"{spec.mount_point}; provision up moves it"))
    if not observed.get("mounted"):
        found.append((f"{NAME} {spec.mount_point}", "not mounted (the device may be lost: its fstab line has "
                                                     "nofail, so the host booted without it)"))
    if rec.get("array"):
        found.extend(_array(str(rec["array"]), rec, observed.get("array") or {}))
    return found


def _array(name: str, rec: dict, now: dict) -> list[tuple[str, str]]:
    item = f"{NAME} array {name}"
    if now.get("state") != "active":
        return [(item, f"not running (mdstat: {now.get('state') or 'absent'}); mdadm --assemble --scan, or "
                       "provision up")]
    found = []
    if now.get("healthy") is False or now.get("failed"):
        failed_members = ", ".join(now.get("failed") or []) or "a member missing"
        found.append((item, f"degraded ({failed_members}); replace the disk and re-add it (mdadm --manage --add)"))
    recorded, members = sorted(rec.get("members") or []), sorted(now.get("members") or [])
    if members and members != recorded:
        found.append((item, f"members changed: recorded {', '.join(recorded)}; now {', '.join(members)}"))
    return found


def judge(profile: Profile, observed: dict[str, Any] | None) -> list[Check]:
    """verify: one check, pass when mounted and the array (if any) is whole."""
    if not profile.storage.scratch.enabled:
        return []
    found = problems(profile, observed)
    if found:
        return [failed(NAME, "; ".join(f"{item}: {detail}" for item, detail in found))]
    array = ((observed or {}).get("recorded") or {}).get("array")
    return [passed(NAME, f"{profile.storage.scratch.mount_point} mounted" + (f", array {array} active and whole"
                                                                            if array else ""))]
