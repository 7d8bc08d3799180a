"""Reading `ibstat` (infiniband-diags): one block per channel adapter, one sub-block per port.

    CA 'mlx5_0'
        CA type: MT4129
        ...
        Port 1:
                State: Active
                Physical state: LinkUp
                Rate: 400
                ...
                Link layer: InfiniBand

Indentation is tabs or spaces depending on the build; the reader goes by the keys, not the
indentation. `Rate` is the port's signalling rate in Gb/s (HDR 200, NDR 400).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^Port (?P<port>\d+):\s*$")
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: int
    state: str  # Active, Down, Init, Armed
    physical_state: str  # LinkUp, Disabled, Polling, ...
    rate_gbps: float | None
    link_layer: str  # InfiniBand or Ethernet (RoCE)
    ca_type: str = ""
    firmware: str = ""

    @property
    def name(self) -> str:
        return f"{self.ca} port {self.port}"

    @property
    def up(self) -> bool:
        return self.state.lower() == "active" and self.physical_state.lower() == "linkup"


class IbstatError(ValueError):
    pass


def read_ibstat(text: str) -> list[IbPort]:
    """Every port of every adapter, in order. Raises IbstatError on text that is not ibstat."""
    ports: list[IbPort] = []
    ca, ca_fields, port, fields = None, {}, None, {}

    def flush() -> None:
        if ca is not None and port is not None:
            rate = fields.get("Rate", "")
            match = re.match(r"\d+(\.\d+)?", rate)
            ports.append(IbPort(ca, port, fields.get("State", ""), fields.get("Physical state", ""),
                                float(match.group()) if match else None, fields.get("Link layer", ""),
                                ca_fields.get("CA type", ""), ca_fields.get("Firmware version", "")))

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _CA.match(line):
            flush()
            ca, ca_fields, port, fields = m.group("name"), {}, None, {}
        elif m := _PORT.match(line):
            flush()
            port, fields = int(m.group("port")), {}
        elif (m := _FIELD.match(line)) and ca is not None:
            (fields if port is not None else ca_fields)[m.group("key")] = m.group("value")
    flush()
    if not ports and text.strip():
        raise IbstatError(f"not ibstat output (no \"CA '...'\" block with a port): {' '.join(text.split())[:120]!r}")
    return ports


SYSFS_KEYS = ("state", "phys_state", "rate", "link_layer")
_SYSFS_STATE = re.compile(r"^\d+:\s*(?P<name>\S.*)$")


def read_sysfs(ports: dict[str, dict[str, str]]) -> list[IbPort]:
    """The same ports from /sys/class/infiniband/<ca>/ports/<n>/{state,phys_state,rate,link_layer},
    as gpu_probe reads them (keyed "<ca>/<n>"), for hosts without ibstat. The kernel writes
    `state` as "4: ACTIVE", `phys_state` as "5: LinkUp" and `rate` as "400 Gb/sec (4X NDR)"
    (Linux Documentation/ABI/stable/sysfs-class-infiniband; drivers/infiniband/core/sysfs.c).
    Raises IbstatError on a value that is not in that form."""
    out: list[IbPort] = []
    for key in sorted(ports, key=lambda k: (k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[-1] or 0))):
        ca, _, port = key.rpartition("/")
        values = {k: str(v or "").strip() for k, v in ports[key].items()}
        state, phys = _SYSFS_STATE.match(values.get("state", "")), _SYSFS_STATE.match(values.get("phys_state", ""))
        if not ca or not port.isdigit() or not state or not phys:
            raise IbstatError(f"not /sys/class/infiniband port values: {key}: {values}")
        rate = re.match(r"\d+(\.\d+)?", values.get("rate", ""))
        # ibstat prints the state in title case (Active, Down) and the physical state as is (LinkUp).
        out.append(IbPort(ca, int(port), state.group("name").title(), phys.group("name"),
                          float(rate.group()) if rate else None, values.get("link_layer", "")))
    return out
