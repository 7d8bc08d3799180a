"""The path users take: an SSH user whose sudo asks for a password.

One lab host whose `provision` user must type its password for sudo (the lab's default is
passwordless sudo, as on cloud images), started converged with one hold removed. Without a
password `up` fails that host with sudo's own complaint; with --become-password-file it
converges (puts the hold back); `check` with
--ask-become-pass (the password typed at the prompt) finds no drift. The password is in
no file of any run folder.

    sudo .venv/bin/pytest -m lab tests/integration/test_privilege_lab.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.lab import hosts as lab_hosts

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = pytest.mark.lab
_missing = [tool for tool in ("podman", "ssh") if shutil.which(tool) is None]
needs_lab = pytest.mark.skipif(os.geteuid() != 0 or bool(_missing), reason="needs root and podman (scripts/setup-dev-host)")

PASSWORD = "pl4nted-Become-pw"


@pytest.fixture(scope="module")
def sudo_with_password(tmp_path_factory):
    # Started converged (the test is about the password, not the install); one hold removed
    # out of band, so `up` must change the host, through sudo, to pass.
    with labtools.lab_hosts(1, "priv", tmp_path_factory, converged=DRIVER_ONLY) as lab:
        host = lab.hosts[0].name
        assert podman("exec", host, "apt-mark", "unhold", "nvidia-smi").returncode == 0
        user, sudoers = lab_hosts.USER, lab_hosts.SUDOERS
        r = podman("exec", "-i", host, "sh", "-c",
                   f"chpasswd && printf '%s ALL=(ALL:ALL) ALL\\n' {user} > {sudoers} && chmod 0440 {sudoers}",
                   input=f"{user}:{PASSWORD}\n")
        assert r.returncode == 0, r.stderr
        # sudo now really wants the password (a -n call fails), so the tests below prove become works.
        assert podman("exec", "--user", user, host, "sudo", "-n", "true").returncode != 0
        yield lab


def _run(*args: str, input: str | None = None):
    return CliRunner().invoke(app, list(args), input=input, catch_exceptions=False)


def _files_holding(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@needs_lab
def test_become_password_from_a_file_and_from_the_prompt(sudo_with_password, tmp_path):
    lab = sudo_with_password
    runs = tmp_path / "runs"

    without = _run("up", "--profile", DRIVER_ONLY, str(lab.inventory), "--runs-dir", str(runs), "--json")
    assert without.exit_code == 1, without.output
    assert "password" in without.output.lower() and "sudo" in without.output.lower(), without.output[-3000:]

    password_file = tmp_path / "become-password"
    password_file.write_text(PASSWORD + "\n")
    password_file.chmod(0o600)
    up = _run("up", "--profile", DRIVER_ONLY, str(lab.inventory), "--runs-dir", str(runs), "--json",
              "--become-password-file", str(password_file))
    assert up.exit_code in (0, 2), up.output[-4000:]  # 2: verify says "no GPU" for the GPU checks it can run
    assert '"status": "changed"' in up.output, up.output[-4000:]
    assert "nvidia-smi" in podman("exec", lab.hosts[0].name, "apt-mark", "showhold").stdout.split()

    check = _run("check", "--profile", DRIVER_ONLY, str(lab.inventory), "--runs-dir", str(runs), "--json",
                 "--ask-become-pass", input=PASSWORD + "\n")
    assert check.exit_code == 0, check.output[-4000:]
    assert '"status": "ok"' in check.output

    # Three run folders, and the password in none of their files.
    assert len(list(runs.iterdir())) == 3
    assert _files_holding(runs, PASSWORD) == []
