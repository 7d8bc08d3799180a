"""Reading `nvidia-smi dmon` (a sample per GPU per interval). Two header lines name the
columns and their units; the columns depend on `-s` and the driver (newer ones add jpg and
ofa), so the reader goes by the header:

    # gpu   pwr gtemp mtemp    sm   mem   enc   dec  mclk  pclk
    # Idx     W     C     C     %     %     %     %   MHz   MHz
        0    70    48     -     5     1     0     0  7000  1350

`-` is a value the GPU does not report (memory temperature on many boards).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DmonSample:
    gpu: int
    values: dict[str, float | None] = field(default_factory=dict)  # column -> value, None for "-"


@dataclass(frozen=True)
class Dmon:
    columns: list[str]
    units: list[str]
    samples: list[DmonSample]

    def peak(self, column: str, gpu: int | None = None) -> float | None:
        seen = [s.values.get(column) for s in self.samples if gpu is None or s.gpu == gpu]
        seen = [v for v in seen if v is not None]
        return max(seen) if seen else None

    @property
    def gpus(self) -> list[int]:
        return sorted({s.gpu for s in self.samples})


class DmonError(ValueError):
    pass


def read_dmon(text: str) -> Dmon:
    columns: list[str] = []
    units: list[str] = []
    samples: list[DmonSample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            words = line.lstrip("#").split()
            if words and words[0].lower() == "gpu":
                columns = [w.lower() for w in words]
            elif words and words[0].lower() == "idx":
                units = words
            continue
        if not columns:
            raise DmonError(f"a dmon row before its header: {line[:80]!r}")
        words = line.split()
        if len(words) != len(columns) or not words[0].isdigit():
            raise DmonError(f"a dmon row with {len(words)} values for {len(columns)} columns: {line[:80]!r}")
        values: dict[str, float | None] = {}
        for name, word in zip(columns[1:], words[1:]):
            try:
                values[name] = None if word == "-" else float(word)
            except ValueError:
                raise DmonError(f"not a number in column {name}: {word!r} in {line[:80]!r}") from None
        samples.append(DmonSample(int(words[0]), values))
    if not columns:
        raise DmonError(f"not nvidia-smi dmon output (no '# gpu ...' header): {' '.join(text.split())[:120]!r}")
    return Dmon(columns, units, samples)
