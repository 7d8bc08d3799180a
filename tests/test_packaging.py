"""The wheel carries the playbooks and roles, so an installed `provision` works anywhere."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from .conftest import REPO


def test_wheel_ships_playbooks_roles_profiles_and_the_matrix(tmp_path: Path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                   check=True, capture_output=True)
    wheel = next(tmp_path.glob("gpu_provisioner-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("provisioner/ansible/playbooks/site.yml", "provisioner/ansible/playbooks/verify.yml",
                   "provisioner/ansible/playbooks/preflight.yml", "provisioner/ansible/playbooks/check.yml",
                   "provisioner/ansible/playbooks/library/provisioner_state.py",
                   "provisioner/ansible/roles/common/library/dpkg_lock.py",
                   "provisioner/ansible/roles/common/tasks/main.yml",
                   "provisioner/profiles/h100-train.yml", "provisioner/data/compat.yml", "provisioner/cli/__init__.py"):
        assert needed in names, needed
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "provision = provisioner.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
