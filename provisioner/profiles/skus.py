"""Per-SKU verification thresholds (data/gpu_skus.yml) and NVIDIA's Xid catalog
(data/xid.yml), beside the compatibility matrix. A value the profile sets wins."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from provisioner.yamlfile import load_data

from provisioner import paths
from provisioner.profiles.models import Profile

# nvidia-smi reports less than the nominal size: H100 80GB shows 81559 MiB (79.6 GiB), and
# an L40S 48GB with ECC on shows 46068 MiB (45.0 GiB): ECC on GDDR takes ~6% (real captures).
MEMORY_SLACK = 0.92


@cache
def _data(name: str) -> dict:
    return load_data((paths.DATA_DIR / name).read_text(encoding="utf-8"))


def xid_catalog() -> dict:
    return _data("xid.yml")


@dataclass(frozen=True)
class Thresholds:
    memory_mib_min: int | None
    memory_from: str
    ecc_uncorrectable_max: int
    ecc_correctable_max: int | None
    nccl_busbw_floor_gbps: float | None
    retired_pages_max: int


def sku(name: str) -> dict:
    """The SKU entry whose `match` is the longest substring of `name` ({} when none)."""
    found = [s for s in _data("gpu_skus.yml")["skus"] if s["match"].lower() in (name or "").lower()]
    return max(found, key=lambda s: len(s["match"]), default={})


def thresholds(profile: Profile, gpu_name: str) -> Thresholds:
    data = _data("gpu_skus.yml")
    entry = {**data["defaults"], **sku(gpu_name or profile.hardware.gpu.model or "")}
    want = profile.hardware.gpu
    verify = profile.verify
    if want.memory_gib:
        memory, memory_from = int(want.memory_gib * 1024 * MEMORY_SLACK), f"profile: {want.memory_gib} GiB"
    else:
        memory, memory_from = entry.get("memory_mib_min"), f"SKU {entry.get('match', '?')}"
    return Thresholds(
        memory_mib_min=memory, memory_from=memory_from,
        ecc_uncorrectable_max=verify.ecc_uncorrectable_max if verify.ecc_uncorrectable_max is not None
        else entry["ecc_uncorrectable_max"],
        ecc_correctable_max=verify.ecc_correctable_max if verify.ecc_correctable_max is not None
        else entry.get("ecc_correctable_max"),
        nccl_busbw_floor_gbps=verify.nccl_min_busbw_gbps if verify.nccl_min_busbw_gbps is not None
        else entry.get("nccl_busbw_floor_gbps"),
        retired_pages_max=entry["retired_pages_max"])


# Acceptance: what a GPU's datasheet promises and which cited floors apply (data/gpu_skus.yml).
MEASURES = {  # measure -> (what it is, unit, the datasheet figure it is read against)
    "allreduce_busbw_gbps": ("all-reduce bus bandwidth on one node", "GB/s", "nvlink_gbps"),
    "fleet_allreduce_busbw_gbps": ("all-reduce bus bandwidth across hosts", "GB/s", None),
    "gemm_fp32_tflops": ("GEMM fp32", "TFLOPS", "fp32"),
    "gemm_tf32_tflops": ("GEMM tf32", "TFLOPS", "tf32"),
    "gemm_fp16_tflops": ("GEMM fp16", "TFLOPS", "fp16"),
    "gemm_bf16_tflops": ("GEMM bf16", "TFLOPS", "bf16"),
    "gemm_fp8_tflops": ("GEMM fp8", "TFLOPS", "fp8"),
    "memory_gbps": ("device memory bandwidth", "GB/s", "memory_gbps"),
    "h2d_gbps": ("host-to-device copy bandwidth", "GB/s", None),
    "d2h_gbps": ("device-to-host copy bandwidth", "GB/s", None),
    "d2d_gbps": ("GPU-to-GPU copy bandwidth per pair", "GB/s", "nvlink_gbps"),
}


@dataclass(frozen=True)
class Floor:
    value: float | None  # None: uncalibrated (no cited floor applies)
    basis: str           # where the floor comes from, or why there is none
    peak: float | None   # the datasheet peak it is read against, when one is cited
    peak_source: str


def datasheet_peak(gpu_name: str, measure: str) -> tuple[float | None, str]:
    """The datasheet figure `measure` is read against for this GPU, with its source."""
    key = MEASURES[measure][2]
    sheet = sku(gpu_name).get("datasheet") or {}
    if key in (sheet.get("tflops") or {}):
        return float(sheet["tflops"][key]), sheet["tflops_source"]
    if key == "memory_gbps" and "memory_gbps" in sheet:
        return float(sheet["memory_gbps"]), sheet["memory_source"]
    if key == "nvlink_gbps" and "nvlink_gbps" in sheet:
        return float(sheet["nvlink_gbps"]), sheet["nvlink_source"]
    return None, ""


def _applies(where: dict, gpu_name: str, gpus: int, interconnect: str) -> bool:
    return (("match" not in where or where["match"].lower() in (gpu_name or "").lower())
            and ("gpus" not in where or where["gpus"] == gpus)
            and ("interconnect" not in where or interconnect in where["interconnect"]))


def floor(profile: Profile, gpu_name: str, gpus: int, measure: str) -> Floor:
    """The floor `measure` is judged against: the profile's (accept.floors, or for the one-node
    all-reduce verify.nccl_min_busbw_gbps and the SKU's nccl_busbw_floor_gbps), else the most
    specific cited published floor that applies, else none (uncalibrated)."""
    peak, peak_source = datasheet_peak(gpu_name, measure)
    own = getattr(profile.accept.floors, measure, None)
    if own is not None:
        return Floor(own, f"profile accept.floors.{measure}", peak, peak_source)
    if measure == "allreduce_busbw_gbps":
        cut = thresholds(profile, gpu_name)
        if cut.nccl_busbw_floor_gbps is not None:
            origin = ("profile verify.nccl_min_busbw_gbps" if profile.verify.nccl_min_busbw_gbps is not None
                      else f"SKU {sku(gpu_name).get('match', '?')}: {sku(gpu_name).get('basis', '')}")
            return Floor(cut.nccl_busbw_floor_gbps, origin, peak, peak_source)
    found = [f for f in _data("gpu_skus.yml").get("published_floors", [])
             if f["measure"] == measure and _applies(f["where"], gpu_name, gpus, profile.hardware.interconnect)]
    if found:
        best = max(found, key=lambda f: len(f["where"]))
        return Floor(float(best["gbps"]), f"{best['basis']} ({best['source']})", peak, peak_source)
    return Floor(None, "no cited floor for this GPU and node", peak, peak_source)
