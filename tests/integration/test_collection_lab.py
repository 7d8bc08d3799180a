"""A user's own playbook on a lab host, with our roles and module by their fully qualified
names, from the collection built by `ansible-galaxy collection build` and installed offline
into a temporary collections path, with the variables `provision render` wrote. Nothing
of this checkout is on Ansible's search path: without the installed copy the playbook
does not even parse."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import profiles

from ..test_collection_build import ENV, build_and_install
from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = [pytest.mark.lab, pytest.mark.extended]  # CI leaves it out for time: make test-extended

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

BIN = Path(sys.executable).parent
PLAYBOOK = """\
- name: Bring our GPU nodes to the driver the profile pins, with gpu-provisioner's roles.
  hosts: all
  become: true
  roles:
    - role: gpu_provisioner.node.common
    - role: gpu_provisioner.node.nvidia_driver
  post_tasks:
    - name: Record what the roles manage, so provision check can compare the host later.
      gpu_provisioner.node.provisioner_state:
        action: record
        profile: "{{ provisioner_profile }}"
        profile_sha256: "{{ provisioner_profile_sha256 }}"
        managed: ["{{ common_managed }}", "{{ nvidia_driver_managed }}"]
"""


def _recap(output: str) -> dict[str, int]:
    match = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


def test_a_users_playbook_runs_the_installed_collection_on_a_lab_host(tmp_path_factory, tmp_path: Path):
    _, collections = build_and_install(tmp_path)
    project = tmp_path / "my-site"  # the user's own project: their playbook, no ansible.cfg of ours
    project.mkdir()
    (project / "gpu.yml").write_text(PLAYBOOK)
    env = {k: v for k, v in ENV.items() if k != "ANSIBLE_CONFIG"}
    installed_env = {**env, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1"}

    with labtools.lab_hosts(1, "coll", tmp_path_factory) as lab:
        rendered = tmp_path / "rendered"
        r = subprocess.run([str(BIN / "provision"), "render", "--profile", DRIVER_ONLY, str(lab.inventory), "-o",
                            str(rendered)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert (rendered / "group_vars" / "all" / "provisioner.yml").is_file()
        playbook = [str(BIN / "ansible-playbook"), "-i", str(rendered / "hosts.yml"), "gpu.yml"]

        # Without the installed collection, the FQCN roles are not found: nothing else supplies them.
        bare = subprocess.run([*playbook, "--syntax-check"], cwd=project, capture_output=True, text=True, env=env,
                              timeout=300)
        assert bare.returncode != 0 and "gpu_provisioner.node.common" in bare.stdout + bare.stderr

        first = subprocess.run(playbook, cwd=project, capture_output=True, text=True, env=installed_env, timeout=1500)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        assert _recap(first.stdout)["changed"] > 0
        second = subprocess.run(playbook, cwd=project, capture_output=True, text=True, env=installed_env, timeout=900)
        assert second.returncode == 0, second.stdout[-4000:]
        assert _recap(second.stdout)["changed"] == 0, "a second run must change nothing"

        host = lab.hosts[0].name
        driver = profiles.load(DRIVER_ONLY).profile.driver.version
        assert "nvidia-smi" in podman("exec", host, "apt-mark", "showhold").stdout.split()
        assert podman("exec", host, "dpkg-query", "-W", "-f=${Version}", "nvidia-smi").stdout.startswith(driver)
        record = json.loads(podman("exec", host, "cat", "/etc/ansible/facts.d/provisioner.fact").stdout)
        assert record["profile"] == "lab-driver-only"
        assert record["state"]["held_packages"]["nvidia-smi"]["hold"] is True
