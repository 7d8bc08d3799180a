"""Acceptance verdicts: each measurement judged against its floor (profiles/skus.floor: the
profile's, else a cited published floor), naming the measurement, the floor and the shortfall.
Without a cited floor a measurement is "uncalibrated": reported against the datasheet peak as
a warning (a skip), never a failure, so nothing is failed or drained on a guess. Pure."""

from __future__ import annotations

import json

from provisioner.judge import ddp as ddp_judge
from provisioner.parsers import dcgm, nvbandwidth
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


def judge_allreduce(profile: Profile, host: str, job: dict | None) -> list[Check]:
    """`provision accept`: the all-reduce across one node's GPUs (accept_run's torchrun of
    ddp_smoke.py on loopback): the job's correctness as `verify --ddp` judges it, then its bus
    bandwidth against the node floor (GPU hosts with two ranks or more; on a CPU host gloo's
    figure is reported, not judged against a GPU)."""

    name = "accept allreduce"
    if not job:
        return [failed(name, "no all-reduce result came back from this host")]
    if job.get("timed_out"):
        return [failed(name, f"killed after its bound of {job.get('job_timeout')} s (the whole job, its "
                             f"process group with it): {ddp_judge.why_failed(job)}")]
    checks = [Check(c.name.replace("ddp", name, 1), c.status, c.detail)
              for c in ddp_judge.judge_ddp(host, job, profile.hardware.gpu.count, [host], [])]
    results = job.get("results") or []
    if any(c.status == "fail" for c in checks) or not results:
        return checks
    values = {f"rank {r.get('rank')}": float(r.get("busbw_GBs") or 0) for r in results}
    if int(job.get("gpus") or 0) == 0:
        checks.append(skipped("accept allreduce_busbw_gbps", f"gloo across {len(results)} rank(s): "
                                                             f"{min(values.values()):g} GB/s; {CPU_NOTE}"))
    elif len(results) < 2:
        checks.append(skipped("accept allreduce_busbw_gbps", "one GPU: a world of one rank gives no bus bandwidth"))
    else:
        checks.append(judge_measure(profile, profile.hardware.gpu.model or "", len(results), "allreduce_busbw_gbps",
                                    values))
    return checks


def judge_measurements(profile: Profile, job: dict | None) -> tuple[list[Check], float | None]:
    """accept_run's torch measurement job: each figure against its floor (judge_capture), and
    the reference workload's samples/s (None when it did not run). A job killed at its bound
    keeps the figures it wrote before and fails naming the bound."""
    name = "accept measurements"
    if not job:
        return [failed(name, "no measurement result came back from this host")], None
    data = job.get("data")
    checks: list[Check] = []
    if job.get("timed_out"):
        checks.append(failed(name, f"killed after its bound of {job.get('job_timeout')} s (its process group with "
                                   f"it); the figures measured before are judged below"))
    elif int(job.get("rc", -1)) != 0:
        tail = " ".join(str(job.get("stderr", "")).split()[-40:])[:400]
        checks.append(failed(name, f"accept_measure.py exited {job.get('rc')}: {tail}"))
    if not isinstance(data, dict):
        return checks or [failed(name, "the measurement job wrote nothing")], None
    if data.get("measurements"):
        checks += judge_capture(profile, json.dumps(data))
    samples = data.get("reference_workload_samples_per_s")
    ok = isinstance(samples, (int, float)) and not isinstance(samples, bool) and 0 < samples < 1e9
    return checks, float(samples) if ok else None


def judge_metric_contract(required: dict[str, str], body: str) -> Check:
    """The exporter's metric contract: the scrape carries every DCGM field the shipped dashboard
    and alert rules use (`required`: metric -> where it is used). `body`: the scrape, read with
    parsers/dcgm (prometheus_client's parser)."""

    name = "accept exporter contract"
    if not required:
        return skipped(name, "the dashboard and alert rules use no DCGM field this profile collects")
    try:
        served = dcgm.read_metrics(body).metrics
    except ValueError as exc:
        return failed(name, f"the scrape is not a Prometheus exposition: {exc}")
    missing = sorted(set(required) - served)
    if missing:
        return failed(name, f"{len(missing)} field(s) the dashboard or alert rules use are not served: "
                            + "; ".join(f"{m} ({required[m]})" for m in missing))
    return passed(name, f"all {len(required)} field(s) the dashboard and alert rules use are served")
