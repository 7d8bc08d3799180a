from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.render import inventory
from provisioner import profiles
from provisioner.render.ansible_data import load_unsafe
from provisioner.render import render

from .conftest import DATA, REPO

EXAMPLE = REPO / "inventories" / "example" / "hosts.ini"
GOLDEN = DATA / "golden"


def test_example_inventory_through_ansibles_parser():
    inv = inventory.load(EXAMPLE)
    assert inv.hostnames() == ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "login-01"]
    assert inv.hosts["login-01"] == {"ansible_host": "192.0.2.10", "ansible_user": "ubuntu"}
    assert inv.groups["gpu_nodes"].vars == {"ansible_python_interpreter": "/usr/bin/python3"}
    assert inv.groups["fleet"].children == ["gpu_nodes", "login"]


def test_secrets_are_dropped_and_named(tmp_path: Path):
    src = tmp_path / "hosts.ini"
    src.write_text("[gpu]\nnode1 ansible_host=10.0.0.1 ansible_become_password=hunter2 ansible_ssh_pass=pw2\n"
                   "[gpu:vars]\nmy_api_token=tok3\nansible_user=ops\n")
    inv = inventory.load(src)
    assert inv.hosts["node1"] == {"ansible_host": "10.0.0.1"}
    assert inv.groups["gpu"].vars == {"ansible_user": "ops"}
    assert sorted(inv.dropped_secrets) == ["group gpu: my_api_token", "host node1: ansible_become_password",
                                           "host node1: ansible_ssh_pass"]
    out = tmp_path / "out"
    render(profiles.load("h100-train"), inv, out)
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "hunter2" not in text and "pw2" not in text and "tok3" not in text
            assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"


def test_yaml_inventory_is_read_too(tmp_path: Path):
    src = tmp_path / "hosts.yml"
    src.write_text("all:\n  children:\n    gpu:\n      hosts:\n        n1: {ansible_host: 10.0.0.7}\n")
    assert inventory.load(src).hosts == {"n1": {"ansible_host": "10.0.0.7"}}


def _normalised(folder: Path) -> dict[str, str]:
    """The rendered files with the machine-specific absolute paths replaced."""
    texts = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            text = path.read_text().replace(str(folder), "<OUT>").replace(str(REPO), "<REPO>")
            texts[str(path.relative_to(folder))] = text
    return texts


@pytest.mark.parametrize("profile", profiles.builtin_names())
def test_render_matches_the_golden_files(profile: str, tmp_path: Path):
    out = tmp_path / "out"
    render(profiles.load(profile), inventory.load(EXAMPLE), out)
    got = _normalised(out)
    golden_dir = GOLDEN / profile
    if os.environ.get("UPDATE_GOLDEN"):
        shutil.rmtree(golden_dir, ignore_errors=True)
        for name, text in got.items():
            (golden_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (golden_dir / name).write_text(text)
    want = {str(p.relative_to(golden_dir)): p.read_text() for p in sorted(golden_dir.rglob("*")) if p.is_file()}
    assert got == want


@pytest.mark.parametrize("name", ["h200-train", "b200-train"])
def test_current_training_profiles_render_for_ubuntu_24_04(name: str, tmp_path: Path):
    child = tmp_path / "noble.yml"
    child.write_text(f"extends: {name}\nname: {name}-noble\ndescription: on 24.04\nos: ubuntu-24.04\n")
    out = tmp_path / "out"
    render(profiles.load(str(child)), inventory.load(EXAMPLE), out)
    group_vars = load_unsafe((out / "group_vars/all/provisioner.yml").read_text())
    assert group_vars["provisioner_os"] == "ubuntu-24.04"
    assert group_vars["nvidia_driver_version"] == "580.159.04" and group_vars["cuda_toolkit_versions"] == ["13.0"]
    assert group_vars["python_env_envs"][0]["framework"]["variant"] == "cu130" and "libcudnn9-cuda-13" in group_vars["cudnn_pins"]


def test_render_is_byte_identical_across_runs(tmp_path: Path):
    loaded, inv = profiles.load("a100-train"), inventory.load(EXAMPLE)
    render(loaded, inv, tmp_path / "a")
    render(profiles.load("a100-train"), inventory.load(EXAMPLE), tmp_path / "a2")
    cmp = filecmp.dircmp(tmp_path / "a", tmp_path / "a2")
    # Only ansible.cfg names its own folder; every other file is identical byte for byte.
    assert cmp.diff_files == ["ansible.cfg"]
    render(loaded, inv, tmp_path / "a")  # rendering into the same folder again changes nothing
    assert filecmp.dircmp(tmp_path / "a", tmp_path / "a2").diff_files == ["ansible.cfg"]


@pytest.mark.ansible
def test_ansible_inventory_sees_hosts_with_profile_vars(tmp_path: Path):
    out = tmp_path / "out"
    render(profiles.load("h100-train"), inventory.load(EXAMPLE), out)
    cli = Path(sys.executable).parent / "ansible-inventory"
    result = subprocess.run([str(cli), "-i", str(out), "--list"], capture_output=True, text=True, check=True,
                            env={**os.environ, "ANSIBLE_CONFIG": str(out / "ansible.cfg")})
    assert "WARNING" not in result.stderr
    data = json.loads(result.stdout)
    hostvars = data["_meta"]["hostvars"]
    assert sorted(hostvars) == ["gpu-node-01", "gpu-node-02", "gpu-node-03", "gpu-node-04", "login-01"]
    node = hostvars["gpu-node-03"]
    # Plain profile strings reach Ansible as plain strings (versions stay strings, see
    # provisioner/render/ansible_data.py); only a string that could template is marked unsafe.
    assert node["nvidia_driver_version"] == "580.159.04" and node["fabric_manager_version"] == "580.159.04"
    assert node["nccl_pins"] == {"libnccl2": "2.19.3-1+cuda12.2", "libnccl-dev": "2.19.3-1+cuda12.2"}
    assert node["cudnn_pins"]["libcudnn8"] == "8.9.7.29-1+cuda12.2"
    assert node["python_env_envs"][0]["framework"]["requirement"] == "torch==2.11.0+cu126"
    assert node["cuda_toolkit_versions"] == ["12.2"]
    assert node["ansible_python_interpreter"] == "/usr/bin/python3"
    assert load_unsafe((out / "group_vars/all/provisioner.yml").read_text())["provisioner_profile"] == "h100-train"


def test_a_host_listed_in_more_groups_by_name_and_a_templated_port_are_still_taken(tmp_path: Path):
    # issue 28, item 15: only a host *given variables* in several places is refused
    # (tests/data/bad/inventories/host-defined-three-times.ini); naming it in other groups is Ansible's way.
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nnode1 ansible_host=10.0.0.5 ansible_port=2222\nnode2:2200 ansible_host=10.0.0.6\n"
                     "[train]\nnode1\nnode2\n[gpu:vars]\nansible_ssh_port=\"{{ site_ssh_port }}\"\n")
    inv = inventory.load(hosts)
    assert inv.groups["train"].hosts == ["node1", "node2"]
    assert inv.hosts["node1"]["ansible_port"] == 2222 and inv.hosts["node2"]["ansible_port"] == 2200
    hosts.write_text("[gpu]\nnode1 ansible_host=10.0.0.5\n[train]\nnode1:2222\n")
    with pytest.raises(Exception, match="host node1 is given variables in 2 places"):
        inventory.load(hosts)
