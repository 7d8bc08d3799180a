"""Judging what gpu_verify collected (one gpu_probe call, plus the opt-in nccl-tests, dcgmi
diag and exporter scrape) against the profile: one check per question, each pass / fail /
skip with its reason.

The readers in parsers/ turn raw tool output into data; this module only decides. On a
host without a GPU the GPU checks say "no GPU present" plainly, and pass only when the
profile expects no GPU. Judges never crash and never pass on nothing: a reader that cannot
read its input fails that check naming the reader and the text; a check over zero GPUs is
never a pass.
"""

from __future__ import annotations

import json
import re
from typing import Any

from provisioner.profiles import compat, skus
from provisioner.parsers import kernel_log
from provisioner.parsers import nccl_tests
from provisioner.parsers import dcgm
from provisioner.parsers import nvidia_smi
from provisioner.parsers import ibstat as ibstat_mod
from provisioner.judge import containers as containers_judge
from provisioner.judge import frameworks
from provisioner.judge import mig as mig_judge
from provisioner.judge import network
from provisioner.verdicts.checks import Check, failed, not_in_capture, passed, skipped
from provisioner.profiles.models import Profile, PythonEnv



MEMORY_SLACK = skus.MEMORY_SLACK


def _truthy(value: Any) -> bool:
    return value in (True, "True", "true", 1, "1")


def _guard(name: str, judge_fn, *args) -> list[Check]:
    """One judge, its failures made checks: a reader that cannot read its input fails `name`
    naming the reader and the text; any other exception fails it naming the exception."""
    try:
        return judge_fn(*args)
    except nvidia_smi.Unreadable as exc:
        return [failed(name, f"{exc.reader} could not read {nvidia_smi.snippet(exc.text)!r}"
                             + (f" ({exc.why})" if exc.why else ""))]
    except Exception as exc:  # noqa: BLE001 - one bad input must not end the host's (or the run's) judging
        return [failed(name, f"the {judge_fn.__name__} judge raised {type(exc).__name__}: {exc}")]


def _gpu_label(index: int, gpu: nvidia_smi.Gpu) -> str:
    return f"GPU {index}" + (f" ({gpu.bus_id})" if gpu.bus_id else "")


# --- nvidia-smi ----------------------------------------------------------------------------

FORM_NAMES = {"csv": "this nvidia-smi --query-gpu CSV", "xml": "this nvidia-smi -q -x", "table": "this nvidia-smi table",
              "q": "this nvidia-smi -q", "list": "nvidia-smi -L", "version": "nvidia-smi --version",
              "discovery": "dcgmi discovery -l"}


def _lacks(report: nvidia_smi.GpuReport, name: str, what: str) -> Check:
    """A reading the input does not carry: a skip naming what is missing, never a failure."""
    return not_in_capture(name, f"{FORM_NAMES.get(report.source, report.source)} has no {what}")


def judge_gpus(profile: Profile, report: nvidia_smi.GpuReport) -> list[Check]:
    """The GPU listing against the profile. Every reading is optional: where the input lacks one
    (a CSV without the column, -L, a paste cut short) that check is "not in this capture"."""
    want = profile.hardware.gpu
    gpus = report.gpus
    if report.source == "version":  # `nvidia-smi --version` names versions, no GPUs
        return _versions(profile, report)
    if not profile.expects_gpu:
        return [passed("gpus", f"{len(gpus)} GPU(s) present; the profile expects none")]
    checks = [(passed if len(gpus) == want.count else failed)("gpu count", f"{len(gpus)} GPU(s), profile expects {want.count}")]
    if report.errors:
        checks.append(failed("gpu readings", "nvidia-smi could not read: " + "; ".join(report.errors)[:400]
                             + " (ERR!: a GPU that does not answer; read dmesg for an Xid)"))
    if not gpus:  # never "every GPU is a X" over no GPU
        checks.append(failed("gpu model", f"no GPU was read from nvidia-smi's {report.source} output"))
        return checks + _versions(profile, report) + _idle(profile, report)

    def is_model(name: str) -> bool:
        model = want.model.lower()
        if not name.endswith("..."):
            return model in name.lower()
        # The plain table cuts long names: "NVIDIA GeForce RTX 4080 ...", "NVIDIA RTX PRO 6000 Blac...":
        # the model is in what is shown, or runs past the cut (a word of what is shown starts it).
        shown = name[:-3].strip().lower()
        words = [shown[i + 1:] for i, ch in enumerate(shown) if ch == " "]
        return model in shown or any(len(rest) >= 4 and model.startswith(rest) for rest in [shown, *words])

    named = [g for g in gpus if g.name]
    wrong = sorted({g.name for g in named if not is_model(g.name)})
    if not named:
        checks.append(_lacks(report, "gpu model", "GPU name"))
    else:
        checks.append(failed("gpu model", f"{', '.join(wrong)} is not a {want.model}") if wrong
                      else passed("gpu model", f"every GPU is a {want.model}"
                                  + (f" ({len(named)} of {len(gpus)} named)" if len(named) < len(gpus) else "")))
    sizes = [g.memory_mib for g in gpus if g.memory_mib is not None]
    limits = skus.thresholds(profile, named[0].name if named else "")
    if limits.memory_mib_min and not sizes:
        checks.append(_lacks(report, "gpu memory", "memory size"))
    elif limits.memory_mib_min:
        small = [s for s in sizes if s < limits.memory_mib_min]
        checks.append(failed("gpu memory", f"{len(small)} GPU(s) have {min(small)} MiB, under {limits.memory_mib_min} MiB "
                                           f"({limits.memory_from})")
                      if small else passed("gpu memory", f"every GPU has {min(sizes)} MiB (>= {limits.memory_mib_min} MiB, "
                                                         f"{limits.memory_from})"))
    checks += _versions(profile, report)
    persistence = [g.persistence for g in gpus if g.persistence is not None]
    if profile.verify.require_persistence_mode and not persistence:
        checks.append(_lacks(report, "persistence mode", "persistence mode"))
    elif profile.verify.require_persistence_mode:
        off = persistence.count(False)
        checks.append(failed("persistence mode", f"off on {off} GPU(s): enable nvidia-persistenced") if off
                      else passed("persistence mode", f"on for every GPU{_of(persistence, gpus)}"))
    ecc = [g.ecc for g in gpus if g.ecc is not None]  # N/A (no ECC: GeForce cards) reads as off
    if profile.verify.require_ecc is not None and not ecc:
        checks.append(_lacks(report, "ecc", "ECC mode"))
    elif profile.verify.require_ecc is not None:
        on = ecc.count(True)
        if profile.verify.require_ecc:
            checks.append(passed("ecc", f"on for all {len(ecc)} GPU(s){_of(ecc, gpus)}") if on == len(ecc)
                          else failed("ecc", f"on for {on} of {len(ecc)} GPU(s): nvidia-smi -e 1, then reboot"))
        else:
            checks.append(passed("ecc", f"on for {on} of {len(ecc)} GPU(s); the profile does not require it"))
    mig = [g.mig for g in gpus if g.mig is not None]
    state = "on" if want.mig else "off"
    if not mig:
        checks.append(_lacks(report, "mig", "MIG mode"))
    else:
        wrong_mig = [m for m in mig if m != want.mig]
        checks.append(failed("mig", f"MIG mode differs from the profile ({state}) on {len(wrong_mig)} GPU(s)"
                             + (f"; {report.mig_devices} MIG device(s)" if report.mig_devices else ""))
                      if wrong_mig else passed("mig", f"MIG mode {state} on every GPU{_of(mig, gpus)}"))
    return checks + _idle(profile, report)


def _of(read: list, gpus: list) -> str:
    """" (read on 2 of 4)" when a capture carries a reading for only some of its GPUs."""
    return f" (read on {len(read)} of {len(gpus)})" if len(read) < len(gpus) else ""


def _idle(profile: Profile, report: nvidia_smi.GpuReport) -> list[Check]:
    if profile.verify.require_idle_gpus and report.processes is None:
        return [_lacks(report, "idle", "process list")]
    if profile.verify.require_idle_gpus:
        return [failed("idle", f"{report.processes} compute process(es) hold the GPUs") if report.processes
                else passed("idle", "no compute processes on the GPUs")]
    return []


def _versions(profile: Profile, report: nvidia_smi.GpuReport) -> list[Check]:
    checks = []
    if report.driver:
        checks.append(passed("driver version", f"{report.driver} loaded") if report.driver == profile.driver.version
                      else failed("driver version", f"loaded {report.driver}, profile pins {profile.driver.version}"))
    elif profile.expects_gpu:  # nvidia-smi always prints it; a paste cut above the header does not
        checks.append(_lacks(report, "driver version", "driver version"))
    toolkit = profile.cuda.default if profile.cuda.enabled else None
    if report.cuda and toolkit:
        ok = compat.version(report.cuda) >= compat.version(toolkit)
        checks.append((passed if ok else failed)(
            "driver cuda", f"the driver supports CUDA {report.cuda}; the toolkit is {toolkit}"))
    elif report.cuda_note and profile.expects_gpu:
        checks.append(failed("driver cuda", f"nvidia-smi prints CUDA Version: {report.cuda_note}: the driver's CUDA "
                                            "library (libcuda.so) is missing or does not load; reinstall the driver's "
                                            "user-space packages (provision up)"))
    elif report.cuda:
        checks.append(skipped("driver cuda", f"the driver supports CUDA {report.cuda}; the profile installs no toolkit"))
    elif toolkit and profile.expects_gpu:
        checks.append(_lacks(report, "driver cuda", "CUDA version"))
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
    if _truthy(smi.get("timed_out")):
        return [failed("nvidia-smi", f"nvidia-smi did not answer within {smi.get('timeout', '?')} s: a hung GPU or "
                                     "driver; read dmesg for an Xid")]
    if rc != 0:
        return judge_smi_failure(profile, f"{smi.get('stdout', '')}\n{smi.get('stderr', '')}", rc)
    report = nvidia_smi.read(str(smi.get("stdout", "")))
    return judge_gpus(profile, report) + (judge_health(profile, report) if report.source == "xml" else [])


# --- GPU health (from -q -x) ---------------------------------------------------------------

# Clock-event reasons that mean trouble; the others (gpu_idle, applications_clocks_setting,
# sw_power_cap, sync_boost, display_clocks_setting) are the GPU doing what it was told.
BAD_CLOCK_REASONS = {"hw_slowdown": "hardware slowdown", "hw_thermal_slowdown": "hardware thermal slowdown",
                     "hw_power_brake_slowdown": "hardware power brake", "sw_thermal_slowdown": "software thermal slowdown"}
UNDER_LOAD_PERCENT = 50


def judge_health(profile: Profile, report: nvidia_smi.GpuReport) -> list[Check]:
    """ECC errors, retired pages / row remapping, PCIe link under load, throttling, the GPU fabric."""
    gpus = [(i, g, g.health) for i, g in enumerate(report.gpus) if g.health is not None]
    if not gpus:
        if report.gpus and all(g.ecc is False for g in report.gpus) and report.source == "table":
            return [skipped("ecc errors", "no ECC counters on these GPUs (ECC off or not supported)")]
        return [_lacks(report, "gpu health", "health readings (ECC counters, remapped rows, PCIe link, clocks)")]
    limits = skus.thresholds(profile, gpus[0][1].name)
    if report.source == "table":  # the table's one health reading: Volatile Uncorr. ECC
        return _ecc(report, gpus, limits)
    return [*_ecc(report, gpus, limits), *_memory_repair(gpus, limits), *_pcie_link(gpus), *_clocks(gpus),
            *_gpu_fabric(profile, report, gpus)]


def _ecc(report, gpus, limits) -> list[Check]:
    """ECC counters since the driver loaded."""
    counted = [(i, g, h) for i, g, h in gpus if h.ecc_uncorrectable is not None or h.ecc_correctable is not None]
    if not counted and all(g.ecc is False for _, g, _ in gpus):
        return [skipped("ecc errors", "no ECC counters on these GPUs (ECC off or not supported)")]
    if not counted:
        return [_lacks(report, "ecc errors", "ECC error counters")]
    bad = [f"{_gpu_label(i, g)}: {h.ecc_uncorrectable} uncorrectable" for i, g, h in counted
           if (h.ecc_uncorrectable or 0) > limits.ecc_uncorrectable_max]
    if limits.ecc_correctable_max is not None:
        bad += [f"{_gpu_label(i, g)}: {h.ecc_correctable} correctable" for i, g, h in counted
                if (h.ecc_correctable or 0) > limits.ecc_correctable_max]
    return [failed("ecc errors", f"{'; '.join(bad)} ECC error(s) since the driver loaded (threshold: "
                                 f"{limits.ecc_uncorrectable_max} uncorrectable): drain, reset the GPU; RMA if "
                                 "they return") if bad
            else passed("ecc errors", f"uncorrectable ECC errors within the threshold "
                                      f"({limits.ecc_uncorrectable_max}) on all {len(counted)} GPU(s)")]


def _memory_repair(gpus, limits) -> list[Check]:
    """Row remapping (Ampere and later) or page retirement (before)."""
    checks = []
    remap = [(i, g, h) for i, g, h in gpus if h.remap_pending is not None or h.remap_failure is not None]
    retire = [(i, g, h) for i, g, h in gpus if h.retired_sbe is not None or h.retired_dbe is not None]
    if remap:
        failures = [_gpu_label(i, g) for i, g, h in remap if h.remap_failure]
        pending = [_gpu_label(i, g) for i, g, h in remap if h.remap_pending]
        if failures:
            checks.append(failed("row remapping", f"row remapping failed on {', '.join(failures)}: the memory cannot be "
                                                  "repaired: RMA"))
        elif pending:
            checks.append(failed("row remapping", f"a row remap is pending on {', '.join(pending)}: reset the GPU (or "
                                                  "reboot) to apply it"))
        else:
            checks.append(passed("row remapping", f"no pending or failed row remap on {len(remap)} GPU(s)"))
    if retire:
        total = {(_gpu_label(i, g)): (h.retired_sbe or 0) + (h.retired_dbe or 0) for i, g, h in retire}
        pending = [_gpu_label(i, g) for i, g, h in retire if h.retired_pending]
        worn = [f"{label}: {n} pages" for label, n in total.items() if n >= limits.retired_pages_max]
        if worn:
            checks.append(failed("retired pages", f"{'; '.join(worn)} retired (limit {limits.retired_pages_max}): RMA"))
        elif pending:
            checks.append(failed("retired pages", f"page retirement pending on {', '.join(pending)}: reboot (or reload "
                                                  "the driver) to retire them"))
        elif not remap:
            checks.append(passed("retired pages", f"at most {max(total.values())} retired page(s) per GPU (limit "
                                                  f"{limits.retired_pages_max}), none pending"))
    if not remap and not retire:
        checks.append(not_in_capture("memory repair", "no row-remap or page-retirement reading (N/A on GPUs "
                                                      "without them, and in MIG mode)"))
    return checks


def _pcie_link(gpus) -> list[Check]:
    """The PCIe link under load: the generation (and on some boards the width) drops at idle by design."""
    links = [(i, g, h) for i, g, h in gpus if h.pcie_width and h.pcie_width_max]
    loaded = [(i, g, h) for i, g, h in links if (h.utilization or 0) >= UNDER_LOAD_PERCENT]
    if not links:
        return [not_in_capture("pcie link", "no PCIe link width reading")]
    if not loaded:
        return [skipped("pcie link", f"judged only under load (>= {UNDER_LOAD_PERCENT}% utilization): the link "
                                     "slows down at idle by design")]
    narrow = [f"{_gpu_label(i, g)} x{h.pcie_width} of x{h.pcie_width_max}"
              + (f", gen {h.pcie_gen} of {h.pcie_gen_max}" if h.pcie_gen and h.pcie_gen_max else "")
              for i, g, h in loaded if h.pcie_width < h.pcie_width_max
              or (h.pcie_gen and h.pcie_gen_max and h.pcie_gen < h.pcie_gen_max)]
    return [failed("pcie link", f"under load, below its maximum: {'; '.join(narrow)}: reseat the GPU or check "
                                "the riser/slot") if narrow
            else passed("pcie link", f"{len(loaded)} GPU(s) under load at their maximum link width and gen")]


def _clocks(gpus) -> list[Check]:
    """Throttling: hardware or thermal slowdowns, not the GPU doing what it was told."""
    gpus = [(i, g, h) for i, g, h in gpus if h.clock_reasons is not None]
    if not gpus:
        return [not_in_capture("clocks", "no clocks event (throttle) reasons")]
    throttled = [f"{_gpu_label(i, g)}: {', '.join(BAD_CLOCK_REASONS[r] for r in h.clock_reasons if r in BAD_CLOCK_REASONS)}"
                 for i, g, h in gpus if set(h.clock_reasons) & set(BAD_CLOCK_REASONS)]
    benign = sorted({r for _, _, h in gpus for r in h.clock_reasons} - set(BAD_CLOCK_REASONS))
    return [failed("clocks", f"slowed down: {'; '.join(throttled)}: check cooling, power and the BMC's logs")
            if throttled else passed("clocks", "no hardware or thermal slowdown"
                                     + (f" (benign reasons active: {', '.join(benign)})" if benign else ""))]


def _gpu_fabric(profile: Profile, report, gpus) -> list[Check]:
    """The GPU fabric (NVSwitch systems, Blackwell)."""
    fabric = [(i, g, h) for i, g, h in gpus if h.fabric_state]
    if fabric:
        bad_fabric = [f"{_gpu_label(i, g)}: {h.fabric_state}" + (f" ({h.fabric_status})" if h.fabric_status else "")
                      for i, g, h in fabric if h.fabric_state != "Completed"
                      or (h.fabric_status and h.fabric_status != "Success")]
        return [failed("gpu fabric", f"not joined to the NVLink fabric: {'; '.join(bad_fabric)}: check "
                                     "nvidia-fabricmanager (or the NVLink switch tray)") if bad_fabric
                else passed("gpu fabric", f"fabric state Completed on all {len(fabric)} GPU(s)")]
    if profile.hardware.interconnect == "nvswitch" and report.source == "csv" and not any(
            h.fabric_state for _, _, h in gpus):
        return [not_in_capture("gpu fabric", "no fabric.state column (or N/A: before R550, or no NVSwitch)")]
    if profile.hardware.interconnect == "nvswitch":
        return [skipped("gpu fabric", "the driver reports no GPU fabric state (before R550, or no NVSwitch)")]
    return []


# --- Xid events -----------------------------------------------------------------------------

def judge_xid(profile: Profile, events: list[kernel_log.XidEvent], report: nvidia_smi.GpuReport | None) -> list[Check]:
    """Each Xid since boot, classified by NVIDIA's catalog (provisioner/data/xid.yml) into its action."""
    if not events:
        return [passed("xid events", "no Xid event in the kernel log since boot")]
    catalog = skus.xid_catalog()
    gpus = {}
    for index, gpu in enumerate(report.gpus if report else []):
        if gpu.bus_id:  # "00000000:2B:00.0" -> "0000:2b:00"
            gpus[gpu.bus_id.lower()[-12:-2]] = f"GPU {index}"
    found = []
    worst = "informational"
    order = ["informational", "inspect_application", "reset_gpu", "drain_and_reset", "reboot", "rma"]
    for event in events:
        entry = catalog["xids"].get(event.xid)
        if event.recovery_action:  # Xid 154: the driver says what it needs
            text = event.recovery_action.lower()
            action = "reboot" if "reboot" in text else "drain_and_reset" if "drain and reset" in text else (
                "reset_gpu" if "reset" in text else "informational" if "none" in text else
                "rma" if "drain" in text else "reset_gpu")
        elif entry:
            # "Not Solo": another Xid on the same GPU changes the bucket (Xid 48 with 63/64: drain and reset)
            beside = [bucket for xid, bucket in (entry.get("with") or {}).items()
                      if any(e.xid == int(xid) and e.pci == event.pci for e in events)]
            action = catalog["buckets"].get(beside[0] if beside else entry["immediate"], "rma")
            if entry.get("investigatory") == "CONTACT_SUPPORT" and action == "reset_gpu" and \
                    sum(e.xid == event.xid and e.pci == event.pci for e in events) > 1:
                action = "rma"  # repeated on the same GPU: what the investigatory bucket says
        else:
            action = catalog["unknown_action"]
        worst = max(worst, action, key=order.index)
        gpu = gpus.get(event.pci[-10:], f"GPU at PCI {event.pci}")
        name = entry["description"] if entry else "not in our catalog transcription"
        found.append(f"Xid {event.xid} ({name}) on {gpu}" + (f" at {event.when}" if event.when else "")
                     + f": {catalog['actions'][action]}"
                     + (f" ({entry['note']})" if entry and entry.get("note") else ""))
    detail = f"{len(events)} Xid event(s) since boot: " + "; ".join(found[:8]) + (
        f"; ... {len(found) - 8} more" if len(found) > 8 else "")
    return [(passed if worst == "informational" else failed)("xid events", detail[:1200])]


def judge_kernel_log(profile: Profile, log: dict[str, Any], report: nvidia_smi.GpuReport | None) -> list[Check]:
    if int(log.get("rc", -1)) != 0 or not int(log.get("lines") or 0):
        why = " ".join(str(log.get("stderr") or "no lines").split())[:200]
        return [skipped("xid events", f"the kernel log since boot could not be read ({why})")]
    return judge_xid(profile, kernel_log.read_xids(str(log.get("stdout", ""))), report)


def judge_module(profile: Profile, version: str) -> list[Check]:
    """The loaded kernel module (/sys/module/nvidia/version) against the pinned driver."""
    if not version:
        if not profile.expects_gpu:
            return [passed("driver module", "no NVIDIA kernel module loaded; none expected")]
        return [failed("driver module", "no NVIDIA kernel module is loaded (/sys/module/nvidia/version is absent): "
                                        "reboot into the kernel the module was built for, or run provision up")]
    return [(passed if version == profile.driver.version else failed)(
        "driver module", f"kernel module {version} loaded, profile pins {profile.driver.version}"
        + ("" if version == profile.driver.version else ": reboot to load the installed driver"))]


def judge_topology(profile: Profile, topo: nvidia_smi.Topology) -> list[Check]:
    if profile.hardware.interconnect not in ("nvlink", "nvswitch"):
        return [skipped("nvlink topology", f"interconnect is {profile.hardware.interconnect}: no NVLink expected")]
    if topo.gpus == 0:
        return [failed("nvlink topology", "no GPU row read from nvidia-smi topo -m")]
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


def judge_links(profile: Profile, topo: dict[str, Any], nvlink: dict[str, Any]) -> list[Check]:
    """`nvidia-smi topo -m` and `nvidia-smi nvlink -s` as the probe ran them."""
    if profile.hardware.interconnect not in ("nvlink", "nvswitch"):
        return [skipped("nvlink", f"interconnect is {profile.hardware.interconnect}: no NVLink expected")]
    checks = []
    if int(topo.get("rc", -1)) == 0 and str(topo.get("stdout", "")).strip():
        checks += judge_topology(profile, nvidia_smi.read_topo(str(topo["stdout"])))
    else:
        checks.append(failed("nvlink topology", f"nvidia-smi topo -m failed (rc {topo.get('rc')}): "
                                                f"{nvidia_smi.snippet(str(topo.get('stderr') or topo.get('stdout') or ''))}"))
    if int(nvlink.get("rc", -1)) == 0:
        checks += judge_nvlink(profile, nvidia_smi.read_nvlink_status(str(nvlink.get("stdout", ""))))
    else:
        checks.append(failed("nvlink links", f"nvidia-smi nvlink -s failed (rc {nvlink.get('rc')}): "
                                             f"{nvidia_smi.snippet(str(nvlink.get('stderr') or nvlink.get('stdout') or ''))}"))
    return checks


# --- NCCL, DCGM, torch, fabric manager ---------------------------------------------------------

def judge_nccl(profile: Profile, run: nccl_tests.NcclRun) -> list[Check]:
    checks = []
    # The floor: the profile's, the SKU's, else a cited published one (Azure's 431 GB/s on 8x H200...).
    cut = skus.floor(profile, profile.hardware.gpu.model or (run.devices[0] if run.devices else ""), run.gpus,
                     "allreduce_busbw_gbps")
    peak = run.peak_busbw
    if cut.value is None:
        checks.append(skipped("nccl bandwidth", f"{peak:g} GB/s bus bandwidth; the profile sets no floor and no "
                                                "cited floor applies"))
    else:
        short = "" if peak >= cut.value else f", short by {cut.value - peak:g} GB/s"
        checks.append((passed if peak >= cut.value else failed)(
            "nccl bandwidth", f"all_reduce {peak:g} GB/s bus bandwidth on {run.gpus} GPU(s), floor {cut.value:g}"
                              f"{short} ({cut.basis})"))
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


def probed_env(profile: Profile) -> PythonEnv | None:
    """The environment the torch probe runs in: the first with PyTorch (the python_env role
    records its Python for gpu_verify)."""
    return next((env for env in profile.python_envs if env.pytorch), None)


def judge_torch(profile: Profile, torch: dict[str, Any]) -> list[Check]:
    env = probed_env(profile)
    if "ran" in torch and not _truthy(torch.get("ran")):
        return [failed("torch", f"no Python environment {env.name if env else ''} on this host ({' '.join(str(torch.get('stderr', '')).split())[:200]}): "
                                "run provision up")]
    if int(torch.get("rc", -1)) != 0:
        return [failed("torch", f"import torch failed in the environment: {' '.join(str(torch.get('stderr', '')).split())[-300:]}")]
    lines = str(torch.get("stdout", "")).strip().splitlines()
    if not lines:
        return [failed("torch", "the torch probe printed nothing")]
    try:
        info = json.loads(lines[-1])
    except ValueError:
        raise nvidia_smi.Unreadable("torch probe reader", lines[-1], "not the JSON line the probe prints") from None
    wanted = env.pytorch.version if env is not None and env.pytorch else None
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
        model = profile.hardware.gpu.model or ""
        names = [str(d) for d in info.get("devices") or []]
        if model and names:
            odd = [n for n in names if model.upper() not in n.upper()]
            checks.append((failed if odd else passed)(
                "torch gpu model", f"{', '.join(sorted(set(odd)))} is not a {model}" if odd else f"{len(names)} x {names[0]}"))
    return checks + judge_torch_compute(profile, info)


# The tolerances (and why): judge/frameworks.py TOLERANCE, shared by every framework's probe.
TOLERANCE = frameworks.TOLERANCE
_within = frameworks.within


def _arch_check(profile: Profile, info: dict[str, Any]) -> Check:
    """The GPU's compute capability against the wheel's arch list (torch.cuda.get_arch_list():
    sm_XY cubins, compute_XY PTX), by the rule compat.runs_on applies to the matrix."""
    cc = str(info.get("capability") or "")
    arches = [str(a) for a in info.get("arch_list") or []]
    if not re.fullmatch(r"\d+\.\d+", cc) or not arches:
        return failed("torch arch", f"not reported (capability {cc or '?'}, arch list {arches or '?'})")
    def capabilities(kind: str) -> list[str]:  # sm_90a -> 9.0, compute_120 -> 12.0
        return [f"{m[1]}.{m[2]}" for a in arches if (m := re.fullmatch(kind + r"_(\d+)(\d)a?", a))]

    cubins, ptx = capabilities("sm"), capabilities("compute")
    ok = compat.runs_on(cc, cubins, max(ptx, key=compat.version) if ptx else None)
    return (passed if ok else failed)("torch arch", f"sm_{cc.replace('.', '')} {'in' if ok else 'not in'} the wheel's "
                                                    f"{' '.join(arches)}")


def judge_torch_compute(profile: Profile, info: dict[str, Any]) -> list[Check]:
    """The probe's computations (roles/gpu_verify/files/torch_probe.py): on the CPU always;
    on the GPU only where CUDA is available; without a GPU nothing GPU-related passes."""
    if "cpu_matmul" not in info:  # a probe from before issue 30 computed nothing: judged as it was
        return []
    checks = [_within("torch matmul cpu", info.get("cpu_matmul"), "float32", key="fp32"),
              _within("torch autocast cpu", info.get("cpu_autocast_bf16"), "bfloat16")]
    gpu_checks = ("torch arch", "torch matmul gpu", "torch autocast gpu", "torch gradscaler", "torch fp8")
    if not info.get("cuda_available"):
        if profile.expects_gpu:
            return checks + [failed(name, "not run: CUDA is not available to torch") for name in gpu_checks]
        return checks + [skipped(name, "no GPU here, none expected") for name in gpu_checks]
    checks.append(_arch_check(profile, info))
    checks.append(_within("torch matmul gpu", info.get("gpu_matmul"), "float32", key="fp32"))
    autocast = info.get("gpu_autocast")
    if not isinstance(autocast, dict) or autocast.get("error") or not autocast:
        checks.append(_within("torch autocast gpu", autocast, "float16"))
    else:
        checks += [_within(f"torch autocast gpu {dtype}", result, dtype) for dtype, result in sorted(autocast.items())]
    scaler = info.get("grad_scaler")
    if not isinstance(scaler, dict) or scaler.get("error"):
        checks.append(failed("torch gradscaler", f"did not run: {(scaler or {}).get('error', 'no result')}"[:200]))
    else:
        ok = scaler.get("finite") is True and scaler.get("weights_moved") is True
        checks.append((passed if ok else failed)(
            "torch gradscaler", f"one fp16 step: loss {scaler.get('loss')}, scale {scaler.get('scale')}, "
                                f"weights {'moved' if scaler.get('weights_moved') else 'did not move'}"))
    cc = str(info.get("capability") or "0.0")
    if re.fullmatch(r"\d+\.\d+", cc) and compat.version(cc) >= (8, 9):
        checks.append(_within("torch fp8", info.get("fp8"), "float8_e4m3fn"))
    else:
        checks.append(skipped("torch fp8", f"sm_{cc.replace('.', '')} has no float8 tensor cores (sm_89 and newer)"))
    return checks


def _waits_for_the_module(profile: Profile) -> str:
    """Why a service that needs the driver is not running while no NVIDIA module is loaded."""
    return ("no GPU here, so it never starts" if not profile.expects_gpu
            else "it starts at the boot that loads the driver (reboot needed: see driver module)")


def judge_fabric_manager(profile: Profile, fm: dict[str, Any]) -> list[Check]:
    if not profile.fabric_manager.enabled:
        return []
    state = fm.get("unit_state") or "absent"
    version = fm.get("installed_version") or ""
    if state not in ("active", "absent", "not-found") and fm.get("module_loaded") is False:
        # Not a fault of its own: the role enables it and starts it only once the module is loaded.
        checks = [skipped("fabric manager", f"nvidia-fabricmanager is {state} with no NVIDIA module loaded: "
                                            + _waits_for_the_module(profile))]
    else:
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


def judge_infiniband(profile: Profile, ib: dict[str, Any] | None, container: str) -> list[Check]:
    """The HCAs' ports (gpu_probe's infiniband: ibstat, else /sys/class/infiniband) against
    the profile's InfiniBand. No HCA is never a pass: in a container it is a skip that says
    what was not checked, on a machine a failure."""
    if ib is None:
        return [skipped("infiniband", "the probe did not read InfiniBand (gpu_verify_infiniband is off)")]
    if not ib.get("present"):
        if container:
            return [skipped("infiniband", f"no InfiniBand HCA in this {container} container (/sys/class/infiniband "
                                          "is absent): port state and rate not checked here")]
        return [failed("infiniband", "the profile declares InfiniBand, but this host has no HCA "
                                     "(/sys/class/infiniband is absent): check the adapter and its driver "
                                     "(lsmod | grep mlx5_ib)")]
    ibstat = ib.get("ibstat") or {}
    if int(ibstat.get("rc", -1)) == 0 and str(ibstat.get("stdout", "")).strip():
        return network.judge_infiniband(profile, ibstat)
    ports = [p for p in ibstat_mod.read_sysfs(ib.get("sysfs") or {}) if p.link_layer.lower() == "infiniband"]
    return network.judge_ports(profile, ports, "/sys/class/infiniband; ibstat "
                               + ("is not installed" if ibstat.get("missing") else "failed"))


def judge_gpudirect(profile: Profile, probe: dict[str, Any]) -> list[Check]:
    """The GPUDirect RDMA path compat.gpudirect chose: nvidia-peermem loaded next to the driver."""
    direct = compat.gpudirect(profile)
    if direct.mode != "nvidia-peermem":
        return [skipped("gpudirect rdma", f"{direct.mode}: {direct.why}" + (
            "; nothing to load, NCCL uses it when it runs" if direct.mode == "dma-buf" else ""))]
    if not str(probe.get("module_version") or "").strip():
        return [skipped("gpudirect rdma", "nvidia-peermem loads with the driver, and no NVIDIA module is loaded"
                        + (f" (a {probe['container']} container)" if probe.get("container") else ""))]
    if probe.get("peermem_loaded"):
        return [passed("gpudirect rdma", "nvidia-peermem is loaded")]
    return [failed("gpudirect rdma", "nvidia-peermem is not loaded: modprobe nvidia-peermem (it needs a kernel "
                                     "with the RDMA peer-memory interface: MLNX_OFED/DOCA-OFED)")]


def _unit_state(unit: dict[str, Any] | None) -> str:
    unit = unit or {}
    return unit.get("ActiveState") or "unknown" if unit.get("LoadState") == "loaded" else "not-found"


def judge_probe(profile: Profile, probe: dict[str, Any]) -> list[Check]:
    """Everything gpu_probe returned in its one call."""
    commands = probe.get("commands") or {}
    smi = commands.get("nvidia_smi_xml") or {"missing": True, "rc": 127}
    checks = _guard("nvidia-smi", judge_nvidia_smi, profile, smi)
    report = None
    if int(smi.get("rc", -1)) == 0:
        try:
            report = nvidia_smi.read(str(smi.get("stdout", "")))
        except nvidia_smi.Unreadable:
            report = None
    checks += _guard("driver module", judge_module, profile, str(probe.get("module_version") or "").strip())
    if profile.expects_gpu:
        checks += _guard("nvlink", judge_links, profile, commands.get("topo") or {}, commands.get("nvlink") or {})
    checks += _guard("xid events", judge_kernel_log, profile, commands.get("kernel_log") or {}, report)
    checks += _guard("cuda toolkit", judge_cuda_toolkit, profile, commands.get("nvcc") or {})
    checks += _guard("mig layout", mig_judge.judge, profile, probe.get("mig"))
    units = probe.get("units") or {}
    checks += _guard("fabric manager", judge_fabric_manager, profile, {
        "unit_state": _unit_state(units.get("fabric_manager")),
        "installed_version": probe.get("fabric_manager_version") or "",
        "module_loaded": bool(str(probe.get("module_version") or "").strip())})
    if profile.hardware.infiniband:
        checks += _guard("infiniband", judge_infiniband, profile, probe.get("infiniband"), str(probe.get("container") or ""))
        checks += _guard("gpudirect rdma", judge_gpudirect, profile, probe)
    torch = commands.get("torch")
    if probed_env(profile) is not None:
        checks += _guard("torch", judge_torch, profile, torch if torch else {"ran": False, "stderr": "not probed"})
    if profile.containers.runtime != "none":
        checks += _guard("container runtime", containers_judge.judge_host, profile.containers.runtime,
                         profile.containers.default_runtime, probe.get("containers"),
                         report.driver if report else None, len(report.gpus) if report and report.gpus else None)
    if frameworks.probed_envs(profile):
        checks += _guard("frameworks", frameworks.judge, profile, probe.get("framework_probes") or {})
    return checks


def judge(profile: Profile, reported: dict[str, Any]) -> list[Check]:
    """Every check for one host, from gpu_verify's `provisioner_verify` (the probe's one call
    plus the opt-in runs)."""
    if "probe" in reported:
        checks = judge_probe(profile, reported.get("probe") or {})
    else:  # the record older runs wrote (one task per tool), and hand-made inputs
        checks = _guard("nvidia-smi", judge_nvidia_smi, profile, reported.get("nvidia_smi") or {})
        if "cuda_toolkit" in reported:
            checks += _guard("cuda toolkit", judge_cuda_toolkit, profile, reported["cuda_toolkit"])
        if "fabric_manager" in reported:
            checks += _guard("fabric manager", judge_fabric_manager, profile, reported["fabric_manager"])
        torch = reported.get("torch")
        if torch and probed_env(profile) is not None:
            checks += _guard("torch", judge_torch, profile, torch)
    nccl = reported.get("nccl_tests") or {}
    if _truthy(nccl.get("ran")):
        checks += _guard("nccl bandwidth", lambda p, text: judge_nccl(p, nccl_tests.read(text)), profile,
                         str(nccl.get("stdout", "")))
    elif profile.verify.nccl_min_busbw_gbps and profile.expects_gpu:
        why = ("nccl-tests did not run on this host" if profile.nccl.tests
               else "nccl-tests are not built (set nccl.tests, tests_source and tests_sha256 in the profile)")
        checks.append(skipped("nccl bandwidth", why))
    exporter = reported.get("exporter") or {}
    if profile.dcgm.enabled and profile.dcgm.exporter.enabled:
        if exporter.get("body"):
            checks += _guard("exporter metrics", lambda p, body: judge_exporter(p, dcgm.read_metrics(body)), profile,
                             str(exporter["body"]))
        elif "probe" in reported and not str((reported.get("probe") or {}).get("module_version") or "").strip():
            # nv-hostengine, and so the exporter, start only once the driver's module is loaded.
            checks.append(skipped("exporter metrics", f"dcgm-exporter does not answer (unit "
                                  f"{exporter.get('unit_state', 'unknown')}) with no NVIDIA module loaded: "
                                  + _waits_for_the_module(profile)))
        else:
            checks.append(failed("exporter metrics", f"dcgm-exporter does not answer (unit {exporter.get('unit_state', 'unknown')})"))
    elif "exporter" in reported:
        checks.append(skipped("exporter metrics", "DCGM is not part of this profile"))
    diag = reported.get("dcgmi_diag") or {}
    if _truthy(diag.get("ran")):
        checks += _guard("dcgm diag", lambda text: judge_diag(dcgm.read_diag(text)), str(diag.get("stdout", "")))
    return checks
