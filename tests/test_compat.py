"""Every rule of the compatibility matrix: a profile it accepts and one it refuses."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from provisioner.profiles import compat
from provisioner import profiles
from .conftest import REPO
from provisioner.profiles.models import Profile
from provisioner.profiles import deep_merge


@pytest.fixture(autouse=True)
def fixed_today(monkeypatch):
    # End of life is judged against today; the cases are written for this date.
    monkeypatch.setattr(compat, "today", lambda: dt.date(2026, 12, 1))


def one_item_form(data: dict) -> dict:
    """A resolved profile's one environment written back as python_env with torch, the form
    the built-in profiles use and the cases below change."""
    envs = data.pop("python_envs", [])
    if len(envs) == 1:
        env = envs[0]
        fw = env.pop("framework", None)
        if fw and fw["name"] == "pytorch":
            env["torch"] = {"version": fw["version"], "index": fw["variant"], "packages": fw["packages"]}
        elif fw:
            env["framework"] = fw
        data["python_env"] = env
    elif envs:
        data["python_envs"] = envs
    return data


def build(base: str, changes: dict) -> Profile:
    data = deep_merge(one_item_form(copy.deepcopy(profiles.as_dict(profiles.load(base).profile))), changes)
    # Derived values are re-derived from the changed settings, as a fresh load would.
    data["hardware"]["gpu"].setdefault("architecture", None)
    if "architecture" not in changes.get("hardware", {}).get("gpu", {}):
        data["hardware"]["gpu"]["architecture"] = None
    for section, key in (("fabric_manager", "version"), ("cuda", "source"), ("cuda", "default"),
                         ("python_env", "python")):
        if key not in changes.get(section, {}):
            data[section][key] = None
    if "enabled" not in changes.get("fabric_manager", {}):
        data["fabric_manager"]["enabled"] = "auto"
    return Profile.model_validate(data)


def rules_broken(base: str, changes: dict) -> dict[str, compat.Problem]:
    return {p.rule: p for p in compat.check(build(base, changes))}


CUDA_12_2_OLD_DRIVER = {"driver": {"branch": 525, "version": "525.147.05"}}

def framework(name: str, version: str, variant: str, **env) -> dict:
    """Changes giving the profile's one environment this framework instead of its torch."""
    return {"python_env": {"torch": None, "framework": {"name": name, "version": version, "variant": variant},
                           **env}}


OLD_DRIVERS = {"535": {"driver": {"branch": 535, "version": "535.288.01"}},
               "550": {"driver": {"branch": 550, "version": "550.163.01"}}}
V100 = {"hardware": {"gpu": {"model": "V100"}}}

# (rule, base profile, accepted changes, refused changes, text in the fix)
CASES = [
    # TensorFlow and JAX (compat.yml tensorflow / jax).
    ("tensorflow-known", "h100-train", framework("tensorflow", "2.21.0", "and-cuda"),
     framework("tensorflow", "2.14.0", "and-cuda"), "use one of 2.15"),
    ("jax-known", "h100-train", framework("jax", "0.10.2", "cuda13"), framework("jax", "0.4.30", "cuda12"),
     "use one of 0.5.0"),
    ("tensorflow-python", "h100-train", framework("tensorflow", "2.21.0", "and-cuda", python="3.13"),
     framework("tensorflow", "2.21.0", "and-cuda", python="3.14"), "python_env.python: '3.13'"),
    ("tensorflow-python", "debian12-lab", framework("tensorflow", "2.20.0", "cpu"),
     framework("tensorflow", "2.15.0", "cpu", python="3.12"), "python_env.python: '3.11'"),
    # JAX 0.11 dropped Python 3.11 (CHANGELOG); Debian 12's system Python is 3.11.
    ("jax-python", "debian12-lab", framework("jax", "0.10.2", "cpu"), framework("jax", "0.11.0", "cpu"),
     "python_env.python: '3.14'"),
    ("jax-python", "h100-train", framework("jax", "0.6.2", "cuda12"), framework("jax", "0.7.0", "cuda12"),
     "python_env.python: '3.13'"),
    ("jax-variant", "h100-train", framework("jax", "0.7.2", "cuda13", python="3.12"),
     framework("jax", "0.7.1", "cuda13", python="3.12"), "use variant cuda12"),
    # A JAX CUDA 13 build needs R580 (NVIDIA: 580.65.06); R535 and R550 stop at CUDA 12.
    ("jax-driver", "h100-train", framework("jax", "0.10.2", "cuda12", python="3.12") | OLD_DRIVERS["550"],
     framework("jax", "0.10.2", "cuda13", python="3.12") | OLD_DRIVERS["550"], "or use variant cuda12"),
    ("jax-driver", "h100-train", framework("jax", "0.10.2", "cuda13", python="3.12"),
     framework("jax", "0.10.2", "cuda13", python="3.12") | OLD_DRIVERS["535"], "raise driver.version to 580.65.06"),
    ("tensorflow-driver", "l40s-infer", framework("tensorflow", "2.21.0", "and-cuda"),
     framework("tensorflow", "2.21.0", "and-cuda") | {"driver": {"branch": 520, "version": "520.61.05"}},
     "raise driver.version to 525.60.13"),
    # JAX's CUDA 13 wheels need SM 7.5 or newer; V100 is 7.0 (its CUDA 12 wheels run from 5.2).
    ("jax-arch", "h100-train", framework("jax", "0.10.2", "cuda12", python="3.12") | V100,
     framework("jax", "0.10.2", "cuda13", python="3.12") | V100, "use variant cuda12"),
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
    ("fabric-manager-version", "h100-train", {"fabric_manager": {"version": "580.159.04"}},
     {"fabric_manager": {"version": "580.65.06"}}, "fabric_manager.version: 580.159.04"),
    ("distro-fabric-manager", "debian12-lab", {}, {"fabric_manager": {"enabled": True}}, "driver.source: cuda_repo"),
    ("cudnn-known", "h100-train", {"cudnn": {"version": "8.9.6.50"}}, {"cudnn": {"version": "8.9.9.99"}}, "use one of"),
    ("cudnn-cuda", "h100-train", {"cudnn": {"version": "9.1.0.70"}}, {"cudnn": {"version": "8.6.0.163"}},
     "use cudnn"),
    ("nccl-cuda", "h100-train", {"nccl": {"version": "2.18.3"}}, {"nccl": {"version": "2.16.5"}}, "use nccl 2.28.9"),
    ("tensorrt-cuda", "l40s-infer", {}, {"cuda": {"toolkits": ["12.2"]}, "cudnn": {"version": "8.9.7.29"},
                                         "nccl": {"version": "2.18.5"}, "python_env": {"torch": {"index": "cu121"}}},
     "use tensorrt 8.6.1.6"),
    ("tensorrt-cudnn", "l40s-infer", {"cudnn": {"version": "8.6.0.163"}}, {"cudnn": {"version": "8.9.7.29"}},
     "use cuDNN 8.6.x"),
    ("torch-known", "h100-train", {"python_env": {"torch": {"version": "2.3.1"}}},
     {"python_env": {"torch": {"version": "1.11.0"}}}, "use one of"),
    ("torch-python", "h100-train", {"python_env": {"python": "3.11"}}, {"python_env": {"python": "3.9"}},
     "python_env.python: '3.14'"),
    ("torch-index", "h100-train", {"python_env": {"torch": {"index": "cu126"}}},
     {"python_env": {"torch": {"index": "cu121"}}}, "use cu126"),
    ("torch-index-driver", "l40s-infer", {"python_env": {"torch": {"index": "cu121"}}},
     {"driver": {"branch": 520, "version": "520.61.05"}, "python_env": {"torch": {"index": "cu121"}}},
     "raise driver.version"),
    # --- issue 15 ---
    ("torch-arch", "rtx5090-cv", {}, {"python_env": {"torch": {"index": "cu126"}}}, "use index cu130 or cu132"),
    ("torch-arch", "h100-train",  # Volta left the cu128 wheels in 2.11 (PyTorch PR #175253)
     {"hardware": {"gpu": {"model": "Tesla V100-SXM2-32GB"}, "interconnect": "nvlink"},
      "cuda": {"toolkits": ["12.8"]}, "nccl": {"version": "2.25.1"}, "cudnn": {"enabled": False},
      "python_env": {"torch": {"version": "2.10.0", "index": "cu128"}}},
     {"hardware": {"gpu": {"model": "Tesla V100-SXM2-32GB"}, "interconnect": "nvlink"},
      "cuda": {"toolkits": ["12.8"]}, "nccl": {"version": "2.25.1"}, "cudnn": {"enabled": False},
      "python_env": {"torch": {"version": "2.11.0", "index": "cu128"}}}, "use index cu126"),
    ("torch-index-default", "h100-train", {"python_env": {"torch": {"version": "2.11.0", "index": "cu126"}}},
     {"python_env": {"torch": {"version": "2.11.0", "index": None}}}, "set python_env.framework.variant to one of cu126"),
    ("driver-eol", "l40s-infer", {}, {"driver": {"branch": 535, "version": "535.129.03"}},
     "move to R580 (long-term support, end of life 2028-06)"),
    ("driver-eol", "l40s-infer", {"driver": {"branch": 595, "version": "595.45.04"}},  # production until 2027-03
     {"driver": {"branch": 520, "version": "520.61.05"}}, "move to R580"),
    ("fabric-manager-no-nvswitch", "l40s-infer", {"fabric_manager": {"enabled": "auto"}},
     {"fabric_manager": {"enabled": True}}, "fabric_manager.enabled: auto"),
    ("arch-max-cuda", "t4-infer", {"hardware": {"gpu": {"model": "Tesla P100-PCIE-16GB"}}},  # Pascal: CUDA 12.x only
     {"hardware": {"gpu": {"model": "Tesla P100-PCIE-16GB"}}, "cuda": {"toolkits": ["13.0"]}}, "use CUDA 12.9 or older"),
    ("arch-max-cuda", "t4-infer", {"hardware": {"gpu": {"model": "Tesla M60"}}},  # Maxwell: CUDA 12.x only
     {"hardware": {"gpu": {"model": "Tesla M60"}}, "cuda": {"toolkits": ["13.0"]}}, "use CUDA 12.9 or older"),
    ("open-modules", "h200-train", {"hardware": {"gpu": {"model": "NVIDIA GH200 480GB"}}},
     {"hardware": {"gpu": {"model": "NVIDIA GH200 480GB"}}, "driver": {"kernel_modules": "proprietary"}},
     "kernel_modules: open"),
    ("sku-min-driver", "rtx5090-cv", {"hardware": {"gpu": {"model": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}}},
     {"hardware": {"gpu": {"model": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}},
      "driver": {"branch": 570, "version": "570.172.08"}, "cuda": {"toolkits": ["12.8"]},
      "python_env": {"torch": {"version": "2.7.1", "index": "cu128"}}}, "raise driver.version to 575.57.08"),
    ("cuda-min-driver", "h200-train", {"cuda": {"toolkits": ["13.2"], "forward_compat": True}},
     {"cuda": {"toolkits": ["13.2"]}}, "raise driver.version to 595.45.04"),
    ("cuda-compat-datacenter", "rtx5090-cv", {"driver": {"branch": 595, "version": "595.45.04"},
                                              "cuda": {"toolkits": ["13.2"]}},
     {"cuda": {"toolkits": ["13.2"], "forward_compat": True}}, "raise driver.version to 595.45.04"),
    ("cuda-compat-branch", "h200-train", {"cuda": {"toolkits": ["13.2"], "forward_compat": True}},
     {"driver": {"branch": 590, "version": "590.44.01"}, "cuda": {"toolkits": ["13.2"], "forward_compat": True}},
     "use an LTSB or production branch"),
    ("flavour-cudnn", "l40s-infer", {}, {"os": "ubuntu-24.04"}, "use cudnn 9.x, or os: ubuntu-22.04"),
    ("flavour-tensorrt", "l40s-infer", {}, {"os": "ubuntu-24.04"}, "use tensorrt 10.x, or os: ubuntu-22.04"),
    # GPUDirect RDMA (compat.yml gpudirect_rdma): DMA-BUF needs the open modules; nvidia-peermem
    # needs a kernel with the peer-memory interface (a warning: MLNX_OFED may bring it).
    ("gpudirect-dma-buf", "h200-train", {"network": {"gpudirect_rdma": "dma-buf"}},
     {"network": {"gpudirect_rdma": "dma-buf"}, "driver": {"kernel_modules": "proprietary"}},
     "network.gpudirect_rdma: auto"),
    ("gpudirect-no-infiniband", "h200-train", {"network": {"gpudirect_rdma": "off"}, "hardware": {"infiniband": False}},
     {"network": {"gpudirect_rdma": "nvidia-peermem"}, "hardware": {"infiniband": False}}, "hardware.infiniband: true"),
    ("gpudirect-peermem-kernel", "h100-train", {"network": {"gpudirect_rdma": "nvidia-peermem"}},
     {"network": {"gpudirect_rdma": "nvidia-peermem"}, "os": "ubuntu-24.04"}, "install MLNX_OFED/DOCA-OFED"),
    ("gpudirect-none", "debian12-lab", {"hardware": {"infiniband": True}, "driver": {"kernel_modules": "open"}},
     {"hardware": {"infiniband": True}}, "set driver.kernel_modules: open"),
    # --- issue 27 ---
    # NVIDIA's dcgm-exporter tags pair each exporter with the DCGM it is built against (4.5.2-4.8.1).
    ("dcgm-exporter-pair", "h100-train", {}, {"dcgm": {"exporter": {"version": "4.6.0-1"}}},
     "use dcgm.exporter.version 4.8.1"),
    # CUDA 13.3 exists; its minimum driver is not recorded, so the driver is not judged against it.
    ("cuda-min-driver-unknown", "h200-train", {}, {"cuda": {"toolkits": ["13.3"]}}, "check CUDA 13.3's release notes"),
    # Ubuntu 22.04's own archive now has R580 and R595 (packages.ubuntu.com jammy).
    ("distro-driver", "debian12-lab",
     {"os": "ubuntu-22.04", "driver": {"branch": 595, "version": "595.84"}, "cuda": {"toolkits": ["11.5"]}},
     {"os": "ubuntu-22.04", "driver": {"branch": 590, "version": "590.48.01"}, "cuda": {"toolkits": ["11.5"]}},
     "use branch 470 or 525 or 535 or 550 or 570 or 580 or 595"),
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
    # f"{kind}-known" shares cudnn-known's code; f"flavour-{kind}" is tested as flavour-cudnn/-tensorrt
    tested = {c[0] for c in CASES} | {"nccl-known", "tensorrt-known"}
    named = {n for n in named if "{kind}" not in n}
    # f"{fw.name}-..." is one rule for TensorFlow and JAX: each needs a case under one of its names.
    templated = {n for n in named if "{fw.name}" in n}
    named -= templated
    for n in templated:
        assert {n.replace("{fw.name}", fw) for fw in ("tensorflow", "jax")} & tested, f"untested rule: {n}"
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


def test_the_measured_wheel_architectures_are_what_the_matrix_says():
    # Measured with `pip install torch==X` (PyPI's default variant, cu130 for both) and
    # torch._C._cuda_getArchFlags() on a GPU-less host (compat.yml torch_arches notes).
    measured = ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    assert compat.wheel_arches("2.11", "cu130")[0] == measured
    assert compat.wheel_arches("2.14", "cu130")[0] == measured
    assert compat.wheel_arches("2.14", "cu126")[0][-1] == "9.0"       # cu126 stops at sm_90
    assert "7.0" not in compat.wheel_arches("2.11", "cu128")[0]       # 2.11 dropped Volta from cu128
    assert compat.runs_on("8.9", ["8.0", "8.6"], None)                 # Ada runs sm_86 cubins
    assert compat.runs_on("10.3", ["10.0"], None)                      # B300 runs sm_100 cubins
    assert compat.runs_on("12.1", ["10.0", "12.0"], "12.0")            # PTX JIT upwards
    assert not compat.runs_on("12.0", ["9.0"], None) and not compat.runs_on("7.0", ["7.5"], None)


def test_the_default_index_never_falls_back_to_cpu_on_a_gpu_profile():
    gpu = build("h100-train", {"python_env": {"torch": {"version": "2.11.0", "index": None}}})
    assert compat.torch_index(gpu) is None                             # refused by torch-index-default
    lab = build("debian12-lab", {"python_env": {"torch": {"index": None}}})
    assert compat.torch_index(lab) == "cpu"                            # no GPU: CPU wheels are right


def test_end_of_life_names_the_date_the_branch_and_what_it_does_for_geforce():
    datacenter = rules_broken("l40s-infer", {"driver": {"branch": 550, "version": "550.54.15"}})["driver-eol"]
    assert datacenter.severity == "warning" and "2025-02" in datacenter.message and "R550" in datacenter.message
    assert "1 year from 2024-02-23" in datacenter.message                # policy where the table gives no month
    assert "GeForce" not in datacenter.message
    geforce = rules_broken("rtx4090-dev", {"driver": {"branch": 535, "version": "535.129.03"}})["driver-eol"]
    assert "GeForce cards run the same driver packages" in geforce.message
    # NVIDIA's current tables (the R615 and R620 "Supported Drivers and CUDA Toolkit Versions" pages).
    assert compat.lifecycle(580) == {"type": "lts", "eol": "2028-06", "basis": "NVIDIA's data-center lifecycle table"}
    assert compat.lifecycle(620) == {"type": "lts", "eol": "2029-09", "basis": "NVIDIA's data-center lifecycle table"}
    assert compat.lifecycle(610)["eol"] == "2026-08" and compat.lifecycle(595)["eol"] == "2027-03"
    # R620 has no release in the committed releases.json yet, so R580 stays the branch to move to.
    assert compat.supported_branch(dt.date(2026, 12, 1)) == 580


def test_forward_compat_accepts_a_newer_toolkit_only_where_nvidia_supports_it():
    ok = rules_broken("h200-train", {"cuda": {"toolkits": ["13.2"], "forward_compat": True}})
    assert not {"cuda-min-driver", "cuda-compat-datacenter", "cuda-compat-branch"} & set(ok)
    assert compat.compat_package("13.2") == "cuda-compat-13-2"


def test_nvidia_smi_names_of_current_cards():
    for model, arch, cc in [("NVIDIA H200", "hopper", "9.0"), ("NVIDIA H200 NVL", "hopper", "9.0"),
                            ("NVIDIA GH200 480GB", "hopper", "9.0"), ("NVIDIA H100 NVL", "hopper", "9.0"),
                            ("NVIDIA B200", "blackwell", "10.0"), ("NVIDIA B300 SXM6 AC", "blackwell", "10.3"),
                            ("NVIDIA GB200", "blackwell", "10.0"), ("NVIDIA GeForce RTX 5090", "blackwell", "12.0"),
                            ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "blackwell", "12.0"),
                            ("NVIDIA A10", "ampere", "8.6"), ("NVIDIA A10G", "ampere", "8.6"),
                            ("NVIDIA A100-SXM4-80GB", "ampere", "8.0"), ("NVIDIA L4", "ada", "8.9"),
                            ("NVIDIA L40S", "ada", "8.9"), ("Tesla P100-PCIE-16GB", "pascal", "6.0"),
                            ("Tesla P40", "pascal", "6.1"), ("Tesla P4", "pascal", "6.1"),
                            ("Tesla M60", "maxwell", "5.2"), ("Tesla T4", "turing", "7.5")]:
        p = build("h100-train", {"hardware": {"gpu": {"model": model}}})
        assert (compat.architecture_of(p), compat.compute_capability(p)) == (arch, cc), model


def test_torch_index_driver_never_proposes_the_index_it_refuses():
    # Issue 27: the fix listed every index of the release, the refused one among them.
    old_driver = {"driver": {"branch": 470, "version": "470.57.02"}, "cuda": {"toolkits": ["11.4"]}}
    for index in ("cu121", "cu124"):
        problem = rules_broken("rtx4090-dev", {**old_driver, "python_env": {"torch": {"index": index}}})["torch-index-driver"]
        assert index not in problem.fix, problem.fix
        assert problem.fix == "raise driver.version to 525.60.13 or newer, or use index cu118 (its CUDA runs on 470.57.02)"
    none_runs = rules_broken("h100-train", {"hardware": {"gpu": {"model": "V100"}},
                                            "driver": {"branch": 460, "version": "460.73.01"}})["torch-index-driver"]
    assert none_runs.fix.startswith("raise driver.version to 525.60.13 or newer (PyTorch 2.11 publishes no index")
    assert "or use index" not in none_runs.fix


RTX_PRO_570 = {"driver": {"branch": 570, "version": "570.133.20"}, "cuda": {"toolkits": ["12.8"]},
               "python_env": {"torch": {"version": "2.7.1", "index": "cu128"}}}


def test_rtx_pro_6000_and_rtx_4000_sff_ada_as_nvidia_smi_prints_them():
    # Issue 27: "RTX PRO 6000" (the table cuts the name to "NVIDIA RTX PRO 6000 Blac...") and
    # "NVIDIA RTX 4000 SFF Ada Generation" had no architecture, so such a profile was refused.
    for model, arch, cc in [("RTX PRO 6000", "blackwell", "12.0"), ("NVIDIA RTX PRO 6000 Blac...", "blackwell", "12.0"),
                            ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "blackwell", "12.0"),
                            ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "blackwell", "12.0"),
                            ("NVIDIA RTX 4000 SFF Ada Generation", "ada", "8.9"), ("RTX 4000 SFF Ada", "ada", "8.9"),
                            ("NVIDIA RTX 4000 Ada Generation", "ada", "8.9")]:
        p = build("h100-train", {"hardware": {"gpu": {"model": model}}})
        assert (compat.architecture_of(p), compat.compute_capability(p)) == (arch, cc), model
    sff = build("rtx4090-dev", {"hardware": {"gpu": {"model": "RTX 4000 SFF Ada", "memory_gib": 20}}})
    assert not [p for p in compat.check(sff) if p.severity == "error"]


def test_each_rtx_pro_6000_edition_has_the_floor_of_its_first_driver():
    def floor(model: str, version: str) -> str | None:
        changes = copy.deepcopy(RTX_PRO_570)
        changes["hardware"] = {"gpu": {"model": model}}
        changes["driver"] = {"branch": int(version.split(".")[0]), "version": version}
        found = rules_broken("rtx5090-cv", changes).get("sku-min-driver")
        return found and found.fix
    server = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert floor(server, "570.133.20") == "raise driver.version to 575.57.08 or newer"
    assert floor(server, "575.57.08") is None
    for workstation in ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Max-Q",
                        "RTX PRO 6000"):
        assert floor(workstation, "570.133.20") is None, workstation
        assert floor(workstation, "570.86.16") == "raise driver.version to 570.123.07 or newer", workstation


def test_package_naming_stays_gone():
    # compat.yml's package_naming (cuDNN 9 / DCGM 4 names per CUDA major) and compat.package_names
    # were read by nothing but their own test: the catalogue names each package itself.
    assert "package_naming" not in compat.matrix()
    assert "package_naming" not in (REPO / "provisioner" / "data" / "compat.yml").read_text()
    assert not hasattr(compat, "package_names")


def test_the_matrix_lists_no_cuda_toolkits_per_flavour():
    # What CUDA a flavour carries is the index's to say (packages.resolve), never a second list.
    for flavour, carries in compat.matrix()["flavours"].items():
        assert set(carries) == {"cudnn_majors", "tensorrt_majors"}, flavour
    profile = build("h200-train", {"os": "ubuntu-24.04", "cuda": {"toolkits": ["12.2"]}})
    assert not {p.rule for p in compat.check(profile)} & {"flavour-cuda"}


def test_cuda_releases_without_a_recorded_floor_are_known_but_not_judged():
    floors = compat.matrix()["cuda"]["min_driver"]
    assert {c: floors[c] for c in ("13.3", "13.4", "13.5")} == dict.fromkeys(("13.3", "13.4", "13.5"))
    assert compat.max_cuda_for_driver("999.99") == "13.2"      # only releases with a floor count
    problem = rules_broken("h200-train", {"cuda": {"toolkits": ["13.5"]}})["cuda-min-driver-unknown"]
    assert problem.severity == "warning" and "cuda-known" not in rules_broken("h200-train", {"cuda": {"toolkits": ["13.5"]}})


def test_distro_archives_list_the_current_branches():
    distro = compat.matrix()["distro"]
    assert {580, 595} <= set(distro["ubuntu-22.04"]["driver_branches"])
    assert {580, 595} <= set(distro["ubuntu-24.04"]["driver_branches"])


def test_dcgm_exporter_pairs_are_nvidias_tags():
    builds = compat.matrix()["dcgm_exporter_builds"]
    assert builds["4.8.1"] == "4.5.2" and builds["4.6.0"] == "4.4.1" and builds["4.8.2"] == "4.5.3"
    # Every built-in that names both names a pair NVIDIA tagged.
    for name in profiles.builtin_names():
        p = profiles.load(name).profile
        if p.dcgm.enabled and p.dcgm.version and p.dcgm.exporter.version:
            assert builds[p.dcgm.exporter.version.split("-")[0]] == p.dcgm.version, name
