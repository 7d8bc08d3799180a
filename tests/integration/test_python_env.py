"""Molecule scenario molecule/python_env: common + python_env (venv, CPU torch from the
controller's wheelhouse) + dcgm_exporter (rendered unit/collectors/user, a stand-in
binary) converge, are idempotent, and verify.yml (read-only) asserts the real state; then,
on the same instance, python_env_side_effect.yml (beside this file) runs gpu_verify on the
host (nvidia-smi missing, then installed: exit 9 as data) and has a Miniforge installer and
a dcgm-exporter binary with a wrong sha256 refused for real.

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


SCENARIO = REPO / "molecule" / "python_env"
SIDE_EFFECT = Path(__file__).resolve().with_name("python_env_side_effect.yml")


@pytest.mark.molecule
@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_molecule_python_env_scenario_passes(tmp_path: Path):
    from provisioner import lab
    from provisioner.lab import aptcache

    cache_was_running = aptcache.running_pid() is not None
    # Our own ephemeral directory: Molecule's inventory and ansible.cfg for the instance are
    # there, and the side-effect playbook runs with them after `molecule test`.
    ephemeral = tmp_path / "molecule"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1", PROVISIONER_WHEELHOUSE=str(WHEELHOUSE), ANSIBLE_CALLBACKS_ENABLED="ansible.posix.timer",
               MOLECULE_EPHEMERAL_DIRECTORY=str(ephemeral))

    def molecule(*args: str, timeout: int = 2400) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "molecule"), *args], cwd=REPO, capture_output=True, text=True, env=env,
                              timeout=timeout)

    start = time.monotonic()
    try:
        molecule("destroy", "-s", "python_env", timeout=600)  # whatever an earlier, killed run left
        # converge, idempotence, verify (read-only); the instance is kept for the side effects.
        r = molecule("test", "-s", "python_env", "--destroy", "never")
        out = r.stdout + r.stderr
        assert r.returncode == 0, _fatals(out)
        # One "Playbook run took" line per playbook: create, converge, idempotence, verify.
        took = re.findall(r"Playbook run took [^\n]*", out)
        # converge then idempotence: the second converge changed nothing on the host
        recaps = re.findall(r"molecule-pyenv\s+: ok=\d+\s+changed=(\d+)", out)
        assert len(recaps) >= 3 and recaps[1] == "0", recaps
        # verify changed nothing either
        assert recaps[2] == "0", recaps

        side_env = dict(env, ANSIBLE_CONFIG=str(ephemeral / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO),
                        MOLECULE_SCENARIO_DIRECTORY=str(SCENARIO), MOLECULE_PROJECT_DIRECTORY=str(REPO))
        side = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(ephemeral / "inventory"), str(SIDE_EFFECT)],
                              cwd=REPO, capture_output=True, text=True, env=side_env, timeout=1800)
        side_out = side.stdout + side.stderr
        assert side.returncode == 0, _fatals(side_out)
        took += re.findall(r"Playbook run took [^\n]*", side_out)
    finally:
        molecule("destroy", "-s", "python_env", timeout=600)
        # The scenario starts the lab's apt cache; stop it again unless a lab (or someone) had it running.
        if not cache_was_running and not lab.status(None):
            aptcache.stop()
    print(f"molecule test -s python_env + side effects: {time.monotonic() - start:.0f}s; " + " | ".join(took))


def _fatals(out: str) -> str:
    fatals = "\n...\n".join(out[max(0, m.start() - 1200):m.start() + 2500] for m in re.finditer("fatal:", out))
    return fatals[-12000:] + "\n...\n" + out[-3000:]
