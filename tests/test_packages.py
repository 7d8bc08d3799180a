"""What a profile installs from NVIDIA's CUDA repository (provisioner/profiles/packages.py):
names from the flavour's naming rules, versions from an index, resolved before any host is
touched. Here the index is the committed snapshot (offline); tests/test_aptindex.py resolves
against a live signed index."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.profiles import catalogue, packages
from provisioner import profiles
from provisioner.errors import ProvisionError
from provisioner.render import plan_for, role_vars


def _profile(tmp_path: Path, text: str):
    f = tmp_path / "p.yml"
    f.write_text("extends: h100-train\nname: p\ndescription: test\n" + text)
    return profiles.load(str(f))


def test_h100_train_resolves_to_exact_repository_versions():
    plan = packages.resolve(profiles.load("h100-train").profile, "snapshot").pins
    # The driver's exact-version Depends (its siblings, as the index lists them) are pinned with it.
    cat = catalogue.load("ubuntu2204")
    siblings, todo = {}, [("nvidia-driver-580", "580.159.04-1ubuntu1")]
    while todo:
        entry = cat.entry(*todo.pop())
        for dep, op, want in (alt for r in entry.depends for alt in catalogue.parse_relation(r)):
            if op == "=" and dep not in siblings:
                siblings[dep] = want
                todo.append((dep, want))
    assert len(siblings) > 5 and all(plan["driver"].pop(dep) == want for dep, want in siblings.items())
    assert plan == {
        "driver": {"cuda-drivers-580": "580.159.04-1ubuntu1", "nvidia-driver-580": "580.159.04-1ubuntu1",
                   "nvidia-driver-pinning-580": "580-1ubuntu1"},
        "fabric_manager": {"nvidia-fabricmanager": "580.159.04-1", "libnvidia-nscq": "580.159.04-1"},
        "cuda_toolkit": {"cuda-toolkit-12-2": "12.2.2-1"},
        "cudnn": {"libcudnn8": "8.9.7.29-1+cuda12.2", "libcudnn8-dev": "8.9.7.29-1+cuda12.2"},
        "nccl": {"libnccl2": "2.19.3-1+cuda12.2", "libnccl-dev": "2.19.3-1+cuda12.2"},
        # DCGM's -cudaNN follows the driver's CUDA (R580 -> 13), not the 12.2 toolkit; the
        # proprietary pair carries the profiling module (DCGM_FI_PROF_*).
        "dcgm": {"datacenter-gpu-manager-4-core": "1:4.5.2-1", "datacenter-gpu-manager-4-cuda13": "1:4.5.2-1",
                 "datacenter-gpu-manager-4-proprietary": "1:4.5.2-1",
                 "datacenter-gpu-manager-4-proprietary-cuda13": "1:4.5.2-1"},
        # The exporter NVIDIA tags against DCGM 4.5.2 (dcgm-exporter 4.5.2-4.8.1).
        "dcgm_exporter": {"datacenter-gpu-manager-exporter": "4.8.1-1"},
    }


def test_render_hands_the_roles_the_plan():
    v = role_vars(profiles.load("h100-train"))
    assert v["nvidia_driver_repo_pins"]["nvidia-driver-580"] == "580.159.04-1ubuntu1"
    assert v["fabric_manager_pins"] == {"nvidia-fabricmanager": "580.159.04-1", "libnvidia-nscq": "580.159.04-1"}
    assert v["cudnn_pins"]["libcudnn8"] == "8.9.7.29-1+cuda12.2" and v["cuda_toolkit_pins"] == {"cuda-toolkit-12-2": "12.2.2-1"}
    assert v["dcgm_exporter_package_pins"] == {"datacenter-gpu-manager-exporter": "4.8.1-1"}
    assert v["cuda_repo_enabled"] is True and v["cuda_repo_flavour"] == "ubuntu2204"


def test_tensorrt_renders_its_real_three_part_version():
    v = role_vars(profiles.load("l40s-infer"))
    assert v["tensorrt_pins"] == dict.fromkeys(("libnvinfer8", "libnvinfer-plugin8", "libnvparsers8", "libnvonnxparsers8"), "8.5.3-1+cuda11.8")
    # l40s-infer: CUDA 11.8 toolkit on R580, so DCGM is the -cuda13 build all the same.
    assert "datacenter-gpu-manager-4-cuda13" in v["dcgm_exporter_dcgm_pins"]


def test_a_version_the_index_lacks_is_refused_naming_the_field_the_index_and_what_it_has(tmp_path):
    loaded = _profile(tmp_path, "driver:\n  version: 580.82.07\n")
    # Loading (profiles validate) only advises: the live index decides at render time.
    assert "580.82.07" in loaded.advisory and "advisory" in loaded.advisory
    with pytest.raises(ProvisionError) as err:
        plan_for(loaded)
    msg = str(err.value)
    cat = catalogue.load("ubuntu2204")
    assert "driver.version" in msg and "580.82.07" in msg and "p.yml" in msg and cat.origin in msg
    assert "nearest it carries: " + ", ".join(cat.nearest("cuda-drivers-580", "580.82.07")) in msg


def test_a_library_build_for_another_cuda_major_is_refused(tmp_path):
    with pytest.raises(ProvisionError) as err:
        plan_for(_profile(tmp_path, "nccl:\n  version: 2.25.1\n"))   # the snapshot has only +cuda12.8; the toolkit is 12.2
    assert "nccl.version" in str(err.value) and "no build for CUDA 12.2" in str(err.value)


def test_an_os_without_a_flavour_is_refused_and_the_flavour_can_be_chosen(tmp_path):
    with pytest.raises(ProvisionError) as err:
        _profile(tmp_path, "os: debian-12\n")
    assert "'debian12'" in str(err.value) and "mirrors.cuda_repo_flavour" in err.value.fix
    # A Debian host taking the ubuntu2204 flavour (the lab does, against the stand-in).
    loaded = _profile(tmp_path, "os: debian-12\nmirrors:\n  cuda_repo_flavour: ubuntu2204\n")
    assert plan_for(loaded).pins["driver"]["cuda-drivers-580"] == "580.159.04-1ubuntu1"
    assert role_vars(loaded)["cuda_repo_flavour"] == "ubuntu2204"


def test_naming_follows_the_branch():
    cat = catalogue.load("ubuntu2204")
    assert cat.names("driver_proprietary", 580) == ["cuda-drivers-580", "nvidia-driver-580"]
    # R590+: branch-less names, locked by the pinning package (NVIDIA Driver Installation Guide).
    assert cat.names("driver_proprietary", 595) == ["cuda-drivers", "nvidia-driver"]
    assert cat.names("driver_open", 595) == ["nvidia-open"]
    assert cat.names("driver_pinning", 595) == ["nvidia-driver-pinning-595"] and cat.names("driver_pinning", 570) == []
    # Fabric manager and nscq lost the branch suffix at 580 in NVIDIA's repository.
    assert cat.names("fabric_manager", 570) == ["nvidia-fabricmanager-570"]
    assert cat.names("fabric_manager", 580) == ["nvidia-fabricmanager"]
    assert cat.names("nscq", 570) == ["libnvidia-nscq-570"]


def test_a_naming_rule_may_only_name_known_numbers(tmp_path):
    data = (catalogue.CATALOGUE_DIR / "ubuntu2204.yml").read_text()
    bad = tmp_path / "bad.yml"
    assert "nvidia-driver-{branch}-open" in data
    bad.write_text(data.replace("nvidia-driver-{branch}-open", "nvidia-driver-{profile.name}"))
    with pytest.raises(ProvisionError) as err:
        catalogue.load(path=bad)
    assert "only branch, cuda_major, cuda_minor, driver_cuda_major" in str(err.value)


@pytest.mark.parametrize("name", profiles.builtin_names())
def test_every_builtin_resolves_inside_its_flavours_catalogue(name):
    loaded = profiles.load(name)
    p = loaded.profile
    assert loaded.advisory is None
    plan = packages.resolve(p, "snapshot").pins
    if not packages.uses_cuda_repo(p):
        assert plan == {}
        return
    cat = packages.load_catalogue(p)
    for pins in plan.values():
        for package, version in pins.items():
            assert version in cat.versions(package), (package, version)


def test_conda_needs_its_checksummed_installer(tmp_path):
    with pytest.raises(ProvisionError) as err:
        _profile(tmp_path, "python_env:\n  conda_installer: null\n")
    # The environment's line and the two fields it lacks (an environment-level rule: the
    # location is the environment, python_env or python_envs.N).
    assert "p.yml:4: python_env: a conda environment needs conda_installer" in str(err.value)
    assert "conda_installer_sha256" in str(err.value)


def test_an_exporter_binary_needs_its_sha256(tmp_path):
    with pytest.raises(ProvisionError) as err:
        _profile(tmp_path, "dcgm:\n  exporter:\n    binary: https://mirror.example/dcgm-exporter\n")
    assert "binary_sha256" in str(err.value)


def test_an_nvlink5_system_installs_the_nvlink5_stack_with_fabric_manager():
    # HGX B200: nvlink5-<branch> (the NVLink Subnet Manager and NVSwitch telemetry) at fabric
    # manager's version; an HGX H100 (third-generation NVSwitches) does not get it.
    b200 = packages.resolve(profiles.load("b200-train").profile, "snapshot").pins["fabric_manager"]
    assert b200["nvlink5-580"] == b200["nvidia-fabricmanager"]
    assert "nvlink5-580" not in packages.resolve(profiles.load("h100-train").profile, "snapshot").pins["fabric_manager"]
    assert catalogue.load("ubuntu2204").names("nvlink5", 580) == ["nvlink5-580"]
