"""How the plays become root: the options are checked before any host is touched, and the
password goes to Ansible without being written anywhere by us."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.engine.runner import BECOME_PROMPT, Become

from .conftest import DATA

DRIVER_ONLY = str(DATA / "profiles" / "lab-driver-only.yml")


def _check(tmp_path: Path, *extra: str):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nn1 ansible_host=192.0.2.1\n")
    return CliRunner().invoke(app, ["check", "--profile", DRIVER_ONLY, str(hosts), "--runs-dir",
                                    str(tmp_path / "runs"), *extra])


def test_a_missing_password_file_or_an_unknown_method_is_refused_before_any_run(tmp_path):
    r = _check(tmp_path, "--become-password-file", str(tmp_path / "nope"))
    assert r.exit_code == 1 and "cannot read the become password file" in r.output, r.output
    r = _check(tmp_path, "--become-method", "sudoo")
    assert r.exit_code == 1 and "not a become method" in r.output, r.output
    password_file = tmp_path / "pw"
    password_file.write_text("x\n")
    r = _check(tmp_path, "--ask-become-pass", "--become-password-file", str(password_file))
    assert r.exit_code == 1 and "both give the become password" in r.output, r.output
    assert not (tmp_path / "runs").exists()


def test_what_ansible_playbook_is_told(tmp_path):
    assert Become().cmdline() == ["--become-method", "sudo"] and Become().expect() == {}
    from_file = Become("doas", tmp_path / "pw")
    assert from_file.cmdline() == ["--become-method", "doas", "--become-password-file", str(tmp_path / "pw")]
    assert from_file.expect() == {}
    typed = Become("sudo", password="s3cret")
    assert typed.cmdline() == ["--become-method", "sudo", "--ask-become-pass"]
    assert typed.expect() == {BECOME_PROMPT: "s3cret"}
    assert "s3cret" not in repr(typed)


def test_a_password_file_others_can_read_or_ansible_would_execute_is_refused(tmp_path):
    # issue 28, item 15: Ansible runs an executable --become-password-file and takes its output
    password_file = tmp_path / "pw"
    password_file.write_text("#!/bin/sh\necho s3cret\n")
    for mode, why in ((0o755, "is executable"), (0o700, "is executable"), (0o640, "read or written by group or others"),
                      (0o604, "read or written by group or others"), (0o620, "read or written by group or others")):
        password_file.chmod(mode)
        r = _check(tmp_path, "--become-password-file", str(password_file))
        assert r.exit_code == 1 and why in r.output and "chmod 600" in r.output, (oct(mode), r.output)
    r = _check(tmp_path, "--become-password-file", "/dev/null")
    assert r.exit_code == 1 and "not a regular file" in r.output, r.output
    assert not (tmp_path / "runs").exists()
    password_file.chmod(0o600)
    from provisioner.cli.options import parse_become

    assert parse_become(False, password_file, "sudo") == Become("sudo", password_file.resolve())
