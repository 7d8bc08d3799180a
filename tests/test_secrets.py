"""Secrets given in an inventory never reach a rendered file or a run record, and run
records are owner-only."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.engine import commands

pytestmark = pytest.mark.ansible

PLANTED = "planted-s3cret-9f1c"


def test_planted_secrets_are_nowhere_in_the_run_record(tmp_path: Path):
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


def test_run_records_are_owner_only(tmp_path: Path, local_inventory: Path):
    report = commands.execute("preflight", commands.prepare("debian12-lab", local_inventory), runs_dir=tmp_path / "runs")
    for path in [report.run_dir, *report.run_dir.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
