"""What holds a host's NVIDIA devices, as the host classified it, and whether the driver can
be swapped without a reboot.

The holder detection is one piece of code, on the host: plugins/module_utils/holders.py reads
`fuser -v /dev/nvidia*`, nvidia-smi's compute applications and each holder's cgroup, and
classifies every holder (persistenced, fabric_manager, dcgm, dcgm_exporter, cuda, process).
The probe reports that list (provisioner_holders.holders, beside the tools' own text kept as
evidence); the MIG change on the host (module_utils/mig_layout.py) acts on the same list. Here
the controller judges it: `provision plan` lists the holders in a host's disruption class, and
reads back the reboot-free driver activation decision the host took on them (`activation`).

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


def activation(reported: Any, holders: list[Holder]) -> Activation:
    """The host's reboot-free activation decision (module_utils/holders.activation, the one
    decision, taken on the host beside the one detection and acted on by the driver role),
    checked again: `load` only as a real true, and only when every holder the host listed
    is a service whose unit is among the units it would stop; `why` kept as bounded text."""
    decision = reported.get("activation") if isinstance(reported, dict) else None
    if not isinstance(decision, dict):
        return Activation(False, "the host reported no activation decision (its collection is older than the "
                                 "decision): reboot")
    text = decision.get("why") if isinstance(decision.get("why"), str) else ""
    why = "".join(c if c.isprintable() else "?" for c in text)[:1000] or "?"
    units = decision.get("stop_units") if isinstance(decision.get("stop_units"), list) else []
    stop = tuple(sorted({u for u in units if isinstance(u, str) and _UNIT.match(u)}))
    if decision.get("load") is not True:
        return Activation(False, why)
    if len(stop) != len(units) or {h.service_unit for h in holders} != set(stop) or not all(h.service_unit for h in holders):
        return Activation(False, "the host's activation decision does not match the holders it listed: reboot")
    return Activation(True, why, stop)
