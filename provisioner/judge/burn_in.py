"""`provision accept --level burn-in`: what the sustained load returned (accept_run's burn_in
record) judged. Pure. The telemetry samples (parsers/gpu_samples) and the Xid lines that
appeared in the kernel log during the load (parsers/kernel_log) decide:

- a new Xid: a failure naming it (NVIDIA's catalog, data/xid.yml);
- an increase of uncorrected ECC errors on a GPU: a failure;
- thermal, power-brake or HW slowdown reasons active while loaded, and the SM clock's lowest
  fraction of its maximum: reported as warnings, uncalibrated (no NVIDIA or provider source we
  found sets a share of samples or a clock floor), never a failure;
- on a host without a GPU the load ran on the CPU: not judged against a GPU, no telemetry."""

from __future__ import annotations

from provisioner.judge.accept import CPU_NOTE, UNCALIBRATED
from provisioner.parsers import gpu_samples, kernel_log
from provisioner.parsers.nvidia_smi import Unreadable
from provisioner.profiles import skus
from provisioner.verdicts.checks import Check, failed, passed, skipped

# Reasons that mean the GPU slowed itself to protect itself (heat, power delivery), not a set
# cap: NVML's HW slowdown, SW/HW thermal slowdown and HW power brake bits.
SLOWDOWNS = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def _samples(job: dict, phase: str | None = None) -> list[gpu_samples.Sample]:
    found = []
    for entry in job.get("samples") or []:
        if isinstance(entry, dict) and (phase is None or entry.get("phase") == phase):
            found += gpu_samples.read_samples(str(entry.get("csv") or ""))
    return found


def summarize(before: list[gpu_samples.Sample], loaded: list[gpu_samples.Sample],
              after: list[gpu_samples.Sample], xids: list[kernel_log.XidEvent]) -> dict:
    """The samples' summary the report carries: min/max temperature, the lowest SM clock
    fraction, the reasons seen (samples per reason), the Xids and each GPU's ECC delta."""
    temps = [s.temperature_c for s in loaded if s.temperature_c is not None]
    fractions = [s.sm_fraction for s in loaded if s.sm_fraction is not None]
    reasons: dict[str, int] = {}
    for s in loaded:
        for name in gpu_samples.reason_names(s.reasons or 0):
            reasons[name] = reasons.get(name, 0) + 1
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for s in before + loaded + after:
        if s.ecc_uncorrected is not None:
            first.setdefault(s.gpu, s.ecc_uncorrected)
            last[s.gpu] = s.ecc_uncorrected
    return {"samples": len(loaded), "temperature_c": {"min": min(temps), "max": max(temps)} if temps else None,
            "sm_clock_fraction_min": round(min(fractions), 3) if fractions else None,
            "throttle_reasons": reasons, "xids": [{"xid": e.xid, "pci": e.pci, "message": e.message[:200]}
                                                   for e in xids],
            "ecc_uncorrected_delta": {gpu: last[gpu] - first[gpu] for gpu in sorted(first)}}


def _described(catalog: dict, xid: int) -> str:
    return str((catalog.get(xid) or {}).get("description") or "not in NVIDIA's Xid catalog")


def judge_telemetry(summary: dict, kernel_read: bool, kernel_why: str = "") -> list[Check]:
    checks = []
    catalog = skus.xid_catalog()["xids"]
    if not kernel_read:
        checks.append(skipped("accept burn-in xid", f"not read: {kernel_why or 'the kernel log'}"))
    elif summary["xids"]:
        named = "; ".join(f"Xid {x['xid']} on {x['pci']} ({_described(catalog, x['xid'])}): {x['message'][:120]}"
                          for x in summary["xids"][:8])
        checks.append(failed("accept burn-in xid", f"{len(summary['xids'])} new Xid event(s) during the load: {named}"))
    else:
        checks.append(passed("accept burn-in xid", "no new Xid event in the kernel log during the load"))
    grew = {gpu: n for gpu, n in summary["ecc_uncorrected_delta"].items() if n > 0}
    if grew:
        checks.append(failed("accept burn-in ecc", "uncorrected ECC errors grew during the load: "
                             + ", ".join(f"GPU {g} +{n}" for g, n in grew.items())))
    elif summary["ecc_uncorrected_delta"]:
        checks.append(passed("accept burn-in ecc", f"no uncorrected ECC error during the load "
                                                   f"({len(summary['ecc_uncorrected_delta'])} GPU(s))"))
    else:
        checks.append(skipped("accept burn-in ecc", "not judged: the GPUs report no volatile ECC count ([N/A])"))
    n = summary["samples"]
    if not n:
        checks.append(failed("accept burn-in telemetry", "no GPU sample was taken during the load"))
        return checks
    temps = summary["temperature_c"]
    seen = summary["throttle_reasons"]
    slow = {k: v for k, v in seen.items() if k in SLOWDOWNS}
    told = (f"{n} sample(s); temperature {temps['min']:g}-{temps['max']:g} C" if temps else f"{n} sample(s)") + (
        "; reasons seen: " + ", ".join(f"{k} in {v}/{n}" for k, v in sorted(seen.items())) if seen else
        "; no throttle reason active")
    if slow:
        checks.append(skipped("accept burn-in throttle", f"thermal, power-brake or HW slowdown while loaded: "
                                                         f"{told}; {UNCALIBRATED}: no cited share of samples"))
    else:
        checks.append(passed("accept burn-in throttle", told))
    low = summary["sm_clock_fraction_min"]
    checks.append(skipped("accept burn-in sm clock", (f"lowest SM clock {100 * low:.0f}% of its maximum while loaded"
                                                      if low is not None else "no SM clock was sampled")
                          + f"; {UNCALIBRATED}: no cited floor"))
    return checks


def judge_burn_in(job: dict | None) -> tuple[list[Check], dict]:
    """accept_run's burn_in record -> the checks and the summary for the report."""
    name = "accept burn-in"
    if not isinstance(job, dict):
        return [failed(name, "no burn-in result came back from this host")], {}
    data = job.get("data") if isinstance(job.get("data"), dict) else {}
    load = data.get("burn_in") if isinstance(data.get("burn_in"), dict) else {}
    tflops = {str(k): float(v) for k, v in (load.get("tflops") or {}).items() if isinstance(v, (int, float))}
    seconds = float(load.get("seconds") or 0)
    checks: list[Check] = []
    if job.get("timed_out"):
        checks.append(failed(name, f"killed after its bound of {job.get('job_timeout')} s (its process group with "
                                   "it); the samples taken before are judged below"))
    elif int(job.get("rc", -1)) != 0:
        tail = " ".join(str(job.get("stderr", "")).split()[-40:])[:400]
        checks.append(failed(name, f"the sustained load exited {job.get('rc')}: {tail}"))
    if not checks and not tflops:
        checks.append(failed(name, "the sustained load wrote no figure"))
    figures = ", ".join(f"{k} {v:g}" for k, v in sorted(tflops.items())) or "no figure"
    summary: dict = {"device": load.get("device"), "seconds": seconds, "load_tflops": tflops}
    if load.get("device") == "cpu":
        if not checks:
            checks.append(skipped(name, f"sustained CPU GEMM for {seconds:g} s: {figures} TFLOPS; {CPU_NOTE}"))
        checks.append(skipped("accept burn-in telemetry", "not run: no GPU"))
        return checks, dict(summary, telemetry="not run: no GPU")
    if not checks:
        checks.append(passed(name, f"sustained GEMM for {seconds:g} s, TFLOPS per GPU: {figures}"))
    sampler = job.get("sampler")
    if sampler:  # nvidia-smi missing or refusing the query: said, not judged
        checks.append(skipped("accept burn-in telemetry", str(sampler)[:300]))
        return checks, dict(summary, telemetry=str(sampler)[:300])
    errors = [e for e in job.get("samples") or [] if isinstance(e, dict) and e.get("error")]
    if errors:  # nvidia-smi answered, then failed: a GPU lost or hung under load
        checks.append(failed("accept burn-in telemetry", f"nvidia-smi failed in {len(errors)} of "
                                                         f"{len(job.get('samples') or [])} sample(s), first at "
                                                         f"{errors[0].get('t')} s ({errors[0].get('phase')}): "
                                                         f"{str(errors[0].get('error'))[:300]}"))
    try:
        parts = [_samples(job, phase) for phase in ("before", "load", "after")]
        xlog = job.get("kernel_log") if isinstance(job.get("kernel_log"), dict) else {}
        xids = kernel_log.read_xids(str(xlog.get("new") or ""))
    except Unreadable as exc:
        return checks + [failed("accept burn-in telemetry", str(exc))], summary
    summary.update(summarize(*parts, xids), telemetry="sampled")
    return checks + judge_telemetry(summary, bool(xlog.get("read")), str(xlog.get("why") or "")), summary
