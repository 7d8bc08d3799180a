"""gpu_provisioner.node.apt_hold: many packages held or released in one apt-mark call, run for
real on this machine (ansible-runner, local connection). The package it holds is one this
machine has installed and not held (the first of CANDIDATES); its selection is put back
whatever happens."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .ansibleplay import LOCAL, play

pytestmark = pytest.mark.ansible

CANDIDATES = ("make", "less", "gzip")


def _held() -> list[str]:
    return subprocess.run(["apt-mark", "showhold"], capture_output=True, text=True, check=True).stdout.split()


def _installed(name: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", name], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.startswith("ii")


@pytest.fixture
def package():
    if os.geteuid() != 0 or not shutil.which("apt-mark"):
        pytest.skip("apt_hold changes dpkg's selections: root on a Debian-family machine")
    name = next((n for n in CANDIDATES if _installed(n) and n not in _held()), None)
    if name is None:
        pytest.skip(f"none of {CANDIDATES} is installed and unheld here")
    try:
        yield name
    finally:
        subprocess.run(["apt-mark", "unhold", name], capture_output=True)


def _tasks(*steps: tuple[str, list[str], str]) -> list:
    """One play: a task per (name, packages, state), in order."""
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": name, "gpu_provisioner.node.apt_hold": {"name": names, "state": state}} for name, names, state in steps]}]


def _res(run, task: str) -> dict:
    return run.results(task)[0]["event_data"]["res"]


def test_holds_in_one_call_changes_nothing_the_second_time_and_releases(package: str, tmp_path: Path):
    check = play(tmp_path, "check", _tasks(("hold", [package], "held")), LOCAL, check=True)
    assert check.rc == 0 and _res(check, "hold")["changed_packages"] == [package]
    assert package not in _held(), "check mode changed nothing"

    run = play(tmp_path, "real", _tasks(("hold", [package], "held"), ("again", [package], "held")), LOCAL)
    assert run.rc == 0, run.stdout
    assert _res(run, "hold")["changed"] and _res(run, "hold")["changed_packages"] == [package]
    assert package in _res(run, "hold")["held"] and package in _held()
    assert not _res(run, "again")["changed"] and _res(run, "again")["changed_packages"] == []

    released = play(tmp_path, "release", _tasks(("release", [package, "no-such-package-here"], "released")), LOCAL)
    assert released.rc == 0 and _res(released, "release")["changed_packages"] == [package], "only what was held"
    assert package not in _held()


def test_a_name_that_is_not_a_package_name_fails_before_apt_mark_runs(tmp_path: Path):
    if os.geteuid() != 0 or not shutil.which("apt-mark"):
        pytest.skip("needs apt-mark")
    run = play(tmp_path, "bad", _tasks(("hold", ["--purge"], "held")), LOCAL)
    assert run.rc != 0
    assert "not a package name: --purge" in _res(run, "hold")["msg"]
