"""Integration tests against real lab hosts (rootful podman, systemd containers).

    sudo .venv/bin/pytest -m lab tests/integration/test_lab.py        # ~1 min warm
    sudo .venv/bin/pytest -m molecule tests/integration/test_lab.py   # ~2 min warm

Skipped with a reason when not root or podman is missing (run `sudo scripts/setup-dev-host`).
The lab gets a unique prefix and a temporary workdir, so a user's own lab is untouched.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's ansible, ansible-playbook, molecule


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root (rootful podman): run pytest with sudo"
    if not shutil.which("podman"):
        return "podman is not installed: run `sudo scripts/setup-dev-host`"
    if not (BIN / "ansible").exists() and not shutil.which("ansible"):
        return "ansible is not installed in this Python environment"
    return None


_reason = _skip_reason()
needs_lab = pytest.mark.skipif(_reason is not None, reason=_reason or "")


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="1",
                ANSIBLE_DEPRECATION_WARNINGS="0")


def _ansible(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ansible"), *args], capture_output=True, text=True,
                          env=_env(), timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from provisioner import lab as labmod

    prefix = "t" + secrets.token_hex(3)
    workdir = tmp_path_factory.mktemp("lab") / "lab"
    result = labmod.up(hosts=3, prefix=prefix, workdir=workdir)
    try:
        yield result
    finally:
        labmod.down(prefix, workdir, stop_cache=False)  # the other lab stream may need it (labtools.lab_hosts)


@pytest.mark.lab
@needs_lab
def test_up_writes_inventory_for_three_hosts(lab):
    assert [h.name for h in lab.hosts] == [f"{lab.prefix}-{i}" for i in (1, 2, 3)]
    assert all(h.ip and h.systemd in ("running", "degraded") for h in lab.hosts)
    text = lab.inventory.read_text()
    assert "[lab]" in text and "StrictHostKeyChecking=yes" in text
    assert str(lab.private_key) in text
    assert len(lab.known_hosts.read_text().splitlines()) == 3
    assert (lab.private_key.stat().st_mode & 0o077) == 0


@pytest.mark.lab
@needs_lab
def test_ansible_ping_over_ssh(lab):
    r = _ansible("all", "-i", str(lab.inventory), "-m", "ansible.builtin.ping")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count('"ping": "pong"') == 3, r.stdout
    # Really SSH, not a podman connection: the inventory says so, and it is the default.
    assert "ansible_connection" not in lab.inventory.read_text()


@pytest.mark.lab
@needs_lab
def test_systemd_answers_on_each_host(lab):
    r = _ansible("all", "-i", str(lab.inventory), "-m", "ansible.builtin.shell",
                 "-a", "systemctl is-system-running || true")
    assert r.returncode == 0, r.stdout + r.stderr
    states = [line.strip() for line in r.stdout.splitlines() if line.strip() in ("running", "degraded", "starting", "initializing", "maintenance")]
    assert sorted(states) and all(s in ("running", "degraded") for s in states) and len(states) == 3, r.stdout


@pytest.mark.lab
@needs_lab
def test_a_systemd_unit_created_by_ansible_starts(lab, tmp_path):
    play = tmp_path / "unit.yml"
    play.write_text("""\
- name: Create and start a test unit.
  hosts: all
  become: true
  gather_facts: false
  tasks:
    - name: Write the unit.
      ansible.builtin.copy:
        dest: /etc/systemd/system/lab-hello.service
        mode: "0644"
        content: |
          [Unit]
          Description=lab test service
          [Service]
          ExecStart=/bin/sh -c 'echo hello from %H > /run/lab-hello; exec sleep infinity'
          [Install]
          WantedBy=multi-user.target
    - name: Start and enable it.
      ansible.builtin.systemd_service:
        name: lab-hello.service
        state: started
        enabled: true
        daemon_reload: true
    - name: Ask systemd whether it is active.
      ansible.builtin.command: systemctl is-active lab-hello.service
      register: active
      changed_when: false
    - name: Check that it is.
      ansible.builtin.assert:
        that: active.stdout == 'active'
""")
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(lab.inventory), str(play)],
                       capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("failed=0") == 3, r.stdout
    out = _ansible("all", "-i", str(lab.inventory), "-m", "ansible.builtin.command", "-a", "cat /run/lab-hello")
    assert out.returncode == 0 and out.stdout.count("hello from") == 3, out.stdout


@pytest.mark.lab
@needs_lab
def test_status_and_down_leave_nothing(lab):
    from provisioner import lab as labmod
    from provisioner.lab import aptcache
    from provisioner.lab import podman as podman_mod

    st = labmod.status(lab.prefix)
    assert [h.name for h in st] == [h.name for h in lab.hosts]
    assert all(h.state == "running" for h in st)

    # A container that is not ours (a Molecule test host) may still fetch through the apt
    # cache: down must leave the cache running for it.
    other = subprocess.run(["podman", "run", "-d", "--rm", "localhost/provisioner-lab:latest", "sleep", "120"],
                           capture_output=True, text=True, check=True).stdout.strip()
    try:
        res = labmod.down(lab.prefix, lab.inventory.parent)
        assert res.cache_stopped is False and aptcache.running_pid() is not None
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", other], capture_output=True, check=False)
    assert sorted(res.removed_containers) == sorted(h.name for h in lab.hosts)
    left = subprocess.run(["podman", "ps", "-a", "--filter", f"label={podman_mod.LABEL}={lab.prefix}", "--format", "json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(left.stdout or "[]") == []
    assert not lab.inventory.exists()
    assert not lab.inventory.parent.exists()  # the workdir held only what `up` wrote
    assert labmod.status(lab.prefix) == []


@pytest.mark.lab
@needs_lab
def test_bad_prefix_is_a_clear_error():
    from provisioner import lab as labmod
    from provisioner.errors import ProvisionError

    with pytest.raises(ProvisionError, match="prefix"):
        labmod.up(hosts=1, prefix="Bad_Name")


@pytest.mark.molecule
@needs_lab
def test_molecule_default_scenario_passes():
    if not (BIN / "molecule").exists():
        pytest.skip("molecule is not installed: pip install molecule 'molecule-plugins[podman]' ansible")
    r = subprocess.run([str(BIN / "molecule"), "test"], cwd=REPO, capture_output=True, text=True,
                       env=_env(), timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
