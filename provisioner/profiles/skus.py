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
