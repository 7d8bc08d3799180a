"""Docker with NVIDIA's Container Toolkit on a lab host, end to end (issue 29).

    sudo .venv/bin/pytest -m lab tests/integration/test_containers_lab.py -s

One lab host starts from the driver-only converged image (provisioner.lab.converged) with
the user's own /etc/docker/daemon.json: the four settings Debian 12's dockerd needs to start
in an unprivileged lab host (measured, issue 29), which double as the settings that must
survive. `provision up` with `containers: {runtime: docker}` then takes the toolkit from the
lab's stand-in for NVIDIA's libnvidia-container repository (provisioner.lab.toolkitrepo,
named as the profile's mirror with the stand-in's own key) at 1.17.9-1, a version the
product's data file does not list: the controller resolved it from the stand-in's signed
index. Proven here: the packages exact and held, the nvidia runtime as `docker info` lists
it, the user's settings kept, a second full converge changing nothing, a daemon.json
replaced without the runtime found by `check` (exit 2, naming the file) and repaired by
`up`, and `containers: none` taking out the toolkit, the repository and the registration
while the user's settings and the engine stay. Not proven: running a GPU container (the
toolkit's programs are stubs, the host has no GPU and is unprivileged), CDI generation
(GPU hosts only; the role says "no GPU present").
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from provisioner.engine import commands

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

VERSION = "1.17.9-1"        # served by the stand-in, absent from provisioner/data/container_toolkit.yml
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]
USER_SETTINGS = {"iptables": False, "ip-masq": False, "bridge": "none", "storage-driver": "vfs"}
DAEMON_JSON = "/etc/docker/daemon.json"


@pytest.fixture(scope="module")
def standin():
    from provisioner.lab import cudarepo, toolkitrepo

    repo = toolkitrepo.build()
    url = cudarepo.serve(repo)
    yield url, repo.fingerprint


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with labtools.lab_hosts(1, "ctr", tmp_path_factory, converged=DRIVER_ONLY) as result:
        yield result


def _profiles(folder: Path, url: str, fingerprint: str) -> tuple[Path, Path]:
    shutil.copy(DRIVER_ONLY, folder / "lab-driver-only.yml")
    on, off = folder / "lab-docker.yml", folder / "lab-docker-off.yml"
    on.write_text("extends: lab-driver-only.yml\nname: lab-docker\ndescription: driver-only with Docker and the toolkit\n"
                  f"containers: {{runtime: docker, toolkit_version: '{VERSION}'}}\n"
                  f"mirrors: {{container_toolkit_url: '{url}', container_toolkit_key_fingerprint: {fingerprint}}}\n")
    off.write_text("extends: lab-driver-only.yml\nname: lab-docker\ndescription: driver-only with Docker and the toolkit\n"
                   "containers: {runtime: none}\n")
    return on, off


def _sh(host: str, script: str) -> str:
    return podman("exec", host, "sh", "-c", script).stdout


def _daemon_json(host: str) -> dict:
    return json.loads(_sh(host, f"cat {DAEMON_JSON}"))


def _runtimes(host: str) -> dict:
    out = _sh(host, "docker info --format '{{json .Runtimes}}'")
    return json.loads(out) if out.strip().startswith("{") else {}


def test_docker_with_the_toolkit_converges_drifts_is_repaired_and_is_taken_out(lab, standin, tmp_path: Path):
    t0 = time.monotonic()
    url, fingerprint = standin
    on, off = _profiles(tmp_path, url, fingerprint)
    host, inventory = lab.hosts[0].name, lab.inventory
    runs = tmp_path / "runs"

    def run(command: str, profile: Path, **options):
        return commands.execute(command, commands.prepare(str(profile), inventory), runs_dir=runs, **options)

    seeded = podman("exec", "-i", host, "sh", "-c", f"mkdir -p /etc/docker && cat > {DAEMON_JSON}",
                    input=json.dumps(USER_SETTINGS, indent=2) + "\n")
    assert seeded.returncode == 0, seeded.stderr

    first = run("up", on)
    assert first.exit_code == 0, first.as_dict()
    versions = _sh(host, "dpkg-query -W -f '${Package} ${Version}\\n' " + " ".join(PACKAGES))
    assert sorted(versions.split("\n")[:-1]) == sorted(f"{p} {VERSION}" for p in PACKAGES), versions
    assert set(_sh(host, "apt-mark showhold").split()) >= set(PACKAGES)
    assert "nvidia" in _runtimes(host), _sh(host, "docker info 2>&1 | tail -30")
    config = _daemon_json(host)
    assert {k: config[k] for k in USER_SETTINGS} == USER_SETTINGS and config["runtimes"]["nvidia"]["path"]
    print(f"\nfirst converge: {time.monotonic() - t0:.0f}s")

    again = run("up", on, full=True)
    assert again.exit_code == 0, again.as_dict()
    assert again.hosts[0].changed_tasks == [], again.hosts[0].changed_tasks
    print(f"second full converge: {time.monotonic() - t0:.0f}s")

    # A Docker package upgrade (or a person) replaces daemon.json with one without the runtime.
    podman("exec", "-i", host, "sh", "-c", f"cat > {DAEMON_JSON}", input=json.dumps(USER_SETTINGS) + "\n")
    drift = run("check", on)
    assert drift.exit_code == 2, drift.as_dict()
    assert f"{DAEMON_JSON} lost the nvidia runtime" in json.dumps(drift.as_dict()), drift.as_dict()
    print(f"check found the drift: {time.monotonic() - t0:.0f}s")
    repaired = run("up", on)
    assert repaired.exit_code == 0, repaired.as_dict()
    assert "nvidia" in _daemon_json(host)["runtimes"] and "nvidia" in _runtimes(host)
    assert run("check", on).exit_code == 0
    print(f"repaired: {time.monotonic() - t0:.0f}s")

    gone = run("up", off)
    assert gone.exit_code == 0, gone.as_dict()
    assert _daemon_json(host) == USER_SETTINGS                           # only our key went
    assert "nvidia" not in _runtimes(host) and _runtimes(host)          # dockerd restarted, still running
    left = _sh(host, "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' " + " ".join(PACKAGES) + " 2>/dev/null")
    assert not [line for line in left.splitlines() if line[1:2] == "i"], left
    assert _sh(host, "ls /etc/apt/sources.list.d/ /etc/apt/preferences.d/ /usr/share/keyrings/").count("nvidia-container") == 0
    assert _sh(host, "dpkg-query -W -f '${Version}' docker.io")          # the engine stays
    print(f"whole test {time.monotonic() - t0:.0f}s")
