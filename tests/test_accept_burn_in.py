"""`provision accept --level burn-in` (issue 31): the duration (profile field, --duration) and
the refusal without one, `dcgmi diag -r 3` at a bound that fits NVIDIA's stated run time, the
telemetry reader and the burn-in judges on REAL captures (nvidia-smi --query-gpu CSV from
utkuozdemir/nvidia_gpu_exporter's test data, kernel-log Xid lines from public reports, all in
tests/data/fixtures and tests/data/captures with their provenance), the job bound with its
sampler ticking (a real process killed midway), and what the report carries."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.engine import accept
from provisioner.errors import ProvisionError
from provisioner.judge import burn_in
from provisioner.judge.verify import judge_diag
from provisioner.parsers import dcgm, gpu_samples
from provisioner.reports.report import Report

from .conftest import DATA, FIXTURES, load_module

CSV = FIXTURES / "nvidia-smi" / "csv"
H100_IDLE = (CSV / "query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.csv").read_text()
H100_LOAD = (CSV / "query-gpu__h100-80gb-hbm3__590.48.01__load__nvidia-gpu-exporter.csv").read_text()
RTX_LOAD = (CSV / "query-gpu__rtx-4080-super__595.71.05__load__nvidia-gpu-exporter.csv").read_text()
XID_79 = (DATA / "captures" / "kernel-log__xid-79__rtx-5080__open-gpu-kernel-modules-issue-1151.txt").read_text()
XID_48_63 = (DATA / "captures" / "kernel-log__xid-48-63-154__rtx-pro-6000__sirzzang-blog.txt").read_text()


def _job(before: str, load: list[str], after: str, new_xids: str = "", read: bool = True, **extra) -> dict:
    """accept_run's burn_in record around captured samples (the record's shape is the module's)."""
    samples = ([{"phase": "before", "csv": before}] + [{"phase": "load", "csv": c} for c in load]
               + [{"phase": "after", "csv": after}])
    data = {"burn_in": {"device": "gpu", "seconds": 60.0, "tflops": {"GPU 0": 610.5}}}
    return {"rc": 0, "timed_out": False, "job_timeout": 660, "stderr": "", "data": data, "samples": samples,
            "sampler": None, "kernel_log": {"read": read, "why": "" if read else "dmesg exited 1", "new": new_xids},
            **extra}


def test_burn_in_needs_a_duration_from_the_profile_or_the_command_line(tmp_path: Path):
    lab = profiles.load("debian12-lab").profile
    assert lab.accept.burn_in.duration_s is None
    accept.Request(level="burn-in").check()  # without the profile: the CLI's first check passes
    with pytest.raises(ProvisionError, match="set accept.burn_in.duration_s in the profile") as refused:
        accept.Request(level="burn-in").check(lab)
    assert refused.value.where == "accept.burn_in.duration_s"
    assert accept.Request(level="burn-in", duration_s=20).burn_in_s(lab) == 20
    own = tmp_path / "lab-burn.yml"
    own.write_text("extends: debian12-lab\nname: lab-burn\ndescription: burn-in set\naccept:\n  burn_in:\n"
                   "    duration_s: 3600\n")
    burnt = profiles.load(str(own)).profile
    accept.Request(level="burn-in").check(burnt)
    assert accept.Request(level="burn-in").burn_in_s(burnt) == 3600
    assert accept.Request(level="burn-in", duration_s=30).burn_in_s(burnt) == 30  # --duration wins
    assert accept.Request(level="standard").burn_in_s(burnt) is None
    with pytest.raises(ProvisionError, match="--duration is the burn-in level's"):
        accept.Request(level="standard", duration_s=30).check()
    with pytest.raises(ProvisionError, match="out of range"):
        accept.Request(level="burn-in", duration_s=5).check()


def test_burn_in_runs_dcgmi_diag_r3_with_a_bound_over_nvidias_stated_15_minutes():
    h100 = profiles.load("h100-train").profile
    assert accept.verify_extravars(h100, "burn-in") == {"gpu_verify_dcgm_diag_level": 3, "gpu_verify_timeout": 1800}
    assert accept.verify_extravars(profiles.load("debian12-lab").profile, "burn-in") == {
        "gpu_verify_dcgm_diag_level": 0}
    # The real level-3 capture (8x H200, GoogleCloudPlatform/ramble) is judged by verify's dcgm judge.
    r3 = (FIXTURES / "dcgm" / "dcgmi-diag-r3__8x-h200__570.133.20__ramble.txt").read_text()
    [check] = judge_diag(dcgm.read_diag(r3))
    assert check.status == "pass" and "skipped: EUD Test" in check.detail


def test_samples_read_from_real_captures_with_units_and_both_reason_names():
    [idle] = gpu_samples.read_samples(H100_IDLE)
    [load] = gpu_samples.read_samples(H100_LOAD)
    assert (idle.sm_mhz, idle.max_sm_mhz, gpu_samples.reason_names(idle.reasons)) == (345, 1980, ["gpu_idle"])
    assert (load.sm_fraction, load.temperature_c, load.power_w, load.reasons, load.ecc_uncorrected) == (
        1.0, 59, 631.95, 0, 0)
    [rtx] = gpu_samples.read_samples(RTX_LOAD)
    assert rtx.ecc_uncorrected is None and round(rtx.sm_fraction, 3) == 0.886  # a GeForce: no ECC
    # Hand-made: the older driver's name for the bitmask, nounits, two GPUs, a header per sample.
    old = ("index, clocks.sm, clocks.max.sm, temperature.gpu, power.draw, clocks_throttle_reasons.active, "
           "ecc.errors.uncorrected.volatile.total\n0, 1410, 1410, 61, 390.1, 0x0000000000000000, 0\n"
           "1, 1005, 1410, 87, 401.0, 0x0000000000000060, 0\n")
    two = gpu_samples.read_samples(old + old)
    assert [s.gpu for s in two] == ["0", "1", "0", "1"]
    assert gpu_samples.reason_names(two[1].reasons) == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    with pytest.raises(gpu_samples.Unreadable, match="before its header"):
        gpu_samples.read_samples("0, 1410, 1410\n")
    with pytest.raises(gpu_samples.Unreadable, match="values for"):
        gpu_samples.read_samples(old + "0, 1410\n")


def test_a_clean_burn_in_on_real_h100_captures_passes_and_warns_only_uncalibrated():
    checks, summary = burn_in.judge_burn_in(_job(H100_IDLE, [H100_LOAD, H100_LOAD], H100_IDLE))
    by = {c.name: c for c in checks}
    assert by["accept burn-in"].status == "pass" and "GPU 0 610.5" in by["accept burn-in"].detail
    assert by["accept burn-in xid"].status == "pass"
    assert by["accept burn-in ecc"].status == "pass"
    assert by["accept burn-in throttle"].status == "pass"
    assert by["accept burn-in sm clock"].status == "skip" and "100% of its maximum" in by["accept burn-in sm clock"].detail
    assert "uncalibrated" in by["accept burn-in sm clock"].detail
    assert summary["samples"] == 2 and summary["temperature_c"] == {"min": 59, "max": 59}
    assert summary["sm_clock_fraction_min"] == 1.0 and summary["throttle_reasons"] == {}
    assert summary["xids"] == [] and summary["ecc_uncorrected_delta"] == {"0": 0}


@pytest.mark.parametrize("log, xids", [(XID_79, [79]), (XID_48_63, [48, 63, 154, 171])])
def test_a_new_xid_during_the_load_fails_naming_it(log, xids):
    checks, summary = burn_in.judge_burn_in(_job(H100_IDLE, [H100_LOAD], H100_LOAD, new_xids=log))
    [xid] = [c for c in checks if c.name == "accept burn-in xid"]
    assert xid.status == "fail"
    assert sorted({x["xid"] for x in summary["xids"]}) == xids
    if 79 in xids:
        assert "Xid 79 on 0000:2b:00 (" in xid.detail and "fallen off the bus" in xid.detail
    # Hand-made: nvidia-smi answered before the load, then failed during it (the module keeps the error).
    lost = _job(H100_IDLE, [H100_LOAD], H100_LOAD)
    lost["samples"].insert(2, {"phase": "load", "t": 10.0, "csv": "", "error": "exit 15: GPU is lost"})
    failing = [c for c in burn_in.judge_burn_in(lost)[0] if c.status == "fail"]
    assert [c.name for c in failing] == ["accept burn-in telemetry"]
    assert "failed in 1 of 4 sample(s), first at 10.0 s (load): exit 15: GPU is lost" in failing[0].detail
    unread = burn_in.judge_burn_in(_job(H100_IDLE, [H100_LOAD], H100_LOAD, read=False))[0]
    assert [c.detail for c in unread if c.name == "accept burn-in xid"] == ["not read: dmesg exited 1"]


def test_uncorrected_ecc_growth_fails_and_thermal_throttling_warns_uncalibrated():
    """Hand-made from the real H100 load row: the same row with its ECC count at 2 and
    HW slowdown + HW thermal slowdown active (0x48)."""
    header, row = H100_LOAD.strip().splitlines()
    cells = [c.strip() for c in row.split(",")]
    names = [c.strip() for c in header.split(",")]
    cells[names.index("ecc.errors.uncorrected.volatile.total")] = "2"
    cells[names.index("clocks_event_reasons.active")] = "0x0000000000000048"
    cells[names.index("clocks.current.sm [MHz]")] = "990 MHz"
    hot = header + "\n" + ", ".join(cells) + "\n"
    checks, summary = burn_in.judge_burn_in(_job(H100_IDLE, [H100_LOAD, hot], hot))
    by = {c.name: c for c in checks}
    assert by["accept burn-in ecc"].status == "fail" and "GPU 0 +2" in by["accept burn-in ecc"].detail
    assert by["accept burn-in throttle"].status == "skip"
    assert "hw_thermal_slowdown in 1/2" in by["accept burn-in throttle"].detail
    assert "uncalibrated" in by["accept burn-in throttle"].detail
    assert summary["sm_clock_fraction_min"] == 0.5
    assert summary["throttle_reasons"] == {"hw_slowdown": 1, "hw_thermal_slowdown": 1}
    # A GeForce reports no volatile ECC count: said, not judged.
    geforce = {c.name: c for c in burn_in.judge_burn_in(_job(RTX_LOAD, [RTX_LOAD], RTX_LOAD))[0]}
    assert geforce["accept burn-in ecc"].status == "skip"


def test_a_cpu_burn_in_is_labelled_not_judged_and_a_killed_one_fails_naming_its_bound():
    """Hand-made: the record accept_run returns on a host without a GPU (the lab)."""
    cpu = {"rc": 0, "timed_out": False, "job_timeout": 50, "stderr": "", "samples": [],
           "sampler": "not run: no GPU", "kernel_log": {"read": False, "why": "dmesg exited 1", "new": ""},
           "data": {"burn_in": {"device": "cpu", "seconds": 20.0, "tflops": {"cpu": 0.04}}}}
    checks, summary = burn_in.judge_burn_in(cpu)
    assert [(c.name, c.status) for c in checks] == [("accept burn-in", "skip"), ("accept burn-in telemetry", "skip")]
    assert "sustained CPU GEMM for 20 s" in checks[0].detail and "not judged against a GPU" in checks[0].detail
    assert checks[1].detail == "not run: no GPU" and summary["telemetry"] == "not run: no GPU"
    killed = burn_in.judge_burn_in(dict(cpu, rc=124, timed_out=True))[0]
    assert killed[0].status == "fail" and "killed after its bound of 50 s" in killed[0].detail
    assert burn_in.judge_burn_in(None)[0][0].status == "fail"
    empty = burn_in.judge_burn_in(dict(cpu, data=None))[0]
    assert empty[0].status == "fail" and empty[0].detail == "the sustained load wrote no figure"
    # The report carries the summary and prints one line per host.
    report = Report("accept", "p", "0" * 64, "hosts.ini", Path("run"), started="", accept={
        "level": "burn-in", "burn_in": {"n1": summary, "n2": burn_in.judge_burn_in(
            _job(H100_IDLE, [H100_LOAD], H100_LOAD))[1], "n3": {"seconds": "x", "telemetry": "sampled"}}})
    lines = report.accept_lines()
    assert lines[0] == "burn-in n1: 20 s of load on the cpu; telemetry not run: no GPU"
    assert lines[1].startswith("burn-in n2: 60 s of load on the gpu; 1 sample(s), temperature 59-59 C, lowest SM "
                               "clock 100% of max, reasons none, new Xids 0, uncorrected ECC +0")
    assert lines[2] == "burn-in n3: the summary is malformed"
    assert report.as_dict()["accept"]["burn_in"]["n2"]["ecc_uncorrected_delta"] == {"0": 0}


def test_the_burn_in_job_is_sampled_while_it_runs_and_killed_at_its_bound(tmp_path: Path):
    """A real process that outlives its bound: the sampler ticks while it runs, then the whole
    process group is killed at the bound; without a GPU nothing is sampled and it says why."""
    mod = load_module("accept_run")
    ticks = []
    started = time.monotonic()
    job = mod.bounded([sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(600)"], 2.5,
                      tick=lambda: ticks.append(time.monotonic()), every=0.5)
    assert job["timed_out"] and job["rc"] == 124 and "loading" in job["stdout"]
    assert 3 <= len(ticks) <= 6 and time.monotonic() - started < 20
    done = mod.bounded([sys.executable, "-c", "print('done')"], 30, tick=lambda: ticks.append(0), every=5)
    assert done["rc"] == 0 and not done["timed_out"] and done["stdout"].strip() == "done"
    sampler = mod.Sampler(0)
    sampler.sample("load")
    assert sampler.why == "not run: no GPU" and sampler.samples == []


def test_a_measure_job_killed_at_its_bound_keeps_its_figures_and_leaves_no_folder(tmp_path: Path):
    """accept_run.measure_job and burn_in around a real process: a stand-in for accept_measure.py
    (hand-made: it writes a figure, then outlives its bound) run in a folder of its own."""
    mod = load_module("accept_run")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "accept_measure.py").write_text(
        "import json, sys, time\n"
        "json.dump({'argv': sys.argv[2:], 'tflops': [1.5]}, open(sys.argv[1], 'w'))\n"
        "time.sleep(600)\n")
    before = set(Path(tempfile.gettempdir()).glob("provisioner-accept-out.*"))
    job = mod.measure_job(sys.executable, str(scripts), ["--only", "gemm"], 2, {})
    assert job["timed_out"] and job["rc"] == 124
    assert job["data"] == {"argv": ["--only", "gemm"], "tflops": [1.5]} and "stdout" not in job
    ran = mod.burn_in(sys.executable, str(scripts), 1, 1, 1, 0, {})
    assert ran["timed_out"] and ran["data"]["argv"] == ["--burn-in", "1"] and ran["burn_in_s"] == 1
    assert ran["sampler"] == "not run: no GPU" and ran["samples"] == []
    assert set(Path(tempfile.gettempdir()).glob("provisioner-accept-out.*")) == before
