"""Reading NVIDIA nvbandwidth's plain-text output: one matrix per testcase ("Running X." then
the matrix's title, its column labels and one row per source), and, in newer versions, a
"SUM X value" line. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass


class NvbandwidthError(ValueError):
    pass


@dataclass(frozen=True)
class Testcase:
    name: str                                # device_to_device_memcpy_write_ce ...
    title: str                               # memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
    columns: list[str]
    rows: dict[str, list[float | None]]      # row label -> one cell per column (None: N/A)
    total: float | None                      # the SUM line, when printed

    @property
    def between_gpus(self) -> bool:
        return self.title.count("GPU(") == 2

    def cells(self) -> dict[str, float]:
        """Every measured cell, labelled `row -> column` (or `GPU n` for a host test), the
        diagonal of a GPU-to-GPU matrix (a GPU with itself) left out."""
        out = {}
        for row, values in self.rows.items():
            for column, value in zip(self.columns, values):
                if value is None or (self.between_gpus and row == column):
                    continue
                out[f"GPU {row} -> GPU {column}" if self.between_gpus else f"GPU {column}"] = value
        return out


_RUNNING = re.compile(r"^Running (\w+)\.\s*$")
_TITLE = re.compile(r"^(memcpy|memory) .*bandwidth \(GB/s\)\s*$")
_SUM = re.compile(r"^SUM (\w+) ([\d.]+)\s*$")


def read(text: str) -> list[Testcase]:
    found: list[Testcase] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        running = _RUNNING.match(lines[i].strip())
        i += 1
        if not running:
            continue
        while i < len(lines) and not _TITLE.match(lines[i].strip()):
            if _RUNNING.match(lines[i].strip()):
                break
            i += 1
        if i >= len(lines) or not _TITLE.match(lines[i].strip()):
            raise NvbandwidthError(f"{running.group(1)}: no bandwidth matrix after 'Running {running.group(1)}.'")
        title = lines[i].strip()
        columns = lines[i + 1].split() if i + 1 < len(lines) else []
        if not columns or not all(c.isdigit() for c in columns):
            raise NvbandwidthError(f"{running.group(1)}: the matrix has no column labels")
        rows: dict[str, list[float | None]] = {}
        i += 2
        while i < len(lines):
            cells = lines[i].split()
            if len(cells) != len(columns) + 1 or not cells[0].isdigit():
                break
            try:
                rows[cells[0]] = [None if c == "N/A" else float(c) for c in cells[1:]]
            except ValueError:
                raise NvbandwidthError(f"{running.group(1)}: unreadable row {lines[i].strip()!r}") from None
            i += 1
        total = None
        if i < len(lines) and (summed := _SUM.match(lines[i].strip())) and summed.group(1) == running.group(1):
            total = float(summed.group(2))
            i += 1
        found.append(Testcase(running.group(1), title, columns, rows, total))
    if not found:
        raise NvbandwidthError("no 'Running <testcase>.' section: not nvbandwidth output")
    return found
