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
# The variables tasks/main.yml's loop sets from each python_env_envs item (read from the task
# itself, so these renders see what the loop gives env.yml).
LOOP_VARS = next(t["vars"] for t in yaml.safe_load((ROLES / "python_env" / "tasks" / "main.yml").read_text())
                 if t.get("loop_control", {}).get("loop_var") == "python_env_item")


def env_render(profile: str | dict, i: int = 0, env: dict | None = None, **role_vars) -> RoleRender:
    """The role as its loop renders environment `i` of the profile (`env`: changes to it)."""
    rendered = profile_vars(profile) if isinstance(profile, str) else profile
    item = {**rendered["python_env_envs"][i], **(env or {})}
    return RoleRender("python_env", {**rendered, **LOOP_VARS, "python_env_item": item, **role_vars})


def test_h100_conda_commands_and_condarc():
    r = env_render("h100-train", env={"conda_installer": INSTALLER, "conda_installer_sha256": SHA})
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
    assert r.var("python_env_cmd_pip_framework") == [
        build + "/bin/python", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
        "--index-url", "https://download.pytorch.org/whl/cu126", "torch==2.11.0+cu126", "torchvision==0.26.0"]
    condarc = yaml.safe_load(r.template("condarc.j2"))
    assert condarc == {"channels": ["conda-forge"], "channel_priority": "strict",
                       "auto_update_conda": False, "show_channel_urls": True}
    hint = r.template("profile-hint.sh.j2")
    assert "source /opt/conda/bin/activate /opt/conda/envs/pytorch_env" in hint
    assert "PROVISIONER_PYTHON_ENV=/opt/conda/envs/pytorch_env" in hint


def test_conda_mirrors_reach_the_commands_and_condarc():
    r = env_render("h100-train", env={"conda_installer": "https://mirror.example/Miniforge3.sh",
                                      "conda_installer_sha256": SHA, "conda_packages": ["numpy=1.26"]},
                   python_env_conda_channels=["https://mirror.example/conda-forge"],
                   python_env_pip_index_url="https://pypi.mirror.example/simple",
                   python_env_torch_index_url="https://torch.mirror.example/whl")
    assert r.var("python_env_installer_is_url") is True
    assert r.var("python_env_cmd_conda_create")[-2:] == ["python=3.12", "numpy=1.26"]
    cmd = r.var("python_env_cmd_pip_framework")
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--index-url"] == ["https://torch.mirror.example/whl/cu126"]
    assert "--extra-index-url" not in cmd
    packages = r.var("python_env_cmd_pip_packages")
    assert packages[packages.index("--index-url") + 1] == "https://pypi.mirror.example/simple"
    assert yaml.safe_load(r.template("condarc.j2"))["channels"] == ["https://mirror.example/conda-forge"]


def test_debian12_lab_takes_torch_from_the_wheelhouse_only():
    r = env_render("debian12-lab")
    assert r.var("python_env_env_dir") == "/opt/venvs/pytorch_env"
    build = r.var("python_env_build_dir")
    assert re.fullmatch(r"/opt/venvs/\.pytorch_env-[0-9a-f]{12}", build)
    assert r.var("python_env_cmd_venv") == ["/usr/bin/python3", "-m", "venv", build]
    # A change of spec is a new build path: the working environment is never rebuilt in place.
    other = env_render("debian12-lab", env={"packages": ["numpy==2.1.0"]})
    assert other.var("python_env_build_dir") != build
    assert other.var("python_env_env_dir") == "/opt/venvs/pytorch_env"
    cmd = r.var("python_env_cmd_pip_framework")
    assert cmd == [build + "/bin/python", "-m", "pip", "install", "--no-input",
                   "--disable-pip-version-check", "--find-links=/opt/provisioner/wheelhouse", "torch==2.13.0+cpu"]
    assert "--extra-index-url" not in cmd  # the PyTorch index is unreachable here, and not needed
    pattern = r.var("python_env_torch_wheel_pattern")
    assert re.match(pattern, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert not re.match(pattern, "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert not re.match(pattern, "torch-2.13.0+cpu.cxx11-cp311-none-linux_x86_64.whl")


def test_spec_hash_moves_with_what_is_installed_not_with_where_it_comes_from():
    base = profile_vars("debian12-lab")

    def sha(env=None, **changes):
        return env_render(base, env=env, **changes).var("python_env_spec_sha256")

    same = sha()
    assert re.fullmatch(r"[0-9a-f]{64}", same)
    assert sha(python_env_pip_index_url="https://pypi.mirror.example/simple") == same
    assert sha(python_env_pip_find_links="/srv/wheels") == same
    torch = base["python_env_envs"][0]["framework"]
    assert sha({"framework": {**torch, "version": "2.13.1", "requirement": "torch==2.13.1+cpu"}}) != same
    assert sha({"packages": ["numpy==2.1.0"]}) != same
    assert sha({"name": "other"}) != same
    assert sha({"owner": "trainer"}) != same


def test_molecule_scenario_uses_the_debian12_lab_profile_as_rendered():
    rendered = profile_vars("debian12-lab")
    scenario = yaml.safe_load((REPO / "molecule" / "python_env" / "vars" / "scenario.yml").read_text())
    for key, value in scenario.items():
        if key.startswith("python_env_") and key not in ("python_env_wheelhouse_source", "python_env_enabled"):
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


# --- several environments (issue 30) ----------------------------------------------------

TWO_ENVS = """extends: debian12-lab
name: lab-two-envs
description: a PyTorch and a JAX environment side by side
python_env: {enabled: false}
python_envs:
  - name: torch
    manager: venv
    prefix: /opt/venvs
    framework: {name: pytorch, version: 2.13.0, variant: cpu}
  - name: jax
    manager: venv
    prefix: /opt/venvs
    owner: root
    framework: {name: jax, version: 0.10.2, variant: cpu}
    packages: [numpy==2.1.0]
  - name: tf
    manager: venv
    prefix: /srv/envs
    owner: trainer
    framework: {name: tensorflow, version: 2.21.0, variant: cpu}
"""


def _two_envs(tmp_path: Path) -> dict:
    from provisioner import profiles, render

    (tmp_path / "p.yml").write_text(TWO_ENVS)
    return render.role_vars(profiles.load(str(tmp_path / "p.yml")))


def test_each_environment_is_rendered_with_its_own_folder_owner_and_framework(tmp_path: Path):
    rendered = _two_envs(tmp_path)
    assert [e["name"] for e in rendered["python_env_envs"]] == ["torch", "jax", "tf"]
    torch, jax, tf = (env_render(rendered, i) for i in range(3))
    assert [r.var("python_env_env_dir") for r in (torch, jax, tf)] == [
        "/opt/venvs/torch", "/opt/venvs/jax", "/srv/envs/tf"]
    assert tf.var("python_env_owner") == "trainer"
    builds = {r.var("python_env_build_dir") for r in (torch, jax, tf)}
    assert len(builds) == 3
    # PyTorch from the wheelhouse (the lab profile's), the others from the pip index and the wheelhouse.
    assert torch.var("python_env_cmd_pip_framework")[-1] == "torch==2.13.0+cpu"
    cmd = jax.var("python_env_cmd_pip_framework")
    assert cmd[-1] == "jax==0.10.2" and jax.var("python_env_cmd_pip_packages")[-1] == "numpy==2.1.0"
    assert "--find-links=/opt/provisioner/wheelhouse" in cmd and not any("pytorch" in a for a in cmd)
    assert tf.var("python_env_cmd_pip_framework")[-1] == "tensorflow-cpu==2.21.0"
    assert jax.var("python_env_framework_import") == "; import jax"
    assert tf.var("python_env_framework_import") == "; import tensorflow"
    # A non-PyTorch framework is part of the spec (a version change rebuilds), under "framework".
    assert jax.var("python_env_spec")["framework"] == ["jax==0.10.2"]
    assert jax.var("python_env_spec")["torch"] == []
    assert "framework" not in torch.var("python_env_spec")
    hint = env_render(rendered).template("profile-hint.sh.j2")
    for line in ("#   torch: source /opt/venvs/torch/bin/activate", "#   jax: source /opt/venvs/jax/bin/activate",
                 "#   tf: source /srv/envs/tf/bin/activate", "PROVISIONER_PYTHON_ENV=/opt/venvs/torch"):
        assert line in hint


def test_gpu_variants_name_the_extra_their_instructions_give(tmp_path: Path):
    from provisioner import render
    from provisioner.profiles import compat
    from .test_compat import build, framework

    for name, version, variant, requirement in (("jax", "0.10.2", "cuda13", "jax[cuda13]==0.10.2"),
                                               ("jax", "0.10.2", "cuda12", "jax[cuda12]==0.10.2"),
                                               ("tensorflow", "2.21.0", "and-cuda", "tensorflow[and-cuda]==2.21.0")):
        p = build("h100-train", framework(name, version, variant, python="3.12"))
        assert not [x for x in compat.check(p) if x.rule.startswith(name)]
        assert render.framework(p, p.python_envs[0])["requirement"] == requirement


def test_dropped_environments_are_taken_from_the_record_only_as_the_role_makes_them():
    from ansible_collections.gpu_provisioner.node.plugins.filter.pip import env_records, envs_dropped

    # The record older converges wrote (one environment, its fields at the top level) still counts.
    old = {"name": "pytorch_env", "env_dir": "/opt/venvs/pytorch_env", "python": "/opt/venvs/pytorch_env/bin/python"}
    assert env_records(old) == {"pytorch_env": old}
    assert env_records({}) == {} and env_records(None) == {}
    records = env_records({"envs": {"torch": {"env_dir": "/opt/venvs/torch"}, "jax": {"env_dir": "/opt/venvs/jax"},
                                    "evil": {"env_dir": "/usr"}, "dots": {"env_dir": "/opt/venvs/../dots"},
                                    "lib": {"env_dir": "/usr/lib"}, "..": {"env_dir": "/opt/.."}}})
    dropped = envs_dropped(records, [{"name": "torch"}])
    # Only an absolute, normalised path ending in the name, below a folder: what the role itself makes.
    assert [d["name"] for d in dropped] == ["jax", "lib"]
    assert dropped[0] == {"name": "jax", "env_dir": "/opt/venvs/jax", "freeze_file": "jax.freeze.txt"}
    assert envs_dropped(records, [{"name": n} for n in records]) == []


def test_the_docs_two_environment_profile_validates_and_renders(tmp_path: Path):
    from provisioner import profiles, render

    text = (REPO / "docs" / "environments.md").read_text()
    (tmp_path / "p.yml").write_text(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    rendered = render.role_vars(profiles.load(str(tmp_path / "p.yml")))
    assert [(e["name"], e["framework"]["requirement"]) for e in rendered["python_env_envs"]] == [
        ("torch", "torch==2.11.0+cu126"), ("jax", "jax[cuda13]==0.10.2")]
