"""gpu_provisioner.node.apt_install: exact versions installed with one apt-get call, run for
real on this machine (ansible-runner, local connection) where nothing gets installed: a
package dpkg has at its version already is left alone (no apt-get run, no change, in check
mode too); check mode asks apt to simulate a version it does not offer and fails with apt's
own words, naming what it would have installed; anything that is not a package name (an
option, a shell word) is refused before apt-get runs. The real install is the converge's:
bench/converge.py and the lab's converge tests run it on lab hosts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .ansibleplay import LOCAL, play

pytestmark = pytest.mark.ansible

CANDIDATES = ("gzip", "tar", "coreutils")


@pytest.fixture
def installed() -> tuple[str, str]:
    """A package dpkg has installed here, and its version."""
    if not shutil.which("apt-get") or not shutil.which("dpkg-query"):
        pytest.skip("apt_install needs apt-get and dpkg-query (a Debian-family machine)")
    for name in CANDIDATES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}|${Version}", name], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.startswith("ii"):
            return name, r.stdout.split("|", 1)[1]
    pytest.skip(f"none of {CANDIDATES} is installed here")


def _install(items: list[str]) -> list:
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "install", "gpu_provisioner.node.apt_install": {"name": items, "allow_downgrade": True}}]}]


def _res(run) -> dict:
    return run.results("install")[0]["event_data"]["res"]


def test_a_package_at_its_version_already_changes_nothing_and_runs_no_apt(installed, tmp_path: Path):
    name, version = installed
    for check in (False, True):
        run = play(tmp_path, f"same-{check}", _install([f"{name}={version}", name]), LOCAL, check=check)
        assert run.rc == 0, run.stdout[-2000:]
        res = _res(run)
        assert res["changed"] is False and res["changed_packages"] == [] and "stdout" not in res


def test_check_mode_simulates_and_fails_on_a_version_apt_does_not_offer(installed, tmp_path: Path):
    name, version = installed
    missing = f"{name}=0.0.0-provisioner-test"
    run = play(tmp_path, "missing", _install([f"{name}={version}", missing]), LOCAL, check=True)
    assert run.rc != 0 and run.status("install") == ["failed"]
    res = _res(run)
    assert res["msg"].startswith("apt-get install --simulate failed") and "0.0.0-provisioner-test" in res["msg"]
    assert res["changed_packages"] == [missing]
    after = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True).stdout
    assert after == version


def test_a_version_glob_is_kept_when_the_installed_version_matches_and_refused_when_nothing_offered_matches(
        installed, tmp_path: Path):
    name, version = installed
    glob = f"{name}={version.rsplit('-', 1)[0]}-*" if "-" in version else f"{name}={version}*"
    run = play(tmp_path, "glob", _install([glob]), LOCAL, check=True)
    assert run.rc == 0, run.stdout[-2000:]
    assert _res(run)["changed"] is False and _res(run)["changed_packages"] == []
    run = play(tmp_path, "glob-none", _install([f"{name}=0.0.0-provisioner-*"]), LOCAL, check=True)
    assert run.rc != 0 and run.status("install") == ["failed"]
    assert f"no version of {name} matching 0.0.0-provisioner-* is offered" in _res(run)["msg"]


@pytest.mark.parametrize("bad", ["-o=APT::Get::Assume-Yes=1", "gzip; reboot", "gzip=1.0 $(id)", "", "Gzip", "gzip=*", "gzip=1.*.2"])
def test_refuses_what_is_not_a_package_or_package_version(tmp_path: Path, bad: str):
    run = play(tmp_path, "bad", _install(["gzip", bad]), LOCAL, check=True)
    assert run.rc != 0 and run.status("install") == ["failed"]
    assert "not a package or package=version" in _res(run)["msg"]


def _refresh(items: list[str], valid: int) -> list:
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "install", "gpu_provisioner.node.apt_install": {"name": items, "update_cache": True,
                                                                 "cache_valid_time": valid}}]}]


def test_the_lists_are_refreshed_only_when_older_than_cache_valid_time_and_a_refresh_alone_is_no_change(
        installed, tmp_path: Path):
    """Check mode only: a real `apt-get update` would change this controller's lists. The age
    is apt's own (the lists folder's mtime), as ansible.builtin.apt reads it."""
    name, version = installed
    lists = Path("/var/lib/apt/lists")
    if not lists.exists():
        pytest.skip("no /var/lib/apt/lists here")
    before = lists.stat().st_mtime
    stale = play(tmp_path, "stale", _refresh([f"{name}={version}"], 0), LOCAL, check=True)
    assert stale.rc == 0, stale.stdout[-2000:]
    assert _res(stale)["cache_updated"] is True and _res(stale)["changed"] is False
    fresh = play(tmp_path, "fresh", _refresh([f"{name}={version}"], 10 ** 9), LOCAL, check=True)
    assert fresh.rc == 0, fresh.stdout[-2000:]
    assert _res(fresh)["cache_updated"] is False and _res(fresh)["changed"] is False
    assert lists.stat().st_mtime == before  # check mode refreshed nothing
