"""Acceptance verdicts: each measurement judged against its floor (profiles/skus.floor: the
profile's, else a cited published floor), naming the measurement, the floor and the shortfall.
Without a cited floor a measurement is "uncalibrated": reported against the datasheet peak as
a warning (a skip), never a failure, so nothing is failed or drained on a guess. Pure."""

from __future__ import annotations

import json

from provisioner.parsers import nvbandwidth
from provisioner.parsers.nvidia_smi import Unreadable
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


CPU_NOTE = "measured on the CPU (a host without a GPU): not judged against a GPU"


def judge_capture(profile: Profile, text: str) -> list[Check]:
    """The measurements scripts/gpu-machine-check (and the lab's CPU versions) write:
    {"provision_accept": 1, "device": "gpu"|"cpu", "gpu": name, "gpus": n,
     "measurements": {measure: {label: value}}}. Untrusted: every field is checked."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise Unreadable("accept measurements reader", text[:200], f"not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("provision_accept") != 1:
        raise Unreadable("accept measurements reader", text[:200], "not version 1 of provision_accept")
    measurements = data.get("measurements")
    device, gpu, gpus = data.get("device"), data.get("gpu") or "", data.get("gpus")
    if (device not in ("gpu", "cpu") or not isinstance(measurements, dict) or not isinstance(gpu, str)
            or not isinstance(gpus, int) or isinstance(gpus, bool) or not 0 <= gpus <= 1024):
        raise Unreadable("accept measurements reader", text[:200], "device, gpu, gpus or measurements malformed")
    checks = []
    for measure, values in sorted(measurements.items()):
        if measure not in skus.MEASURES or not isinstance(values, dict) or not all(
                isinstance(k, str) and len(k) <= 80 and isinstance(v, (int, float)) and not isinstance(v, bool)
                and 0 <= v < 1e9 for k, v in values.items()):
            raise Unreadable("accept measurements reader", str(measure)[:80],
                             f"not a measurement ({', '.join(skus.MEASURES)}) with numeric values per label")
        clean = {k: float(v) for k, v in values.items()}
        if device == "cpu":
            what, unit, _ = skus.MEASURES[measure]
            low = min(clean.values(), default=0.0)
            checks.append(skipped(f"accept {measure}", f"{what}: {low:g} {unit}; {CPU_NOTE}"))
        else:
            checks.append(judge_measure(profile, gpu, gpus, measure, clean))
    return checks or [failed("accept", "the capture carries no measurement")]
