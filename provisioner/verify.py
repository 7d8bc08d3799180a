"""Judging what verify.yml collected (nvidia-smi's own output) against the profile.

nvidia-smi is asked for CSV with a header, so parsing goes by column name and works for
any column order or extra columns. Its failures are classified into the few causes an
operator acts on, each with its fix; on a host without a GPU the checks say so plainly.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Any

from provisioner.checks import Check, failed, passed, skipped
from provisioner.models import Profile

QUERY_FIELDS = "name,memory.total,driver_version,persistence_mode,ecc.mode.current"
# nvidia-smi reports less than the nominal size: H100 80GB shows 81559 MiB (79.6 GiB), and
# an L40S 48GB with ECC on shows 46068 MiB (45.0 GiB): ECC on GDDR takes ~6% (real captures).
MEMORY_SLACK = 0.92


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int | None
    driver: str
    persistence: str
    ecc: str


@dataclass(frozen=True)
class SmiFailure:
    cause: str
    fix: str


# Order matters: the first pattern that matches names the cause.
FAILURES = [
    (r"couldn't communicate with the NVIDIA driver",
     SmiFailure("no GPU present, or the NVIDIA driver is not loaded",
                "on a GPU host: check `lsmod | grep nvidia`, `dkms status`, then reboot into the kernel the module was built for")),
    (r"Driver/library version mismatch",
     SmiFailure("driver/library version mismatch: the loaded kernel module is older than the installed libraries",
                "reboot the host (or unload and reload the nvidia modules) so the new driver is loaded")),
    (r"No devices were found",
     SmiFailure("no devices found: the driver is loaded but sees no GPU",
                "check `dmesg | grep -i nvrm` for a GPU that fell off the bus or is unsupported by this driver")),
    (r"Unable to determine the device handle|GPU is lost|Unknown Error",
     SmiFailure("GPU lost: the driver cannot talk to a GPU",
                "read `dmesg | grep -i xid`; a GPU lost to an Xid 79 needs a reset or reboot, repeated loss an RMA")),
    (r"couldn't find libnvidia-ml\.so",
     SmiFailure("NVML library not found: the driver's user-space libraries are missing",
                "reinstall the driver packages (provision up) or fix ldconfig for libnvidia-ml.so")),
]


def classify(output: str) -> SmiFailure | None:
    for pattern, failure in FAILURES:
        if re.search(pattern, output):
            return failure
    return None


def _mib(text: str) -> int | None:
    match = re.match(r"\s*(\d+)", text)
    return int(match.group(1)) if match else None


def parse_query(text: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,nounits]` output (with its header)."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [column.split(" [")[0].strip() for column in rows[0]]
    gpus = []
    for row in rows[1:]:
        if not row:
            continue
        cell = dict(zip(header, (value.strip() for value in row)))
        gpus.append(Gpu(
            name=cell.get("name", ""),
            memory_mib=_mib(cell.get("memory.total", "")),
            driver=cell.get("driver_version", ""),
            persistence=cell.get("persistence_mode", ""),
            ecc=cell.get("ecc.mode.current", ""),
        ))
    return gpus


def judge(profile: Profile, reported: dict[str, Any]) -> list[Check]:
    smi = reported.get("nvidia_smi") or {}
    want = profile.hardware.gpu
    rc = int(smi.get("rc", -1))
    output = f"{smi.get('stdout', '')}\n{smi.get('stderr', '')}"

    if smi.get("missing") in (True, "True", "true") or rc == 127:
        if not profile.expects_gpu:
            return [passed("gpus", "no GPU present and none expected (nvidia-smi is not installed)")]
        return [failed("nvidia-smi", "nvidia-smi is not installed: the driver is missing; run provision up")]
    if rc != 0:
        failure = classify(output)
        if failure is None:
            failure = SmiFailure(f"nvidia-smi exited {rc}: {' '.join(output.split())[:200]}", "run nvidia-smi on the host")
        if not profile.expects_gpu:
            return [passed("gpus", f"no GPU present and none expected (nvidia-smi: {failure.cause})")]
        return [failed("nvidia-smi", f"{failure.cause}; fix: {failure.fix}"),
                skipped("gpu details", "not checked: nvidia-smi cannot read the GPUs")]

    gpus = parse_query(smi.get("stdout", ""))
    if not profile.expects_gpu:
        return [passed("gpus", f"{len(gpus)} GPU(s) present; the profile expects none")]
    checks = [(passed if len(gpus) == want.count else failed)(
        "gpu count", f"{len(gpus)} GPU(s), profile expects {want.count}")]
    wrong_model = sorted({g.name for g in gpus if want.model and want.model.lower() not in g.name.lower()})
    checks.append(failed("gpu model", f"{', '.join(wrong_model)} is not a {want.model}") if wrong_model
                  else passed("gpu model", f"every GPU is a {want.model}"))
    if want.memory_gib:
        floor_mib = want.memory_gib * 1024 * MEMORY_SLACK
        small = [g for g in gpus if (g.memory_mib or 0) < floor_mib]
        checks.append(failed("gpu memory", f"{len(small)} GPU(s) under {want.memory_gib} GiB") if small
                      else passed("gpu memory", f"every GPU has ~{want.memory_gib} GiB"))
    drivers = sorted({g.driver for g in gpus})
    checks.append(passed("driver version", f"{profile.driver.version} loaded") if drivers == [profile.driver.version]
                  else failed("driver version", f"loaded {', '.join(drivers)}, profile pins {profile.driver.version}"))
    if profile.verify.require_persistence_mode:
        off = [g for g in gpus if g.persistence != "Enabled"]
        checks.append(failed("persistence mode", f"off on {len(off)} GPU(s); enable nvidia-persistenced") if off
                      else passed("persistence mode", "enabled on every GPU"))
    if profile.verify.require_ecc is not None:
        on = [g for g in gpus if g.ecc == "Enabled"]
        ok = len(on) == len(gpus) if profile.verify.require_ecc else True
        checks.append((passed if ok else failed)("ecc", f"ECC enabled on {len(on)} of {len(gpus)} GPU(s)"))
    return checks
