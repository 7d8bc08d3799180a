"""A stand-in for NVIDIA's libnvidia-container apt repository (the NVIDIA Container Toolkit).

Built by the CUDA stand-in's builder (provisioner/lab/cudarepo.py: empty .debs with NVIDIA's
names, versions and Depends, a flat repository signed with a throwaway key) from its OWN
manifest, ``provisioner/lab/standin_toolkit/stable-deb.yml``, never from the product's data
(provisioner/data/container_toolkit.yml), which it differs from on purpose (the manifest's
header says where). The layout is NVIDIA's: ``<root>/stable/deb/amd64/`` with Packages,
Release, InRelease, so a host's deb line is ``deb [signed-by=...] <url>/stable/deb/amd64 /``
(NVIDIA's own line names ``$(ARCH)``, which apt expands).

What it cannot prove: anything about NVIDIA's programs. Its nvidia-container-runtime,
nvidia-container-runtime-hook and nvidia-container-cli are stubs that say so and exit 1
(cudarepo.PAYLOADS): they configure no engine and start no container. Its nvidia-ctk does one
thing: `cdi generate` prints a STUB spec (it says so) naming only the installed driver's
libcuda and no device node, so an engine can resolve CDI devices from it (Podman's `init`
injects its edits) and a spec for another driver can be found and rewritten. An engine can
list the registered runtime (`docker info`) but not run a container with it.

The CUDA stand-in's server serves it too: build it under the same root (each flavour keeps
its own cache stamp there).
"""

from __future__ import annotations

from pathlib import Path

from provisioner.lab import cudarepo
from provisioner.lab import manifest as manifest_mod

MANIFEST = Path(__file__).resolve().parent / "standin_toolkit" / "stable-deb.yml"


def load() -> manifest_mod.Manifest:
    """The toolkit stand-in's manifest, validated."""
    return manifest_mod.load("libnvidia-container", path=MANIFEST)


def build(root: Path = cudarepo.DEFAULT_ROOT) -> cudarepo.Repo:
    """Build (or find cached) the toolkit stand-in under `root`, with its key also at
    ``<root>/gpgkey``, where NVIDIA publishes its own (the install guide's URL), so a profile's
    mirrors.container_toolkit_url names the served root as it would name a mirror."""
    repo = cudarepo.build(root, manifest=load())
    key, gpgkey = (repo.root / repo.key_path).read_bytes(), repo.root / "gpgkey"
    if not gpgkey.is_file() or gpgkey.read_bytes() != key:
        tmp = gpgkey.with_name(".gpgkey.tmp")
        tmp.write_bytes(key)
        tmp.replace(gpgkey)
    return repo
