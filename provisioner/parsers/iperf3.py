"""Reading `iperf3 --client ... --json`: the bandwidth the receiver saw (end.sum_received),
what the sender sent, TCP retransmits, or iperf3's own error ("error" at the top level, e.g.
"unable to connect to server: Connection refused")."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Iperf3Run:
    received_gbps: float | None
    sent_gbps: float | None
    retransmits: int | None
    seconds: float | None
    error: str = ""
    local: str = ""  # "address:port" the client bound
    remote: str = ""


class Iperf3Error(ValueError):
    pass


def read_iperf3(text: str) -> Iperf3Run:
    try:
        data = json.loads(text)
    except ValueError:
        raise Iperf3Error(f"not iperf3 --json output: {' '.join(str(text).split())[:160]!r}") from None
    if not isinstance(data, dict):
        raise Iperf3Error("not iperf3 --json output: not a JSON object")
    connected = ((data.get("start") or {}).get("connected") or [{}])[0] or {}
    local = f"{connected.get('local_host', '')}:{connected.get('local_port', '')}" if connected else ""
    remote = f"{connected.get('remote_host', '')}:{connected.get('remote_port', '')}" if connected else ""
    if data.get("error"):
        return Iperf3Run(None, None, None, None, str(data["error"]), local, remote)
    end = data.get("end") or {}
    received, sent = end.get("sum_received") or {}, end.get("sum_sent") or {}
    if "bits_per_second" not in received:
        raise Iperf3Error("iperf3 --json output without end.sum_received.bits_per_second (a UDP test, or cut short)")

    def gbps(part: dict) -> float | None:
        return round(part["bits_per_second"] / 1e9, 3) if "bits_per_second" in part else None

    return Iperf3Run(gbps(received), gbps(sent), sent.get("retransmits"), received.get("seconds"), "", local, remote)
