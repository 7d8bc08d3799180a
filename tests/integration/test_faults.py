"""Faults injected into a real test host (a lab host, reached over SSH): a nearly full
filesystem, a controller killed mid-install, dpkg's lock held by another process. In each case the run refuses or fails that host with the reason, touches nothing it should
not, and the host converges once the fault is gone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provisioner.engine import commands

from . import labtools
from .labtools import DRIVER_ONLY, podman, task_started

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("test hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

PROFILE = DRIVER_ONLY
HOST = f"t{os.getpid()}faults-1"  # the name labtools.lab_hosts gives the host below


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """One fresh lab host whose /opt is a 64 MiB tmpfs (a small separate filesystem), reached
    over SSH as the lab's sudo user, as every lab host; its inventory."""
    with labtools.lab_hosts(1, "faults", tmp_path_factory, run_args=("--tmpfs", "/opt:rw,size=64m,mode=0755")) as lab:
        assert lab.hosts[0].name == HOST
        yield lab.inventory


def installed(package: str) -> bool:
    # "install ok installed", or "hold ok installed" once the role has held it
    return podman("exec", HOST, "dpkg-query", "-W", "-f=${Status}", package).stdout.endswith(" ok installed")


def test_a_nearly_full_filesystem_is_refused_by_preflight_and_nothing_is_touched(host: Path, tmp_path: Path):
    podman("exec", HOST, "fallocate", "-l", "60M", "/opt/filler", check=True)
    try:
        report = commands.execute("up", commands.prepare(PROFILE, host), runs_dir=tmp_path)
    finally:
        podman("exec", HOST, "rm", "-f", "/opt/filler")
    assert report.exit_code != 0
    [result] = report.hosts
    disk = next(c for c in result.checks if c.name == "free disk")
    assert disk.status == "fail"
    assert disk.detail.startswith("/opt has 0 GiB free, the stack needs >= 10 GiB (10.0 GiB more)"), disk.detail
    assert result.changed_tasks == [], "a host that fails preflight must not be converged"
    assert not installed("nvidia-driver")


def small_disk_profile(folder: Path) -> Path:
    """/opt stays too small for the lab profile: the tests after the disk one lower the floor."""
    profile = folder / "lab-small-disk.yml"
    profile.write_text(f"extends: {PROFILE}\nname: lab-small-disk\ndescription: lab driver-only, tiny /opt\n"
                       "hardware:\n  min_free_disk_gib: 0\n")
    return profile


def _start_up(profile: Path, inventory: Path, runs: Path) -> subprocess.Popen:
    provision = str(Path(sys.executable).parent / "provision")
    return subprocess.Popen([provision, "up", "--profile", str(profile), str(inventory), "--runs-dir", str(runs), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_task(runs: Path, task: str, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Until the run's event stream shows `task` started on the host."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if task_started(runs, task):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    raise AssertionError(f"{task!r} never started")


INSTALL = "Install the driver packages at their exact versions"


def test_controller_killed_mid_install_loses_nothing_and_the_next_up_converges(host: Path, tmp_path: Path):
    profile = small_disk_profile(tmp_path)
    # Ctrl-C (SIGINT to the process group) while apt installs the driver.
    runs_int = tmp_path / "int"
    proc = _start_up(profile, host, runs_int)
    _wait_for_task(runs_int, INSTALL, proc)
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1
    [record] = runs_int.glob("*/report.json")
    saved = json.loads(record.read_text())
    assert saved["interrupted"] is True and "interrupted" in saved["verdict"]
    assert json.loads(out)["interrupted"] is True

    # SIGKILL of everything on the controller, again mid-install: no chance to write anything.
    runs_kill = tmp_path / "kill"
    proc = _start_up(profile, host, runs_kill)
    _wait_for_task(runs_kill, INSTALL, proc)
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    [record] = runs_kill.glob("*/report.json")
    assert json.loads(record.read_text())["interrupted"] is True  # written at the start, never finished

    # The next run repairs whatever apt/dpkg were left in (waiting for a dpkg still running
    # on the host, finishing a half-configured one) and converges.
    report = commands.execute("up", commands.prepare(str(profile), host), runs_dir=tmp_path / "after")
    assert report.exit_code == 0, report.as_dict()
    assert installed("nvidia-driver")
    assert podman("exec", HOST, "dpkg", "--audit").stdout == ""


def test_a_held_dpkg_lock_fails_the_host_after_the_bound_then_the_host_converges(host: Path, tmp_path: Path):
    profile = small_disk_profile(tmp_path)
    bounded = tmp_path / "hosts.ini"
    bounded.write_text(host.read_text().rstrip("\n") + "\ncommon_apt_lock_timeout=5\n")  # in [lab:vars], its last section
    locker = ("import fcntl, time\n"
              "f = open('/var/lib/dpkg/lock-frontend', 'r+')\n"
              "fcntl.lockf(f, fcntl.LOCK_EX)\n"
              "time.sleep(600)\n")
    # Independent of the tests before it: an apt or dpkg they left running on the shared host
    # (a killed controller's apt-get) is waited for, bounded, before this test takes the lock.
    idle = podman("exec", HOST, "sh", "-c", "for i in $(seq 300); do pgrep -x 'apt-get|apt|dpkg' >/dev/null "
                                            "|| exit 0; sleep 1; done; exit 1")
    assert idle.returncode == 0, "an apt/dpkg process kept running on the host for 300 s"
    podman("exec", "-d", HOST, "python3", "-c", locker, check=True)
    time.sleep(1)
    start = time.monotonic()
    # --full: the host may already be converged (the test before); the lock is met in common.
    report = commands.execute("up", commands.prepare(str(profile), bounded), runs_dir=tmp_path, full=True)
    took = time.monotonic() - start
    [result] = report.hosts
    assert report.exit_code == 1 and result.status == "failed"
    message = " ".join(result.failures)
    assert "dpkg is locked by pid" in message and "python3 -c import fcntl" in message, message
    assert "the bound is 5 s" in message
    assert took < 120, f"the bound is 5 s; the whole run took {took:.0f} s"
    assert result.changed_tasks == []  # nothing was touched on the host
    assert podman("exec", HOST, "dpkg", "--audit").stdout == ""

    podman("exec", HOST, "pkill", "-f", "fcntl.lockf")
    again = commands.execute("up", commands.prepare(str(profile), bounded), runs_dir=tmp_path, full=True)
    assert again.exit_code == 0, again.as_dict()
    assert installed("nvidia-driver")
