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

from provisioner.render import inventory, role_specs
from provisioner import profiles
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


# --- structure: YAML inventories, group_vars beside them, and the profile's string fields --

hostnames = st.one_of(st.sampled_from(["node1", "gpu-01", "n;rm -rf /", "a b", "[x]", "{{ x }}", "-l", "é"]),
                      st.text(string.ascii_letters + string.digits + "-_.;$ ", min_size=1, max_size=10))
variables = st.dictionaries(
    st.sampled_from(["ansible_host", "ansible_port", "common_apt_lock_timeout", "nvidia_driver_version",
                     "dcgm_exporter_listen_address", "python_env_prefix", "api_key", "registry", "x", "password"]),
    documents, max_size=4)
group_bodies = st.fixed_dictionaries({}, optional={
    "hosts": st.one_of(st.dictionaries(hostnames, st.one_of(st.none(), variables), max_size=3), documents),
    "vars": st.one_of(variables, documents),
    "children": st.dictionaries(st.sampled_from(["gpu", "infer", "all", "ungrouped", "a-b"]),
                                st.one_of(st.none(), st.fixed_dictionaries({}, optional={
                                    "hosts": st.dictionaries(hostnames, st.none(), max_size=2)})), max_size=2),
})


def _inventory_result(path: Path) -> None:
    try:
        inv = inventory.load(path)
        assert inv.hosts
        role_specs.check_inventory(inv, profiles.load("debian12-lab").profile)
    except ProvisionError as err:
        assert err.message and (err.where or err.fix)


@SETTINGS
@given(st.one_of(st.fixed_dictionaries({"all": group_bodies}), documents),
       st.one_of(st.none(), st.one_of(variables, documents)))
def test_any_yaml_inventory_with_group_vars(tmp_path_factory, document, group_vars):
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "hosts.yml"
    path.write_text(yaml.safe_dump(document))
    if group_vars is not None:
        (folder / "group_vars").mkdir()
        (folder / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    _inventory_result(path)


free_text = st.one_of(st.text(max_size=40), st.sampled_from([
    "{{ lookup('pipe', 'id') }}", "http://x\nTrusted: yes", "/", "/usr", "..", "/opt/../usr", "https://a:b@c/",
    "javascript:x", "file://host/x", "--index-url=x", "numpy==1.0", "\u2028", "/opt/venvs", "https://ok.example/x"]))
FIELDS = [("hardware", "gpu", "model"), ("python_env", "prefix"), ("python_env", "name"), ("python_env", "owner"),
          ("mirrors", "apt_proxy"), ("mirrors", "cuda_repo_url"), ("mirrors", "pip_index_url"),
          ("mirrors", "pip_find_links"), ("mirrors", "wheelhouse_source"), ("python_env", "conda_installer"),
          ("dcgm", "exporter", "binary"), ("nccl", "tests_source"), ("description",), ("extends",)]


@SETTINGS
@given(st.dictionaries(st.sampled_from(FIELDS), free_text, min_size=1, max_size=4),
       st.lists(st.one_of(free_text, st.none()), max_size=3))
def test_any_string_in_the_profiles_string_fields(tmp_path_factory, changes, packages):
    data = profiles.as_dict(profiles.load("debian12-lab").profile)
    data["python_env"] = data.pop("python_envs")[0]  # the one-item form the FIELDS name
    for keys, value in changes.items():
        section = data
        for key in keys[:-1]:
            section = section.setdefault(key, {})
        section[keys[-1]] = value
    data["python_env"]["packages"] = packages
    path = tmp_path_factory.mktemp("fuzz") / "p.yml"
    path.write_text(yaml.safe_dump(data))
    try:
        loaded = profiles.load(str(path))
    except ProvisionError as err:
        assert err.message
        return
    from provisioner.render.ansible_data import dump_unsafe
    from provisioner.safe_paths import control_character
    from provisioner.render import role_vars

    accepted = profiles.as_dict(loaded.profile)
    for keys in changes:
        value = {**accepted, "python_env": (accepted["python_envs"] or [{}])[0]}
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        assert not isinstance(value, str) or control_character(value) is None, (keys, value)
    for package in [p for env in accepted["python_envs"] for p in env["packages"]]:
        assert not package.startswith("-")  # never a pip option
    # Whatever could template is tagged, judged per YAML scalar (not per line: a long string,
    # such as the profile's own YAML in provisioner_profile_yaml, spans several lines).
    for scalar in _scalars(yaml.compose(dump_unsafe(role_vars(loaded)), Loader=yaml.SafeLoader)):
        if any(marker in scalar.value for marker in ("{{", "{%", "{#")):
            assert scalar.tag == "!unsafe", (scalar.tag, scalar.value)


def _scalars(node):
    if isinstance(node, yaml.ScalarNode):
        yield node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _scalars(item)
    elif isinstance(node, yaml.MappingNode):
        for _key, value in node.value:  # keys stay plain: Ansible never templates a variable's name
            yield from _scalars(value)
