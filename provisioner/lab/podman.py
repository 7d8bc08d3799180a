"""Rootful podman, as the lab uses it: the machine check, one way to call podman, and
what podman knows about the lab's containers (labels, addresses, the bridge's gateway)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
from typing import Sequence

from provisioner.errors import ProvisionError

LABEL = "io.github.gpu-provisioner.lab"          # value: the lab's prefix
LABEL_WORKDIR = "io.github.gpu-provisioner.lab.workdir"
NETWORK = "podman"
SETUP_FIX = "sudo scripts/setup-dev-host"


def preflight(need_ssh: bool = True) -> str:
    """Root, podman and (for `up`) the SSH client: what every lab command needs."""
    if os.geteuid() != 0:
        raise ProvisionError(
            "the lab needs root: it runs rootful podman (systemd containers with their own IP addresses)",
            where="lab", fix=f"run it with sudo (after `{SETUP_FIX}` once)",
        )
    podman = shutil.which("podman")
    if not podman:
        raise ProvisionError("podman is not installed", where="lab", fix=SETUP_FIX)
    if need_ssh:
        for tool in ("ssh", "ssh-keygen"):
            if not shutil.which(tool):
                raise ProvisionError(f"'{tool}' is not installed", where="lab", fix=SETUP_FIX)
    return podman


def run(*args: str, check: bool = True, input: str | None = None, timeout: float | None = 120
        ) -> subprocess.CompletedProcess:
    cmd = ["podman", *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, input=input, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise ProvisionError(f"`{shlex.join(cmd)}` did not finish in {timeout} s", where="podman", fix=SETUP_FIX) from e
    if check and r.returncode != 0:
        msg = (r.stderr or r.stdout).strip()
        fix = SETUP_FIX
        if "crun" in msg or "setrlimit" in msg or "cgroup" in msg:
            fix = f"{SETUP_FIX} (it sets runc, cgroupfs and ulimits in /etc/containers/containers.conf)"
        raise ProvisionError(f"`podman {args[0]}` failed: {msg}", where="podman", fix=fix)
    return r


def lab_containers(prefix: str | None) -> list[dict]:
    """The containers labelled as lab `prefix` (None: every lab), in host-number order."""
    label = f"{LABEL}={prefix}" if prefix else LABEL
    r = run("ps", "-a", "--filter", f"label={label}", "--format", "json")
    rows = json.loads(r.stdout or "[]") or []
    return sorted(rows, key=lambda c: _index(c["Names"][0]))


def _index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def inspect(names: Sequence[str]) -> dict[str, dict]:
    if not names:
        return {}
    r = run("inspect", "--type", "container", "--format", "json", *names)
    return {c["Name"].lstrip("/"): c for c in json.loads(r.stdout)}


def ip_of(info: dict) -> str | None:
    ns = info.get("NetworkSettings") or {}
    for net in (ns.get("Networks") or {}).values():
        if net.get("IPAddress"):
            return net["IPAddress"]
    return ns.get("IPAddress") or None


def exec_sh(name: str, script: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a shell script inside a container (stdin only when `input` is given)."""
    return run("exec", "-i" if input is not None else "-t=false", name, "sh", "-c", script,
               check=check, input=input, timeout=60)


def systemd_state(name: str) -> str:
    """`systemctl is-system-running` inside the container ('' when it cannot answer)."""
    return run("exec", name, "systemctl", "is-system-running", check=False, timeout=30).stdout.strip()


def network_gateway(network: str = NETWORK) -> str:
    r = run("network", "inspect", network)
    data = json.loads(r.stdout)[0]
    for sub in data.get("subnets") or data.get("Subnets") or []:
        gw = sub.get("gateway") or sub.get("Gateway")
        if gw:
            return gw
    raise ProvisionError(f"podman network {network!r} has no gateway address", where="podman network", fix=SETUP_FIX)


def port_open(host: str, port: int) -> bool:
    """Whether something answers on host:port (the lab's own services on the bridge's gateway)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
