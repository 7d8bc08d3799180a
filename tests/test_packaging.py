"""The wheel carries the playbooks and roles, so an installed `provision` works anywhere."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO


@pytest.mark.slow
def test_wheel_ships_playbooks_roles_profiles_and_the_matrix(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                   check=True, capture_output=True)
    wheel = next(tmp_path.glob("gpu_provisioner-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    c = "provisioner/ansible/ansible_collections/gpu_provisioner/node"
    for needed in (f"{c}/playbooks/site.yml", f"{c}/playbooks/verify.yml", f"{c}/playbooks/preflight.yml",
                   f"{c}/playbooks/check.yml", f"{c}/plugins/modules/provisioner_state.py",
                   f"{c}/plugins/modules/dpkg_lock.py", f"{c}/roles/common/tasks/main.yml", f"{c}/galaxy.yml",
                   f"{c}/meta/runtime.yml", "provisioner/templates/bundle/apply.sh.j2",
                   "provisioner/profiles/h100-train.yml", "provisioner/data/compat.yml", "provisioner/cli/__init__.py",
                   "provisioner/lab/standin/ubuntu2204.yml"):
        assert needed in names, needed
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "provision = provisioner.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
