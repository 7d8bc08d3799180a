"""Per-host overrides pass the validators of the profile field they override (issue 28,
item 4; provisioner/render/overrides.py): the issue's inventory (a listen address
not-an-ip, nvidia_driver_version=999.1.1, common_extra_ca_certificates per host; its
python_env_prefix=/ and python_env_name=.. are no longer overridable at all since the
environments are one list, python_env_envs: issue 30) ends in one error naming the inventory file and
line, the host and the variable, through the real CLI, nothing written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import profiles
from provisioner.cli import app
from provisioner.render import PROFILE_FIELD
from provisioner.render.overrides import CONTROLLER_FILES, OVERRIDABLE

OVERRIDES = ("common_apt_proxy", "provisioner_reboot_timeout", "python_env_pip_index_url",
             "dcgm_exporter_listen_address", "nvidia_driver_persistence")


def _site(tmp: Path, inventory: str, overrides=OVERRIDES, name: str = "hosts.ini", base: str = "debian12-lab") -> tuple[Path, Path]:
    (tmp / "p.yml").write_text(f"extends: {base}\nname: p\ndescription: d\ninventory_overrides: [{', '.join(overrides)}]\n")
    (tmp / name).write_text(inventory)
    return tmp / "p.yml", tmp / name


def _render(profile: Path, hosts: Path, out: Path):
    return CliRunner().invoke(app, ["render", "-p", str(profile), str(hosts), "-o", str(out)], env={"COLUMNS": "250"})


def _refused(tmp: Path, profile: Path, hosts: Path, *expect: str) -> str:
    result = _render(profile, hosts, tmp / "out")
    output = " ".join(result.output.split())
    assert result.exit_code == 1, result.output
    assert "Traceback" not in output and output.count("error:") == 1, result.output
    for text in expect:
        assert text in output, result.output
    assert not (tmp / "out").exists()
    return output


@pytest.mark.parametrize("setting,why", [
    ("common_apt_proxy=javascript:alert(1)", "mirrors.apt_proxy would refuse"),
    ("provisioner_reboot_timeout=5", "reboot.timeout_s would refuse"),
    ("dcgm_exporter_listen_address=not-an-ip", "'not-an-ip' is not an IP address"),
    ("python_env_pip_index_url=file:///etc", "mirrors.pip_index_url would refuse"),
])
def test_an_override_the_profile_field_would_refuse_is_refused(tmp_path: Path, setting: str, why: str):
    profile, hosts = _site(tmp_path, f"[gpu]\nnode1\nnode2 ansible_host=10.0.0.6 {setting}\n")
    name = setting.split("=")[0]
    _refused(tmp_path, profile, hosts, f"{hosts}:3: host node2 sets {name}=", why)


def test_fields_the_package_plan_or_the_matrix_decide(tmp_path: Path):
    """nvidia_driver_version feeds the package pins, fabric manager and the node's own check:
    not overridable; nor is an environment's field (python_envs render as one variable)."""
    profile, hosts = _site(tmp_path, "[gpu]\nnode1 nvidia_driver_version=999.1.1\n",
                           overrides=("nvidia_driver_version",))
    _refused(tmp_path, profile, hosts, "inventory_overrides names 'nvidia_driver_version' (profile field "
                                       "driver.version), which cannot be overridden per host")
    profile, hosts = _site(tmp_path, "[gpu]\nnode1 python_env_prefix=/opt/other\n", overrides=("python_env_prefix",))
    _refused(tmp_path, profile, hosts, "host node1 sets python_env_prefix: unknown variable of the role python_env")


def test_controller_files_come_only_through_the_profile(tmp_path: Path):
    profile, hosts = _site(tmp_path, "[gpu]\nnode1 common_extra_ca_certificates=\"['/etc/shadow']\"\n",
                           overrides=("common_extra_ca_certificates",))
    _refused(tmp_path, profile, hosts, "inventory_overrides names 'common_extra_ca_certificates'",
             "it names a controller file, and those come only through the profile")


def test_a_group_override_names_the_group_its_file_and_the_host(tmp_path: Path):
    profile, hosts = _site(tmp_path, "[gpu]\nnode1\n[gpu:vars]\nprovisioner_reboot_timeout=5\n")
    _refused(tmp_path, profile, hosts, f"{hosts}:4: group gpu sets provisioner_reboot_timeout=5 for host node1",
             "reboot.timeout_s would refuse")


def test_an_override_is_a_value_not_a_template(tmp_path: Path):
    inventory = "all:\n  hosts:\n    node1:\n      common_apt_proxy: \"{{ '/' }}\"\n"
    profile, hosts = _site(tmp_path, inventory, name="hosts.yml")
    _refused(tmp_path, profile, hosts, "an override is a value, not a template")


def test_good_overrides_still_render(tmp_path: Path):
    profile, hosts = _site(tmp_path, "[gpu]\nnode1\nnode2 provisioner_reboot_timeout=1200 nvidia_driver_persistence=false "
                                     "dcgm_exporter_listen_address=10.0.0.6\n")
    result = _render(profile, hosts, tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "provisioner_reboot_timeout: 1200" in (tmp_path / "out" / "hosts.yml").read_text()


def test_each_overridable_variable_is_its_fields_only_rendering():
    """The map back to the field is the one render.PROFILE_FIELD states, and that field
    renders no other variable (so a host can differ in it alone)."""
    for name, field in OVERRIDABLE.items():
        dotted = ".".join(field)
        assert PROFILE_FIELD[name] == dotted, name
        others = [n for n, f in PROFILE_FIELD.items() if n != name and re.search(rf"(^|[ (]){re.escape(dotted)}\b", f)]
        assert others == [], (name, others)
    assert not set(CONTROLLER_FILES) & set(OVERRIDABLE)
    # Every built-in, dumped and validated again, is accepted: the base every host's overrides are judged on.
    from provisioner.profiles.models import Profile

    for builtin in profiles.builtin_names():
        Profile.model_validate(profiles.as_dict(profiles.load(builtin).profile))
