"""The NVIDIA roles on a real lab container (Debian 12, rootful podman, no GPU), through
the Molecule scenario molecule/nvidia: converge with the debian12-lab profile's rendered
variables, idempotence (changed=0), verify (real installed state), then drift in check mode.

    sudo .venv/bin/pytest -m molecule tests/integration/test_nvidia_roles.py

Slow the first time on a machine (the CUDA toolkit is a 1.6 GB download through the lab's
shared apt cache); later runs are served from the cache. Prints the timings and bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO, ROLES
BIN = Path(sys.executable).parent
HOST = "molecule-nvidia"

# extended: Debian's real CUDA 11.8 toolkit (gigabytes) makes this the longest lab module (30 min
# loaded); the production path test converges the same roles from the stand-in in the CI run.
pytestmark = [pytest.mark.molecule, pytest.mark.lab, pytest.mark.extended]

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("the nvidia scenario needs root and podman (scripts/setup-dev-host)", allow_module_level=True)
if not (BIN / "molecule").exists():
    pytest.skip("molecule is not installed: pip install -e '.[lab]'", allow_module_level=True)


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_FORCE_COLOR="0",
                ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="0", MOLECULE_PROJECT_DIRECTORY=str(REPO))


def _molecule(action: str, timeout: int = 1800) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    r = subprocess.run([str(BIN / "molecule"), action, "-s", "nvidia"], cwd=REPO, capture_output=True,
                       text=True, env=_env(), timeout=timeout)
    return r, time.monotonic() - start


def _check_mode(tmp: Path) -> list[str]:
    """Run the scenario's converge in check mode over the podman connection; return the
    names of the tasks that reported changed."""
    inventory = tmp / "hosts.ini"
    inventory.write_text(f"{HOST} ansible_connection=containers.podman.podman ansible_python_interpreter=/usr/bin/python3\n")
    env = dict(_env(), ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_COLLECTIONS_PATH=str(REPO), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "--check",
                        str(REPO / "molecule" / "nvidia" / "converge.yml")],
                       cwd=REPO, capture_output=True, text=True, env=env, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads(r.stdout[r.stdout.index("{"):])
    changed = []
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(HOST, {})
            if result.get("changed") or any(i.get("changed") for i in result.get("results", [])):
                changed.append(task["task"]["name"])
    return changed


def _exec(*cmd: str) -> None:
    subprocess.run(["podman", "exec", HOST, *cmd], check=True, capture_output=True, timeout=120)


def test_nvidia_scenario_converges_idempotent_verified_and_check_mode_sees_drift(tmp_path):
    from provisioner.lab import aptcache

    numbers: dict[str, float] = {}
    log = aptcache.LOG_DIR / "apt-cacher.log"
    log_start = len(log.read_text(errors="replace").splitlines()) if log.exists() else 0
    try:
        for action in ("dependency", "destroy", "syntax", "create", "prepare", "converge", "idempotence", "verify"):
            r, numbers[action] = _molecule(action)
            assert r.returncode == 0, f"molecule {action} failed:\n" + (r.stdout + r.stderr)[-6000:]
        stats = aptcache.stats(log_start)
        numbers["fetched_upstream_mb"] = stats.fetched_upstream / 1e6
        numbers["served_to_host_mb"] = stats.served_to_hosts / 1e6

        start = time.monotonic()
        assert _check_mode(tmp_path) == [], "check mode after converge must report no change"
        numbers["check_mode"] = time.monotonic() - start

        # Out of band: one hold removed, the nouveau blacklist deleted.
        _exec("apt-mark", "unhold", "nvidia-smi")
        _exec("rm", "/etc/modprobe.d/provisioner-blacklist-nouveau.conf")
        assert sorted(_check_mode(tmp_path)) == sorted([
            "gpu_provisioner.node.nvidia_driver : Blacklist nouveau so the NVIDIA module can bind the GPUs "
            "(a file only; also in a container, whose image may boot a host).",
            "gpu_provisioner.node.nvidia_driver : Hold every driver package so apt upgrade cannot move it.",
        ])
        # check mode changed nothing
        held = subprocess.run(["podman", "exec", HOST, "apt-mark", "showhold"], capture_output=True, text=True, check=True)
        assert "nvidia-smi" not in held.stdout.split()
        gone = subprocess.run(["podman", "exec", HOST, "test", "-e", "/etc/modprobe.d/provisioner-blacklist-nouveau.conf"])
        assert gone.returncode == 1
    finally:
        print("\nnvidia scenario:", json.dumps({k: round(v, 1) for k, v in numbers.items()}))
        _molecule("destroy", timeout=300)
