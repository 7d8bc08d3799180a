"""Judging `verify --network`: each pair's iperf3 bandwidth against the profile's floor, and
each host's InfiniBand ports (ibstat) against the declared rate. Pure."""

from __future__ import annotations

from typing import Any

from provisioner.verdicts.checks import Check, failed, passed, skipped
from provisioner.profiles.models import Profile
from provisioner.parsers import ibstat as ibstat_mod
from provisioner.parsers import iperf3 as iperf3_mod


def judge_pair(profile: Profile, client: str, server: str, measured: dict[str, Any] | None) -> Check:
    name = f"network {client} -> {server}"
    floor = profile.network.floor_gbps
    if not measured:
        return failed(name, "no iperf3 result came back from the client")
    text = str(measured.get("json") or "")
    if measured.get("timed_out"):
        return failed(name, f"iperf3 did not finish within its time-out ({measured.get('stderr', '')})")
    try:
        run = iperf3_mod.read_iperf3(text)
    except iperf3_mod.Iperf3Error as exc:
        stderr = " ".join(str(measured.get("stderr", "")).split())[:200]
        return failed(name, f"{exc}" + (f"; stderr: {stderr}" if stderr else ""))
    where = f"{measured.get('address')} -> {measured.get('peer')}:{measured.get('port')}"
    if run.error:
        return failed(name, f"iperf3 {where}: {run.error}")
    detail = (f"{run.received_gbps:g} Gb/s received over {run.seconds or 0:.1f} s ({where}, "
              f"{run.retransmits if run.retransmits is not None else '?'} retransmits)")
    if floor is None:
        return passed(name, detail + "; the profile sets no floor (network.min_gbps or ethernet_gbps)")
    verdict = passed if run.received_gbps is not None and run.received_gbps >= floor else failed
    return verdict(name, f"{detail}; floor {floor:g} Gb/s")


def judge_infiniband(profile: Profile, ib: dict[str, Any] | None) -> list[Check]:
    declared = profile.hardware.infiniband
    if not ib:
        return [failed("infiniband", "the profile declares InfiniBand, but this host has no "
                                     "/sys/class/infiniband or ibstat did not run")] if declared else []
    if ib.get("missing"):
        return [failed("infiniband", "ibstat is not installed (apt install infiniband-diags)")]
    try:
        ports = [p for p in ibstat_mod.read_ibstat(str(ib.get("stdout", ""))) if p.link_layer.lower() == "infiniband"]
    except ibstat_mod.IbstatError as exc:
        return [failed("infiniband", str(exc))]
    return judge_ports(profile, ports, "ibstat")


def judge_ports(profile: Profile, ports: list[ibstat_mod.IbPort], source: str) -> list[Check]:
    """The InfiniBand ports (Ethernet/RoCE ones already left out) against the profile: each
    Active/LinkUp, at the declared rate or faster. `source` says where they were read."""
    declared, rate = profile.hardware.infiniband, profile.network.infiniband_rate_gbps
    if not ports:
        return [failed("infiniband", f"{source} lists no InfiniBand port")] if declared else [
            skipped("infiniband", "no InfiniBand port (only Ethernet / RoCE ports)")]
    bad = [f"{p.name} {p.state}/{p.physical_state}" for p in ports if not p.up]
    slow = [f"{p.name} at {p.rate_gbps:g}" for p in ports if p.up and rate and (p.rate_gbps or 0) < rate]
    detail = f"{len(ports)} InfiniBand port(s)" + (f", expected {rate} Gb/s each" if rate else "")
    if bad or slow:
        return [failed("infiniband", detail + ": " + "; ".join(bad + slow) + f" (read from {source})")]
    return [passed("infiniband", detail + ": all Active/LinkUp" + (f" at {rate}" if rate else "")
                   + f" (read from {source})")]
