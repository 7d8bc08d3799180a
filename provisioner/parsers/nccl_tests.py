"""Reading nccl-tests output (all_reduce_perf and friends)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    size_bytes: int
    busbw_out: float  # out-of-place bus bandwidth, GB/s
    busbw_in: float
    wrong: int | None  # validation errors (None when the run did not validate: "N/A")


@dataclass(frozen=True)
class NcclRun:
    gpus: int
    devices: list[str]
    rows: list[Row]
    avg_busbw: float | None
    out_of_bounds: int | None

    @property
    def peak_busbw(self) -> float:
        """Bus bandwidth at the largest message size, where NCCL reaches its plateau; the
        "Avg bus bandwidth" line averages in tiny sizes too and undersells the fabric."""
        if not self.rows:
            return 0.0
        largest = max(self.rows, key=lambda r: r.size_bytes)
        return max(largest.busbw_out, largest.busbw_in)

    @property
    def wrong_results(self) -> int:
        return sum(r.wrong or 0 for r in self.rows)


_ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+\w+\s+\w+\s+(?:-?\d+\s+)?"
                  r"[\d.]+\s+[\d.]+\s+([\d.]+)\s+(\S+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+(\S+)\s*$")


def read(text: str) -> NcclRun:
    header = re.search(r"nGpus (\d+)", text)
    devices = re.findall(r"^#\s+Rank\s+\d+ .*device\s+\d+ \[[^\]]*\] (.+?)\s*$", text, re.M)
    rows = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            wrong = None if match.group(4) == "N/A" else int(match.group(4))
            rows.append(Row(int(match.group(1)), float(match.group(3)), float(match.group(5)), wrong))
    avg = re.search(r"# Avg bus bandwidth\s*:\s*([\d.]+)", text)
    oob = re.search(r"# Out of bounds values\s*:\s*(\d+)", text)
    return NcclRun(gpus=len(devices) or (int(header.group(1)) if header else 0), devices=devices, rows=rows,
                   avg_busbw=float(avg.group(1)) if avg else None, out_of_bounds=int(oob.group(1)) if oob else None)
