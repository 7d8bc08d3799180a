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
    """Two hosts started from the image of a host `provision up` converged with PROFILE
    (provisioner.lab.converged): these tests need converged hosts, not the converge."""
    if not list(WHEELHOUSE.glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip(f"no torch 2.13.0+cpu wheel for Python 3.11 in {WHEELHOUSE} (set PROVISIONER_WHEELHOUSE)")
    with labtools.lab_hosts(2, "dist", tmp_path_factory, converged=PROFILE) as result:
        yield result


def test_diagnose_finds_an_unheld_driver_package_and_a_stopped_unit_within_its_size_bound(lab, tmp_path: Path):
    victim, clean = (h.name for h in lab.hosts)
    target = commands.prepare(PROFILE, lab.inventory)
    # --dry-run against the lab's inventory: the command list, and no host contacted (no run folder).
    from typer.testing import CliRunner

    from provisioner.cli import app

    dry = CliRunner().invoke(app, ["diagnose", "-p", PROFILE, str(lab.inventory), "--dry-run",
                                   "--runs-dir", str(tmp_path / "dry")], env={"COLUMNS": "300"})
    assert dry.exit_code == 0, dry.output
    assert "nvidia-smi dmon -s pcu -c 5 -d 1" in dry.output and "apt-mark showhold" in dry.output
    assert not (tmp_path / "dry").exists()
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


def _verify(profile: str, inventory: Path, runs: Path, **options):
    return commands.execute("verify", commands.prepare(profile, inventory), runs_dir=runs, **options)


def _variant(tmp_path: Path, name: str, network: str) -> str:
    """lab-ddp with another network section (floors, time-outs), as a user's own profile would."""
    path = tmp_path / f"{name}.yml"
    path.write_text(f"extends: {PROFILE}\nname: {name}\ndescription: lab-ddp, {name}\nnetwork:\n{network}")
    return str(path)


def _listening(host: str, port: int) -> str:
    return podman("exec", host, "ss", "-Htln", f"sport = :{port}").stdout.strip()


def test_verify_network_passes_a_floor_below_the_measured_bandwidth_and_fails_one_above(lab, tmp_path: Path):
    a, b = (h.name for h in lab.hosts)
    started = time.monotonic()
    low = _verify(PROFILE, lab.inventory, tmp_path, network=True)
    took = time.monotonic() - started
    checks = {h.name: {c.name: c for c in h.checks} for h in low.hosts}
    print(f"verify --network, 2 lab hosts: {took:.1f} s; " + "; ".join(
        f"{c.name}: {c.detail}" for h in checks.values() for c in h.values() if c.name.startswith("network")))
    assert low.exit_code == 0, low.as_dict()
    ab, ba = checks[a][f"network {a} -> {b}"], checks[b][f"network {b} -> {a}"]
    assert ab.status == ba.status == "pass" and "floor 0.05 Gb/s" in ab.detail
    measured = float(ab.detail.split(" Gb/s")[0])
    assert measured > 0.05
    # The check opened nothing that stays: no iperf3 server listens on either host afterwards.
    assert _listening(a, 5301) == "" and _listening(b, 5301) == ""
    assert "iperf3" not in podman("exec", a, "ps", "-eo", "comm").stdout
    # The package's own server unit (every interface) is kept off by the network role.
    assert podman("exec", a, "systemctl", "is-enabled", "iperf3").stdout.strip() == "disabled"

    above = _variant(tmp_path, "lab-ddp-high-floor", f"  min_gbps: {measured * 50:.0f}\n")
    high = _verify(above, lab.inventory, tmp_path, network=True)
    assert high.exit_code == 2, high.as_dict()
    failed = {h.name: {c.name: c for c in h.checks} for h in high.hosts}[a][f"network {a} -> {b}"]
    assert failed.status == "fail" and f"floor {measured * 50:.0f} Gb/s" in failed.detail


def test_verify_ddp_runs_gloo_on_two_hosts_and_names_a_host_lost_mid_job(lab, tmp_path: Path):
    import threading

    a, b = (h.name for h in lab.hosts)
    seen: list[str] = []
    stop = threading.Event()

    def watch_the_rendezvous_port():  # what listens on the rendezvous host while the job runs
        while not stop.is_set():
            line = _listening(a, 29600)
            if line:
                seen.append(line)
            time.sleep(0.5)

    watcher = threading.Thread(target=watch_the_rendezvous_port, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        ok = _verify(PROFILE, lab.inventory, tmp_path, ddp=True)
    finally:
        stop.set()
        watcher.join(timeout=10)
    took = time.monotonic() - started
    checks = {h.name: {c.name: c for c in h.checks} for h in ok.hosts}
    print(f"verify --ddp, 2 lab hosts: {took:.1f} s; " + "; ".join(
        f"{n}: {c[k].detail}" for n, c in checks.items() for k in ("ddp backend", "ddp")))
    assert ok.exit_code == 0, ok.as_dict()
    for name in (a, b):
        assert checks[name]["ddp backend"].status == "pass" and "gloo" in checks[name]["ddp backend"].detail
        assert "world size 2 on 2 host(s)" in checks[name]["ddp backend"].detail
        assert "bus bandwidth" in checks[name]["ddp"].detail
    # The rendezvous listened on a's address under test only, and nothing is left behind.
    address = lab.hosts[0].ip
    assert seen and all(line.split()[3] == f"{address}:29600" for line in seen), seen
    assert _listening(a, 29600) == ""

    # A host lost mid-job: the other names it, within its bounded time, not a hang.
    quick = _variant(tmp_path, "lab-ddp-quick", "  ddp:\n    port: 29600\n    steps: 3\n    tensor_mib: 4\n"
                                                "    timeout_s: 20\n")
    done: list[bool] = []
    runs = tmp_path / "lost"  # its own runs folder: the watcher must not see the first job's events
    runs.mkdir()

    def kill_when_the_job_starts():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not done:
            if labtools.task_started(runs, "Run this host's part of the DDP job", b, playbook="ddp"):
                time.sleep(2)
                podman("kill", b)
                return
            time.sleep(0.3)

    watcher = threading.Thread(target=kill_when_the_job_starts, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        lost = _verify(quick, lab.inventory, runs, ddp=True)
        took = time.monotonic() - started
    finally:
        done.append(True)
        watcher.join(timeout=10)
        from provisioner import lab as lab_mod

        lab_mod.up(2, lab.prefix, lab.inventory.parent)  # b back, for whoever comes next
    by_name = {h.name: h for h in lost.hosts}
    print(f"verify --ddp with {b} killed mid-job: {took:.1f} s; {a}: "
          + "; ".join(c.detail for c in by_name[a].checks if c.name == "ddp"))
    assert podman("inspect", "-f", "{{.State.Running}}", b).stdout.strip() == "true"  # restarted after the kill
    assert lost.exit_code == 1 and by_name[b].status == "unreachable"
    survivor = {c.name: c for c in by_name[a].checks}["ddp"]
    assert survivor.status == "fail" and f"lost during the job: {b}" in survivor.detail
    # Bounded: the job's own bound (2 x timeout_s + 60 = 100 s) and the play around it (the
    # GPU verify step first), on a busy 2-core machine; gloo's default wait alone is 30 minutes.
    assert took < 300, took
