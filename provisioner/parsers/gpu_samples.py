"""GPU telemetry samples: `nvidia-smi --query-gpu=... --format=csv[,nounits]` printed with its
header, once per sample (burn-in's sampler in accept_run; public captures print units too).
The header names each column, so any columns in any order read, and both names of the
throttle-reasons bitmask: clocks_throttle_reasons.active (older drivers) and
clocks_event_reasons.active (its name since NVML's R535 rename). Pure."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from provisioner.parsers.nvidia_smi import Unreadable

# NVML's clocks event (throttle) reason bits: docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html
# (0x1-0x100); board limit 0x200 and reliability 0x400 from NVIDIA's cuda-python NVML bindings, ClocksEventReasons
# (nvidia.github.io/cuda-python, cuda.bindings.nvml.ClocksEventReasons).
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting", 0x200: "board_limit",
           0x400: "reliability"}

# One name per column whatever the driver or the query called it.
_ALIASES = {"clocks.sm": "clocks.current.sm", "clocks_throttle_reasons.active": "clocks_event_reasons.active"}
_COLUMNS = {"index", "timestamp", "name", "uuid", "pci.bus_id", "clocks.current.sm", "clocks.max.sm", "temperature.gpu",
            "power.draw", "clocks_event_reasons.active", "ecc.errors.uncorrected.volatile.total"}
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class Sample:
    gpu: str                       # index (or the row's position when the query had none)
    sm_mhz: float | None
    max_sm_mhz: float | None
    temperature_c: float | None
    power_w: float | None
    reasons: int | None            # the active bitmask
    ecc_uncorrected: int | None    # ecc.errors.uncorrected.volatile.total; None: no ECC ([N/A])

    @property
    def sm_fraction(self) -> float | None:
        return self.sm_mhz / self.max_sm_mhz if self.sm_mhz is not None and self.max_sm_mhz else None


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit] + (
        [f"unknown 0x{mask & ~sum(REASONS):x}"] if mask & ~sum(REASONS) else [])


def _column(header: str) -> str:
    name = header.split(" [", 1)[0].strip()  # "power.draw [W]" -> "power.draw"
    return _ALIASES.get(name, name)


def _number(text: str | None) -> float | None:
    match = _NUMBER.match((text or "").strip())
    return float(match.group()) if match else None  # "[N/A]", "N/A", "[Not Supported]": None


def read_samples(text: str) -> list[Sample]:
    """Every row of one or more header-led CSV blocks (a header may repeat: one per sample)."""
    header: list[str] | None = None
    found = []
    for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True):
        if not row:
            continue
        if any(_column(cell) in _COLUMNS for cell in row):  # a value is never a column's name
            header = [_column(cell) for cell in row]
            continue
        if header is None:
            raise Unreadable("nvidia-smi samples reader", ",".join(row)[:160],
                             "a sample before its header: query with --format=csv (the header names the columns)")
        if len(row) != len(header):
            raise Unreadable("nvidia-smi samples reader", ",".join(row)[:160],
                             f"{len(row)} values for {len(header)} columns")
        c = dict(zip(header, (cell.strip() for cell in row)))
        mask = c.get("clocks_event_reasons.active") or ""
        ecc = _number(c.get("ecc.errors.uncorrected.volatile.total"))
        found.append(Sample(gpu=c.get("index") or c.get("pci.bus_id") or "0",
                            sm_mhz=_number(c.get("clocks.current.sm")), max_sm_mhz=_number(c.get("clocks.max.sm")),
                            temperature_c=_number(c.get("temperature.gpu")), power_w=_number(c.get("power.draw")),
                            reasons=int(mask, 16) if re.fullmatch(r"0x[0-9a-fA-F]{1,16}", mask) else None,
                            ecc_uncorrected=int(ecc) if ecc is not None else None))
    return found
