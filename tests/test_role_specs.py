"""Role variables in the inventory are checked against the roles' meta/argument_specs.yml
on the controller, before any host is touched (the corpus in tests/data/bad/inventories
has the refusals; here: what passes, and that the CLI refuses without a traceback)."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from provisioner import profiles
from provisioner.render import role_specs
from provisioner.cli import app
from provisioner.render import role_vars

from .conftest import ROLES


@pytest.mark.parametrize("name", profiles.builtin_names())
def test_every_builtin_profile_renders_variables_its_roles_accept(name):
    # What `provision render` writes into group_vars must itself pass the roles' specs:
    # a renamed role variable would otherwise be silently ignored by the role.
    assert role_specs.problems(role_vars(profiles.load(name))) == []


def test_every_role_has_argument_specs_and_the_check_knows_them():
    roles = sorted(p.name for p in (ROLES).iterdir() if p.is_dir())
    assert sorted(role_specs.role_options()) == roles


def test_variables_outside_the_roles_and_right_ones_pass():
    assert role_specs.problems({"rack": "r12", "ansible_host": "10.0.0.5", "provisioner_profile": "x",
                                "common_apt_lock_timeout": 600, "nvidia_driver_reboot_allowed": True,
                                "dcgm_exporter_listen_address": "10.1.2.3"}) == []


def test_longest_role_prefix_owns_the_variable():
    # nccl_tests_source belongs to the nccl role, and a typo there is that role's.
    found = role_specs.problems({"nccl_tests_sorce": "/srv/x.tar.gz"})
    assert found == [("nccl_tests_sorce", "unknown variable of the role nccl: did you mean nccl_tests_source?")]


def test_cli_refuses_a_typo_in_hosts_ini_and_starts_no_run(tmp_path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nnode1 ansible_host=10.0.0.1\nnode2 ansible_host=10.0.0.2 cuda_toolkit_enabeld=false\n")
    result = CliRunner().invoke(app, ["up", "--profile", "h100-train", str(hosts), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"{hosts}:3" in result.output
    assert "cuda_toolkit_enabeld" in result.output and "did you mean cuda_toolkit_enabled?" in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("role", sorted(role_specs.role_options()))
def test_role_defaults_and_argument_specs_name_the_same_variables(role):
    # A default the spec lacks is refused when a user sets it; a spec default missing
    # from defaults/main.yml leaves the variable undefined (argument_specs does not set it).
    options = role_specs.role_options()[role]
    path = ROLES / role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    assert sorted(set(defaults) - set(options)) == []
    assert sorted(n for n, spec in options.items() if "default" in spec and n not in defaults) == []
