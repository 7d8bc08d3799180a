"""Molecule scenario molecule/python_env: common + python_env (venv, CPU torch from the
controller's wheelhouse) + dcgm_exporter (rendered unit/collectors/user, a stand-in
binary) converge, are idempotent, and verify.yml asserts the real state; then gpu_verify
runs on the host (nvidia-smi missing, then installed: exit 9 as data) and a Miniforge
installer with a wrong sha256 is refused for real.

    sudo .venv/bin/pytest -m molecule tests/integration/test_python_env.py   # ~6-8 min

Skipped with a reason when not root, podman or molecule is missing, or the torch wheel is
not in the wheelhouse ($PROVISIONER_WHEELHOUSE, default /opt/wheels).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WHEELHOUSE = Path(os.environ.get("PROVISIONER_WHEELHOUSE") or "/opt/wheels")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "molecule scenarios need root (rootful podman): run pytest with sudo"
    if not shutil.which("podman"):
        return "podman is not installed: run `sudo scripts/setup-dev-host`"
    if not (BIN / "molecule").exists():
        return "molecule is not installed: pip install -e '.[lab]'"
    if not list(WHEELHOUSE.glob("torch-2.13.0+cpu-cp311-*.whl")):
        return f"no torch 2.13.0+cpu wheel for Python 3.11 in {WHEELHOUSE} (set PROVISIONER_WHEELHOUSE)"
    return None


_reason = _skip_reason()


@pytest.mark.molecule
@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_molecule_python_env_scenario_passes():
    from provisioner import lab
    from provisioner.lab import aptcache

    cache_was_running = aptcache.running_pid() is not None
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1", PROVISIONER_WHEELHOUSE=str(WHEELHOUSE), ANSIBLE_CALLBACKS_ENABLED="ansible.posix.timer")
    start = time.monotonic()
    try:
        r = subprocess.run([str(BIN / "molecule"), "test", "-s", "python_env"], cwd=REPO, capture_output=True,
                           text=True, env=env, timeout=2400)
    finally:
        # The scenario starts the lab's apt cache; stop it again unless a lab (or someone) had it running.
        if not cache_was_running and not lab.status(None):
            aptcache.stop()
    out = r.stdout + r.stderr
    fatals = "\n...\n".join(out[max(0, m.start() - 1200):m.start() + 2500] for m in re.finditer("fatal:", out))
    assert r.returncode == 0, fatals[-12000:] + "\n...\n" + out[-3000:]
    # One "Playbook run took" line per playbook: create, converge, idempotence, verify, destroy.
    took = re.findall(r"Playbook run took [^\n]*", out)
    print(f"molecule test -s python_env: {time.monotonic() - start:.0f}s; " + " | ".join(took))
    # converge then idempotence: the second converge changed nothing on the host
    recaps = re.findall(r"molecule-pyenv\s+: ok=\d+\s+changed=(\d+)", out)
    assert len(recaps) >= 3 and recaps[1] == "0", recaps
