"""The path our users take: a stock GPU profile, NVIDIA's CUDA repository, a sudo user.

    sudo .venv/bin/pytest -m lab tests/integration/test_production_path_lab.py -s

A profile that extends the built-in `h100-train` converges a lab host as the lab's SSH
user `provision` (sudo), from the lab's stand-in for NVIDIA's CUDA repository
(provisioner.lab.cudarepo: NVIDIA's layout, package names, versions, Release fields and a
signing key made for the test run). The host starts as most GPU cloud images do: NVIDIA's
`cuda-keyring` already set the same repository up, with another keyring file and its pin-600
file. (A host without that source takes the stand-in in test_rolling_driver_lab.py and
test_cudarepo_lab.py; one host here keeps this, the suite's most expensive profile, to one
host's runs.)

What the profile changes from h100-train, and why:
- hardware: the lab's (no GPU, one small container), with the NVSwitch interconnect kept,
  so fabric manager and nscq are installed as on an HGX H100;
- os: debian-12, which is the truth about a lab host. mirrors.cuda_repo_flavour is ubuntu2204,
  so it takes h100-train's Ubuntu 22.04 package set from the stand-in;
- mirrors: the stand-in's URL, key URL and key fingerprint, as a site's mirror would be given;
- driver and CUDA: the stand-in's newest R580 release and CUDA 12.8, which the committed
  snapshot (provisioner/data/catalogue/ubuntu2204.yml) does not have: every pin must come
  from the stand-in's signed index, at the revisions its own manifest gives
  (provisioner/lab/standin/ubuntu2204.yml), which differ from the snapshot's on purpose;
- python_env: off. Its Miniforge installer and CUDA wheels are not reachable from here; the
  Molecule python_env scenario covers the role (venv, conda with a stand-in installer,
  checksum refusals, drift repair);
- tensorrt: on (8.6.1.6, built for CUDA 12.x), which h100-train does not install, so that
  the TensorRT role converges against the stand-in too;
- the DCGM exporter at 4.6.0, the newest packaged exporter a public listing shows (the
  stand-in carries only what a listing shows; h100-train pairs DCGM 4.5.2 with 4.8.1 as
  NVIDIA tags them, and compat warns of the pair here).

Before the converge, the same profile asking for a driver release the index lacks is
refused before the host changes (no preferences file, no new package).

What this proves: the apt logic (names and exact versions resolved by render in the
catalogue; pins by version and by NVIDIA's Origin/Label; holds; the host with a
pre-existing cuda-keyring source set aside so apt still works), the order (fabric manager,
nv-hostengine and the exporter are enabled but not started while no driver module is
loaded), privilege (every change through sudo), a second converge changing nothing, drift
found and repaired (in the second converge, which changes nothing else), and check
mode on a fresh host. What it cannot prove: NVIDIA's binaries,
a DKMS build, a kernel module loading, a reboot, a GPU. The packages are empty stand-ins.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.engine import commands
from provisioner.errors import ProvisionError
from provisioner.lab import manifest
from provisioner.profiles import catalogue
from provisioner.render import plan_for

from . import labtools
from .labtools import podman

pytestmark = pytest.mark.lab
if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

KEYRING_SOURCE = "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"    # what cuda-keyring 1.1-1 writes
KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
PIN_600 = "/etc/apt/preferences.d/cuda-repository-pin-600"

PROFILE = """\
extends: h100-train
name: h100-train-lab
description: h100-train on a GPU-less Debian lab host, from the stand-in CUDA repository
os: debian-12
hardware:
  gpu:
    count: 0
  min_cpu_cores: 1
  min_ram_gib: 1
  min_free_disk_gib: 5
  nvme: false
  infiniband: false
python_env:
  enabled: false
tensorrt:
  version: 8.6.1.6
dcgm:
  exporter:
    version: 4.6.0
driver:
  version: {driver}
fabric_manager:
  version: {driver}
cuda:
  toolkits: ["{toolkit}"]
mirrors:
  cuda_repo_url: {url}
  cuda_repo_flavour: ubuntu2204
  cuda_repo_key_url: {key_url}
  cuda_repo_key_fingerprint: {fingerprint}
"""


# The stand-in's newest R580 release, from its own manifest (not the snapshot's data).
NEWEST_DRIVER = manifest.load("ubuntu2204").versions("cuda-drivers-580")[-1].split("-")[0]


def sh(host: str, script: str, timeout: int = 300):
    return podman("exec", host, "sh", "-c", script, timeout=timeout)


@pytest.fixture(scope="module")
def lab(standin, tmp_path_factory):
    repo, url = standin
    with labtools.lab_hosts(1, "prod", tmp_path_factory) as result:
        keyring_host = result.hosts[0].name
        binary = tmp_path_factory.mktemp("keyring") / "cuda-archive-keyring.gpg"   # cuda-keyring ships it dearmored
        subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(binary), str(repo.dir / f"{repo.key_id}.pub")],
                       check=True)
        assert podman("cp", str(binary), f"{keyring_host}:{KEYRING}").returncode == 0
        setup = sh(keyring_host, f"""set -e
echo 'deb [signed-by={KEYRING}] {url}{repo.path}/ /' > {KEYRING_SOURCE}
printf 'Package: *\\nPin: release l=NVIDIA CUDA\\nPin-Priority: 600\\n' > {PIN_600}
apt-get update 2>&1""")
        assert setup.returncode == 0 and "Err:" not in setup.stdout, setup.stdout + setup.stderr
        yield result


@pytest.fixture(scope="module")
def profile_file(standin, tmp_path_factory) -> Path:
    repo, url = standin
    path = tmp_path_factory.mktemp("profile") / "h100-train-lab.yml"
    path.write_text(PROFILE.format(url=url, key_url=f"{url}{repo.key_path}", fingerprint=repo.fingerprint,
                                   driver=NEWEST_DRIVER, toolkit="12.8"))
    return path


def run(command: str, profile: Path, inventory: Path, runs: Path, **options):
    return commands.execute(command, commands.prepare(str(profile), inventory), runs_dir=runs, **options)


def failures(report) -> list[tuple[str, str, str]]:
    return [(h.name, c.name, c.detail) for h in report.hosts for c in h.checks if c.status == "fail"]


def installed(host: str, names) -> dict[str, str]:
    out = sh(host, "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(names)).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_h100_train_from_the_stand_in_as_a_sudo_user(lab, profile_file, tmp_path):
    t0 = time.monotonic()
    loaded = profiles.load(str(profile_file))
    # The snapshot does not have this release (profiles validate says so, as advice) ...
    assert NEWEST_DRIVER in (loaded.advisory or "") and not catalogue.load("ubuntu2204").versions("cuda-toolkit-12-8")
    # ... and the pins come from the stand-in's signed index, at its manifest's revisions.
    plan = plan_for(loaded)
    standin = manifest.load("ubuntu2204")
    pins = {name: version for component in plan.pins.values() for name, version in component.items()}
    assert set(plan.pins) == {"driver", "fabric_manager", "cuda_toolkit", "cudnn", "nccl", "tensorrt", "dcgm",
                              "dcgm_exporter"}
    assert all(version in standin.versions(name) for name, version in pins.items()), pins
    assert plan.pins["driver"]["cuda-drivers-580"] == standin.versions("cuda-drivers-580")[-1]
    assert plan.pins["cuda_toolkit"] == {"cuda-toolkit-12-8": standin.versions("cuda-toolkit-12-8")[-1]}
    assert plan.pins["tensorrt"]["libnvinfer8"] == "8.6.1.6-1+cuda12.0"
    assert plan.index["url"].endswith("/ubuntu2204/x86_64/") and plan.index["release_date"]
    hosts = [h.name for h in lab.hosts]
    inventory = lab.inventory
    assert "ansible_user=provision" in inventory.read_text()        # the sudo user, not root

    # A release the index lacks is refused before the host changes: the error names the
    # index (URL, Release Date) and what it carries; no preferences file, no new package.
    before = sh(hosts[0], "dpkg-query -W -f '${Package} ${Version}\\n'; ls /etc/apt/preferences.d").stdout
    lacking = profile_file.with_name("lacking.yml")
    lacking.write_text(profile_file.read_text().replace(NEWEST_DRIVER, "580.82.07"))
    with pytest.raises(ProvisionError) as refused:
        run("up", lacking, inventory, tmp_path)
    message = str(refused.value)
    assert "cuda-drivers-580 580.82.07 is not in the index at" in message and plan.index["url"] in message, message
    assert f"Release Date: {plan.index['release_date']}" in message and NEWEST_DRIVER in message, message
    assert sh(hosts[0], "dpkg-query -W -f '${Package} ${Version}\\n'; ls /etc/apt/preferences.d").stdout == before

    # Check mode on a fresh host: says what it would do, touches nothing, fails nothing.
    dry = run("check", profile_file, inventory, tmp_path, deep=True)
    assert {h.status for h in dry.hosts} <= {"drift", "ok"}, failures(dry)
    assert sh(hosts[0], "test -e /etc/apt/sources.list.d/provisioner-cuda.sources").returncode != 0
    assert installed(hosts[0], ["nvidia-driver-580"]) == {}
    print(f"\ncheck --deep on a fresh host: {time.monotonic() - t0:.0f}s")

    up = run("up", profile_file, inventory, tmp_path)
    assert up.exit_code == 0, failures(up)
    print(f"converge: {time.monotonic() - t0:.0f}s; verdict: {up.verdict}")
    for host in up.hosts:
        checks = {c.name: c for c in host.checks}
        assert checks["gpus"].status == "pass" and "no GPU present" in checks["gpus"].detail, host

    for host in hosts:
        have = installed(host, pins)
        assert have == pins, (host, have)                               # every pin, exactly
        held = set(sh(host, "apt-mark showhold").stdout.split())
        assert set(pins) <= held, (host, set(pins) - held)
        # apt keeps NVIDIA's other builds at 100, the exact one at 1001.
        policy = sh(host, "apt-cache policy cuda-drivers-580 libcudnn8").stdout
        older = standin.versions("cuda-drivers-580")[0]
        assert f"{pins['cuda-drivers-580']} 1001" in policy and f"{older} 100" in policy, policy
        # apt is healthy afterwards: one source for the repository, its key only.
        update = sh(host, "apt-get update 2>&1")
        assert update.returncode == 0 and "Conflicting values" not in update.stdout, update.stdout
        # Nothing that needs a loaded module was started; each is enabled for the boot that loads it.
        for unit in ("nvidia-fabricmanager", "nvidia-dcgm", "dcgm-exporter"):
            assert sh(host, f"systemctl is-enabled {unit}").stdout.strip() == "enabled", (host, unit)
            assert sh(host, f"systemctl is-active {unit}").stdout.strip() != "active", (host, unit)
        # The package's own exporter unit (root, every interface) is masked; ours listens nowhere yet.
        assert sh(host, "systemctl is-enabled nvidia-dcgm-exporter").stdout.strip() == "masked"
        assert "--address 127.0.0.1:9400" in sh(host, "cat /etc/systemd/system/dcgm-exporter.service").stdout

    # The cuda-keyring host: its source was set aside (renamed, not deleted), and the record says so.
    keyring_host = hosts[0]
    assert sh(keyring_host, f"test -e {KEYRING_SOURCE}").returncode != 0
    assert sh(keyring_host, f"test -e {KEYRING_SOURCE}.disabled-by-provisioner").returncode == 0
    fact = json.loads(sh(keyring_host, "cat /etc/ansible/facts.d/cuda_repo.fact").stdout)
    assert KEYRING_SOURCE in json.dumps(fact), fact

    assert run("check", profile_file, inventory, tmp_path).exit_code == 0

    # Out of band: unhold cuDNN. check finds it (the probe alone) ...
    victim = hosts[0]
    assert sh(victim, "apt-mark unhold libcudnn8").returncode == 0
    drift = run("check", profile_file, inventory, tmp_path)
    assert drift.exit_code == 2
    by_name = {h.name: h for h in drift.hosts}
    assert by_name[victim].status == "drift" and "hold removed: libcudnn8" in by_name[victim].changed_tasks
    # ... and a second full converge puts the hold back and changes nothing else: the repair
    # and the idempotence of every role in one run (a separate repair run cost ~4 min here).
    again = run("up", profile_file, inventory, tmp_path, full=True)
    assert again.exit_code == 0, failures(again)
    changed = [h.changed_tasks for h in again.hosts]
    assert len(changed[0]) == 1 and changed[0][0].startswith("Hold the packages so apt upgrade cannot move them"), \
        f"the second converge may change only the cuDNN hold: {changed}"
    assert "libcudnn8" in sh(victim, "apt-mark showhold").stdout.split()
    print(f"second converge: {time.monotonic() - t0:.0f}s")
    assert run("check", profile_file, inventory, tmp_path).exit_code == 0
    print(f"whole test: {time.monotonic() - t0:.0f}s")
