"""Property-based fuzzing of the two inputs people write by hand: profiles and inventories.

Whatever the bytes, loading ends in a profile, or in the project's one error type with a
location and a fix; never in a traceback.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provisioner import inventory, profiles, role_specs
from provisioner.errors import ProvisionError

pytestmark = pytest.mark.slow

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=False),
                    st.text(string.printable, max_size=12))
keys = st.sampled_from(["name", "description", "extends", "os", "hardware", "gpu", "count", "model", "driver",
                        "branch", "version", "source", "cuda", "toolkits", "python_env", "torch", "index",
                        "dcgm", "exporter", "listen_address", "port", "mirrors", "typo", "nvme"])
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(keys, inner, max_size=6)), max_leaves=20)


def _load_profile(path: Path, text: str) -> None:
    path.write_text(text)
    try:
        profiles.load(str(path))
    except ProvisionError as err:
        assert str(path) in str(err) or "unknown profile" in str(err) or "profile file not found" in str(err)
        assert err.message


@SETTINGS
@given(documents)
def test_any_yaml_document_as_a_profile(tmp_path_factory, document):
    path = tmp_path_factory.mktemp("fuzz") / "p.yml"
    _load_profile(path, yaml.safe_dump(document))


@SETTINGS
@given(st.text(max_size=300))
def test_any_text_as_a_profile(tmp_path_factory, text):
    _load_profile(tmp_path_factory.mktemp("fuzz") / "p.yml", text)


@SETTINGS
@given(st.dictionaries(st.sampled_from(["hardware", "driver", "cuda", "python_env", "dcgm", "verify", "fabric_manager"]),
                       documents, max_size=3))
def test_broken_sections_of_a_real_profile(tmp_path_factory, changes):
    base = profiles.as_dict(profiles.load("h100-train").profile)
    base.update(changes)
    _load_profile(tmp_path_factory.mktemp("fuzz") / "p.yml", yaml.safe_dump(base))


ini_lines = st.one_of(
    st.sampled_from(["[gpu]", "[gpu:vars]", "[gpu:children]", "[all:vars]", "[", "]", "[a b]", "=", "node1",
                     "node[01:03]", "node[3:1]", "x ansible_port=abc", "y ansible_host=", "z a=b=c", "# c", "; c",
                     # role variables, checked against the roles' argument_specs
                     "n1 nvidia_driver_brnach=550", "n2 common_apt_lock_timeout=soon", "nccl_tests=[1,{'a':2}]",
                     "nvidia_driver_persistence=maybe", "cuda_toolkit_versions={'12.2':1}", "common_=1",
                     "n3 dcgm_exporter_port=99999999999999999999", "python_env_pip_packages=\"a,b\"",
                     "gpu_verify_dcgm_diag_level=7", "n4 nvidia_driver_reboot_allowed=None"]),
    st.text(string.printable.replace("\r", "").replace("\x0b", "").replace("\x0c", ""), max_size=30),
)


@SETTINGS
@given(st.lists(ini_lines, max_size=8))
def test_any_hosts_ini(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("fuzz") / "hosts.ini"
    path.write_text("\n".join(lines) + "\n")
    try:
        inv = inventory.load(path)
        assert inv.hosts
        role_specs.check_inventory(inv)
    except ProvisionError as err:
        assert str(path) in str(err) and err.fix
