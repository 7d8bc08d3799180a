"""The InfiniBand stack on one real lab host (tests/data/profiles/lab-infiniband.yml: the
driver-only lab profile with hardware.infiniband and network.gpudirect_rdma: nvidia-peermem):
`provision up`, on a host that was converged with the driver-only profile, installs Debian's rdma-core, ibverbs-utils, infiniband-diags and perftest and
writes the modules-load.d file that loads nvidia-peermem at boot; a second full converge
changes nothing, the check-mode converge finds nothing to do, and `check` names a package
removed behind its back.

What a container cannot prove: it has no HCA (verify says so: a skip with the reason, never a
pass) and loads no kernel module (systemd-modules-load does not run in it), so the port
states, the rate and nvidia-peermem actually loading are judged on real captures in
tests/test_infiniband.py, not here."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from provisioner.engine import commands

from . import labtools
from .labtools import podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

PROFILE = str(Path(__file__).resolve().parents[1] / "data" / "profiles" / "lab-infiniband.yml")
PACKAGES = ["rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"]
MODULES_LOAD = "/etc/modules-load.d/provisioner-gpudirect.conf"


@pytest.fixture(scope="module")
def lab_host(tmp_path_factory):
    """A host started converged with the profile this one extends (driver only): what `up`
    adds for InfiniBand is the converge under test, the driver's own is proven elsewhere."""
    with labtools.lab_hosts(1, "ib", tmp_path_factory, converged=labtools.DRIVER_ONLY) as result:
        yield result


def run(command: str, inventory: Path, runs: Path, **options):
    return commands.execute(command, commands.prepare(PROFILE, inventory), runs_dir=runs, **options)


def installed(host: str) -> dict[str, str]:
    out = podman("exec", host, "dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\\n", *PACKAGES).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_up_installs_the_infiniband_stack_and_loads_nvidia_peermem_at_boot(lab_host, tmp_path: Path):
    host, inventory = lab_host.hosts[0].name, lab_host.inventory
    t0 = time.monotonic()
    assert {name: state for name, state in installed(host).items() if state.startswith("ii")} == {}

    up = run("up", inventory, tmp_path)
    assert up.exit_code == 0, up.as_dict()
    assert up.hosts[0].status == "changed" and any("InfiniBand" in t or "RDMA" in t for t in up.hosts[0].changed_tasks), \
        up.hosts[0].changed_tasks
    print(f"\nconverge: {time.monotonic() - t0:.0f}s")
    assert {name: state.strip() for name, state in installed(host).items()} == dict.fromkeys(PACKAGES, "ii")
    assert podman("exec", host, "cat", MODULES_LOAD, check=True).stdout == (
        "# Managed by gpu-provisioner (role network): GPUDirect RDMA through nvidia-peermem\n"
        "# (profile network.gpudirect_rdma). Re-run provision up instead of editing.\n"
        "nvidia-peermem\n")
    assert podman("exec", host, "stat", "-c", "%U %a", MODULES_LOAD, check=True).stdout.split() == ["root", "644"]
    assert podman("exec", host, "sh", "-c", "command -v ibstat ibv_devinfo ib_write_bw").returncode == 0
    checks = {c.name: c for c in up.hosts[0].checks}
    # No HCA in a container: said plainly, by preflight and by verify (the probe read
    # /run/systemd/container), and never a pass.
    infiniband = [c for c in up.hosts[0].checks if c.name == "infiniband"]
    assert [c.status for c in infiniband] == ["skip", "skip"], infiniband
    assert [c.detail for c in infiniband] == [
        "no InfiniBand HCA in this podman container (/sys/class/infiniband is absent): not checked here",
        "no InfiniBand HCA in this podman container (/sys/class/infiniband is absent): port state and rate "
        "not checked here"]
    assert checks["gpudirect rdma"].status == "skip"
    assert checks["gpudirect rdma"].detail == ("nvidia-peermem loads with the driver, and no NVIDIA module is loaded "
                                               "(a podman container)")

    again = run("up", inventory, tmp_path, full=True)
    assert again.exit_code == 0, again.as_dict()
    assert again.hosts[0].changed_tasks == [], "a second converge must change nothing"
    deep = run("check", inventory, tmp_path, deep=True)
    assert deep.exit_code == 0, deep.as_dict()
    print(f"second converge and check --deep: {time.monotonic() - t0:.0f}s")

    # The state record knows what the role installed: a package removed by hand is drift.
    podman("exec", host, "apt-get", "remove", "-y", "-q", "perftest", check=True, timeout=300)
    drift = run("check", inventory, tmp_path)
    assert drift.exit_code == 2, drift.as_dict()
    assert drift.hosts[0].status == "drift" and drift.hosts[0].changed_tasks == ["package perftest"]
    assert drift.hosts[0].diffs["package perftest"] == "recorded: installed; now: not installed"
    print(f"whole test: {time.monotonic() - t0:.0f}s")
