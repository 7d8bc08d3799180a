"""A rolling `provision up` on three real lab hosts, one at a time (--batch 1), with drain,
gate and undrain hooks that log to a file: the hooks' order per host, a gate that fails on
the second host stopping the rollout with the third host untouched, and --resume finishing
it. Hooks run on the controller; here they look into the hosts with `podman exec`, so the
log also proves what each host held when its hook ran.

What this proves and what it does not: the batch, hook and gate mechanics and the package,
hold and unit order of the driver role on each host, on the driver-only lab profile
(Debian's 535 packages). Containers can neither rebuild a kernel module for the booted
kernel nor reboot, so no module rebuild or reboot is exercised."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.reports import report as report_mod

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

PROVISION = str(Path(sys.executable).parent / "provision")
FACT = "/etc/ansible/facts.d/provisioner.fact"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with labtools.lab_hosts(3, "roll", tmp_path_factory) as result:
        yield result


def _held(host: str) -> list[str]:
    return sorted(podman("exec", host, "apt-mark", "showhold").stdout.split())


def _up(inventory: Path, runs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROVISION, "up", "--profile", DRIVER_ONLY, str(inventory), "--runs-dir", str(runs), *args],
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "COLUMNS": "200"})


def test_rolling_up_one_host_at_a_time_stops_at_a_failed_gate_and_resumes(lab, tmp_path: Path):
    one, two, three = (h.name for h in lab.hosts)
    log = tmp_path / "hooks.log"
    # Each hook logs its name, the host from {host} and from the environment, and whether
    # the host holds a recorded converge (the fact file) at that moment.
    state = "$(podman exec {host} test -f " + FACT + " && echo converged || echo bare)"
    drain = f'echo "drain {{host}} $PROVISION_HOST {state}" >> {log}'
    undrain = f'echo "undrain {{host}} $PROVISION_HOST {state}" >> {log}'
    failing_gate = f'echo "gate {{host}} $PROVISION_HOST {state}" >> {log}; test {{host}} != {two}'
    runs = tmp_path / "runs"

    first = _up(lab.inventory, runs, "--batch", "1", "--drain", drain, "--undrain", undrain, "--gate", failing_gate)
    assert first.returncode == 1, first.stdout + first.stderr
    assert log.read_text().splitlines() == [
        f"drain {one} {one} bare", f"gate {one} {one} converged", f"undrain {one} {one} converged",
        f"drain {two} {two} bare", f"gate {two} {two} converged",  # no undrain: the failed host stays drained
    ]
    # The host after the failed batch is untouched: never drained, nothing installed or held.
    assert podman("exec", three, "test", "-e", FACT).returncode != 0
    assert _held(three) == []
    assert _held(one) and _held(one) == _held(two)
    out = first.stdout
    assert f"rollout stopped at batch 2 of 3: {one} done; failed (left drained): {two}; untouched: {three}" in out
    assert f"  {two}  failed: gate: exit 1 after" in out and f"  {three}  not-verified: untouched" in out
    run_dir = Path(out.split("run record: ")[-1].strip())
    assert f"--resume {run_dir}" in out and f"--limit {two},{three}" in out
    assert (run_dir / "hooks" / f"002-{two}-gate.log").is_file()
    assert sorted(p.name for p in (run_dir / "artifacts").iterdir()) == [
        "preflight", "site-batch1", "site-batch2", "verify-batch1", "verify-batch2"]
    record = report_mod.load(run_dir)
    assert record.rollout["stopped_at"] == 2 and record.exit_code == 1

    # Resume with a gate that passes: the failed host and the untouched one, in order.
    log.write_text("")
    passing_gate = f'echo "gate {{host}} $PROVISION_HOST {state}" >> {log}'
    second = _up(lab.inventory, runs, "--resume", str(run_dir), "--gate", passing_gate)
    assert second.returncode == 0, second.stdout + second.stderr
    assert log.read_text().splitlines() == [
        f"drain {two} {two} converged", f"gate {two} {two} converged", f"undrain {two} {two} converged",
        f"drain {three} {three} bare", f"gate {three} {three} converged", f"undrain {three} {three} converged",
    ]
    assert "2 host(s): 2 ok (1 changed), 0 drifted, 0 failed, 0 unreachable" in second.stdout
    assert _held(three) == _held(one)
