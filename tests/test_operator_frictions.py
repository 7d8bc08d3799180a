"""Issue 33's frictions, each held by a test: options that were taken and ignored, -v counted as
Ansible counts it, up's grouped help, and one clear error (exit 1, the fix, no traceback) for
the become prompt without a terminal and for swapped profile and inventory arguments. The
profile side (`extends` inherits `description`, a folder as a profile) is in test_profiles.py."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.errors import ProvisionError
from provisioner.reports.report import HostReport, Report
from provisioner.reports.table import CHANGES_SHOWN, render_table

from .conftest import DATA, REPO

runner = CliRunner()
DRIVER_ONLY = str(DATA / "profiles" / "lab-driver-only.yml")


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.ini"
    path.write_text("[gpu]\nn1 ansible_host=192.0.2.1\n")
    return path


@pytest.fixture
def captured(monkeypatch):
    """commands.prepare and commands.execute replaced: what execute was given, and the
    environment it ran in, without touching a host or starting Ansible."""
    from provisioner.engine import commands

    seen: dict = {}

    def execute(command, target, **options):
        seen.update(options, command=command, ansible_verbosity=os.environ.get("ANSIBLE_VERBOSITY"))
        raise ProvisionError("stopped by the test")

    target = SimpleNamespace(inventory=SimpleNamespace(dropped_secrets=()), loaded=SimpleNamespace(warnings=()))
    monkeypatch.setattr(commands, "prepare", lambda profile, inventory, *args, **kwargs: target)
    monkeypatch.setattr(commands, "execute", execute)
    monkeypatch.delenv("ANSIBLE_VERBOSITY", raising=False)
    return seen


@pytest.mark.parametrize("extra", [["--batch", "2"], ["--max-fail", "10%"], ["--batch", "1", "--max-fail", "0"]])
def test_plain_check_refuses_batch_and_max_fail(hosts, tmp_path, captured, extra):
    result = runner.invoke(app, ["check", "-p", DRIVER_ONLY, str(hosts), "--runs-dir", str(tmp_path / "runs"), *extra])
    assert result.exit_code == 1, result.output
    assert "apply to check --deep" in result.output and "fix: drop --batch/--max-fail, or add --deep" in result.output
    assert "Traceback" not in result.output and captured == {}  # refused before anything ran
    assert not (tmp_path / "runs").exists()


def test_check_deep_still_takes_batch_and_max_fail(hosts, tmp_path, captured):
    result = runner.invoke(app, ["check", "--deep", "-p", DRIVER_ONLY, str(hosts), "--runs-dir", str(tmp_path),
                                 "--batch", "2", "--max-fail", "10%"])
    assert "stopped by the test" in result.output, result.output
    assert captured["command"] == "check" and captured["deep"] is True
    assert captured["batch"] == "2" and captured["max_fail"] == 10


@pytest.mark.parametrize(("flags", "ansible"), [([], None), (["-v"], None), (["-vv"], None), (["-vvv"], "3"),
                                                (["-v", "-v", "-v", "-v"], "4"), (["--verbose"] * 3, "3")])
def test_v_is_counted_and_from_vvv_reaches_ansible(hosts, tmp_path, captured, flags, ansible):
    result = runner.invoke(app, ["verify", "-p", DRIVER_ONLY, str(hosts), "--runs-dir", str(tmp_path), *flags])
    assert "stopped by the test" in result.output, result.output
    assert captured["ansible_verbosity"] == ansible
    assert "ANSIBLE_VERBOSITY" not in os.environ  # only while the command ran


def _report_with_changes(tmp_path: Path, count: int) -> Report:
    report = Report("up", "p", "f" * 64, "hosts.ini", tmp_path, started="2026-12-01T12:00:00Z")
    report.hosts.append(HostReport("n1", "changed", changed_tasks=[f"task {i}" for i in range(count)]))
    return report


def _printed(report: Report, verbose: int) -> str:
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    render_table(report, console, verbose=verbose)
    return console.file.getvalue()


def test_v_shows_the_first_changed_tasks_and_vv_every_one(tmp_path):
    report = _report_with_changes(tmp_path, CHANGES_SHOWN + 4)
    assert "task 0" not in _printed(report, 0)  # no table without -v
    one = _printed(report, 1)
    assert f"task {CHANGES_SHOWN - 1}" in one and f"task {CHANGES_SHOWN}" not in one and "… 4 more (-vv)" in one
    two = _printed(report, 2)
    assert f"task {CHANGES_SHOWN + 3}" in two and "more (-vv)" not in two


def test_up_help_groups_its_options_in_panels():
    result = runner.invoke(app, ["up", "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert result.exit_code == 0
    text = result.output
    panels = {"Which hosts, how many at a time": ("--limit", "--batch", "--max-fail"),
              "Output and records": ("--json", "--verbose", "--runs-dir"),
              "Becoming root": ("--ask-become-pass", "--become-password-file"),
              "How up converges": ("--full", "--strict"),
              "Rolling changes and rollback": ("--drain", "--gate", "--undrain", "--resume", "--rollback")}
    starts = {title: text.index(title) for title in panels}  # every panel is there
    order = sorted(starts, key=starts.get)
    for title, options in panels.items():
        following = [starts[t] for t in order if starts[t] > starts[title]]
        section = text[starts[title]:min(following, default=len(text))]
        for option in options:
            assert option in section, f"{option} not under {title!r}"


def test_ask_become_pass_without_a_terminal_says_why_and_names_the_password_file(hosts, tmp_path):
    # A new session has no controlling terminal, and stdin is empty: what cron and CI give.
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    run = subprocess.run([sys.executable, "-m", "provisioner.cli", "check", "-K", "-p", DRIVER_ONLY, str(hosts),
                          "--runs-dir", str(tmp_path / "runs")], stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, env=env, start_new_session=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "no terminal to ask on" in run.stderr and "--become-password-file" in run.stderr
    assert "GetPassWarning" not in run.stderr and "Aborted" not in run.stderr and "Traceback" not in run.stderr


def test_a_profile_given_as_the_inventory_is_named(tmp_path):
    profile = tmp_path / "mine.yml"
    profile.write_text("extends: h100-train\nname: mine\n")
    result = runner.invoke(app, ["up", "-p", "h100-train", str(profile), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1, result.output
    assert "this is a profile, not an inventory" in result.output and "--profile mine.yml" in result.output
    assert "WARNING" not in result.output and "host line" not in result.output


@pytest.mark.parametrize("ref", ["hosts.ini", "./hosts.ini"])
def test_an_inventory_given_as_the_profile_is_named(hosts, tmp_path, monkeypatch, ref):
    monkeypatch.chdir(hosts.parent)
    result = runner.invoke(app, ["check", "-p", ref, str(hosts), "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1, result.output
    assert "is an Ansible inventory, not a profile" in result.output and "Traceback" not in result.output
