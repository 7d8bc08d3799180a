"""A profile is data: `{{ lookup('pipe', ...) }}` in any of its free-text fields reaches the
host as literal text, and the command never runs; not when rendering, not when Ansible
reads the inventory, not when a play uses the variable (issue 17, class 1).

Every string field a profile has gets the payload where its grammar lets it through
(URL fields take it in the path); fields whose grammar refuses it (names, paths,
versions) are refused at load, which the bad-input corpus covers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import ansible_runner
import pytest
import yaml

from provisioner.render import inventory
from provisioner import profiles
from provisioner.errors import ProvisionError
from provisioner.render import render

pytestmark = pytest.mark.ansible

# Where each free-text field takes the payload: {} is replaced by it.
FIELDS = {
    ("description",): "{}",
    ("hardware", "gpu", "model"): "{}",
    ("mirrors", "apt_proxy"): "http://cache.example:3142/{}",
    ("mirrors", "cuda_repo_url"): "https://mirror.example/cuda/{}",
    ("mirrors", "pip_index_url"): "https://pypi.example/{}/simple",
    ("mirrors", "pip_find_links"): "https://wheels.example/{}",
    ("mirrors", "torch_index_url"): "https://torch.example/{}",
    ("mirrors", "download_base_url"): "https://dl.example/{}",
    ("mirrors", "conda_channels", 0): "https://conda.example/{}",
    ("python_envs", 0, "conda_installer"): "https://dl.example/{}/Miniforge3.sh",
    ("dcgm", "exporter", "binary"): "https://dl.example/{}/dcgm-exporter",
    ("nccl", "tests_source"): "https://dl.example/{}/nccl-tests.tar.gz",
}


def _set(data: dict, keys: tuple, value: str) -> None:
    for key in keys[:-1]:
        data = data.setdefault(key, {}) if isinstance(key, str) else data[key]
    if isinstance(keys[-1], int):
        data[:] = [value]
    else:
        data[keys[-1]] = value


@pytest.fixture
def poisoned(tmp_path: Path):
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    # No spaces: URL fields refuse them; the pipe lookup runs through a shell, where ${IFS} is one.
    payload = f"{{{{lookup('pipe','touch${{IFS}}{marker}')}}}}"
    data = profiles.as_dict(profiles.load("h100-train").profile)
    data.update(name="poisoned", description="x")
    data["nccl"].update(tests=True, tests_sha256="0" * 64)
    data["python_envs"][0].update(manager="conda", conda_installer_sha256="0" * 64)
    data["dcgm"]["exporter"]["binary_sha256"] = "0" * 64
    for keys, form in FIELDS.items():
        _set(data, keys, form.format(payload))
    path = tmp_path / "poisoned.yml"
    path.write_text(yaml.safe_dump(data))
    yield profiles.load(str(path)), payload, marker
    marker.unlink(missing_ok=True)


def test_every_free_text_field_takes_the_payload_or_is_refused(poisoned):
    loaded, payload, _ = poisoned
    assert payload in loaded.profile.hardware.gpu.model
    assert payload in loaded.profile.mirrors.apt_proxy


def test_templates_in_a_profile_reach_the_host_as_literal_text(poisoned, tmp_path: Path, local_inventory: Path):
    loaded, payload, marker = poisoned
    out = tmp_path / "rendered"
    render(loaded, inventory.load(local_inventory), out)
    group_vars = (out / "group_vars" / "all" / "provisioner.yml").read_text()
    names = sorted(k for k, v in yaml.safe_load(group_vars.replace("!unsafe ", "")).items() if payload in json.dumps(v))
    assert len(names) >= 9, names  # every URL field that becomes a role variable

    # ansible-inventory reads the inventory and resolves every variable: nothing runs
    cli = Path(sys.executable).parent / "ansible-inventory"
    listed = subprocess.run([str(cli), "--list"], capture_output=True, text=True, check=True,
                            env={**os.environ, "ANSIBLE_CONFIG": str(out / "ansible.cfg")})
    assert payload in listed.stdout and not marker.exists()

    # a play uses each variable, and a role-style derived value built from them: literal text
    dump = tmp_path / "seen.json"
    playbook = tmp_path / "use.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "all", "gather_facts": False,
        "vars": {"derived_repo": "{{ cuda_repo_base_url ~ '/ubuntu2204/x86_64' }}"},
        "tasks": [
            {"name": "Use every poisoned variable in a template, as the roles do.",
             "ansible.builtin.copy": {"dest": str(dump), "mode": "0600",
                                      "content": "{{ {'vars': dict(names | zip(names | map('extract', vars))),"
                                                 " 'derived': derived_repo} | to_json }}"},
             "vars": {"names": names}},
            {"name": "Print one, as a debug task would.", "ansible.builtin.debug": {"var": "common_apt_proxy"}},
        ],
    }]))
    (tmp_path / "runner").mkdir()
    result = ansible_runner.run(private_data_dir=str(tmp_path / "runner"), playbook=str(playbook),
                                inventory=str(out / "hosts.yml"), quiet=True,
                                envvars={"ANSIBLE_CONFIG": str(out / "ansible.cfg"),
                                         "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert result.rc == 0, result.stdout.read()
    seen = json.loads(dump.read_text())
    for name in names:
        assert payload in json.dumps(seen["vars"][name]), name
    assert seen["derived"] == f"https://mirror.example/cuda/{payload}/ubuntu2204/x86_64"
    assert not marker.exists(), "a template in the profile ran a command"


def test_a_control_character_in_any_free_text_field_is_refused(poisoned, tmp_path: Path):
    loaded, _, _ = poisoned
    for keys, form in FIELDS.items():
        data = profiles.as_dict(loaded.profile)
        data["name"] = "nl"
        _set(data, keys, form.format("a\nb"))
        path = tmp_path / "nl.yml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(ProvisionError, match="control characters are not allowed"):
            profiles.load(str(path))
