"""python_env: the commands and files a profile makes the role run/write, rendered without a host.

The conda path cannot reach a channel or download Miniforge here, so its commands and
.condarc are checked as rendered; the venv path runs for real in molecule/python_env.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from .conftest import REPO, ROLES
from .rolerender import RoleRender, profile_vars

INSTALLER = "/srv/mirror/Miniforge3-24.3.0-0-Linux-x86_64.sh"
SHA = "a" * 64


def test_h100_conda_commands_and_condarc():
    r = RoleRender("python_env", {**profile_vars("h100-train"),
                                  "python_env_conda_installer": INSTALLER,
                                  "python_env_conda_installer_sha256": SHA})
    assert r.var("python_env_env_dir") == "/opt/conda/envs/pytorch_env"  # a link to the build below
    build = r.var("python_env_build_dir")
    assert re.fullmatch(r"/opt/conda/envs/\.pytorch_env-[0-9a-f]{12}", build)
    assert build.endswith(r.var("python_env_spec_sha256")[:12])
    assert r.var("python_env_installer_is_url") is False
    assert r.var("python_env_cmd_conda_installer") == [
        "/bin/bash", "/var/lib/provisioner/python_env/downloads/Miniforge3-24.3.0-0-Linux-x86_64.sh",
        "-b", "-u", "-p", "/opt/conda"]
    assert r.var("python_env_cmd_conda_create") == [
        "/opt/conda/bin/conda", "create", "--yes", "--quiet", "--prefix", build, "python=3.12"]
    # torch 2.11 and its dependencies from the cu126 index the profile names alone (its wheels carry their
    # own CUDA runtime): never --extra-index-url, where any name may come from either index (issue 28, item 14)
    assert r.var("python_env_cmd_pip_torch") == [
        build + "/bin/python", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
        "--index-url", "https://download.pytorch.org/whl/cu126", "torch==2.11.0+cu126", "torchvision==0.26.0"]
    condarc = yaml.safe_load(r.template("condarc.j2"))
    assert condarc == {"channels": ["conda-forge"], "channel_priority": "strict",
                       "auto_update_conda": False, "show_channel_urls": True}
    hint = r.template("profile-hint.sh.j2")
    assert "source /opt/conda/bin/activate /opt/conda/envs/pytorch_env" in hint
    assert "PROVISIONER_PYTHON_ENV=/opt/conda/envs/pytorch_env" in hint


def test_conda_mirrors_reach_the_commands_and_condarc():
    r = RoleRender("python_env", {**profile_vars("h100-train"),
                                  "python_env_conda_installer": "https://mirror.example/Miniforge3.sh",
                                  "python_env_conda_installer_sha256": SHA,
                                  "python_env_conda_channels": ["https://mirror.example/conda-forge"],
                                  "python_env_conda_packages": ["numpy=1.26"],
                                  "python_env_pip_index_url": "https://pypi.mirror.example/simple",
                                  "python_env_torch_index_url": "https://torch.mirror.example/whl"})
    assert r.var("python_env_installer_is_url") is True
    assert r.var("python_env_cmd_conda_create")[-2:] == ["python=3.12", "numpy=1.26"]
    cmd = r.var("python_env_cmd_pip_torch")
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--index-url"] == ["https://torch.mirror.example/whl/cu126"]
    assert "--extra-index-url" not in cmd
    packages = r.var("python_env_cmd_pip_packages")
    assert packages[packages.index("--index-url") + 1] == "https://pypi.mirror.example/simple"
    assert yaml.safe_load(r.template("condarc.j2"))["channels"] == ["https://mirror.example/conda-forge"]


def test_debian12_lab_takes_torch_from_the_wheelhouse_only():
    r = RoleRender("python_env", profile_vars("debian12-lab"))
    assert r.var("python_env_env_dir") == "/opt/venvs/pytorch_env"
    build = r.var("python_env_build_dir")
    assert re.fullmatch(r"/opt/venvs/\.pytorch_env-[0-9a-f]{12}", build)
    assert r.var("python_env_cmd_venv") == ["/usr/bin/python3", "-m", "venv", build]
    # A change of spec is a new build path: the working environment is never rebuilt in place.
    other = RoleRender("python_env", {**profile_vars("debian12-lab"), "python_env_pip_packages": ["numpy==2.1.0"]})
    assert other.var("python_env_build_dir") != build
    assert other.var("python_env_env_dir") == "/opt/venvs/pytorch_env"
    cmd = r.var("python_env_cmd_pip_torch")
    assert cmd == [build + "/bin/python", "-m", "pip", "install", "--no-input",
                   "--disable-pip-version-check", "--find-links=/opt/provisioner/wheelhouse", "torch==2.13.0+cpu"]
    assert "--extra-index-url" not in cmd  # the PyTorch index is unreachable here, and not needed
    pattern = r.var("python_env_torch_wheel_pattern")
    assert re.match(pattern, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert not re.match(pattern, "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert not re.match(pattern, "torch-2.13.0+cpu.cxx11-cp311-none-linux_x86_64.whl")


def test_spec_hash_moves_with_what_is_installed_not_with_where_it_comes_from():
    base = profile_vars("debian12-lab")

    def sha(**changes):
        return RoleRender("python_env", {**base, **changes}).var("python_env_spec_sha256")

    same = sha()
    assert re.fullmatch(r"[0-9a-f]{64}", same)
    assert sha(python_env_pip_index_url="https://pypi.mirror.example/simple") == same
    assert sha(python_env_pip_find_links="/srv/wheels") == same
    assert sha(python_env_torch_version="2.13.1") != same
    assert sha(python_env_pip_packages=["numpy==2.1.0"]) != same
    assert sha(python_env_name="other") != same
    assert sha(python_env_owner="trainer") != same


def test_molecule_scenario_uses_the_debian12_lab_profile_as_rendered():
    rendered = profile_vars("debian12-lab")
    scenario = yaml.safe_load((REPO / "molecule" / "python_env" / "vars" / "scenario.yml").read_text())
    for key, value in scenario.items():
        if key.startswith("python_env_") and key != "python_env_wheelhouse_source":
            assert rendered[key] == value, key
    assert rendered["python_env_wheelhouse_source"] == "/opt/wheels"


def test_every_role_variable_is_documented_in_its_argument_spec():
    for role in ("python_env", "dcgm_exporter", "gpu_verify"):
        base = ROLES / role
        defaults = yaml.safe_load((base / "defaults" / "main.yml").read_text())
        spec = yaml.safe_load((base / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
        assert all(k.startswith(role + "_") for k in defaults), role
        assert set(defaults) <= set(spec), (role, set(defaults) - set(spec))
        for name, option in spec.items():
            assert option.get("description") and option.get("type"), (role, name)
            if name in defaults:
                assert option.get("default") == defaults[name], (role, name)


def test_rendered_role_vars_are_in_each_roles_api():
    for profile in ("h100-train", "debian12-lab", "rtx4090-dev"):
        for key in profile_vars(profile):
            for role in ("python_env", "dcgm_exporter", "gpu_verify"):
                if key.startswith(role + "_"):
                    spec = yaml.safe_load(Path(ROLES / role / "meta" / "argument_specs.yml").read_text())
                    assert key in spec["argument_specs"]["main"]["options"], (profile, key)
