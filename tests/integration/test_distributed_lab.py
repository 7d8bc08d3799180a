"""`provision diagnose`, `verify --network` and `verify --ddp` against two real lab hosts
(podman systemd containers) converged with tests/data/profiles/lab-ddp.yml: the driver
packages, the CPU torch wheel in a venv, iperf3.

    sudo .venv/bin/pytest -q tests/integration/test_distributed_lab.py   # a few minutes
"""

from __future__ import annotations

import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from provisioner.engine import commands
from provisioner.engine import diagnose as diagnose_engine

from . import labtools
from .labtools import podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "tests" / "data" / "profiles" / "lab-ddp.yml")
WHEELHOUSE = Path(os.environ.get("PROVISIONER_WHEELHOUSE") or "/opt/wheels")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Two fresh lab hosts converged with PROFILE (the converge is timed and printed)."""
    if not list(WHEELHOUSE.glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip(f"no torch 2.13.0+cpu wheel for Python 3.11 in {WHEELHOUSE} (set PROVISIONER_WHEELHOUSE)")
    with labtools.lab_hosts(2, "dist", tmp_path_factory) as result:
        started = time.monotonic()
        report = commands.execute("up", commands.prepare(PROFILE, result.inventory),
                                  runs_dir=tmp_path_factory.mktemp("converge"))
        assert report.exit_code == 0, report.as_dict()
        print(f"converge of 2 lab hosts with lab-ddp: {time.monotonic() - started:.0f} s")
        yield result


def test_diagnose_finds_an_unheld_driver_package_and_a_stopped_unit_within_its_size_bound(lab, tmp_path: Path):
    victim, clean = (h.name for h in lab.hosts)
    target = commands.prepare(PROFILE, lab.inventory)
    assert podman("exec", victim, "apt-mark", "unhold", "nvidia-kernel-dkms").returncode == 0
    assert podman("exec", victim, "systemctl", "disable", "--now", "nvidia-persistenced").returncode == 0
    try:
        started = time.monotonic()
        bound = 256 * 1024
        result = diagnose_engine.diagnose(target, runs_dir=tmp_path, max_host_bytes=bound)
        took = time.monotonic() - started
    finally:  # the host back as converged, for the tests after this one
        podman("exec", victim, "apt-mark", "hold", "nvidia-kernel-dkms")
        podman("exec", victim, "systemctl", "enable", "nvidia-persistenced")
    print(f"diagnose of 2 lab hosts: {took:.1f} s\n{result.summary}")
    assert result.exit_code == 2
    by_name = {h.name: h for h in result.hosts}
    faults = by_name[victim].faults
    assert [f.title for f in faults] == [
        "driver package nvidia-kernel-dkms is no longer held: apt upgrade can move it away from the rest of the driver",
        "unit nvidia-persistenced.service was disabled since the last converge"]
    assert "apt-mark showhold: nvidia-kernel-dkms is not listed" in faults[0].evidence
    assert any("UnitFileState=disabled" in line for line in faults[1].evidence)
    assert not by_name[clean].faults
    # A GPU-less host says what it could not collect, and why.
    for host in result.hosts:
        assert any(why.startswith("nvidia-smi -q: no GPU to read") and "container" in why for why in host.not_collected)
        assert any(why.startswith("ibstat: not run") for why in host.not_collected)
    # One tarball: the summary printed, a file per command, each host within its bound.
    with tarfile.open(result.tarball) as tar:
        members = tar.getmembers()
        summary = tar.extractfile("diagnose/summary.md").read().decode()
    assert summary == result.summary and f"## {victim}" in summary and "### FAULT: driver package" in summary
    for host in (victim, clean):
        sent = sum(m.size for m in members if m.name.startswith(f"diagnose/{host}/")
                   and m.name.rsplit("/", 1)[-1] not in ("findings.json", "state-diff.json"))
        assert 0 < sent <= bound + 8192, (host, sent)  # the bound, plus each file's two header lines
    assert result.tarball.stat().st_size < 64 * 1024
    assert result.tarball.parent == result.collection.run_dir
