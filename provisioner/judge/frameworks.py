"""TensorFlow and JAX, judged inside each environment: what roles/gpu_verify/files/
tensorflow_probe.py and jax_probe.py printed there (run by gpu_probe with the environment's
Python, as its owner) against the profile. The import, the version, the GPUs the framework
sees (count and model), and products on the CPU and GPU held to stated tolerances. Without a
GPU the CPU checks still run and every GPU check says "no GPU here": a skip when the profile
expects none, a failure when it expects one; never a pass.

The tolerances are the torch probe's (TOLERANCE): the same 256 x 256 product of standard
normals against float64, in the same dtypes.
"""

from __future__ import annotations

import json
from typing import Any

from provisioner.parsers import nvidia_smi
from provisioner.profiles.models import Profile, PythonEnv
from provisioner.verdicts.checks import Check, failed, passed, skipped

# Relative error (Frobenius norm) of a 256 x 256 product of standard normals against float64.
# float32 accumulates with a unit roundoff of 2^-24 (errors near 1e-6 at this size; 1e-4 leaves
# room for other summation orders, and TF32, whose 2^-11 would show near 1e-3, fails it). In
# float16 (2^-11) or bfloat16 (2^-8) operands the error is about 4e-4 and 3e-3 (the real CPU
# captures: 2.9e-3 for JAX, 4.1e-3 for TensorFlow's mixed_bfloat16): 1e-2 holds both. float8
# e4m3 keeps 3 mantissa bits (2^-4): its scaled product lands near 4e-2, so 1e-1 (an operand
# quantised wrongly is off by order one).
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2, "float8_e4m3fn": 1e-1}

LABEL = {"tensorflow": "tensorflow", "jax": "jax"}
# The probe's keys per framework: the CPU product in reduced precision, the GPU ones.
CPU_REDUCED = {"tensorflow": "cpu_mixed_bf16", "jax": "cpu_bf16"}
GPU_REDUCED = {"tensorflow": "gpu_mixed", "jax": "gpu_reduced"}
HOW = {"tensorflow": "under Keras' mixed precision policy", "jax": "with explicit dtypes"}


def within(name: str, result: Any, dtype: str, key: str = "rel_err") -> Check:
    """One measured product against its dtype's tolerance; a missing or failed one fails."""
    if not isinstance(result, dict) or result.get("error") or not isinstance(result.get(key), (int, float)):
        why = result.get("error") if isinstance(result, dict) and result.get("error") else "no result"
        return failed(name, f"did not run: {str(why)[:200]}")
    err, tol = float(result[key]), TOLERANCE[dtype]
    if result.get("dtype", dtype) != dtype:
        return failed(name, f"computed in {result.get('dtype')}, not {dtype}")
    return (passed if err <= tol else failed)(name, f"{dtype} relative error {err:.1e} (tolerance {tol:.0e})")


def probed_envs(profile: Profile) -> list[PythonEnv]:
    """The environments a framework probe runs in: every TensorFlow and JAX one."""
    return [env for env in profile.python_envs if env.framework and env.framework.name in LABEL]


def _read(run: dict[str, Any], name: str) -> dict[str, Any] | Check:
    """The probe's JSON line, or the failed check that says why there is none."""
    if str(run.get("ran")) not in ("True", "true", "1"):
        why = " ".join(str(run.get("stderr") or "not probed").split())[:200]
        return failed(name, f"the environment was not probed ({why}): run provision up")
    lines = str(run.get("stdout", "")).strip().splitlines()
    info: dict[str, Any] = {}
    if lines:
        try:
            info = json.loads(lines[-1])
        except ValueError:
            raise nvidia_smi.Unreadable(f"{name} probe reader", lines[-1], "not the JSON line the probe prints") from None
    if int(run.get("rc", -1)) != 0 or info.get("error") or not info:
        why = info.get("error") or " ".join(str(run.get("stderr", "")).split())[-300:] or "it printed nothing"
        return failed(name, f"the probe failed in the environment (as {run.get('owner') or '?'}): {why}")
    return info


def judge_env(profile: Profile, env: PythonEnv, run: dict[str, Any]) -> list[Check]:
    """One TensorFlow or JAX environment's probe run (gpu_probe's framework_probes[name])."""
    fw = env.framework
    assert fw is not None and fw.name in LABEL
    label = LABEL[fw.name]

    def name(what: str) -> str:
        return f"{label} {what} ({env.name})"

    info = _read(run, name("import"))
    if isinstance(info, Check):
        return [info]
    have = str(info.get("version", ""))
    built = ", ".join(f"{k} {info[k]}" for k in ("cuda", "cudnn") if info.get(k)) or "no CUDA build"
    checks = [passed(name("import"), f"{label} {have} imports as {run.get('owner') or '?'} ({built})"),
              (passed if have == fw.version else failed)(name("version"), f"{have} (profile pins {fw.version})"),
              within(name("matmul cpu"), info.get("cpu_matmul"), "float32", key="fp32"),
              within(name("bfloat16 cpu"), info.get(CPU_REDUCED[fw.name]), "bfloat16")]
    count = int(info.get("device_count") or 0)
    gpu_checks = (name("gpus"), name("matmul gpu"), name("reduced precision gpu"))
    if count == 0:
        if profile.expects_gpu:
            return checks + [failed(n, f"no GPU here: {label} sees none, the profile expects "
                                       f"{profile.hardware.gpu.count}") for n in gpu_checks]
        return checks + [skipped(n, "no GPU here, none expected") for n in gpu_checks]
    checks.append((passed if count == profile.hardware.gpu.count else failed)(
        name("gpus"), f"{label} sees {count} GPU(s), profile expects {profile.hardware.gpu.count}"))
    model = profile.hardware.gpu.model or ""
    names = [str(d) for d in info.get("devices") or []]
    if model and names:
        odd = [n for n in names if model.upper() not in n.upper()]
        checks.append((failed if odd else passed)(
            name("gpu model"), f"{', '.join(sorted(set(odd)))} is not a {model}" if odd else f"{len(names)} x {names[0]}"))
    checks.append(within(name("matmul gpu"), info.get("gpu_matmul"), "float32", key="fp32"))
    reduced = info.get(GPU_REDUCED[fw.name])
    if not isinstance(reduced, dict) or not reduced or reduced.get("error"):
        checks.append(within(name("reduced precision gpu"), reduced, "float16"))
    else:
        checks += [within(name(f"{dtype} gpu"), result, dtype) for dtype, result in sorted(reduced.items())]
    return checks


def judge(profile: Profile, runs: dict[str, Any]) -> list[Check]:
    """Every TensorFlow and JAX environment of the profile, from gpu_probe's framework_probes
    ({env name: its run}); an environment the host did not probe fails its import check."""
    checks: list[Check] = []
    for env in probed_envs(profile):
        run = runs.get(env.name) if isinstance(runs, dict) else None
        checks += judge_env(profile, env, run if isinstance(run, dict) else {"ran": False})
    return checks
