"""Reading NVIDIA Xid events out of the kernel log (journalctl -k or dmesg, since boot).

The forms seen in real logs:
  May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
  [ 269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 ...        (older: no "PCI:")
  2026-07-01T10:00:00+0000 host kernel: NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: ...
  ... NVRM: Xid (PCI:0000:c1:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
  [Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout ...  (dmesg -T)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+)(?:, (?P<rest>.*))?$")
_WHEN = re.compile(r"^(?P<when>\d{4}-\d\d-\d\dT\S+|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\[\s*\d+\.\d+\]"
                   r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\])")  # the last: dmesg -T
_RECOVERY = re.compile(r"recovery action changed from .*? to 0x[0-9a-f]+ \((?P<action>[^)]+)\)", re.I)


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str  # the GPU's PCI address as the driver printed it
    when: str  # the log line's own timestamp ("" when it has none)
    message: str
    recovery_action: str | None = None  # Xid 154: what the driver asks for


def read_xids(text: str) -> list[XidEvent]:
    """Every Xid line in a kernel log, in order."""
    events = []
    for line in text.splitlines():
        match = _XID.search(line)
        if not match:
            continue
        when = _WHEN.search(line.strip())
        rest = (match.group("rest") or "").strip()
        recovery = _RECOVERY.search(rest)
        events.append(XidEvent(int(match.group("xid")), match.group("pci").lower(),
                               when.group("when") if when else "", rest,
                               recovery.group("action") if recovery else None))
    return events
