"""The TensorFlow and JAX probes (roles/gpu_verify/files/{tensorflow,jax}_probe.py) and their
judge (judge/frameworks.py), reached through judge/verify.py judge(): contract tests on the
probes' JSON.

Real: tests/data/framework_probes/*.json were printed by the probes themselves, run with
tensorflow-cpu 2.21.0 and jax 0.10.2 on this (GPU-less) development machine, and one import
failure (SOURCES.md there says how); each records its probe's sha256, so a changed probe must
be captured again. GPU-shaped outputs below are HAND-MADE (no GPU machine has run these
probes yet): they follow the real captures' keys, with figures a GPU would report.
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from provisioner import profiles
from provisioner.judge import verify
from provisioner.render import role_vars

from .conftest import DATA, REPO, ROLES
from .test_compat import build

PROBES = ROLES / "gpu_verify" / "files"
CAPTURES = DATA / "framework_probes"
LAB = str(REPO / "tests" / "data" / "profiles" / "lab-envs.yml")


def _capture(name: str) -> dict:
    return json.loads((CAPTURES / name).read_text())


def _run(capture: dict, owner: str = "provision") -> dict:
    """A gpu_probe framework run (module: framework_probes[name]) around a probe's output."""
    return {"ran": True, "rc": capture["rc"], "stdout": json.dumps(capture["output"]) + "\n", "stderr": "",
            "owner": owner}


def _judged(profile, runs: dict) -> dict[str, tuple[str, str]]:
    probe = {"commands": {}, "framework_probes": runs}
    checks = verify.judge_probe(profile, probe)
    return {c.name: (c.status, c.detail) for c in checks if "(tf)" in c.name or "(jax)" in c.name}


@pytest.mark.parametrize("capture, probe", [("cpu__tensorflow-cpu-2.21.0.json", "tensorflow_probe.py"),
                                            ("cpu__jax-0.10.2.json", "jax_probe.py"),
                                            ("no-jax.json", "jax_probe.py")])
def test_each_capture_is_the_current_probes_output(capture, probe):
    assert _capture(capture)["probe_sha256"] == hashlib.sha256((PROBES / probe).read_bytes()).hexdigest(), \
        f"{probe} changed: capture its output again (tests/data/framework_probes/SOURCES.md)"


def _real_runs() -> dict:
    return {"tf": _run(_capture("cpu__tensorflow-cpu-2.21.0.json")), "jax": _run(_capture("cpu__jax-0.10.2.json"))}


def test_real_cpu_outputs_pass_import_version_and_cpu_checks_and_say_no_gpu_here():
    judged = _judged(profiles.load(LAB).profile, _real_runs())
    for env, fw in (("tf", "tensorflow"), ("jax", "jax")):
        assert judged[f"{fw} import ({env})"][0] == "pass"
        assert "as provision" in judged[f"{fw} import ({env})"][1] and "no CUDA build" in judged[f"{fw} import ({env})"][1]
        assert judged[f"{fw} version ({env})"][0] == "pass"
        assert judged[f"{fw} matmul cpu ({env})"][0] == "pass" and "float32" in judged[f"{fw} matmul cpu ({env})"][1]
        assert judged[f"{fw} bfloat16 cpu ({env})"][0] == "pass"
        for what in ("gpus", "matmul gpu", "reduced precision gpu"):
            assert judged[f"{fw} {what} ({env})"] == ("skip", "no GPU here, none expected")


def test_real_cpu_output_on_a_gpu_profile_passes_nothing_gpu_related():
    p = build("h100-train", {"python_env": {"torch": None, "python": "3.12",
                                            "framework": {"name": "jax", "version": "0.10.2", "variant": "cuda12"}}})
    checks = verify.judge_probe(p, {"commands": {}, "framework_probes": {p.python_envs[0].name:
                                                                         _run(_capture("cpu__jax-0.10.2.json"))}})
    gpu = [c for c in checks if c.name.startswith("jax ") and "gpu" in c.name]
    assert gpu and all(c.status == "fail" and "no GPU here" in c.detail for c in gpu)


def test_a_version_other_than_the_pinned_one_fails():
    runs = _real_runs()
    out = copy.deepcopy(_capture("cpu__jax-0.10.2.json"))
    out["output"]["version"] = "0.10.1"
    runs["jax"] = _run(out)
    assert _judged(profiles.load(LAB).profile, runs)["jax version (jax)"] == ("fail", "0.10.1 (profile pins 0.10.2)")


def test_the_real_import_failure_fails_the_import_check_alone():
    runs = _real_runs()
    runs["jax"] = _run(_capture("no-jax.json"))
    judged = _judged(profiles.load(LAB).profile, runs)
    assert judged["jax import (jax)"][0] == "fail" and "No module named 'jax'" in judged["jax import (jax)"][1]
    assert not [n for n in judged if n.endswith("(jax)") and n != "jax import (jax)"]
    assert judged["tensorflow import (tf)"][0] == "pass"   # the other environment is judged on its own


def test_an_environment_the_host_did_not_probe_fails():
    runs = _real_runs()
    del runs["tf"]
    assert _judged(profiles.load(LAB).profile, runs)["tensorflow import (tf)"][0] == "fail"


def test_an_error_beyond_the_tolerance_fails_and_a_garbled_line_fails_naming_the_reader():
    runs = _real_runs()
    out = copy.deepcopy(_capture("cpu__tensorflow-cpu-2.21.0.json"))
    out["output"]["cpu_matmul"]["fp32"] = 1.2e-3          # what TF32 would give: not float32
    runs["tf"] = _run(out)
    judged = _judged(profiles.load(LAB).profile, runs)
    assert judged["tensorflow matmul cpu (tf)"][0] == "fail" and "1.2e-03" in judged["tensorflow matmul cpu (tf)"][1]
    runs["tf"] = {"ran": True, "rc": 0, "stdout": "not json\n", "owner": "provision"}
    checks = verify.judge_probe(profiles.load(LAB).profile, {"commands": {}, "framework_probes": runs})
    assert any(c.name == "frameworks" and c.status == "fail" and "probe reader" in c.detail for c in checks)


# HAND-MADE: what an 8 x H100 node with jax[cuda12] 0.10.2 would print (keys of the real
# capture; GPU errors near the figures the tolerances explain).
def _h100_jax() -> dict:
    out = copy.deepcopy(_capture("cpu__jax-0.10.2.json"))
    out["output"].update({
        "cuda": 12080, "cudnn": 91000, "device_count": 8, "devices": ["NVIDIA H100 80GB HBM3"] * 8,
        "capabilities": ["9.0"] * 8, "gpu_matmul": {"fp32": 3.1e-7},
        "gpu_reduced": {"float16": {"dtype": "float16", "rel_err": 4.6e-4},
                        "bfloat16": {"dtype": "bfloat16", "rel_err": 2.9e-3}}})
    return out


def test_hand_made_gpu_output_passes_on_its_gpu_profile_and_fails_on_the_wrong_count():
    p = build("h100-train", {"python_env": {"torch": None, "python": "3.12",
                                            "framework": {"name": "jax", "version": "0.10.2", "variant": "cuda12"}}})
    name = p.python_envs[0].name
    checks = {c.name: c for c in verify.judge_probe(p, {"commands": {}, "framework_probes": {name: _run(_h100_jax())}})
              if c.name.startswith("jax ")}
    assert all(c.status == "pass" for c in checks.values()), [(c.name, c.detail) for c in checks.values()]
    assert {f"jax float16 gpu ({name})", f"jax bfloat16 gpu ({name})", f"jax gpu model ({name})"} <= set(checks)
    four = _h100_jax()
    four["output"].update(device_count=4, devices=["NVIDIA H100 80GB HBM3"] * 4)
    checks = {c.name: c for c in verify.judge_probe(p, {"commands": {}, "framework_probes": {name: _run(four)}})}
    assert checks[f"jax gpus ({name})"].status == "fail"


def test_render_hands_gpu_verify_each_tensorflow_and_jax_environment():
    assert role_vars(profiles.load(LAB))["gpu_verify_framework_envs"] == [
        {"name": "tf", "python": "/opt/venvs/tf/bin/python", "owner": "provision", "framework": "tensorflow"},
        {"name": "jax", "python": "/opt/venvs/jax/bin/python", "owner": "provision", "framework": "jax"}]
    assert "gpu_verify_framework_envs" not in role_vars(profiles.load("debian12-lab"))  # PyTorch alone: as before
