"""A rolling driver-version change on two converged lab hosts, from the stand-in for
NVIDIA's CUDA repository (which serves two 580 builds, 580.65.06 and 580.95.05): converge
both at 580.65.06, then `provision up --batch 1` with the built-in 580.95.05 and hooks that
log to a file. Each host's gate records which driver build both hosts have at that moment,
so the log proves the change went node by node: while the first host is gated on the new
build, the second still runs the old one, untouched.

What this proves: the rollout's order (drain, converge, verify, gate, undrain per host),
and that the held driver and fabric-manager packages move together to the new build and
stay held. What it cannot prove: stopping what holds a GPU, a module rebuild or a reboot
(the packages are empty stand-ins, containers share the controller's kernel and cannot
reboot)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import labtools
from .labtools import podman
from .test_production_path_lab import PROFILE, direct_to_standin, installed, standin  # noqa: F401 - a fixture

pytestmark = [pytest.mark.lab, pytest.mark.skip(reason=(
    "not run yet in CI: on 2026-12-01 its first converge passed but verify failed fabric manager and the exporter "
    "on GPU-less hosts; verify now skips both with the reason while no NVIDIA module is loaded "
    "(test_verify.py::test_services_that_wait_for_the_driver_module_are_not_faults_of_their_own), and this test has "
    "not been run since (two converges of two hosts each, ~10 min): unskip it once it has"))]

PROVISION = str(Path(sys.executable).parent / "provision")
OLD, NEW = "580.65.06", "580.95.05"
DRIVER = "nvidia-driver-580"


@pytest.fixture(scope="module")
def lab(standin, tmp_path_factory):  # noqa: F811 - the fixture imported above
    with labtools.lab_hosts(2, "rolldrv", tmp_path_factory) as result:
        direct_to_standin(result.hosts, standin[1])
        yield result


def _profiles(standin, folder: Path) -> tuple[Path, Path]:  # noqa: F811
    repo, url = standin
    text = PROFILE.format(url=url, key_url=f"{url}{repo.key_path}", fingerprint=repo.fingerprint)
    new = folder / "new.yml"
    new.write_text(text)
    old = folder / "old.yml"
    old.write_text(text.replace("name: h100-train-lab", "name: h100-train-lab-old")
                   + f"driver:\n  version: {OLD}\nfabric_manager:\n  version: {OLD}\n")
    return old, new


def _up(profile: Path, inventory: Path, runs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROVISION, "up", "--profile", str(profile), str(inventory), "--runs-dir", str(runs), *args],
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "COLUMNS": "200"})


def test_a_driver_change_rolls_node_by_node_and_moves_the_held_packages_together(lab, standin, tmp_path):  # noqa: F811
    one, two = (h.name for h in lab.hosts)
    old, new = _profiles(standin, tmp_path)
    runs = tmp_path / "runs"
    first = _up(old, lab.inventory, runs)
    assert first.returncode == 0, first.stdout + first.stderr
    for host in (one, two):
        assert installed(host, [DRIVER])[DRIVER].startswith(OLD)

    log = tmp_path / "hooks.log"
    versions = " ".join(f"{h}=$(podman exec {h} dpkg-query -W -f='${{Version}}' {DRIVER})" for h in (one, two))
    hook = f'echo "%s {{host}} {versions}" >> {log}'
    roll = _up(new, lab.inventory, runs, "--batch", "1", "--drain", hook % "drain", "--gate", hook % "gate",
               "--undrain", hook % "undrain")
    out = roll.stdout + roll.stderr
    assert roll.returncode == 0, out
    lines = log.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["drain", one], ["gate", one], ["undrain", one],
                                                    ["drain", two], ["gate", two], ["undrain", two]], lines
    gate_one = lines[1].split()[2:]
    assert gate_one[0].startswith(f"{one}={NEW}") and gate_one[1].startswith(f"{two}={OLD}"), lines  # node by node
    for host in (one, two):
        have = installed(host, [DRIVER, "nvidia-fabricmanager"])
        assert have[DRIVER].startswith(NEW) and have["nvidia-fabricmanager"].startswith(NEW), (host, have)
        held = set(podman("exec", host, "apt-mark", "showhold").stdout.split())
        assert {DRIVER, "nvidia-fabricmanager"} <= held, (host, held)
    assert "2 host(s): 2 ok (2 changed), 0 drifted, 0 failed, 0 unreachable" in out, out
