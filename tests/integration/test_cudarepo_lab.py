"""A lab host uses the stand-in for NVIDIA's CUDA repository as it would use NVIDIA's.

    sudo .venv/bin/pytest -m lab tests/integration/test_cudarepo_lab.py -s   # ~1-2 min warm

The stand-in (provisioner.lab.cudarepo, built from its own manifest
provisioner/lab/standin/ubuntu2204.yml, not from the product's catalogue) is served on the
podman bridge's gateway; one lab host fetches its key over HTTP into a keyring file, adds
the repository as a deb822 .sources with ``Signed-By:`` that file, and runs apt as root.
This proves apt's side of the cuda_repo path for real: the signature is checked against
that key only, the repository reads as origin NVIDIA / label NVIDIA CUDA with every 580
driver release of the manifest (the newest as apt's Candidate), the cuDNN, NCCL and other
versions are NVIDIA's strings, and an exact-version install of a release that is not the
newest (the driver's packages pinned to it, as the nvidia_driver role pins them) pulls its
Depends from the stand-in and Debian's archive. Every expected version is read from the
manifest. What it cannot prove: anything about
NVIDIA's binaries or a kernel module; the installed packages are empty stand-ins (only a
few files, see cudarepo.PAYLOADS).
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from .labtools import lab_hosts, podman

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("podman"),
                       reason="lab tests need root and podman: run pytest with sudo (scripts/setup-dev-host)"),
]

KEYRING = "/usr/share/keyrings/provisioner-standin-cuda-archive-keyring.asc"
SOURCES = "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.sources"


def _sh(name: str, script: str, timeout: int = 600):
    return podman("exec", name, "sh", "-c", script, timeout=timeout)


def test_lab_host_trusts_and_installs_from_the_stand_in(tmp_path_factory):
    from provisioner.lab import cudarepo, manifest

    t0 = time.monotonic()
    man = manifest.load("ubuntu2204")
    drivers = man.versions("cuda-drivers-580")                       # oldest first
    # The 580.95.05 release as the stand-in serves it (its revision comes from the manifest,
    # which differs from the product's catalogue on purpose).
    fm = next(v for v in man.versions("nvidia-fabricmanager") if v.startswith("580.95.05-"))
    utils = next(v for v in man.versions("nvidia-utils-580") if v.startswith("580.95.05-"))
    repo = cudarepo.build(manifest=man)
    url = cudarepo.serve(repo)
    gateway = url.split("//", 1)[1].split(":", 1)[0]
    repo_url = f"{url}{repo.path}/"
    print(f"\nstand-in: {repo.packages} packages, key {repo.fingerprint}, {'cached' if repo.cached else 'built'} "
          f"in {repo.seconds:.1f}s, served at {repo_url}")
    try:
        with lab_hosts(1, "cr", tmp_path_factory) as lab:
            name = lab.hosts[0].name
            print(f"lab host {name} up in {time.monotonic() - t0:.0f}s")
            setup = _sh(name, f"""set -e
curl -fsS -o {KEYRING} {url}{repo.key_path}
cat > {SOURCES} <<'EOF'
Types: deb
URIs: {repo_url}
Suites: /
Signed-By: {KEYRING}
EOF
apt-get update 2>&1""")
            assert setup.returncode == 0, setup.stdout + setup.stderr
            update = setup.stdout
            assert f"{repo_url.rstrip('/')}  InRelease" in update, update   # apt's form for a flat repository
            assert not [line for line in update.splitlines() if line.startswith(("W:", "E:", "Err:"))], update

            policy = _sh(name, "apt-cache policy cuda-drivers-580").stdout
            print(policy)
            assert f"Candidate: {drivers[-1]}" in policy and all(v in policy for v in drivers), policy
            assert policy.count(repo_url.rstrip("/")) == len(drivers), policy
            releases = _sh(name, "apt-cache policy").stdout
            origin = [line for line in releases.splitlines() if "o=NVIDIA" in line]
            assert origin and "l=NVIDIA CUDA" in origin[0], releases
            assert f"origin {gateway}" in releases

            madison = _sh(name, "apt-cache madison libcudnn8").stdout
            print(madison)
            listed = {tuple(p.strip() for p in line.split("|"))[:2] for line in madison.splitlines()}
            assert {("libcudnn8", v) for v in man.versions("libcudnn8")} <= listed, madison   # NVIDIA's strings

            # 580.95.05 is not the newest release the stand-in serves, and apt takes a Depends'
            # Candidate (the newest sibling): the driver's packages are pinned to the release
            # first, as the nvidia_driver role pins them (templates/preferences.j2).
            pin = _sh(name, "printf 'Package: nvidia-* libnvidia-* xserver-xorg-video-nvidia* cuda-drivers*\\n"
                            f"Pin: version {utils}\\nPin-Priority: 1001\\n' > /etc/apt/preferences.d/nvidia-driver")
            assert pin.returncode == 0, pin.stderr
            install = _sh(name, "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
                                f"nvidia-fabricmanager={fm} nvidia-utils-580={utils} 2>&1")
            assert install.returncode == 0, install.stdout + install.stderr
            state = _sh(name, "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' nvidia-fabricmanager "
                              "nvidia-utils-580 libnvidia-compute-580 libnvidia-gpucomp-580").stdout
            print(state)
            for line in (f"nvidia-fabricmanager {fm} install ok installed",
                         f"nvidia-utils-580 {utils} install ok installed",
                         f"libnvidia-compute-580 {utils} install ok installed"):   # a Depends, same version
                assert line in state, state
            smi = _sh(name, "nvidia-smi; echo rc=$?").stdout
            assert "couldn't communicate with the NVIDIA driver" in smi and "rc=9" in smi, smi
            assert _sh(name, "test -f /lib/systemd/system/nvidia-fabricmanager.service").returncode == 0
            print(f"whole test {time.monotonic() - t0:.0f}s")
    finally:
        cudarepo.stop()
