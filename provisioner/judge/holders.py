"""What holds a host's NVIDIA devices, as the host classified it, and whether the driver can
be swapped without a reboot.

The holder detection is one piece of code, on the host: plugins/module_utils/holders.py reads
`fuser -v /dev/nvidia*`, nvidia-smi's compute applications and each holder's cgroup, and
classifies every holder (persistenced, fabric_manager, dcgm, dcgm_exporter, cuda, process).
The probe reports that list (provisioner_holders.holders, beside the tools' own text kept as
evidence); the MIG change on the host (module_utils/mig_layout.py) acts on the same list. Here
the controller judges it: `provision plan` lists the holders in a host's disruption class and
the reboot-free driver activation decision (`activation`) stands on them.

Everything a host sends is untrusted: an entry that is not a holder is skipped, PIDs are
numbers, a kind outside the known ones reads as an unknown process (it blocks, it is never
stopped), names are cut and kept as data, never a shell word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Kind = Literal["persistenced", "fabric_manager", "dcgm", "dcgm_exporter", "cuda", "process"]
KINDS: tuple[str, ...] = get_args(Kind)
SERVICE_KINDS = frozenset(KINDS) - {"cuda", "process"}
# The provisioner's own daemons, which only keep the driver initialised or read it: stopping
# them for the swap and starting them after is what a reboot would do to them anyway.
STOPPABLE: frozenset[str] = frozenset({"persistenced", "dcgm", "dcgm_exporter"})
_NAME = re.compile(r"[^\x21-\x7e]")
_UNIT = re.compile(r"^[A-Za-z0-9@._:-]{1,200}\.service$")
MAX_HOLDERS = 256  # as many as the host reads (module_utils/holders.py MAX_PIDS)


@dataclass
class Holder:
    pid: int
    command: str
    user: str = ""
    devices: list[str] = field(default_factory=list)
    unit: str = ""
    kind: Kind = "process"
    service_unit: str = ""  # the unit that stops a service holder; "" for a workload

    def describe(self) -> str:
        where = ", ".join(self.devices[:3]) + (f" and {len(self.devices) - 3} more" if len(self.devices) > 3 else "")
        unit = f", unit {self.unit}" if self.unit else ""
        return f"{self.command} (pid {self.pid}{unit}) holds {where}"


def _clean(value: Any, limit: int = 64) -> str:
    return _NAME.sub("?", value)[:limit] if isinstance(value, str) else ""


def _holder(entry: Any) -> Holder | None:
    """One reported holder, checked field by field; None when it is not one."""
    if not isinstance(entry, dict):
        return None
    pid = entry.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 10**10:
        return None
    kind = entry.get("kind") if entry.get("kind") in KINDS else "process"
    unit = _clean(entry.get("unit"), 200)
    service = _clean(entry.get("service_unit"), 200)
    devices = entry.get("devices") if isinstance(entry.get("devices"), list) else []
    return Holder(pid, _clean(entry.get("command")) or "?", _clean(entry.get("user")),
                  [_clean(d, 200) for d in devices[:64] if isinstance(d, str)],
                  unit if _UNIT.match(unit) else "", kind,  # type: ignore[arg-type]
                  service if kind in SERVICE_KINDS and _UNIT.match(service) else "")


def from_probe(reported: Any) -> list[Holder]:
    """The survey's provisioner_holders (module_utils/holders.py collect) -> holders, by pid."""
    listed = reported.get("holders") if isinstance(reported, dict) else None
    found = {h.pid: h for h in map(_holder, listed[:MAX_HOLDERS] if isinstance(listed, list) else []) if h}
    return [found[pid] for pid in sorted(found)]


@dataclass(frozen=True)
class Activation:
    """Whether a new driver module can be loaded in place of the old one, without a reboot:
    `load` True with the units to stop first (and start after), or False and why not."""
    load: bool
    why: str
    stop_units: tuple[str, ...] = ()


def activation(holders: list[Holder], modules: dict[str, str] | None = None) -> Activation:
    """The reboot-free activation decision. Only when nothing holds the GPUs but the
    provisioner's own daemons (persistenced, DCGM, the exporter: stopped for the swap and
    started after) and no module outside our reach holds the driver (nvidia_drm used by a
    console or display). Fabric manager is never stopped under a live NVLink fabric, and a
    workload is never stopped: those say why not, naming each holder."""
    blockers = [h for h in holders if h.kind not in STOPPABLE or not h.service_unit]
    if blockers:
        fm = [h for h in blockers if h.kind == "fabric_manager"]
        why = "; ".join(h.describe() for h in blockers)
        if fm:
            why += (": fabric manager runs the NVSwitch fabric every GPU's NVLink traffic crosses, and is not "
                    "stopped under it; reboot")
        else:
            why += ": stop these processes (drain the host) or reboot"
        return Activation(False, why)
    drm = (modules or {}).get("nvidia_drm", "")
    if drm.isdigit() and int(drm) > 0:
        return Activation(False, f"module nvidia_drm is in use ({drm} references: a console or display server uses "
                                 "the GPU) and cannot be unloaded; reboot")
    units = tuple(sorted({h.service_unit for h in holders if h.service_unit}))
    if not holders:
        return Activation(True, "nothing holds /dev/nvidia*: the old module can be unloaded and the new one loaded")
    return Activation(True, f"only {', '.join(units)} hold /dev/nvidia*: stopped, the old module unloaded and the new "
                            "one loaded, then started again", units)

