"""Lab hosts: start, stop and list them, and write the inventory that reaches them.

`up` runs in phases, each a function of its own: check the request, make the lab's SSH
key, start the containers, wait for systemd, give each host the apt proxy and the key,
write the inventory and known_hosts, wait for SSH. Nothing here prints; progress goes
through an optional callback, errors are ProvisionError.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from provisioner.errors import ProvisionError
from provisioner import outputs
from provisioner.lab import aptcache, limits, podman
from provisioner.lab import image as lab_image
from provisioner.lab.podman import LABEL, LABEL_WORKDIR, NETWORK, SETUP_FIX

Progress = Callable[[str], None]

GROUP = "lab"
PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
# A guard against a typo, not a measured limit: 100 hosts run on a 2-core, 24 GiB machine
# once the kernel limits are raised (lab/limits.py). One Linux bridge takes 1024 ports.
MAX_HOSTS = 500
# Booting shares one deadline: a base, plus time per host (systemd, then sshd, on every host
# at once; measured about 1-2 s of boot per host on 2 busy cores).
BOOT_BASE_SECONDS, BOOT_SECONDS_PER_HOST = 120.0, 4.0
# Containers started at once: podman's own locking serialises much of `podman run`, and
# more in flight only adds contention on 2 cores.
START_WORKERS = 8
KEY_NAME = "id_ed25519"
INVENTORY_NAME = "hosts.ini"
KNOWN_HOSTS_NAME = "known_hosts"
STATE_NAME = "lab.json"
PROXY_DROPIN = "/etc/apt/apt.conf.d/00provisioner-lab-proxy"
# The lab logs in as this user and becomes root through sudo, as users do on a cloud image
# (passwordless sudo there too); root's own login is not set up.
USER = "provision"
SUDOERS = f"/etc/sudoers.d/90-provisioner-lab-{USER}"


@dataclass
class LabHost:
    name: str
    prefix: str
    state: str                 # podman's: running, exited, created, ...
    ip: str | None = None
    image: str | None = None
    systemd: str | None = None  # `systemctl is-system-running` when running


@dataclass
class LabResult:
    prefix: str
    hosts: list[LabHost]
    inventory: Path
    private_key: Path
    known_hosts: Path
    image: str
    apt_proxy: str | None
    seconds: float
    created: list[str] = field(default_factory=list)   # containers made by this call
    reused: list[str] = field(default_factory=list)    # already there (started if stopped)
    removed: list[str] = field(default_factory=list)   # extras beyond --hosts


@dataclass
class DownResult:
    prefix: str
    removed_containers: list[str]
    removed_files: list[Path]
    cache_stopped: bool


@dataclass
class _Containers:
    created: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _say(progress: Progress | None, msg: str) -> None:
    if progress:
        progress(msg)


def _check_prefix(prefix: str) -> None:
    if not PREFIX_RE.match(prefix):
        raise ProvisionError(
            f"lab prefix {prefix!r} is not usable as a container and host name",
            where="--prefix", fix="use lowercase letters, digits and '-', starting with a letter (at most 31)",
        )


def _write_atomic(path: Path, text: str) -> None:
    # The lab folder's own files, rewritten by every `lab up` (force: they are the lab's).
    outputs.write_file(path, text, force=True, what="lab file")


def _ini_quote(value: str, force: bool = False) -> str:
    if not force and not re.search(r"[\s'\"#;]", value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------- up, in phases

def up(
    hosts: int = 3,
    prefix: str = "lab",
    workdir: Path = Path("lab"),
    *,
    image: str | None = None,
    run_args: Sequence[str] = (),
    apt_cache: bool = True,
    extra_ca_certs: Sequence[Path] | None = None,
    timeout: float | None = None,
    progress: Progress | None = None,
) -> LabResult:
    """Start (or complete) a lab of `hosts` containers named `<prefix>-1..N`.

    Idempotent: running hosts are kept, stopped ones started, missing ones created,
    hosts beyond N removed. Builds the test-host image first if its recipe changed
    (`extra_ca_certs`: CA files to trust inside; default: this machine's extra ones).
    Returns when every host's systemd says running/degraded and SSH with the lab key
    works against the host keys recorded in `<workdir>/known_hosts`.

    run_args: more `podman run` options for the hosts this call creates (a test's small
    filesystem: `("--tmpfs", "/opt:rw,size=64m")`); hosts already there keep theirs.

    timeout: seconds for booting and SSH (default BOOT_BASE_SECONDS + BOOT_SECONDS_PER_HOST
    per host). Before starting anything, the kernel limits the new hosts would exceed (inotify,
    memory: lab/limits.py) are refused with the fix; a boot that still does not finish names
    the limit that is exhausted, if one is.
    """
    t0 = time.monotonic()
    _check_prefix(prefix)
    if not 1 <= hosts <= MAX_HOSTS:
        raise ProvisionError(f"--hosts {hosts} is out of range", where="--hosts", fix=f"use 1 to {MAX_HOSTS}")
    podman.preflight()
    workdir = Path(workdir).resolve()
    if image is None:
        image = lab_image.ensure(lab_image.ImageRecipe.for_machine(extra_ca_certs=extra_ca_certs), progress=progress)
    workdir.mkdir(parents=True, exist_ok=True)
    _refuse_other_lab(workdir, prefix)
    key = _ensure_key(workdir, prefix, progress)

    wanted = [f"{prefix}-{i}" for i in range(1, hosts + 1)]
    timeout = timeout if timeout is not None else BOOT_BASE_SECONDS + BOOT_SECONDS_PER_HOST * hosts
    running = {c["Names"][0] for c in podman.lab_containers(prefix) if c["State"] == "running"}
    short = limits.shortfalls(len([n for n in wanted if n not in running]))
    if short:
        raise ProvisionError(f"this machine cannot boot {hosts} lab host(s): " + "; ".join(short), where="--hosts",
                             fix="raise the limits (sudo scripts/setup-dev-host), or ask for fewer hosts")
    deadline = time.monotonic() + timeout
    containers = _start_containers(wanted, prefix, workdir, image, tuple(run_args), progress)
    sysstate = _wait_for_systemd(wanted, deadline, timeout, progress)
    proxy = aptcache.start(podman.network_gateway(), progress) if apt_cache else None
    with ThreadPoolExecutor(START_WORKERS) as pool:
        host_keys = dict(zip(wanted, pool.map(lambda name: _give_access(name, proxy, key), wanted)))
    ips = _addresses(wanted)
    inventory, known_hosts, ssh_args = _write_inventory(workdir, prefix, wanted, ips, host_keys, key)
    _write_atomic(workdir / STATE_NAME, json.dumps({"prefix": prefix, "hosts": wanted, "image": image,
                                                    "apt_proxy": proxy}, indent=2) + "\n")
    _say(progress, "checking SSH on every host")
    _wait_for_ssh(wanted, ips, key, ssh_args, prefix, deadline)

    lab_hosts = [LabHost(n, prefix, "running", ips[n], image, sysstate[n]) for n in wanted]
    return LabResult(prefix, lab_hosts, inventory, key, known_hosts, image, proxy, time.monotonic() - t0,
                     containers.created, containers.reused, containers.removed)


def _refuse_other_lab(workdir: Path, prefix: str) -> None:
    state_file = workdir / STATE_NAME
    if state_file.exists():
        other = json.loads(state_file.read_text()).get("prefix")
        if other and other != prefix and podman.lab_containers(other):
            raise ProvisionError(f"{workdir} already holds the inventory of lab {other!r}", where=str(workdir),
                                 fix=f"use another workdir, or `provision lab down --prefix {other}` first")


def _ensure_key(workdir: Path, prefix: str, progress: Progress | None) -> Path:
    key = workdir / KEY_NAME
    if not key.exists():
        _say(progress, f"making the lab SSH key {key}")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"provisioner-lab-{prefix}", "-f",
                        str(key)], check=True, capture_output=True)
    return key


def _start_containers(wanted: list[str], prefix: str, workdir: Path, image: str, run_args: tuple[str, ...],
                      progress: Progress | None) -> _Containers:
    """Keep running hosts, start stopped ones, create missing ones, remove extras."""
    existing = {c["Names"][0]: c for c in podman.lab_containers(prefix)}
    result = _Containers()
    extras = [n for n in existing if n not in wanted]
    if extras:
        podman.run("rm", "-f", "-t", "5", *extras)
        result.removed += extras
    new = []
    for name in wanted:
        c = existing.get(name)
        if c:
            result.reused.append(name)
            continue
        if podman.run("container", "exists", name, check=False).returncode == 0:
            raise ProvisionError(f"a container named {name!r} exists and is not part of lab {prefix!r}",
                                 where="podman", fix=f"choose another --prefix, or remove it: podman rm -f {name}")
        new.append(name)

    def start(name: str) -> None:
        if name in existing:
            if existing[name]["State"] != "running":
                podman.run("start", name)
            return
        podman.run("run", "-d", "--name", name, "--hostname", name,
                   "--label", f"{LABEL}={prefix}", "--label", f"{LABEL_WORKDIR}={workdir}",
                   "--network", NETWORK, "--systemd=always", *run_args, image, "/sbin/init")

    if new:
        _say(progress, f"starting {len(new)} host(s): {new[0]} .. {new[-1]}" if len(new) > 1 else f"starting {new[0]}")
    with ThreadPoolExecutor(START_WORKERS) as pool:
        list(pool.map(start, wanted))  # in parallel; the first error is raised here
    result.created += new
    return result


def _wait_for_systemd(wanted: list[str], deadline: float, timeout: float, progress: Progress | None) -> dict[str, str]:
    _say(progress, f"waiting for systemd on {len(wanted)} host(s)")
    sysstate: dict[str, str] = {}
    pending = list(wanted)
    while pending:
        for name in list(pending):
            state = podman.systemd_state(name)
            if state in ("running", "degraded"):
                sysstate[name] = state
                pending.remove(name)
        if pending:
            if time.monotonic() > deadline:
                exhausted = limits.shortfalls(1)  # not even one more host fits: that limit stopped it
                cause = f" ({'; '.join(exhausted)})" if exhausted else " (no kernel limit found exhausted)"
                raise ProvisionError(f"systemd did not finish booting on {', '.join(pending)} within {timeout:.0f} s"
                                     + cause, where=pending[0],
                                     fix=f"look inside: podman exec -it {pending[0]} systemctl --failed")
            time.sleep(0.3)
    return sysstate


def _give_access(name: str, proxy: str | None, key: Path) -> str:
    """Point the host's apt at the lab cache (or not), make the sudo user with the lab key
    authorized, and return the host's ed25519 public key for known_hosts."""
    if proxy:
        # The lab's own services on the bridge's gateway (the stand-in repositories) are
        # reached directly, not through the cache.
        gateway = proxy.split("//", 1)[-1].rsplit(":", 1)[0]
        podman.exec_sh(name, f"printf 'Acquire::http::Proxy \"%s\";\\nAcquire::http::Proxy::%s \"DIRECT\";\\n' "
                             f"'{proxy}' '{gateway}' > {PROXY_DROPIN}")
    else:
        podman.exec_sh(name, f"rm -f {PROXY_DROPIN}")
    pubkey = key.with_suffix(".pub").read_text().strip()
    podman.exec_sh(name, f"id -u {USER} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {USER}; "
                         f"printf '%s ALL=(ALL:ALL) NOPASSWD: ALL\\n' {USER} > {SUDOERS}.tmp && chmod 0440 {SUDOERS}.tmp "
                         f"&& visudo -cqf {SUDOERS}.tmp && mv {SUDOERS}.tmp {SUDOERS}; "
                         f"install -d -m 0700 -o {USER} -g {USER} /home/{USER}/.ssh")
    podman.exec_sh(name, f"umask 077 && cat > /home/{USER}/.ssh/authorized_keys && chown {USER}: /home/{USER}/.ssh/authorized_keys",
                   input=pubkey + "\n")
    r = podman.exec_sh(name, "for i in $(seq 100); do [ -s /etc/ssh/ssh_host_ed25519_key.pub ] && break; sleep 0.1; "
                             "done; cat /etc/ssh/ssh_host_ed25519_key.pub")
    return " ".join(r.stdout.split()[:2])


def _addresses(wanted: list[str]) -> dict[str, str]:
    infos = podman.inspect(wanted)
    ips = {n: podman.ip_of(infos[n]) for n in wanted}
    for n, ip in ips.items():
        if not ip:
            raise ProvisionError(f"{n} has no IP address on podman network {NETWORK!r}", where=n, fix=SETUP_FIX)
    return ips  # type: ignore[return-value]


def _write_inventory(workdir: Path, prefix: str, wanted: list[str], ips: dict[str, str],
                     host_keys: dict[str, str], key: Path) -> tuple[Path, Path, str]:
    known_hosts = workdir / KNOWN_HOSTS_NAME
    _write_atomic(known_hosts, "".join(f"{ips[n]},{n} {host_keys[n]}\n" for n in wanted))
    inventory = workdir / INVENTORY_NAME
    ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    lines = [
        f"# Written by `provision lab up --prefix {prefix}`; removed by `provision lab down --prefix {prefix}`.",
        f"[{GROUP}]",
        *(f"{n} ansible_host={ips[n]}" for n in wanted),
        "",
        f"[{GROUP}:vars]",
        f"ansible_user={USER}",
        f"ansible_ssh_private_key_file={_ini_quote(str(key))}",
        f"ansible_ssh_common_args={_ini_quote(ssh_args, force=True)}",
        "ansible_python_interpreter=/usr/bin/python3",
        "",
    ]
    _write_atomic(inventory, "\n".join(lines))
    return inventory, known_hosts, ssh_args


def _ssh_banner(ip: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((ip, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _wait_for_ssh(wanted: list[str], ips: dict[str, str], key: Path, ssh_args: str, prefix: str,
                  deadline: float) -> None:
    """sshd answers on every host, and a login with the lab key against the recorded host keys works."""
    while True:
        waiting = [n for n in wanted if not _ssh_banner(ips[n])]
        if not waiting:
            break
        if time.monotonic() > deadline:
            raise ProvisionError(f"sshd does not answer on {', '.join(waiting)}", where=waiting[0],
                                 fix=f"podman exec {waiting[0]} systemctl status ssh")
        time.sleep(0.2)
    procs = {n: subprocess.Popen(["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                  *ssh_args.split(), f"{USER}@{ips[n]}", "sudo -n true"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in wanted}
    for n, p in procs.items():
        _, err = p.communicate(timeout=60)
        if p.returncode != 0:
            raise ProvisionError(f"SSH to {n} ({ips[n]}) with the lab key failed: {err.strip()}", where=n,
                                 fix=f"provision lab down --prefix {prefix} && provision lab up --prefix {prefix}")


# --------------------------------------------------------------------------- down, status

def down(prefix: str = "lab", workdir: Path = Path("lab"), *, progress: Progress | None = None,
         stop_cache: bool = True) -> DownResult:
    """Remove the lab's containers and the files `up` wrote in `workdir` (inventory,
    known_hosts, key, state; the folder too when that leaves it empty). Stops the apt
    cache daemon when no container is running any more (its cached files stay)."""
    _check_prefix(prefix)
    podman.preflight(need_ssh=False)
    workdir = Path(workdir).resolve()
    names = [c["Names"][0] for c in podman.lab_containers(prefix)]
    if names:
        _say(progress, f"removing {', '.join(names)}")
        podman.run("rm", "-f", "-t", "5", *names)
    files: list[Path] = []
    state_file = workdir / STATE_NAME
    owner = None
    if state_file.exists():
        try:
            owner = json.loads(state_file.read_text()).get("prefix")
        except ValueError:
            owner = None
    if owner in (None, prefix):
        for n in (INVENTORY_NAME, KNOWN_HOSTS_NAME, KEY_NAME, KEY_NAME + ".pub", STATE_NAME):
            p = workdir / n
            if p.exists():
                p.unlink()
                files.append(p)
        if workdir.is_dir() and not any(workdir.iterdir()):
            workdir.rmdir()
    stopped = False
    # Other labs and Molecule's test hosts (not labelled as ours) may be downloading
    # through the cache: it is stopped only when no container at all is running.
    if stop_cache and not podman.run("ps", "-q").stdout.strip():
        stopped = aptcache.stop()
    return DownResult(prefix, names, files, stopped)


def status(prefix: str | None = "lab") -> list[LabHost]:
    """The lab's hosts as podman sees them (prefix None: every lab on this machine)."""
    if prefix is not None:
        _check_prefix(prefix)
    podman.preflight(need_ssh=False)
    rows = podman.lab_containers(prefix)
    infos = podman.inspect([c["Names"][0] for c in rows])
    out = []
    for c in rows:
        name = c["Names"][0]
        h = LabHost(name, (c.get("Labels") or {}).get(LABEL, ""), c["State"], podman.ip_of(infos.get(name, {})),
                    c.get("Image"))
        if c["State"] == "running":
            h.systemd = podman.systemd_state(name) or None
        out.append(h)
    return out
