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


CONFIG_TOML = "/etc/containerd/config.toml"
SPEC = "/etc/cdi/nvidia.yaml"
# The user's own containerd setting (appended to the file Debian's package ships): nvidia-ctk
# copies the default runtime's options into nvidia's, so SystemdCgroup must carry over.
USER_TOML = '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
# Podman in an unprivileged lab host needs vfs storage (measured, issue 29): the user's setting.
STORAGE_CONF = ('[storage]\ndriver = "vfs"\nrunroot = "/run/containers/storage"\n'
                'graphroot = "/var/lib/containers/storage"\n')


def _engine_profile(folder: Path, runtime: str, url: str, fingerprint: str) -> Path:
    shutil.copy(DRIVER_ONLY, folder / "lab-driver-only.yml")
    path = folder / f"lab-{runtime}.yml"
    path.write_text(f"extends: lab-driver-only.yml\nname: lab-{runtime}\ndescription: driver-only with {runtime}\n"
                    f"containers: {{runtime: {runtime}, toolkit_version: '{VERSION}'}}\n"
                    f"mirrors: {{container_toolkit_url: '{url}', container_toolkit_key_fingerprint: {fingerprint}}}\n")
    return path


def test_containerd_and_podman_with_the_cdi_spec_drift_repair_and_off(lab, standin, tmp_path: Path):
    """On the same host, after the Docker test (which ends with containers off; docker.io
    brought Debian's containerd 1.6, whose package ships config.toml, version 2):

    containerd: a user's setting appended to config.toml stays byte for byte, the nvidia
    runtime is registered as `containerd config dump` shows it (with the user's SystemdCgroup
    copied, as nvidia-ctk copies it); the CDI spec is the stand-in nvidia-ctk's STUB spec for
    the installed driver library (Debian's libcuda 535; no GPU, no device node). A config.toml
    that lost the runtime and a spec for another driver version are both named by `check`
    (exit 2) and repaired by one `up`, after which `check` finds nothing.
    podman: switching the profile to podman takes containerd's registration out (the user's
    file as it was) and leaves the spec; podman 4.3 shows no CDI in `podman info`, so the
    observable is its own resolution: a container asking for nvidia.com/gpu=all gets the
    spec's edits in its OCI config at `podman init` (which then stops at runc: an unprivileged
    lab host cannot mount /proc), one asking for a device the spec lacks is refused as
    unresolvable. containers none then removes the toolkit and the spec and keeps the user's
    config.toml and storage.conf.
    Not proven: a GPU in a container, or NVIDIA's own nvidia-ctk spec (GPU hosts only)."""
    t0 = time.monotonic()
    url, fingerprint = standin
    containerd, podman_profile = (_engine_profile(tmp_path, r, url, fingerprint) for r in ("containerd", "podman"))
    off = tmp_path / "lab-off.yml"
    off.write_text("extends: lab-driver-only.yml\nname: lab-containerd\ndescription: d\ncontainers: {runtime: none}\n")
    host, inventory = lab.hosts[0].name, lab.inventory
    runs = tmp_path / "runs"

    def run(command: str, profile: Path, **options):
        return commands.execute(command, commands.prepare(str(profile), inventory), runs_dir=runs, **options)

    seeded = podman("exec", "-i", host, "sh", "-c", f"test -f {CONFIG_TOML} && cat >> {CONFIG_TOML}", input=USER_TOML)
    assert seeded.returncode == 0, seeded.stderr
    user_toml = _sh(host, f"cat {CONFIG_TOML}")

    first = run("up", containerd)
    assert first.exit_code == 0, first.as_dict()
    text = _sh(host, f"cat {CONFIG_TOML}")
    assert text.startswith(user_toml), text                                  # the user's lines as they were
    dump = _sh(host, "containerd config dump")
    nvidia = dump.split('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]', 1)[1]
    nvidia = nvidia.split("\n\n", 1)[0]
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in nvidia and "SystemdCgroup = true" in nvidia, nvidia
    spec = _sh(host, f"cat {SPEC}")
    driver = _sh(host, "readlink -e /usr/lib/x86_64-linux-gnu/libcuda.so.1").strip().rsplit("libcuda.so.", 1)[1]
    assert "A STUB CDI spec" in spec and f"libcuda.so.{driver}" in spec, spec
    print(f"\ncontainerd converge: {time.monotonic() - t0:.0f}s")

    # The registration lost (the user's file back as it was) and a spec for another driver.
    podman("exec", "-i", host, "sh", "-c", f"cat > {CONFIG_TOML}", input=user_toml)
    podman("exec", "-i", host, "sh", "-c", f"cat > {SPEC}", input=spec.replace(driver, "1.2.3"))
    drift = run("check", containerd)
    assert drift.exit_code == 2, drift.as_dict()
    found = json.dumps(drift.as_dict())
    assert f"{CONFIG_TOML} lost the nvidia runtime (containerd)" in found, found
    assert f"{SPEC} is for driver 1.2.3, the installed driver is {driver}" in found, found
    repaired = run("up", containerd)
    assert repaired.exit_code == 0, repaired.as_dict()
    assert _sh(host, f"cat {SPEC}") == spec and _sh(host, f"cat {CONFIG_TOML}") == text
    assert run("check", containerd).exit_code == 0
    print(f"drift found and repaired: {time.monotonic() - t0:.0f}s")

    podman("exec", "-i", host, "sh", "-c", "mkdir -p /etc/containers && cat > /etc/containers/storage.conf",
           input=STORAGE_CONF)
    switched = run("up", podman_profile)
    assert switched.exit_code == 0, switched.as_dict()
    assert _sh(host, f"cat {CONFIG_TOML}") == user_toml                       # containerd's registration out
    assert _sh(host, f"cat {SPEC}") == spec
    probe = ("tar cf /tmp/empty.tar -T /dev/null && podman import -q /tmp/empty.tar localhost/empty >/dev/null && "
             "podman create -q --name gpu --network none --device nvidia.com/gpu=all localhost/empty /x >/dev/null && "
             "podman create -q --name bogus --network none --device nvidia.com/gpu=bogus localhost/empty /x >/dev/null; "
             "podman init bogus 2>&1; echo ---; podman init gpu 2>&1; echo ---; "
             "cat /var/lib/containers/storage/vfs-containers/$(podman inspect gpu --format '{{.Id}}')/userdata/config.json")
    bogus, gpu, oci = _sh(host, probe).split("---\n")
    assert "unresolvable CDI devices nvidia.com/gpu=bogus" in bogus, bogus
    assert "CDI" not in gpu, gpu                                               # resolved; runc stops later
    oci = json.loads(oci)
    assert "NVIDIA_CTK_LAB_STUB=1" in oci["process"]["env"] and "NVIDIA_VISIBLE_DEVICES=void" in oci["process"]["env"]
    assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{driver}" in [m["destination"] for m in oci["mounts"]]
    _sh(host, "podman rm -f gpu bogus; podman rmi localhost/empty")
    print(f"podman resolved the CDI spec: {time.monotonic() - t0:.0f}s")

    gone = run("up", off)
    assert gone.exit_code == 0, gone.as_dict()
    left = _sh(host, "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' " + " ".join(PACKAGES) + " 2>/dev/null")
    assert not [line for line in left.splitlines() if line[1:2] == "i"], left
    assert _sh(host, f"test -e {SPEC} && echo present") == ""
    assert _sh(host, f"cat {CONFIG_TOML}") == user_toml and _sh(host, "cat /etc/containers/storage.conf") == STORAGE_CONF
    assert _sh(host, "dpkg-query -W -f '${Version}' podman containerd")       # the engines stay
    print(f"whole containerd/podman test {time.monotonic() - t0:.0f}s")
