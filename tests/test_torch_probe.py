"""The torch probe (roles/gpu_verify/files/torch_probe.py) and its judge (judge/verify.py
judge_torch): contract tests on the probe's JSON.

Real: tests/data/torch_probe/*.json were printed by the probe itself, run with CPU torch
(SOURCES.md there says how); the capture records the probe's sha256, so a changed probe
must be captured again. GPU-shaped outputs below are HAND-MADE (no GPU machine ran this
probe yet): they follow the real capture's keys, with figures a GPU would report.
"""

from __future__ import annotations

import copy
import hashlib
import json

from provisioner import profiles
from provisioner.judge.verify import judge_torch

from .conftest import DATA, ROLES

PROBE = ROLES / "gpu_verify" / "files" / "torch_probe.py"
CAPTURES = DATA / "torch_probe"


def _capture(name: str) -> dict:
    return json.loads((CAPTURES / name).read_text())


def _judged(profile: str, info: dict) -> dict[str, tuple[str, str]]:
    checks = judge_torch(profiles.load(profile).profile, {"ran": True, "rc": 0, "stdout": json.dumps(info) + "\n"})
    return {c.name: (c.status, c.detail) for c in checks}


def test_the_capture_is_the_current_probes_output():
    real = _capture("cpu__torch-2.13.0+cpu.json")
    assert real["probe_sha256"] == hashlib.sha256(PROBE.read_bytes()).hexdigest(), \
        "torch_probe.py changed: capture its output again (tests/data/torch_probe/SOURCES.md)"


def test_real_cpu_output_passes_the_cpu_checks_and_no_gpu_check():
    info = _capture("cpu__torch-2.13.0+cpu.json")["output"]
    judged = _judged("debian12-lab", info)
    assert judged["torch version"][0] == "pass"
    assert judged["torch matmul cpu"][0] == "pass" and "float32" in judged["torch matmul cpu"][1]
    assert judged["torch autocast cpu"][0] == "pass" and "bfloat16" in judged["torch autocast cpu"][1]
    for name in ("torch arch", "torch matmul gpu", "torch autocast gpu", "torch gradscaler", "torch fp8"):
        assert judged[name][0] == "skip", name


def test_real_cpu_output_on_a_gpu_profile_passes_nothing_gpu_related():
    info = _capture("cpu__torch-2.13.0+cpu.json")["output"]
    judged = _judged("h100-train", info)
    assert judged["torch gpus"][0] == "fail"
    for name in ("torch arch", "torch matmul gpu", "torch autocast gpu", "torch gradscaler", "torch fp8"):
        assert judged[name][0] == "fail", name


# HAND-MADE: what an 8 x H100 node with torch 2.11.0+cu126 would print (arch list from
# compat.yml torch_arches 2.11 cu126; errors near the figures the tolerances explain).
H100 = {
    "python": "3.12.3", "version": "2.11.0+cu126", "cuda": "12.6", "cuda_available": True, "device_count": 8,
    "devices": ["NVIDIA H100 80GB HBM3"] * 8, "cudnn": 91002, "nccl": "2.27.5",
    "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], "capability": "9.0",
    "cpu_matmul": {"fp32": 9e-7}, "cpu_autocast_bf16": {"dtype": "bfloat16", "rel_err": 2.9e-3},
    "gpu_matmul": {"fp32": 1.1e-6},
    "gpu_autocast": {"float16": {"dtype": "float16", "rel_err": 4e-4}, "bfloat16": {"dtype": "bfloat16", "rel_err": 3e-3}},
    "grad_scaler": {"loss": 0.34, "finite": True, "scale": 65536.0, "weights_moved": True},
    "fp8": {"dtype": "float8_e4m3fn", "rel_err": 4.1e-2},
}


def test_hand_made_h100_output_passes_every_gpu_check():
    judged = _judged("h100-train", H100)
    for name in ("torch gpus", "torch gpu model", "torch arch", "torch matmul gpu", "torch autocast gpu float16",
                 "torch autocast gpu bfloat16", "torch gradscaler", "torch fp8"):
        assert judged[name][0] == "pass", (name, judged[name])


def test_hand_made_faults_each_fail_their_own_check():
    def with_(**changes) -> dict:
        info = copy.deepcopy(H100)
        info.update(changes)
        return _judged("h100-train", info)

    # TF32 in a float32 matmul (2^-11 rounding) is not float32.
    assert with_(gpu_matmul={"fp32": 8e-4})["torch matmul gpu"][0] == "fail"
    # A wheel without the GPU's architecture (cu126 stops at sm_90; an sm_120 GPU has no kernel).
    assert with_(capability="12.0")["torch arch"][0] == "fail"
    # PTX for an older architecture JIT-compiles upwards.
    assert with_(capability="12.0", arch_list=H100["arch_list"] + ["compute_90"])["torch arch"][0] == "pass"
    assert with_(grad_scaler={"loss": float("nan"), "finite": False, "scale": 32768.0,
                              "weights_moved": False})["torch gradscaler"][0] == "fail"
    assert with_(fp8={"error": "RuntimeError: _scaled_mm not supported"})["torch fp8"][0] == "fail"
    assert with_(gpu_autocast={"float16": {"dtype": "float32", "rel_err": 1e-6}})["torch autocast gpu float16"][0] == "fail"
    assert with_(devices=["NVIDIA A100-SXM4-80GB"] * 8)["torch gpu model"][0] == "fail"
    # fp8 is judged only from sm_89: an A100-class capability skips it.
    assert with_(capability="8.0")["torch fp8"][0] == "skip"


def test_an_older_probe_without_computations_is_judged_as_before():
    info = {k: H100[k] for k in ("python", "version", "cuda", "cuda_available", "device_count", "devices")}
    judged = _judged("h100-train", info)
    assert judged["torch version"][0] == "pass" and judged["torch gpus"][0] == "pass"
    assert "torch matmul cpu" not in judged
