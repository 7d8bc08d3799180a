"""os: ubuntu-24.04 beside 22.04: the roles' OS data, preflight's OS check, the default
Python, and the matrix's knowledge of what NVIDIA's ubuntu2404 repository carries."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner import profiles
from provisioner.errors import ProvisionError
from provisioner.judge import preflight

from .conftest import ROLES


@pytest.mark.parametrize("role", sorted(p.parent.parent.name for p in ROLES.glob("*/vars/Ubuntu-22.yml")))
def test_every_role_with_22_04_data_has_24_04_data_with_the_same_variables(role: str):
    jammy = yaml.safe_load((ROLES / role / "vars" / "Ubuntu-22.yml").read_text())
    noble = yaml.safe_load((ROLES / role / "vars" / "Ubuntu-24.yml").read_text())
    assert set(noble) == set(jammy)


def test_noble_specifics():
    python = yaml.safe_load((ROLES / "python_env" / "vars" / "Ubuntu-24.yml").read_text())
    assert python["python_env_os_system_python"] == "3.12"
    common = yaml.safe_load((ROLES / "common" / "vars" / "Ubuntu-24.yml").read_text())
    assert common["common_os_apt_suites"][0] == "noble"
    assert yaml.safe_load((ROLES / "cuda_repo" / "vars" / "Ubuntu-24.yml").read_text())["cuda_repo_os_flavour"] == "ubuntu2404"


def _noble(tmp_path: Path, base: str, extra: str = "") -> Path:
    child = tmp_path / f"{base}-noble.yml"
    child.write_text(f"extends: {base}\nname: {base}-noble\ndescription: on 24.04\nos: ubuntu-24.04\n{extra}")
    return child


def test_preflight_wants_24_04_for_a_24_04_profile(tmp_path: Path):
    p = profiles.load(str(_noble(tmp_path, "h200-train"))).profile
    ok = {c.name: c for c in preflight.judge(p, {"distribution": "Ubuntu", "distribution_version": "24.04"})}
    assert ok["os"].status == "pass"
    wrong = {c.name: c for c in preflight.judge(p, {"distribution": "Ubuntu", "distribution_version": "22.04"})}
    assert wrong["os"].status == "fail" and "profile targets Ubuntu 24.04" in wrong["os"].detail


def test_an_old_stack_on_24_04_is_refused_with_the_fix(tmp_path: Path):
    with pytest.raises(ProvisionError) as err:
        profiles.load(str(_noble(tmp_path, "l40s-infer")))
    text = str(err.value)
    assert "[flavour-cudnn]" in text and "[flavour-tensorrt]" in text and "os: ubuntu-22.04" in text
