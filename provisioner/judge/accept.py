"""Acceptance verdicts: each measurement judged against its floor (profiles/skus.floor: the
profile's, else a cited published floor), naming the measurement, the floor and the shortfall.
Without a cited floor a measurement is "uncalibrated": reported against the datasheet peak as
a warning (a skip), never a failure, so nothing is failed or drained on a guess. Pure."""

from __future__ import annotations

from provisioner.parsers import nvbandwidth
from provisioner.profiles import skus
from provisioner.profiles.models import Profile
from provisioner.verdicts.checks import Check, failed, passed, skipped

UNCALIBRATED = "uncalibrated (warn, never fail or drain)"

# nvbandwidth's testcases that measure what a floor is set for; the others are reported only.
NVBANDWIDTH_MEASURES = {"host_to_device_memcpy_ce": "h2d_gbps", "host_to_device_memcpy_sm": "h2d_gbps",
                        "device_to_host_memcpy_ce": "d2h_gbps", "device_to_host_memcpy_sm": "d2h_gbps",
                        "device_to_device_memcpy_read_ce": "d2d_gbps", "device_to_device_memcpy_write_ce": "d2d_gbps",
                        "device_to_device_memcpy_read_sm": "d2d_gbps", "device_to_device_memcpy_write_sm": "d2d_gbps"}


def judge_measure(profile: Profile, gpu_name: str, gpus: int, measure: str, values: dict[str, float],
                  where: str = "") -> Check:
    """`values`: the measured figure per GPU, pair or host (label -> value); the lowest decides."""
    what, unit, _ = skus.MEASURES[measure]
    name = f"accept {measure}"
    if not values:
        return failed(name, f"{what}: nothing was measured{where}")
    label, low = min(values.items(), key=lambda kv: kv[1])
    spread = f"lowest {low:g} {unit} ({label})" + (f", highest {max(values.values()):g}" if len(values) > 1 else "")
    cut = skus.floor(profile, gpu_name, gpus, measure)
    against = (f"; {100 * low / cut.peak:.0f}% of the datasheet's {cut.peak:g} {unit} ({cut.peak_source})"
               if cut.peak else "")
    if cut.value is None:
        return skipped(name, f"{what}{where}: {spread}{against}; {UNCALIBRATED}: {cut.basis}")
    if low >= cut.value:
        return passed(name, f"{what}{where}: {spread}, floor {cut.value:g} {unit} ({cut.basis}){against}")
    short = [k for k, v in values.items() if v < cut.value]
    return failed(name, f"{what}{where}: {spread}, floor {cut.value:g} {unit} ({cut.basis}): short by "
                        f"{cut.value - low:g} {unit} ({100 * (cut.value - low) / cut.value:.1f}%); below the floor: "
                        f"{', '.join(short[:8])}{' ...' if len(short) > 8 else ''}{against}")


def judge_nvbandwidth(profile: Profile, cases: list[nvbandwidth.Testcase], gpu_name: str | None = None) -> list[Check]:
    gpu = gpu_name or profile.hardware.gpu.model or ""
    checks = []
    for case in cases:
        cells = case.cells()
        measure = NVBANDWIDTH_MEASURES.get(case.name)
        if measure is None:
            low = min(cells.values(), default=0.0)
            checks.append(skipped(f"nvbandwidth {case.name}", f"{len(cells)} figure(s), lowest {low:g} GB/s"
                                  + (f", total {case.total:g} GB/s" if case.total is not None else "")
                                  + "; no floor is set for this testcase"))
            continue
        checks.append(judge_measure(profile, gpu, profile.hardware.gpu.count, measure, cells,
                                    f" (nvbandwidth {case.name})"))
    return checks
