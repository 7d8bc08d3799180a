"""Every rule of the compatibility matrix: a profile it accepts and one it refuses."""

from __future__ import annotations

import copy

import pytest

from provisioner import compat, profiles
from provisioner.models import Profile
from provisioner.profiles import deep_merge


def build(base: str, changes: dict) -> Profile:
    data = deep_merge(copy.deepcopy(profiles.as_dict(profiles.load(base).profile)), changes)
    # Derived values are re-derived from the changed settings, as a fresh load would.
    data["hardware"]["gpu"].setdefault("architecture", None)
    if "architecture" not in changes.get("hardware", {}).get("gpu", {}):
        data["hardware"]["gpu"]["architecture"] = None
    for section, key in (("fabric_manager", "version"), ("cuda", "source"), ("cuda", "default")):
        if key not in changes.get(section, {}):
            data[section][key] = None
    if "enabled" not in changes.get("fabric_manager", {}):
        data["fabric_manager"]["enabled"] = "auto"
    return Profile.model_validate(data)


def rules_broken(base: str, changes: dict) -> dict[str, compat.Problem]:
    return {p.rule: p for p in compat.check(build(base, changes))}


CUDA_12_2_OLD_DRIVER = {"driver": {"branch": 525, "version": "525.147.05"}}

# (rule, base profile, accepted changes, refused changes, text in the fix)
CASES = [
    ("cuda-min-driver", "h100-train", {"driver": {"branch": 535, "version": "535.54.03"}}, CUDA_12_2_OLD_DRIVER,
     "raise driver.version to 535.54.03"),
    ("cuda-known", "h100-train", {"cuda": {"toolkits": ["12.1"]}}, {"cuda": {"toolkits": ["12.7"]}}, "use one of"),
    ("distro-driver", "debian12-lab", {}, {"driver": {"branch": 550, "version": "550.54.15"}}, "use branch 535"),
    ("distro-cuda", "debian12-lab", {}, {"cuda": {"toolkits": ["12.2"]}}, "cuda.toolkits: ['11.8']"),
    ("distro-library", "debian12-lab", {}, {"nccl": {"enabled": True, "version": "2.18.5"}}, "nccl.enabled: false"),
    ("gpu-architecture", "h100-train", {"hardware": {"gpu": {"model": "Mystery X1", "architecture": "hopper"}}},
     {"hardware": {"gpu": {"model": "Mystery X1"}}}, "hardware.gpu.architecture"),
    ("arch-min-driver", "rtx4090-dev",
     {"hardware": {"gpu": {"model": "RTX 5090"}}, "driver": {"branch": 570, "version": "570.124.06"},
      "cuda": {"toolkits": ["12.8"]}, "python_env": {"torch": {"version": "2.7.1", "index": "cu128"}}},
     {"hardware": {"gpu": {"model": "RTX 5090"}}, "driver": {"branch": 535, "version": "535.129.03"},
      "cuda": {"toolkits": ["12.2"]}, "python_env": {"torch": {"version": "2.1.2", "index": "cu121"}}},
     "raise driver.version to 570.26"),
    ("arch-min-cuda", "h100-train", {"cuda": {"toolkits": ["11.8"]}, "python_env": {"torch": {"index": "cu118"}}},
     {"cuda": {"toolkits": ["11.7"]}, "python_env": {"torch": {"index": "cu118"}}, "cudnn": {"enabled": False},
      "nccl": {"enabled": False}}, "use CUDA 11.8 or newer"),
    ("arch-max-cuda", "h100-train",
     {"hardware": {"gpu": {"model": "Tesla V100-SXM2-32GB"}, "interconnect": "nvlink"}},
     {"hardware": {"gpu": {"model": "Tesla V100-SXM2-32GB"}, "interconnect": "nvlink"},
      "driver": {"branch": 580, "version": "580.65.06"}, "cuda": {"toolkits": ["13.0"]},
      "cudnn": {"enabled": False}, "nccl": {"enabled": False}}, "use CUDA 12.9 or older"),
    ("open-modules", "t4-infer", {"driver": {"kernel_modules": "open"}},
     {"hardware": {"gpu": {"model": "Tesla V100-PCIE-16GB"}}, "driver": {"kernel_modules": "open"}},
     "kernel_modules: proprietary"),
    ("open-modules", "rtx4090-dev",
     {"hardware": {"gpu": {"model": "RTX 5090"}}, "driver": {"branch": 570, "version": "570.124.06"},
      "cuda": {"toolkits": ["12.8"]}, "python_env": {"torch": {"version": "2.7.1", "index": "cu128"}}},
     {"hardware": {"gpu": {"model": "RTX 5090"}}, "driver": {"branch": 570, "version": "570.124.06",
                                                            "kernel_modules": "proprietary"},
      "cuda": {"toolkits": ["12.8"]}, "python_env": {"torch": {"version": "2.7.1", "index": "cu128"}}},
     "kernel_modules: open"),
    ("fabric-manager-needed", "h100-train", {"fabric_manager": {"enabled": True}},
     {"fabric_manager": {"enabled": False}}, "fabric_manager.enabled: auto"),
    ("fabric-manager-version", "h100-train", {"fabric_manager": {"version": "580.95.05"}},
     {"fabric_manager": {"version": "580.65.06"}}, "fabric_manager.version: 580.95.05"),
    ("distro-fabric-manager", "debian12-lab", {}, {"fabric_manager": {"enabled": True}}, "driver.source: cuda_repo"),
    ("cudnn-known", "h100-train", {"cudnn": {"version": "8.9.6.50"}}, {"cudnn": {"version": "8.9.9.99"}}, "use one of"),
    ("cudnn-cuda", "h100-train", {"cudnn": {"version": "9.1.0.70"}}, {"cudnn": {"version": "8.6.0.163"}},
     "use cudnn"),
    ("nccl-cuda", "h100-train", {"nccl": {"version": "2.18.3"}}, {"nccl": {"version": "2.16.5"}}, "use nccl 2.25.1"),
    ("tensorrt-cuda", "l40s-infer", {}, {"cuda": {"toolkits": ["12.2"]}, "cudnn": {"version": "8.9.7.29"},
                                         "nccl": {"version": "2.18.5"}, "python_env": {"torch": {"index": "cu121"}}},
     "use tensorrt 8.6.1.6"),
    ("tensorrt-cudnn", "l40s-infer", {"cudnn": {"version": "8.6.0.163"}}, {"cudnn": {"version": "8.9.7.29"}},
     "use cuDNN 8.6.x"),
    ("torch-known", "h100-train", {"python_env": {"torch": {"version": "2.3.1"}}},
     {"python_env": {"torch": {"version": "1.13.1"}}}, "use one of"),
    ("torch-python", "h100-train", {"python_env": {"python": "3.11"}}, {"python_env": {"python": "3.9"}},
     "python_env.python: '3.14'"),
    ("torch-index", "h100-train", {"python_env": {"torch": {"index": "cu126"}}},
     {"python_env": {"torch": {"index": "cu121"}}}, "use cu126"),
    ("torch-index-driver", "l40s-infer", {"python_env": {"torch": {"index": "cu121"}}},
     {"driver": {"branch": 520, "version": "520.61.05"}, "python_env": {"torch": {"index": "cu121"}}},
     "raise driver.version"),
]


@pytest.mark.parametrize(("rule", "base", "accepted", "refused", "fix"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_rule_accepts_and_refuses(rule, base, accepted, refused, fix):
    assert rule not in rules_broken(base, accepted)
    broken = rules_broken(base, refused)
    assert rule in broken, f"{rule} not raised; got {list(broken)}"
    assert fix in broken[rule].fix


def test_every_rule_in_the_module_has_a_case():
    import inspect

    source = inspect.getsource(compat)
    named = set()
    for line in source.splitlines():
        line = line.strip()
        if line.startswith('yield Problem("') or line.startswith('yield Problem(f"'):
            named.add(line.split('"')[1])
    tested = {c[0] for c in CASES} | {"nccl-known", "tensorrt-known"}  # f"{kind}-known" shares cudnn-known's code
    named = {n for n in named if "{kind}" not in n}
    assert named <= tested, f"untested rules: {named - tested}"


def test_torch_index_defaults_to_the_newest_not_past_the_toolkit():
    p = build("h100-train", {"python_env": {"torch": {"version": "2.1.2", "index": None, "packages": []}}})
    assert compat.torch_index(p) == "cu121"  # CUDA 12.2 host: there is no cu122 index
    p = build("l40s-infer", {"python_env": {"torch": {"index": None}}})
    assert compat.torch_index(p) == "cu118"


def test_architecture_from_the_names_nvidia_smi_prints():
    for model, arch in [("NVIDIA H100 80GB HBM3", "hopper"), ("NVIDIA H200", "hopper"), ("NVIDIA L40S", "ada"),
                        ("NVIDIA L4", "ada"), ("Tesla T4", "turing"), ("NVIDIA A100-SXM4-80GB", "ampere"),
                        ("NVIDIA GeForce RTX 4090", "ada"), ("NVIDIA RTX 6000 Ada Generation", "ada"),
                        ("NVIDIA B200", "blackwell"), ("NVIDIA GeForce RTX 5090", "blackwell"),
                        ("Tesla V100-SXM2-32GB", "volta")]:
        p = build("h100-train", {"hardware": {"gpu": {"model": model}}})
        assert compat.architecture_of(p) == arch, model


def test_max_cuda_for_driver():
    assert compat.max_cuda_for_driver("535.129.03") == "12.2"
    assert compat.max_cuda_for_driver("570.124.06") == "12.8"
    assert compat.max_cuda_for_driver("400.00") is None
