"""Judging what gpu_verify collected against the profile: one check per question, each
pass / fail / skip with its reason.

The readers in nvidia_smi.py, nccl_tests.py and dcgm.py turn raw tool output into data;
this module only decides. On a host without a GPU the GPU checks say "no GPU present"
plainly, and pass only when the profile expects no GPU.
"""

from __future__ import annotations

import json
import re
from typing import Any

from provisioner import compat
from provisioner.parsers import nccl_tests
from provisioner.parsers import dcgm
from provisioner.parsers import nvidia_smi
from provisioner.judge.checks import Check, failed, passed, skipped
from provisioner.models import Profile

# nvidia-smi reports less than the nominal size: H100 80GB shows 81559 MiB (79.6 GiB), and
# an L40S 48GB with ECC on shows 46068 MiB (45.0 GiB): ECC on GDDR takes ~6% (real captures).
MEMORY_SLACK = 0.92


def _truthy(value: Any) -> bool:
    return value in (True, "True", "true", 1, "1")


# --- nvidia-smi ----------------------------------------------------------------------------

def judge_gpus(profile: Profile, report: nvidia_smi.GpuReport) -> list[Check]:
    want = profile.hardware.gpu
    gpus = report.gpus
    if report.source == "version":  # `nvidia-smi --version` names versions, no GPUs
        return _versions(profile, report)
    if not profile.expects_gpu:
        return [passed("gpus", f"{len(gpus)} GPU(s) present; the profile expects none")]
    checks = [(passed if len(gpus) == want.count else failed)("gpu count", f"{len(gpus)} GPU(s), profile expects {want.count}")]

    def is_model(name: str) -> bool:  # the plain table cuts long names: "NVIDIA GeForce RTX 4080 ..."
        if name.endswith("..."):
            return want.model.lower().startswith(name[:-3].replace("NVIDIA ", "").replace("GeForce ", "").lower()) \
                or name[:-3].lower() in f"nvidia {want.model}".lower()
        return want.model.lower() in name.lower()

    wrong = sorted({g.name for g in gpus if not is_model(g.name)})
    checks.append(failed("gpu model", f"{', '.join(wrong)} is not a {want.model}") if wrong
                  else passed("gpu model", f"every GPU is a {want.model}"))
    sizes = [g.memory_mib for g in gpus if g.memory_mib is not None]
    if want.memory_gib and sizes:
        small = [s for s in sizes if s < want.memory_gib * 1024 * MEMORY_SLACK]
        checks.append(failed("gpu memory", f"{len(small)} GPU(s) have {min(small)} MiB, under {want.memory_gib} GiB")
                      if small else passed("gpu memory", f"every GPU has {min(sizes)} MiB (~{want.memory_gib} GiB)"))
    checks += _versions(profile, report)
    persistence = [g.persistence for g in gpus if g.persistence is not None]
    if profile.verify.require_persistence_mode and persistence:
        off = persistence.count(False)
        checks.append(failed("persistence mode", f"off on {off} GPU(s): enable nvidia-persistenced") if off
                      else passed("persistence mode", "on for every GPU"))
    if profile.verify.require_ecc is not None and gpus and report.source in ("csv", "xml", "table", "q"):
        # These forms carry ECC state; N/A there means the GPU has no ECC (GeForce cards).
        on = [g.ecc for g in gpus].count(True)
        if profile.verify.require_ecc:
            checks.append(passed("ecc", f"on for all {len(gpus)} GPU(s)") if on == len(gpus)
                          else failed("ecc", f"on for {on} of {len(gpus)} GPU(s): nvidia-smi -e 1, then reboot"))
        else:
            checks.append(passed("ecc", f"on for {on} of {len(gpus)} GPU(s); the profile does not require it"))
    mig = [g.mig for g in gpus if g.mig is not None]
    if mig:
        wrong_mig = [m for m in mig if m != want.mig]
        state = "on" if want.mig else "off"
        checks.append(failed("mig", f"MIG mode differs from the profile ({state}) on {len(wrong_mig)} GPU(s)"
                             + (f"; {report.mig_devices} MIG device(s)" if report.mig_devices else ""))
                      if wrong_mig else passed("mig", f"MIG mode {state} on every GPU"))
    if profile.verify.require_idle_gpus and report.processes is not None:
        checks.append(failed("idle", f"{report.processes} compute process(es) hold the GPUs") if report.processes
                      else passed("idle", "no compute processes on the GPUs"))
    return checks


def _versions(profile: Profile, report: nvidia_smi.GpuReport) -> list[Check]:
    checks = []
    if report.driver:
        checks.append(passed("driver version", f"{report.driver} loaded") if report.driver == profile.driver.version
                      else failed("driver version", f"loaded {report.driver}, profile pins {profile.driver.version}"))
    if report.cuda:
        ok = compat.version(report.cuda) >= compat.version(profile.cuda.default)
        checks.append((passed if ok else failed)(
            "driver cuda", f"the driver supports CUDA {report.cuda}; the toolkit is {profile.cuda.default}"))
    return checks


def judge_smi_failure(profile: Profile, output: str, rc: int) -> list[Check]:
    failure = nvidia_smi.classify(output) or nvidia_smi.Failure(
        f"nvidia-smi exited {rc}: {' '.join(output.split())[:200]}", "run nvidia-smi on the host and read its message")
    if not profile.expects_gpu:
        return [passed("gpus", f"no GPU present and none expected (nvidia-smi: {failure.cause})")]
    return [failed("nvidia-smi", f"{failure.cause}; fix: {failure.fix}"),
            skipped("gpu details", "not checked: nvidia-smi cannot read the GPUs")]


def judge_nvidia_smi(profile: Profile, smi: dict[str, Any]) -> list[Check]:
    rc = int(smi.get("rc", -1))
    if _truthy(smi.get("missing")) or rc == 127:
        if not profile.expects_gpu:
            return [passed("gpus", "no GPU present and none expected (nvidia-smi is not installed)")]
        return [failed("nvidia-smi", "nvidia-smi is not installed: the driver is missing; run provision up")]
    if rc != 0:
        return judge_smi_failure(profile, f"{smi.get('stdout', '')}\n{smi.get('stderr', '')}", rc)
    return judge_gpus(profile, nvidia_smi.read(smi.get("stdout", "")))


def judge_topology(profile: Profile, topo: nvidia_smi.Topology) -> list[Check]:
    if profile.hardware.interconnect not in ("nvlink", "nvswitch"):
        return [skipped("nvlink topology", f"interconnect is {profile.hardware.interconnect}: no NVLink expected")]
    if topo.gpus < 2:
        return [skipped("nvlink topology", "one GPU: no GPU pairs to connect")]
    pairs = len(topo.links)
    linked = topo.nvlinked_pairs()
    return [(passed if linked == pairs else failed)(
        "nvlink topology", f"{linked} of {pairs} GPU pairs connected by NVLink")]


def judge_nvlink(profile: Profile, links: dict[int, list[float | None]]) -> list[Check]:
    if profile.hardware.interconnect not in ("nvlink", "nvswitch"):
        return [skipped("nvlink links", f"interconnect is {profile.hardware.interconnect}: no NVLink expected")]
    total = sum(len(v) for v in links.values())
    down = sum(1 for v in links.values() for speed in v if speed is None)
    return [(failed if down or not total else passed)("nvlink links", f"{total - down} of {total} links up")]


# --- NCCL, DCGM, torch, fabric manager ---------------------------------------------------------

def judge_nccl(profile: Profile, run: nccl_tests.NcclRun) -> list[Check]:
    checks = []
    floor = profile.verify.nccl_min_busbw_gbps
    peak = run.peak_busbw
    if floor is None:
        checks.append(skipped("nccl bandwidth", f"{peak:g} GB/s bus bandwidth; the profile sets no floor"))
    else:
        checks.append((passed if peak >= floor else failed)(
            "nccl bandwidth", f"all_reduce {peak:g} GB/s bus bandwidth on {run.gpus} GPU(s), floor {floor:g}"))
    bad = (run.out_of_bounds or 0) + run.wrong_results
    checks.append(failed("nccl results", f"{bad} wrong or out-of-bounds values") if bad
                  else passed("nccl results", "no wrong values"))
    if profile.expects_gpu and run.gpus != profile.hardware.gpu.count:
        checks.append(failed("nccl gpus", f"ran on {run.gpus} GPU(s), profile has {profile.hardware.gpu.count}"))
    return checks


def judge_exporter(profile: Profile, scrape: dcgm.Scrape) -> list[Check]:
    served = sorted(m for m in scrape.metrics if m.startswith("DCGM_FI_DEV_"))
    if not served:
        return [failed("exporter metrics", "the exporter answers but serves no DCGM_FI_DEV_* metrics")]
    checks = [passed("exporter metrics", f"{len(served)} DCGM_FI_DEV_* metrics for {len(scrape.gpus)} GPU(s)")]
    if profile.expects_gpu and len(scrape.gpus) != profile.hardware.gpu.count:
        checks.append(failed("exporter gpus", f"metrics for {len(scrape.gpus)} GPU(s), profile has "
                             f"{profile.hardware.gpu.count}"))
    missing = sorted(set(profile.dcgm.exporter.collectors) - scrape.metrics)
    checks.append(failed("exporter collectors", f"not served: {', '.join(missing)}") if missing
                  else passed("exporter collectors", "every collector the profile asks for is served"))
    xids = {gpu: int(v) for gpu, v in scrape.xid.items() if v}
    if "DCGM_FI_DEV_XID_ERRORS" in scrape.metrics:
        checks.append(failed("xid errors", ", ".join(f"GPU {g}: Xid {x}" for g, x in sorted(xids.items())))
                      if xids else passed("xid errors", "no Xid error on any GPU"))
    return checks


def judge_diag(results: list[dcgm.DiagResult]) -> list[Check]:
    if not results:
        return [failed("dcgm diag", "dcgmi diag printed no test results")]
    failing = [r.test for r in results if r.result == "Fail"]
    skipped_tests = [r.test for r in results if r.result == "Skip"]
    detail = f"{len(results) - len(failing) - len(skipped_tests)} passed"
    if skipped_tests:
        detail += f", skipped: {', '.join(skipped_tests)}"
    return [failed("dcgm diag", f"failed: {', '.join(failing)}; {detail}") if failing else passed("dcgm diag", detail)]


def judge_torch(profile: Profile, torch: dict[str, Any]) -> list[Check]:
    if "ran" in torch and not _truthy(torch.get("ran")):
        env = profile.python_env
        return [failed("torch", f"no Python environment {env.name} on this host ({' '.join(str(torch.get('stderr', '')).split())[:200]}): "
                                "run provision up")]
    if int(torch.get("rc", -1)) != 0:
        return [failed("torch", f"import torch failed in the environment: {' '.join(str(torch.get('stderr', '')).split())[-300:]}")]
    info = json.loads(str(torch.get("stdout", "")).strip().splitlines()[-1])
    wanted = profile.python_env.torch.version if profile.python_env.torch else None
    checks = []
    if wanted:
        have = str(info.get("version", ""))
        checks.append((passed if have.split("+")[0] == wanted else failed)(
            "torch version", f"{have} (profile pins {wanted})"))
    count = int(info.get("device_count") or 0)
    if not profile.expects_gpu:
        checks.append(passed("torch gpus", "CUDA not available: no GPU present, none expected")
                      if not info.get("cuda_available") else passed("torch gpus", f"sees {count} GPU(s)"))
    elif not info.get("cuda_available"):
        checks.append(failed("torch gpus", "torch.cuda.is_available() is False: no GPU present to torch"))
    else:
        checks.append((passed if count == profile.hardware.gpu.count else failed)(
            "torch gpus", f"torch sees {count} GPU(s), profile expects {profile.hardware.gpu.count}"))
    return checks


def judge_fabric_manager(profile: Profile, fm: dict[str, Any]) -> list[Check]:
    if not profile.fabric_manager.enabled:
        return []
    state = fm.get("unit_state") or "absent"
    version = fm.get("installed_version") or ""
    checks = [(passed if state == "active" else failed)("fabric manager", f"nvidia-fabricmanager is {state}")]
    if version:
        checks.append((passed if version.startswith(profile.driver.version) else failed)(
            "fabric manager version", f"{version}, driver {profile.driver.version}"))
    return checks


def judge_cuda_toolkit(profile: Profile, nvcc: dict[str, Any]) -> list[Check]:
    """nvcc must report the profile's default toolkit release (the one on PATH)."""
    if not profile.cuda.enabled:
        return [skipped("cuda toolkit", "the profile installs no toolkit (cuda.enabled false)")]
    wanted = profile.cuda.default
    out = str(nvcc.get("stdout", ""))
    found = re.search(r"release (\d+\.\d+),", out)
    if int(nvcc.get("rc", -1)) != 0 or not found:
        return [failed("cuda toolkit", f"nvcc is not on the host (wanted CUDA {wanted}): run provision up")]
    return [(passed if found.group(1) == wanted else failed)(
        "cuda toolkit", f"nvcc reports release {found.group(1)} (profile: {wanted})")]


def judge(profile: Profile, reported: dict[str, Any]) -> list[Check]:
    """Every check for one host, from gpu_verify's `provisioner_verify`."""
    checks = judge_nvidia_smi(profile, reported.get("nvidia_smi") or {})
    if "cuda_toolkit" in reported:
        checks += judge_cuda_toolkit(profile, reported["cuda_toolkit"])
    if "fabric_manager" in reported:
        checks += judge_fabric_manager(profile, reported["fabric_manager"])
    torch = reported.get("torch")
    if torch and profile.python_env.enabled and profile.python_env.torch:
        checks += judge_torch(profile, torch)
    nccl = reported.get("nccl_tests") or {}
    if _truthy(nccl.get("ran")):
        checks += judge_nccl(profile, nccl_tests.read(str(nccl.get("stdout", ""))))
    elif profile.verify.nccl_min_busbw_gbps and profile.expects_gpu:
        why = ("nccl-tests did not run on this host" if profile.nccl.tests
               else "nccl-tests are not built (set nccl.tests, tests_source and tests_sha256 in the profile)")
        checks.append(skipped("nccl bandwidth", why))
    exporter = reported.get("exporter") or {}
    if profile.dcgm.enabled and profile.dcgm.exporter.enabled:
        if exporter.get("body"):
            checks += judge_exporter(profile, dcgm.read_metrics(str(exporter["body"])))
        else:
            checks.append(failed("exporter metrics", f"dcgm-exporter does not answer (unit {exporter.get('unit_state', 'unknown')})"))
    elif "exporter" in reported:
        checks.append(skipped("exporter metrics", "DCGM is not part of this profile"))
    diag = reported.get("dcgmi_diag") or {}
    if _truthy(diag.get("ran")):
        checks += judge_diag(dcgm.read_diag(str(diag.get("stdout", ""))))
    return checks
