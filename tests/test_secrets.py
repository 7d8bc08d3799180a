"""Secrets given in an inventory never reach a rendered file or a run record, and run
records are owner-only."""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from provisioner.engine import commands

pytestmark = pytest.mark.ansible

PLANTED = "planted-s3cret-9f1c"


def test_planted_secrets_are_nowhere_in_the_run_record(tmp_path: Path, monkeypatch):
    # In the controller's environment too (issue 28, item 10): ansible-runner recorded the
    # whole environment in artifacts/*/command; only the allowed names reach Ansible now.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", f"{PLANTED}-aws")
    monkeypatch.setenv("HF_TOKEN", f"{PLANTED}-hf")
    # An allowed name carrying a secret in its value (issue 28, item 15): Ansible gets the
    # proxy's password while it runs, the run folder's record of the environment does not.
    monkeypatch.setenv("https_proxy", f"http://ops:{PLANTED}-proxy@proxy.invalid:3128")
    monkeypatch.setenv("no_proxy", "*")
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(
        "[local]\n"
        f'localhost ansible_connection=local ansible_python_interpreter="{{{{ ansible_playbook_python }}}}" '
        f"ansible_become_password={PLANTED}-become ansible_ssh_pass={PLANTED}-ssh\n"
        f"[local:vars]\nregistry_token={PLANTED}-token\n"
    )
    report = commands.execute("preflight", commands.prepare("debian12-lab", hosts), runs_dir=tmp_path / "runs")
    assert report.exit_code == 0, report.as_dict()
    files = [p for p in report.run_dir.rglob("*") if p.is_file()]
    assert len(files) > 10  # inventory, profile, report and the runner's events
    for path in files:
        assert PLANTED not in path.read_text(errors="replace"), f"secret leaked into {path}"
    (command,) = report.run_dir.glob("artifacts/*/command")
    env = json.loads(command.read_text())["env"]
    assert "PATH" in env and "ANSIBLE_CONFIG" in env and "AWS_SECRET_ACCESS_KEY" not in env, sorted(env)
    assert env["https_proxy"] == "http://[redacted by provision]@proxy.invalid:3128"
    assert command.stat().st_mode & 0o777 == 0o600


def test_the_environment_allow_list_and_its_extension(monkeypatch):
    from provisioner.engine.runner import allowed_env

    env = {"PATH": "/bin", "HOME": "/root", "LC_ALL": "C.UTF-8", "https_proxy": "http://proxy:3128",
           "ANSIBLE_CONFIG": "/x/ansible.cfg", "RUNNER_OMIT_EVENTS": "False", "SSH_AUTH_SOCK": "/run/agent",
           "AWS_SECRET_ACCESS_KEY": "k", "GITHUB_TOKEN": "t", "MY_SITE_VAR": "v"}
    assert sorted(allowed_env(env)) == ["ANSIBLE_CONFIG", "HOME", "LC_ALL", "PATH", "RUNNER_OMIT_EVENTS",
                                        "SSH_AUTH_SOCK", "https_proxy"]
    monkeypatch.setenv("PROVISION_PASS_ENV", "MY_SITE_VAR")
    assert "MY_SITE_VAR" in allowed_env(env) and "GITHUB_TOKEN" not in allowed_env(env)


def test_run_records_are_owner_only(tmp_path: Path, local_inventory: Path):
    report = commands.execute("preflight", commands.prepare("debian12-lab", local_inventory), runs_dir=tmp_path / "runs")
    for path in [report.run_dir, *report.run_dir.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
