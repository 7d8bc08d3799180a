from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner import profiles
from provisioner.errors import ProvisionError

BUILTINS = ["a10-infer", "a100-train", "b200-train", "debian12-lab", "h100-train", "h200-train", "l40s-infer",
            "rtx4090-dev", "rtx5090-cv", "t4-infer"]
# Built-ins that keep an end-of-life driver branch on purpose, and say why in a comment.
EOL_ON_PURPOSE = {"debian12-lab"}


def test_every_builtin_loads_and_passes_the_matrix():
    assert profiles.builtin_names() == BUILTINS
    for name in BUILTINS:
        loaded = profiles.load(name)
        assert loaded.profile.name == name
        assert len(loaded.digest) == 64


def test_no_builtin_warns_except_the_ones_that_say_why():
    for name in BUILTINS:
        warned = {w.rule for w in profiles.load(name).warnings}
        if name in EOL_ON_PURPOSE:
            assert warned == {"driver-eol"}, name
            assert "on purpose" in profiles.find(name).read_text()
        elif name != "h100-train":  # the lead moves h100-train to R580 (issue 14/15 split)
            assert warned == set(), (name, warned)


@pytest.mark.parametrize("name", ["h200-train", "b200-train"])
def test_current_training_profiles_validate_on_ubuntu_24_04(tmp_path: Path, name: str):
    child = tmp_path / "noble.yml"
    child.write_text(f"extends: {name}\nname: {name}-noble\ndescription: on 24.04\nos: ubuntu-24.04\n")
    loaded = profiles.load(str(child))
    assert loaded.profile.os == "ubuntu-24.04" and loaded.warnings == ()


def test_python_defaults_to_the_systems_python_of_the_os(tmp_path: Path):
    for os_name, python in (("ubuntu-24.04", "3.12"), ("ubuntu-22.04", "3.10")):
        child = tmp_path / f"{os_name}.yml"
        child.write_text("extends: rtx5090-cv\nname: py\ndescription: default python\n"
                         f"os: {os_name}\npython_env:\n  python: null\n")
        assert profiles.load(str(child)).profile.python_envs[0].python == python


def test_h100_train_is_what_the_seed_guidance_asks_for():
    p = profiles.load("h100-train").profile
    assert (p.hardware.gpu.count, p.hardware.gpu.architecture, p.hardware.interconnect) == (8, "hopper", "nvswitch")
    assert p.fabric_manager.enabled is True and p.fabric_manager.version == p.driver.version
    assert p.cuda.toolkits == ["12.2"] and p.cudnn.version.startswith("8.9.")
    # A supported driver branch (R580 LTS), and a current PyTorch whose wheels carry their own
    # CUDA runtime: cu126 is the oldest index 2.11 publishes; the R580 driver runs it.
    assert p.driver.branch == 580 and p.driver.source == "cuda_repo"
    assert p.python_envs[0].pytorch.version.startswith("2.11.") and p.python_envs[0].pytorch.variant == "cu126"
    assert p.python_envs[0].name == "pytorch_env" and p.python_envs[0].python == "3.12"
    # Every artifact it needs is named with its checksum, or comes from a package.
    assert p.python_envs[0].conda_installer.endswith("Miniforge3-26.3.2-3-Linux-x86_64.sh")
    assert p.python_envs[0].conda_installer_sha256 == "848194851a98903134187fbb4ab50efe87b003e0c0f808f97644b7524a62bf2c"
    # DCGM and the exporter NVIDIA builds against it (dcgm-exporter tag 4.5.2-4.8.1).
    assert p.dcgm.exporter.binary is None and (p.dcgm.version, p.dcgm.exporter.version) == ("4.5.2", "4.8.1")
    assert p.hardware.infiniband and p.hardware.min_cpu_cores >= 32 and p.hardware.min_ram_gib >= 1024


def test_extends_deep_merges_mappings_and_replaces_lists(tmp_path: Path):
    child = tmp_path / "mine.yml"
    child.write_text(
        "extends: h100-train\nname: mine\ndescription: tweaked\n"
        "hardware:\n  gpu:\n    count: 4\n"
        "python_env:\n  packages: [numpy]\n"
    )
    loaded = profiles.load(str(child))
    p = loaded.profile
    assert p.hardware.gpu.count == 4
    assert p.hardware.gpu.model == "H100 80GB HBM3"  # kept from the parent: mappings merge
    assert p.python_envs[0].packages == ["numpy"]
    assert p.python_envs[0].pytorch.variant == "cu126"
    assert p.description == "tweaked"
    assert [f.name for f in loaded.files] == ["mine.yml", "h100-train.yml"]


def test_extends_resolves_a_relative_path_from_the_child_file(tmp_path: Path):
    (tmp_path / "site").mkdir()
    (tmp_path / "base.yml").write_text("extends: t4-infer\nname: base\ndescription: b\n")
    (tmp_path / "site" / "node.yml").write_text("extends: ../base.yml\nname: node\ndescription: d\n")
    assert profiles.load(str(tmp_path / "site" / "node.yml")).profile.hardware.gpu.model == "Tesla T4"


def test_child_inherits_the_description_but_not_the_name(tmp_path: Path):
    child = tmp_path / "c.yml"
    child.write_text("extends: h100-train\nname: c\n")
    loaded = profiles.load(str(child))
    assert loaded.profile.name == "c"
    assert loaded.profile.description == profiles.load("h100-train").profile.description
    child.write_text("extends: h100-train\nname: c\ndescription: my own\n")
    assert profiles.load(str(child)).profile.description == "my own"
    child.write_text("extends: h100-train\ndescription: my own\n")
    with pytest.raises(ProvisionError) as err:
        profiles.load(str(child))
    assert "name: required setting is missing" in str(err.value)


@pytest.mark.parametrize("ref", ["{folder}", "{folder}/", "{folder}/../{folder}"])
def test_a_folder_given_as_the_profile_is_named_as_one(tmp_path: Path, monkeypatch, ref: str):
    (tmp_path / "site").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProvisionError) as err:
        profiles.load(ref.format(folder="site"))
    assert "is a folder, not a profile file" in str(err.value)
    assert "inside it" in err.value.fix


def test_resolved_yaml_round_trips_to_the_same_profile(tmp_path: Path):
    loaded = profiles.load("a100-train")
    text = profiles.to_yaml(loaded.profile)
    assert "extends" not in yaml.safe_load(text)
    copy = tmp_path / "copy.yml"
    copy.write_text(text)
    assert profiles.load(str(copy)).digest == loaded.digest


def test_digest_changes_with_any_setting(tmp_path: Path):
    loaded = profiles.load("h100-train")
    base = loaded.digest
    child = tmp_path / "c.yml"
    child.write_text(f"extends: h100-train\nname: h100-train\ndescription: {loaded.profile.description}\n")
    assert profiles.load(str(child)).digest == base
    child.write_text(child.read_text() + "verify:\n  nccl_min_busbw_gbps: 351\n")
    assert profiles.load(str(child)).digest != base


def test_unknown_builtin_lists_the_real_ones():
    with pytest.raises(ProvisionError) as err:
        profiles.load("h900-train")
    assert "unknown profile 'h900-train'" in str(err.value)
    assert "h100-train" in err.value.fix


def test_missing_profile_file_names_the_path(tmp_path: Path):
    with pytest.raises(ProvisionError) as err:
        profiles.load(str(tmp_path / "nope.yml"))
    assert "profile file not found" in str(err.value) and "nope.yml" in str(err.value)
