"""The collection as users get it: `ansible-galaxy collection build` packs it, `ansible-galaxy
collection install` puts it in a collections path offline (no Galaxy dependencies), and
ansible-lint's production profile passes on what was installed. The lab test
tests/integration/test_collection_lab.py runs a user's own playbook from that install."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from .conftest import COLLECTION, REPO

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow
# Only the collections path given: not this checkout, which an editable install puts on
# sys.path (Ansible scans sys.path for ansible_collections/ unless told not to).
ENV = {**os.environ, "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false", "ANSIBLE_COLLECTIONS_PATH": "/nonexistent"}


def build_and_install(tmp_path: Path) -> tuple[Path, Path]:
    """The built tarball, and the collections path it was installed into."""
    dist, collections = tmp_path / "dist", tmp_path / "collections"
    r = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", str(COLLECTION), "--output-path",
                        str(dist)], capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    (tarball,) = dist.glob("gpu_provisioner-node-*.tar.gz")
    r = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "--no-deps", "-p",
                        str(collections), str(tarball)], capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    return tarball, collections


def test_the_built_collection_carries_every_role_module_and_playbook_and_installs_offline(tmp_path: Path):
    tarball, collections = build_and_install(tmp_path)
    version = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())["version"]
    assert tarball.name == f"gpu_provisioner-node-{version}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    roles = sorted(p.name for p in (COLLECTION / "roles").iterdir() if p.is_dir())
    assert {"state_timer", "common", "nvidia_driver", "dcgm_exporter"} <= set(roles)
    for role in roles:
        assert f"roles/{role}/meta/argument_specs.yml" in names, role
    for module in sorted((COLLECTION / "plugins" / "modules").glob("*.py")):
        assert f"plugins/modules/{module.name}" in names
    for util in sorted((COLLECTION / "plugins" / "module_utils").glob("*.py")):
        assert f"plugins/module_utils/{util.name}" in names
    for playbook in ("site", "check", "preflight", "verify"):
        assert f"playbooks/{playbook}.yml" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    installed = collections / "ansible_collections" / "gpu_provisioner" / "node"
    manifest = yaml.safe_load((installed / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["dependencies"] == {}, "nothing may come from Galaxy"
    # Ansible finds it there, by its fully qualified name.
    r = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "list", "-p", str(collections),
                        "gpu_provisioner.node"], capture_output=True, text=True, timeout=120, env=ENV)
    assert f"gpu_provisioner.node {version}" in " ".join(r.stdout.split()), r.stdout + r.stderr


def test_ansible_lint_passes_on_the_installed_collection(tmp_path: Path):
    _, collections = build_and_install(tmp_path)
    installed = collections / "ansible_collections" / "gpu_provisioner" / "node"
    lint = BIN / "ansible-lint"
    if not lint.exists():
        pytest.fail("ansible-lint is not installed: pip install -e '.[dev]'")
    # The project's own settings (.ansible-lint: production profile, offline, the one skip),
    # given on the command line: that file lives in the checkout, not in the collection.
    env = {**ENV, "ANSIBLE_COLLECTIONS_PATH": str(collections)}  # the FQCN names resolve to this install
    r = subprocess.run([str(lint), "--offline", "--nocolor", "--profile", "production", "-x", "galaxy[no-repository]"],
                       cwd=installed, capture_output=True, text=True, timeout=900, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    processed = re.search(r"in (\d+) files processed", out)
    assert processed and int(processed.group(1)) >= len(list(installed.rglob("*.yml"))), out[-2000:]
    assert "Profile 'production' was required, and it passed" in out


def test_an_awx_projects_requirements_file_installs_the_collection_from_this_repository(tmp_path: Path):
    """docs/ecosystem.md's collections/requirements.yml: a git source whose `#/path` is the
    collection's folder (here a git+file:// clone of this checkout: what is committed)."""
    if subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the git source needs one")
    project = tmp_path / "awx-project"
    (project / "collections").mkdir(parents=True)
    (project / "collections" / "requirements.yml").write_text(yaml.safe_dump({"collections": [{
        "name": f"git+file://{REPO}#/ansible_collections/gpu_provisioner/node", "type": "git", "version": "HEAD"}]}))
    r = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "--offline", "-r",
                        "collections/requirements.yml", "-p", "collections"], cwd=project, capture_output=True,
                       text=True, timeout=300, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    installed = project / "collections" / "ansible_collections" / "gpu_provisioner" / "node"
    assert (installed / "roles" / "common" / "tasks" / "main.yml").is_file()
    assert (installed / "plugins" / "modules" / "provisioner_state.py").is_file()
