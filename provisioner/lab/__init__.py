"""The lab: local Debian 12 test hosts in rootful podman, reached over SSH.

Each host is a container running systemd as PID 1 (``--systemd=always``) with its
own address on the podman bridge, its own SSH host keys, and root's authorized_keys
holding a key made for the lab (ed25519, no password). ``up`` writes an Ansible
inventory (``<workdir>/hosts.ini``) and a known_hosts file filled from the containers'
real host keys, so SSH checks them strictly.

Modules: podman (calling podman, what it knows of the lab's containers), aptcache (the
shared apt-cacher-ng), image (the test-host image, built with mmdebstrap), hosts (up,
down, status), cudarepo (the stand-in for NVIDIA's CUDA apt repository: built from its
own manifest, lab/standin/<flavour>.yml read by manifest, never from the product's
catalogue, which it differs from on purpose; signed with a throwaway key, served on the
bridge's gateway; it exercises apt's side of the cuda_repo path, never NVIDIA's binaries). Development tooling: the CLI imports it only for `provision lab`.
"""

from provisioner.lab.hosts import DownResult, LabHost, LabResult, down, status, up

__all__ = ["DownResult", "LabHost", "LabResult", "down", "status", "up"]
