"""`provision up`, `check` and drift against real lab hosts (podman systemd containers):
a fleet run with one host down from the start and one lost mid-install, on fresh hosts;
drift, its repair and a cut-off dpkg run on hosts started converged."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.engine import commands

from . import labtools
from .labtools import DRIVER_ONLY, podman, task_started

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

PROFILE = DRIVER_ONLY
DRIVER = profiles.load(PROFILE).profile.driver.version


@pytest.fixture(scope="module")
def lab_hosts(tmp_path_factory):
    """Three fresh lab hosts for the fleet test: it is about converging them."""
    with labtools.lab_hosts(3, "up", tmp_path_factory) as result:
        yield result


@pytest.fixture(scope="module")
def converged_lab(tmp_path_factory):
    """Two hosts started from the image of a host `provision up` converged with PROFILE
    (provisioner.lab.converged): the drift tests need converged hosts, not a converge. Two:
    one to drift, one that must stay untouched."""
    with labtools.lab_hosts(2, "upc", tmp_path_factory, converged=PROFILE) as result:
        yield result


def run(command: str, inventory: Path, runs: Path, **options):
    return commands.execute(command, commands.prepare(PROFILE, inventory), runs_dir=runs, **options)


INSTALL = "Install the driver packages at their exact versions"


def _kill_when_task_starts(runs: Path, host: str, task: str, done: threading.Event) -> threading.Thread:
    """Kill the host's container as soon as the run's event stream shows `task` started on it."""

    def watch():
        while not done.is_set():
            if task_started(runs, task, host):
                time.sleep(3)  # let apt get going
                podman("kill", host)
                return
            time.sleep(0.5)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_fleet_with_hosts_lost_before_and_during_the_run_converges_the_rest(lab_hosts, tmp_path: Path):
    from provisioner import lab

    ok, lost, down = (h.name for h in lab_hosts.hosts)
    podman("stop", "-t", "2", down)  # unreachable from the start
    done = threading.Event()
    watcher = _kill_when_task_starts(tmp_path, lost, INSTALL, done)  # goes away while apt installs the driver
    try:
        report = run("up", lab_hosts.inventory, tmp_path)
    finally:
        done.set()
    watcher.join(timeout=10)
    by_name = {h.name: h for h in report.hosts}
    assert podman("inspect", "-f", "{{.State.Running}}", lost).stdout.strip() == "false", "the kill never happened"
    assert report.exit_code == 1
    assert by_name[down].status == "unreachable"
    assert by_name[lost].status == "unreachable", by_name[lost]
    assert any(f"unreachable during '{INSTALL}" in f for f in by_name[lost].failures), by_name[lost].failures
    assert by_name[ok].status == "changed", by_name[ok]
    assert all(c.status != "fail" for c in by_name[ok].checks)
    assert report.retry_command().endswith(f"--limit {','.join(sorted([lost, down]))}")
    assert down in report.verdict and lost in report.verdict

    # Bring both back (lab up restarts stopped hosts and rewrites the inventory), retry just
    # them: the one cut off mid-install has its dpkg run finished first.
    again = lab.up(3, lab_hosts.prefix, lab_hosts.inventory.parent)
    retry = run("up", again.inventory, tmp_path, limit=f"{lost},{down}")
    assert retry.exit_code == 0, retry.as_dict()
    assert sorted(h.name for h in retry.hosts) == sorted([lost, down])
    assert podman("exec", lost, "dpkg", "--audit").stdout == ""


def test_second_up_changes_nothing_then_check_finds_exactly_the_drift(converged_lab, tmp_path: Path):
    lab_hosts = converged_lab
    inventory = lab_hosts.inventory
    # The hosts started converged: the image is made only from a host whose second full
    # converge changed nothing (lab.converged); the check-mode converge is below.
    # The default: the survey (preflight and verification in one module call per host)
    # finds each host in its recorded state, skips the converge and verifies it from that
    # same call: one playbook, nothing after it.
    second = run("up", inventory, tmp_path)
    assert second.exit_code == 0, second.as_dict()
    assert sorted(p.name for p in (second.run_dir / "artifacts").iterdir()) == ["survey"]
    for host in second.hosts:
        assert host.changed_tasks == [] and any(c.name == "converge" and "skipped" in c.detail for c in host.checks)
        assert {"os", "free disk", "driver module", "exporter metrics"} <= {c.name for c in host.checks}
        # verify's GPU check (preflight's is named alike): a GPU-less host says so, and passes.
        assert any(c.name == "gpus" and c.status == "pass" and "no GPU present" in c.detail for c in host.checks)

    clean = run("check", inventory, tmp_path)
    assert clean.exit_code == 0, clean.as_dict()
    assert {h.status for h in clean.hosts} == {"ok"}

    # Out of band, on the first host only: delete two managed files, remove a hold, stop
    # and disable the persistence daemon (the one unit a GPU-less lab host keeps enabled),
    # and move a pinned driver package to the archive's other version.
    victim = lab_hosts.hosts[0].name
    podman("exec", victim, "rm", "/etc/modprobe.d/provisioner-blacklist-nouveau.conf",
           "/etc/apt/apt.conf.d/51provisioner-unattended-upgrades")
    assert podman("exec", victim, "apt-mark", "unhold", "nvidia-smi").returncode == 0
    assert podman("exec", victim, "systemctl", "disable", "--now", "nvidia-persistenced").returncode == 0
    older = podman("exec", victim, "sh", "-c", "apt-cache madison nvidia-legacy-check | awk '{print $3}' | grep -v '^" +
                   DRIVER + "-' | head -1").stdout.strip()
    assert older, "the archive should offer another nvidia-legacy-check version"
    moved = podman("exec", victim, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
                   "--allow-downgrades", "--allow-change-held-packages", "--no-install-recommends",
                   f"nvidia-legacy-check={older}")
    assert moved.returncode == 0, moved.stdout + moved.stderr

    # The fast check (one module call per host) names each item.
    drift = run("check", inventory, tmp_path)
    assert drift.exit_code == 2
    by_name = {h.name: h for h in drift.hosts}
    assert by_name[victim].status == "drift"
    assert sorted(by_name[victim].changed_tasks) == sorted([
        "file /etc/apt/apt.conf.d/51provisioner-unattended-upgrades deleted",
        "file /etc/modprobe.d/provisioner-blacklist-nouveau.conf deleted",
        "hold removed: nvidia-smi",
        "unit nvidia-persistenced.service enabled",
        "package nvidia-legacy-check",
    ])
    # apt-get drops the hold of a package it installs at another version: both are said.
    legacy = by_name[victim].diffs["package nvidia-legacy-check"]
    assert legacy.startswith(f"recorded: {DRIVER}-") and legacy.endswith(f" (held); now: {older} (not held)"), legacy
    assert by_name[victim].diffs["unit nvidia-persistenced.service enabled"] == "recorded: enabled; now: disabled"
    assert {by_name[h.name].status for h in lab_hosts.hosts[1:]} == {"ok"}

    # The deep check (the converge in check mode) names the tasks that would repair them.
    deep = run("check", inventory, tmp_path, deep=True)
    assert deep.exit_code == 2
    by_name = {h.name: h for h in deep.hosts}
    assert sorted(by_name[victim].changed_tasks) == sorted([
        "Keep unattended-upgrades away from the GPU driver and libraries.",
        "Blacklist nouveau so the NVIDIA module can bind the GPUs (a file only; also in a container, "
        "whose image may boot a host).",
        "Hold every driver package so apt upgrade cannot move it.",
        "Enable the persistence daemon (started only on a real host with its module loaded).",
        "Put driver packages that moved off their pinned version back on it.",
    ])
    assert "Package-Blacklist" in by_name[victim].diffs["Keep unattended-upgrades away from the GPU driver and libraries."]
    assert {by_name[h.name].status for h in lab_hosts.hosts[1:]} == {"ok"}
    # neither check changed the host
    assert older in podman("exec", victim, "dpkg-query", "-W", "-f=${Version}", "nvidia-legacy-check").stdout

    repaired = run("up", inventory, tmp_path, limit=victim)
    assert repaired.exit_code == 0, repaired.as_dict()
    # A drifted host: surveyed, converged, then verified again after its converge.
    assert sorted(p.name for p in (repaired.run_dir / "artifacts").iterdir()) == ["site", "survey", "verify"]
    assert podman("exec", victim, "dpkg-query", "-W", "-f=${Version}", "nvidia-legacy-check").stdout.startswith(DRIVER + "-")
    assert "nvidia-smi" in podman("exec", victim, "apt-mark", "showhold").stdout.split()
    assert podman("exec", victim, "systemctl", "is-enabled", "nvidia-persistenced").stdout.strip() == "enabled"
    assert run("check", inventory, tmp_path).exit_code == 0

    # The record itself gone, or the profile edited since: said as such.
    podman("exec", victim, "rm", "/etc/ansible/facts.d/provisioner.fact")
    never = {h.name: h for h in run("check", inventory, tmp_path).hosts}[victim]
    assert any(c.name == "recorded profile" and "never converged" in c.detail for c in never.checks)
    assert run("up", inventory, tmp_path, limit=victim).exit_code == 0
    edited = tmp_path / "edited.yml"
    edited.write_text(Path(PROFILE).read_text().replace("description: ", "description: edited; ", 1))
    changed = commands.execute("check", commands.prepare(str(edited), inventory), runs_dir=tmp_path)
    assert changed.exit_code == 2
    assert all(any(c.name == "recorded profile" and "the profile changed" in c.detail for c in h.checks)
               for h in changed.hosts)
    assert run("check", inventory, tmp_path).exit_code == 0


def test_up_finishes_a_dpkg_run_that_was_cut_off(converged_lab, tmp_path: Path):
    """A package left unpacked but not configured (what a killed apt leaves) is repaired first."""
    host = converged_lab.hosts[1].name  # the drift test leaves this one untouched
    cut = podman("exec", host, "sh", "-c",
                 "cd /tmp && apt-get download -q hello >/dev/null && dpkg --unpack hello_*.deb >/dev/null && dpkg --audit")
    assert "hello" in cut.stdout, cut.stderr
    report = run("up", converged_lab.inventory, tmp_path, limit=host)
    assert report.exit_code == 0, report.as_dict()
    assert "Finish the interrupted dpkg run before anything else is installed." in report.hosts[0].changed_tasks
    assert podman("exec", host, "dpkg", "--audit").stdout == ""
    assert "install ok installed" in podman("exec", host, "dpkg-query", "-W", "-f=${Status}", "hello").stdout
