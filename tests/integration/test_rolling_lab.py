"""A rolling `provision up` on two real lab hosts, one at a time (--batch 1), with drain,
gate and undrain hooks that log to a file: a gate that fails on the first host stops the
rollout with the second host untouched, and --resume finishes it, so the log shows the
hooks' order for a host whose converge is skipped (the first, already converged) and for
one converged in its batch (the second). Hooks run on the controller; here they look into
the hosts with `podman exec`, so the log also proves which profile each host's record
named when its hook ran.

As a fleet is rolled in practice, the hosts start converged with the driver-only lab
profile (its converged image, provisioner.lab.converged) and the rollout applies a new
profile: the driver-only one with other verification thresholds, so each host's converge
is a full converge that changes its record and nothing else (two fresh converges one after
the other cost this test about four minutes, for mechanics that do not depend on them).

What this proves and what it does not: the batch, hook and gate mechanics. The driver
role's package, hold and unit order on a fresh host is proven where hosts are converged
fresh (the converged image, the fleet test, the faults). Containers can neither rebuild a
kernel module for the booted kernel nor reboot, so no module rebuild or reboot is exercised."""

from __future__ import annotations

import json
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
    with labtools.lab_hosts(2, "roll", tmp_path_factory, converged=DRIVER_ONLY) as result:
        yield result


@pytest.fixture(scope="module")
def rolled(tmp_path_factory) -> Path:
    """The profile rolled out: driver-only with other verification thresholds."""
    folder = tmp_path_factory.mktemp("rolled")
    shutil.copy(DRIVER_ONLY, folder / "lab-driver-only.yml")
    path = folder / "lab-rolled.yml"
    path.write_text("extends: lab-driver-only.yml\nname: lab-rolled\ndescription: driver-only, other thresholds\n"
                    "hardware:\n  min_free_disk_gib: 5\n")
    return path


def _record(host: str) -> dict:
    return json.loads(podman("exec", host, "cat", FACT).stdout)


def _up(profile: Path, inventory: Path, runs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROVISION, "up", "--profile", str(profile), str(inventory), "--runs-dir", str(runs), *args],
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "COLUMNS": "200"})


def test_rolling_up_one_host_at_a_time_stops_at_a_failed_gate_and_resumes(lab, rolled: Path, tmp_path: Path):
    one, two = (h.name for h in lab.hosts)
    before = _record(two)
    assert before["profile"] == "lab-driver-only"
    log = tmp_path / "hooks.log"
    # Each hook logs its name, the host from {host} and from the environment, and whether
    # the host's record names the rolled profile (new) or the one it started with (old).
    state = "$(podman exec {host} grep -q '\"lab-rolled\"' " + FACT + " && echo new || echo old)"
    hook = f'echo "%s {{host}} $PROVISION_HOST {state}" >> {log}'
    runs = tmp_path / "runs"

    first = _up(rolled, lab.inventory, runs, "--batch", "1", "--drain", hook % "drain", "--undrain", hook % "undrain",
                "--gate", hook % "gate" + f"; test {{host}} != {one}")
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    # No undrain: the host that failed its gate stays drained; the next host is not touched.
    assert log.read_text().splitlines() == [f"drain {one} {one} old", f"gate {one} {one} new"], out
    assert _record(two) == before, out  # the untouched host: not converged, its record as it was
    assert f"rollout stopped at batch 1 of 2: no host done; failed (left drained): {one}; untouched: {two}" in out
    assert f"  {one}  failed: gate: exit 1 after" in out and f"  {two}  not-verified: untouched" in out, out
    run_dir = Path(first.stdout.split("run record: ")[-1].strip())
    assert f"--resume {run_dir}" in out and f"--limit {one},{two}" in out, out
    assert (run_dir / "hooks" / f"001-{one}-gate.log").is_file()
    assert sorted(p.name for p in (run_dir / "artifacts").iterdir()) == ["preflight", "site-batch1", "verify-batch1"]
    assert report_mod.load(run_dir).rollout["stopped_at"] == 1

    # Resume (the batch comes from the record; its hooks run only when given again, as the
    # printed resume line does) with a gate that passes.
    log.write_text("")
    second = _up(rolled, lab.inventory, runs, "--resume", str(run_dir), "--drain", hook % "drain", "--undrain",
                 hook % "undrain", "--gate", hook % "gate")
    out = second.stdout + second.stderr
    assert second.returncode == 0, out
    assert log.read_text().splitlines() == [
        f"drain {one} {one} new", f"gate {one} {one} new", f"undrain {one} {one} new",
        f"drain {two} {two} old", f"gate {two} {two} new", f"undrain {two} {two} new",
    ], out
    assert "2 host(s): 2 ok (1 changed), 0 drifted, 0 failed, 0 unreachable" in out, out
    assert "rollout: 2 batch(es) of 1; 2 host(s) done, failed: none" in out, out
    assert _record(two)["profile_sha256"] == _record(one)["profile_sha256"] != before["profile_sha256"]
