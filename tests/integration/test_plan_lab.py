"""`provision plan` against what `provision up` then did, on one lab host started converged
with the driver-only lab profile (its committed image, provisioner.lab.converged):

1. a no-op: the plan says nothing to do (exit 0), and up converges nothing;
2. a driver change (Debian 12's archive carries 535.309.01 in bookworm-security and
   535.261.03 in bookworm: the profile asks for the older one): the plan names each driver
   package's downgrade at the exact version the host's archive offers (exit 2), its
   disruption (a service restart: a container loads no module) and no reboot; up then
   installs exactly those versions, held, and reports no reboot; a second plan has nothing
   left to do;
3. a library change: NCCL from the lab's stand-in for NVIDIA's CUDA repository
   (provisioner.lab.cudarepo, its ubuntu2204 flavour served to the Debian host as in
   test_production_path_lab.py), installed at 2.16.5. The plan names libnccl2 and
   libnccl-dev at the exact build the stand-in's signed index carries for the profile's CUDA
   (2.16.5-1+cuda11.8, which the committed snapshot lacks), disruption none and no reboot;
   up then installs exactly those, held, without a reboot; a second plan has nothing left
   to do. One converge only (about 2 minutes on a loaded lab machine): an upgrade to another
   release would cost a second one, and a library upgrade (libnccl2) is judged on a
   captured state in tests/test_plan.py.

A container neither loads a module nor reboots, so the reboot flag is proven false here;
the reboot side is tested on captured holder states (tests/test_holders.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

# The checkout's own CLI (python -m, from the repository root), whichever package is installed.
PROVISION = [sys.executable, "-m", "provisioner.cli"]
REPO = Path(__file__).resolve().parents[2]
OLDER = "535.261.03"  # Debian 12 bookworm's nvidia-driver 535.261.03-1 (profiles/debian12-lab.yml)


# The library profile: the driver as step 2 left it, NCCL from the stand-in. No toolkit is
# installed (cuda.enabled stays false); cuda.default (11.8, debian12-lab's) picks NCCL's build.
NCCL = """\
extends: lab-driver-older.yml
name: lab-nccl
cuda:
  source: cuda_repo
nccl:
  enabled: true
  version: {version}
mirrors:
  cuda_repo_url: {url}
  cuda_repo_flavour: ubuntu2204
  cuda_repo_key_url: {key_url}
  cuda_repo_key_fingerprint: {fingerprint}
"""
# NCCL 2.16.5's CUDA 11.8 build, as the stand-in's manifest carries it
# (provisioner/lab/standin/ubuntu2204.yml libnccl2 / libnccl-dev, with the public listing it mirrors).
NCCL_VERSION, NCCL_BUILD = "2.16.5", "2.16.5-1+cuda11.8"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with labtools.lab_hosts(1, "plan", tmp_path_factory, converged=DRIVER_ONLY) as result:
        yield result


def _provision(command: str, profile: str | Path, inventory: Path, runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*PROVISION, command, "--profile", str(profile), str(inventory), "--runs-dir", str(runs),
                           "--json"], capture_output=True, text=True, timeout=1800, cwd=REPO,
                          env={**os.environ, "COLUMNS": "200"})


def _installed(host: str, names: list[str]) -> dict[str, str]:
    out = podman("exec", host, "dpkg-query", "-W", "-f=${Package} ${Version}\n", *names).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_plan_predicts_what_up_does(lab, standin, tmp_path: Path):
    host = lab.hosts[0].name
    runs = tmp_path / "runs"

    # 1. No-op: nothing planned, nothing converged.
    noop = _provision("plan", DRIVER_ONLY, lab.inventory, runs)
    assert noop.returncode == 0, noop.stdout + noop.stderr
    planned = json.loads(noop.stdout)
    assert [(h["host"], h["status"], h["packages"], h["reboot"]) for h in planned["hosts"]] == [
        (host, "unchanged", [], False)]
    up = _provision("up", DRIVER_ONLY, lab.inventory, runs)
    assert up.returncode == 0, up.stdout + up.stderr
    report = json.loads(up.stdout)["hosts"][0]
    assert report["changed_tasks"] == [] and "skipped: the host is in the state" in json.dumps(report["checks"])

    # 2. A driver change: the older build Debian's archive carries.
    older = tmp_path / "lab-driver-older.yml"
    shutil.copy(DRIVER_ONLY, tmp_path / "lab-driver-only.yml")
    older.write_text(f"extends: lab-driver-only.yml\nname: lab-driver-older\ndriver:\n  version: {OLDER}\n")
    change = _provision("plan", older, lab.inventory, runs)
    assert change.returncode == 2, change.stdout + change.stderr
    planned = json.loads(change.stdout)["hosts"][0]
    moves = {p["package"]: p for p in planned["packages"]}
    assert moves["nvidia-driver"]["action"] == "downgrade" and moves["nvidia-driver"]["to"].startswith(OLDER + "-")
    assert all(p["component"] == "driver" and p["to"] for p in moves.values()), moves
    assert planned["disruption"] == "service restart" and planned["reboot"] is False, planned
    assert planned["holds"] == []  # the converged image holds them already

    up = _provision("up", older, lab.inventory, runs)
    assert up.returncode == 0, up.stdout + up.stderr
    report = json.loads(up.stdout)["hosts"][0]
    assert report["status"] == "changed" and not any(c["name"] == "reboot" for c in report["checks"]), report
    # What up did is what the plan said: every package at the planned version, and still held.
    assert _installed(host, list(moves)) == {name: p["to"] for name, p in moves.items()}
    assert set(moves) <= set(podman("exec", host, "apt-mark", "showhold").stdout.split())

    again = _provision("plan", older, lab.inventory, runs)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [h["status"] for h in json.loads(again.stdout)["hosts"]] == ["unchanged"]

    # 3. A library change: NCCL from the stand-in CUDA repository, nothing else.
    t0 = time.monotonic()
    repo, url = standin
    library = tmp_path / "lab-nccl.yml"
    library.write_text(NCCL.format(version=NCCL_VERSION, url=url, key_url=f"{url}{repo.key_path}",
                                   fingerprint=repo.fingerprint))
    change = _provision("plan", library, lab.inventory, runs)
    assert change.returncode == 2, change.stdout + change.stderr
    planned = json.loads(change.stdout)["hosts"][0]
    moves = {p["package"]: (p["component"], p["action"], p["to"]) for p in planned["packages"]}
    assert moves == dict.fromkeys(("libnccl2", "libnccl-dev"), ("nccl", "install", NCCL_BUILD)), planned
    assert planned["disruption"] == "none" and planned["reboot"] is False, planned
    assert planned["holds"] == sorted(moves), planned

    up = _provision("up", library, lab.inventory, runs)
    assert up.returncode == 0, up.stdout + up.stderr
    report = json.loads(up.stdout)["hosts"][0]
    assert report["status"] == "changed" and not any(c["name"] == "reboot" for c in report["checks"]), report
    # What up did is what the plan said: each package at its planned version, held.
    assert _installed(host, list(moves)) == {name: to for name, (_, _, to) in moves.items()}
    assert set(moves) <= set(podman("exec", host, "apt-mark", "showhold").stdout.split())

    again = _provision("plan", library, lab.inventory, runs)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [h["status"] for h in json.loads(again.stdout)["hosts"]] == ["unchanged"]
    print(f"\nthe library change (a plan, up, a second plan): {time.monotonic() - t0:.0f}s")
