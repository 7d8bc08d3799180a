"""Verification logic on real captured nvidia-smi output (../shared/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import profiles, verify
from provisioner.models import Profile
from provisioner.profiles import deep_merge

H100_IDLE = "nvidia-smi/csv/query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.csv"
H200_IDLE = "nvidia-smi/csv/query-gpu__h200__590.48.01__idle__nvidia-gpu-exporter.csv"
L40S_IDLE = "nvidia-smi/csv/query-gpu__l40s__595.80__idle__nvidia-gpu-exporter.csv"


def profile_for(base: str, **changes) -> Profile:
    data = deep_merge(profiles.as_dict(profiles.load(base).profile), changes)
    data["fabric_manager"]["version"] = None
    return Profile.model_validate(data)


def smi_ok(fixtures: Path, name: str) -> dict:
    return {"nvidia_smi": {"rc": 0, "stdout": (fixtures / name).read_text(), "stderr": "", "missing": False}}


def by_name(checks) -> dict:
    return {c.name: c for c in checks}


def test_parse_real_query_output(fixtures: Path):
    gpus = verify.parse_query((fixtures / H100_IDLE).read_text())
    assert len(gpus) == 1
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].memory_mib == 81559
    assert gpus[0].driver == "590.48.01"
    assert gpus[0].persistence in ("Enabled", "Disabled")


def test_h100_capture_passes_a_matching_profile(fixtures: Path):
    gpu = verify.parse_query((fixtures / H100_IDLE).read_text())[0]
    p = profile_for("h100-train", hardware={"gpu": {"count": 1}},
                    driver={"branch": 590, "version": "590.48.01"},
                    verify={"require_persistence_mode": gpu.persistence == "Enabled",
                            "require_ecc": gpu.ecc == "Enabled"})
    checks = by_name(verify.judge(p, smi_ok(fixtures, H100_IDLE)))
    assert {c.status for c in checks.values()} == {"pass"}, checks
    assert "80 GiB" in checks["gpu memory"].detail  # 81559 MiB counts as 80 GB


def test_wrong_count_model_and_driver_fail_with_reasons(fixtures: Path):
    p = profiles.load("h100-train").profile  # 8x H100 on 535.129.03
    checks = by_name(verify.judge(p, smi_ok(fixtures, H200_IDLE)))
    assert checks["gpu count"].status == "fail" and "1 GPU(s), profile expects 8" in checks["gpu count"].detail
    assert checks["gpu model"].status == "fail" and "NVIDIA H200" in checks["gpu model"].detail
    assert checks["driver version"].status == "fail"
    assert "loaded 590.48.01, profile pins 535.129.03" in checks["driver version"].detail


def test_l40s_capture_against_l40s_profile(fixtures: Path):
    p = profile_for("l40s-infer", hardware={"gpu": {"count": 1}}, driver={"branch": 595, "version": "595.80"},
                    verify={"require_ecc": None})
    checks = by_name(verify.judge(p, smi_ok(fixtures, L40S_IDLE)))
    assert checks["gpu count"].status == checks["gpu model"].status == checks["gpu memory"].status == "pass"
    assert checks["driver version"].status == "pass"


ERRORS = {
    "nvidia-smi__no-driver__compute-gpu-installation-issue-33.txt": "no GPU present, or the NVIDIA driver is not loaded",
    "nvidia-smi__version-mismatch__legacy-one-line__shine-cluster-issue-30.txt": "driver/library version mismatch",
    "nvidia-smi__version-mismatch__nvml-550.144__intel-llvm-issue-17614.txt": "driver/library version mismatch",
    "nvidia-smi__version-mismatch__nvml-570.124__tinygrad-open-gpu-kernel-modules-issue-47.txt": "version mismatch",
    "nvidia-smi__no-devices-found__open-gpu-kernel-modules-issue-862.txt": "no devices found",
    "nvidia-smi__device-handle-unknown-error__nvidia-docker-issue-1553.txt": "GPU lost",
    "nvidia-smi__nvml-unknown-error__in-container__nvidia-container-toolkit-issue-1227.txt": "GPU lost",
    "nvidia-smi__libnvidia-ml-not-found__nvidia-docker-issue-1163.txt": "NVML library not found",
}


def test_every_error_fixture_is_classified(fixtures: Path):
    files = sorted(p.name for p in (fixtures / "nvidia-smi" / "errors").glob("*.txt"))
    assert files == sorted(ERRORS)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_nvidia_smi_failures_are_classified_with_a_fix(fixtures: Path, name: str):
    text = (fixtures / "nvidia-smi" / "errors" / name).read_text()
    failure = verify.classify(text)
    assert failure is not None and ERRORS[name] in failure.cause
    checks = verify.judge(profiles.load("h100-train").profile,
                          {"nvidia_smi": {"rc": 9, "stdout": text, "stderr": "", "missing": False}})
    assert checks[0].status == "fail" and failure.fix in checks[0].detail
    assert checks[1].status == "skip"


def test_gpu_less_host_says_so_and_passes_only_when_no_gpu_is_expected(fixtures: Path):
    text = (fixtures / "nvidia-smi/errors/nvidia-smi__no-driver__compute-gpu-installation-issue-33.txt").read_text()
    reported = {"nvidia_smi": {"rc": 9, "stdout": text, "stderr": "", "missing": False}}
    lab = verify.judge(profiles.load("debian12-lab").profile, reported)
    assert [c.status for c in lab] == ["pass"] and "no GPU present" in lab[0].detail
    h100 = verify.judge(profiles.load("h100-train").profile, reported)
    assert h100[0].status == "fail" and "no GPU present" in h100[0].detail


def test_missing_nvidia_smi():
    reported = {"nvidia_smi": {"rc": 2, "stdout": "", "stderr": "", "missing": True}}
    assert verify.judge(profiles.load("h100-train").profile, reported)[0].status == "fail"
    assert verify.judge(profiles.load("debian12-lab").profile, reported)[0].status == "pass"
