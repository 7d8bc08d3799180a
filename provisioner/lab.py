"""The lab: local Debian 12 test hosts in rootful podman, reached over SSH.

Each host is a container running systemd as PID 1 (``--systemd=always``) with its
own address on the podman bridge, its own SSH host keys, and root's
authorized_keys holding a key made for the lab (ed25519, no password). ``up``
writes an Ansible inventory (``<workdir>/hosts.ini``) and a known_hosts file filled
from the containers' real host keys, so SSH checks them strictly.

All lab hosts fetch .deb files through one apt-cacher-ng on this machine, bound to
the podman bridge's gateway address only (never 0.0.0.0): a package installed on
N hosts comes from upstream once (apt-cacher-ng shares one download between
concurrent clients). The cache persists across labs in /var/cache/provisioner-lab.

The CLI calls :func:`up`, :func:`down` and :func:`status`; nothing here prints.
Progress goes through an optional callback; errors are :class:`ProvisionError`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from provisioner import lab_image
from provisioner.errors import ProvisionError

Progress = Callable[[str], None]

LABEL = "io.github.gpu-provisioner.lab"          # value: the lab's prefix
LABEL_WORKDIR = "io.github.gpu-provisioner.lab.workdir"
NETWORK = "podman"
GROUP = "lab"
SETUP_FIX = "sudo scripts/setup-dev-host"
PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")

KEY_NAME = "id_ed25519"
INVENTORY_NAME = "hosts.ini"
KNOWN_HOSTS_NAME = "known_hosts"
STATE_NAME = "lab.json"
PROXY_DROPIN = "/etc/apt/apt.conf.d/00provisioner-lab-proxy"

# apt-cacher-ng, our own instance (own config dir, no remapping: it fetches exactly
# the URL a host asked for, from the mirror the host's sources name).
CACHE_PORT = int(os.environ.get("PROVISIONER_LAB_CACHE_PORT", "3142"))
CACHE_DIR = Path(os.environ.get("PROVISIONER_LAB_CACHE_DIR", "/var/cache/provisioner-lab/apt-cacher-ng"))
CACHE_CONF_DIR = Path("/var/lib/provisioner-lab/apt-cacher-ng")
CACHE_LOG_DIR = Path("/var/log/provisioner-lab")
CACHE_RUN_DIR = Path("/run/provisioner-lab")
CACHE_USER = "apt-cacher-ng"


# --------------------------------------------------------------------------- results

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
class CacheStats:
    """Bytes apt-cacher-ng fetched from upstream vs served to lab hosts."""

    fetched_upstream: int
    served_to_hosts: int
    log: Path


# --------------------------------------------------------------------------- helpers

def _say(progress: Progress | None, msg: str) -> None:
    if progress:
        progress(msg)


def _check_prefix(prefix: str) -> None:
    if not PREFIX_RE.match(prefix):
        raise ProvisionError(
            f"lab prefix {prefix!r} is not usable as a container and host name",
            where="--prefix", fix="use lowercase letters, digits and '-', starting with a letter (at most 31)",
        )


def _preflight(need_ssh: bool = True) -> str:
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


def _podman(*args: str, check: bool = True, input: str | None = None, timeout: float | None = 120) -> subprocess.CompletedProcess:
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


def _lab_containers(prefix: str | None) -> list[dict]:
    label = f"{LABEL}={prefix}" if prefix else LABEL
    r = _podman("ps", "-a", "--filter", f"label={label}", "--format", "json")
    rows = json.loads(r.stdout or "[]") or []
    return sorted(rows, key=lambda c: _index(c["Names"][0]))


def _index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _inspect(names: Sequence[str]) -> dict[str, dict]:
    if not names:
        return {}
    r = _podman("inspect", "--type", "container", "--format", "json", *names)
    return {c["Name"].lstrip("/"): c for c in json.loads(r.stdout)}


def _ip_of(info: dict) -> str | None:
    ns = info.get("NetworkSettings") or {}
    for net in (ns.get("Networks") or {}).values():
        if net.get("IPAddress"):
            return net["IPAddress"]
    return ns.get("IPAddress") or None


def _exec(name: str, script: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return _podman("exec", "-i" if input is not None else "-t=false", name, "sh", "-c", script,
                   check=check, input=input, timeout=60)


def network_gateway(network: str = NETWORK) -> str:
    r = _podman("network", "inspect", network)
    data = json.loads(r.stdout)[0]
    for sub in data.get("subnets") or data.get("Subnets") or []:
        gw = sub.get("gateway") or sub.get("Gateway")
        if gw:
            return gw
    raise ProvisionError(f"podman network {network!r} has no gateway address", where="podman network", fix=SETUP_FIX)


def _ssh_banner(ip: str, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((ip, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)


# --------------------------------------------------------------------------- apt cache

def _cache_pidfile() -> Path:
    return CACHE_RUN_DIR / "apt-cacher-ng.pid"


def _cache_pid() -> int | None:
    try:
        pid = int(_cache_pidfile().read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm.startswith("apt-cacher-ng") else None


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def cache_start(gateway: str, progress: Progress | None = None) -> str:
    """Make sure our apt-cacher-ng listens on gateway:CACHE_PORT; return the proxy URL."""
    url = f"http://{gateway}:{CACHE_PORT}"
    conf = CACHE_CONF_DIR / "acng.conf"
    pid = _cache_pid()
    if pid and f"BindAddress: {gateway}\n" in (conf.read_text() if conf.exists() else "") and _port_open(gateway, CACHE_PORT):
        return url
    if pid:  # running, but for another gateway: restart it
        cache_stop()
    binary = shutil.which("apt-cacher-ng") or "/usr/sbin/apt-cacher-ng"
    if not Path(binary).exists():
        raise ProvisionError("apt-cacher-ng is not installed (the lab's shared apt cache)", where="lab",
                             fix=f"{SETUP_FIX}, or run the lab without the apt cache")
    if _port_open(gateway, CACHE_PORT):
        raise ProvisionError(f"something else already listens on {gateway}:{CACHE_PORT}", where="lab apt cache",
                             fix="stop it (a packaged apt-cacher-ng service?), set PROVISIONER_LAB_CACHE_PORT, or run without the apt cache")
    for d in (CACHE_DIR, CACHE_CONF_DIR, CACHE_LOG_DIR, CACHE_RUN_DIR):
        d.mkdir(parents=True, exist_ok=True)
    conf.write_text(
        "# Written by provisioner.lab: the lab's shared apt cache. No Remap rules, so it\n"
        "# fetches exactly the URL a lab host asked for.\n"
        f"CacheDir: {CACHE_DIR}\nLogDir: {CACHE_LOG_DIR}\n"
        f"Port: {CACHE_PORT}\nBindAddress: {gateway}\n"
        f"PidFile: {_cache_pidfile()}\nSocketPath: {CACHE_RUN_DIR / 'apt-cacher-ng.socket'}\n"
        "ReportPage: acng-report.html\nExThreshold: 4\n"
    )
    cmd = [binary, "-c", str(CACHE_CONF_DIR), "ForeGround=0"]
    try:
        import pwd
        pwd.getpwnam(CACHE_USER)
        for d in (CACHE_DIR, CACHE_LOG_DIR, CACHE_RUN_DIR):
            shutil.chown(d, CACHE_USER, CACHE_USER)
        cmd = ["runuser", "-u", CACHE_USER, "--", *cmd]
    except KeyError:
        pass
    _say(progress, f"starting the lab apt cache (apt-cacher-ng) on {url}")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _port_open(gateway, CACHE_PORT):
            return url
        time.sleep(0.1)
    raise ProvisionError(f"apt-cacher-ng did not start on {url}: {(r.stderr or r.stdout).strip()}",
                         where=str(CACHE_LOG_DIR / "apt-cacher.err"), fix="read that log; or run the lab without the apt cache")


def cache_stop() -> bool:
    """Stop our apt-cacher-ng (the cached files stay). True if one was running."""
    pid = _cache_pid()
    if not pid:
        return False
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return False
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    _cache_pidfile().unlink(missing_ok=True)
    return True


def cache_stats(since_line: int = 0) -> CacheStats:
    """Sum apt-cacher-ng's transfer log (from line `since_line`): 'I' lines are bytes
    fetched from upstream, 'O' lines bytes served to lab hosts."""
    log = CACHE_LOG_DIR / "apt-cacher.log"
    fetched = served = 0
    if log.exists():
        for line in log.read_text(errors="replace").splitlines()[since_line:]:
            parts = line.split("|")
            if len(parts) >= 3 and parts[2].isdigit():
                if parts[1] == "I":
                    fetched += int(parts[2])
                elif parts[1] == "O":
                    served += int(parts[2])
    return CacheStats(fetched, served, log)


# --------------------------------------------------------------------------- up / down / status

def up(
    hosts: int = 3,
    prefix: str = "lab",
    workdir: Path = Path("lab"),
    *,
    image: str | None = None,
    apt_cache: bool = True,
    extra_ca_certs: Sequence[Path] | None = None,
    timeout: float = 180,
    progress: Progress | None = None,
) -> LabResult:
    """Start (or complete) a lab of `hosts` containers named `<prefix>-1..N`.

    Idempotent: running hosts are kept, stopped ones started, missing ones created,
    hosts beyond N removed. Builds the test-host image first if its recipe changed
    (`extra_ca_certs`: CA files to trust inside; default: this machine's extra ones).
    Returns when every host's systemd says running/degraded and SSH with the lab key
    works against the host keys recorded in `<workdir>/known_hosts`.
    """
    t0 = time.monotonic()
    _check_prefix(prefix)
    if not 1 <= hosts <= 64:
        raise ProvisionError(f"--hosts {hosts} is out of range", where="--hosts", fix="use 1 to 64")
    _preflight()
    workdir = Path(workdir).resolve()
    if image is None:
        image = lab_image.ensure(lab_image.ImageRecipe.for_machine(extra_ca_certs=extra_ca_certs), progress=progress)

    workdir.mkdir(parents=True, exist_ok=True)
    state_file = workdir / STATE_NAME
    if state_file.exists():
        other = json.loads(state_file.read_text()).get("prefix")
        if other and other != prefix and _lab_containers(other):
            raise ProvisionError(f"{workdir} already holds the inventory of lab {other!r}", where=str(workdir),
                                 fix=f"use another workdir, or `provision lab down --prefix {other}` first")
    key = workdir / KEY_NAME
    if not key.exists():
        _say(progress, f"making the lab SSH key {key}")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"provisioner-lab-{prefix}", "-f", str(key)],
                       check=True, capture_output=True)
    pubkey = key.with_suffix(".pub").read_text().strip()

    # Containers --------------------------------------------------------------
    wanted = [f"{prefix}-{i}" for i in range(1, hosts + 1)]
    existing = {c["Names"][0]: c for c in _lab_containers(prefix)}
    created, reused, removed = [], [], []
    extras = [n for n in existing if n not in wanted]
    if extras:
        _podman("rm", "-f", "-t", "5", *extras)
        removed += extras
    for name in wanted:
        c = existing.get(name)
        if c:
            reused.append(name)
            if c["State"] != "running":
                _podman("start", name)
            continue
        clash = _podman("container", "exists", name, check=False)
        if clash.returncode == 0:
            raise ProvisionError(f"a container named {name!r} exists and is not part of lab {prefix!r}", where="podman",
                                 fix=f"choose another --prefix, or remove it: podman rm -f {name}")
        _say(progress, f"starting {name}")
        _podman("run", "-d", "--name", name, "--hostname", name,
                "--label", f"{LABEL}={prefix}", "--label", f"{LABEL_WORKDIR}={workdir}",
                "--network", NETWORK, "--systemd=always", image, "/sbin/init")
        created.append(name)

    # systemd up --------------------------------------------------------------
    _say(progress, f"waiting for systemd on {len(wanted)} host(s)")
    sysstate: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    pending = list(wanted)
    while pending:
        for name in list(pending):
            r = _podman("exec", name, "systemctl", "is-system-running", check=False, timeout=30)
            s = r.stdout.strip()
            if s in ("running", "degraded"):
                sysstate[name] = s
                pending.remove(name)
        if pending:
            if time.monotonic() > deadline:
                raise ProvisionError(f"systemd did not finish booting on {', '.join(pending)} within {timeout:.0f} s",
                                     where=pending[0], fix=f"look inside: podman exec -it {pending[0]} systemctl --failed")
            time.sleep(0.3)

    # apt cache, key, host keys -------------------------------------------------
    proxy = cache_start(network_gateway(), progress) if apt_cache else None
    infos = _inspect(wanted)
    host_keys: dict[str, str] = {}
    for name in wanted:
        if proxy:
            _exec(name, f"printf 'Acquire::http::Proxy \"%s\";\\n' '{proxy}' > {PROXY_DROPIN}")
        else:
            _exec(name, f"rm -f {PROXY_DROPIN}")
        _exec(name, "umask 077 && mkdir -p /root/.ssh && cat > /root/.ssh/authorized_keys", input=pubkey + "\n")
        r = _exec(name, "for i in $(seq 100); do [ -s /etc/ssh/ssh_host_ed25519_key.pub ] && break; sleep 0.1; done; "
                        "cat /etc/ssh/ssh_host_ed25519_key.pub")
        host_keys[name] = " ".join(r.stdout.split()[:2])

    ips = {n: _ip_of(infos[n]) for n in wanted}
    for n, ip in ips.items():
        if not ip:
            raise ProvisionError(f"{n} has no IP address on podman network {NETWORK!r}", where=n, fix=SETUP_FIX)

    # inventory -----------------------------------------------------------------
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
        "ansible_user=root",
        f"ansible_ssh_private_key_file={_ini_quote(str(key))}",
        f"ansible_ssh_common_args={_ini_quote(ssh_args, force=True)}",
        "ansible_python_interpreter=/usr/bin/python3",
        "",
    ]
    _write_atomic(inventory, "\n".join(lines))
    _write_atomic(state_file, json.dumps({"prefix": prefix, "hosts": wanted, "image": image, "apt_proxy": proxy}, indent=2) + "\n")

    # SSH answers, with the key and the recorded host keys ----------------------
    _say(progress, "checking SSH on every host")
    while True:
        waiting = [n for n in wanted if not _ssh_banner(ips[n])]
        if not waiting:
            break
        if time.monotonic() > deadline:
            raise ProvisionError(f"sshd does not answer on {', '.join(waiting)}", where=waiting[0],
                                 fix=f"podman exec {waiting[0]} systemctl status ssh")
        time.sleep(0.2)
    procs = {n: subprocess.Popen(["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                  *ssh_args.split(), f"root@{ips[n]}", "true"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in wanted}
    for n, p in procs.items():
        _, err = p.communicate(timeout=60)
        if p.returncode != 0:
            raise ProvisionError(f"SSH to {n} ({ips[n]}) with the lab key failed: {err.strip()}", where=n,
                                 fix=f"provision lab down --prefix {prefix} && provision lab up --prefix {prefix}")

    lab_hosts = [LabHost(n, prefix, "running", ips[n], image, sysstate[n]) for n in wanted]
    return LabResult(prefix, lab_hosts, inventory, key, known_hosts, image, proxy,
                     time.monotonic() - t0, created, reused, removed)


def _ini_quote(value: str, force: bool = False) -> str:
    if not force and not re.search(r"[\s'\"#;]", value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def down(prefix: str = "lab", workdir: Path = Path("lab"), *, progress: Progress | None = None,
         stop_cache: bool = True) -> DownResult:
    """Remove the lab's containers and the files `up` wrote in `workdir` (inventory,
    known_hosts, key, state; the folder too when that leaves it empty). Stops the apt
    cache daemon when no container is running any more (its cached files stay)."""
    _check_prefix(prefix)
    _preflight(need_ssh=False)
    workdir = Path(workdir).resolve()
    names = [c["Names"][0] for c in _lab_containers(prefix)]
    if names:
        _say(progress, f"removing {', '.join(names)}")
        _podman("rm", "-f", "-t", "5", *names)
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
    if stop_cache and not _podman("ps", "-q").stdout.strip():
        stopped = cache_stop()
    return DownResult(prefix, names, files, stopped)


def status(prefix: str | None = "lab") -> list[LabHost]:
    """The lab's hosts as podman sees them (prefix None: every lab on this machine)."""
    if prefix is not None:
        _check_prefix(prefix)
    _preflight(need_ssh=False)
    rows = _lab_containers(prefix)
    infos = _inspect([c["Names"][0] for c in rows])
    out = []
    for c in rows:
        name = c["Names"][0]
        h = LabHost(name, (c.get("Labels") or {}).get(LABEL, ""), c["State"], _ip_of(infos.get(name, {})), c.get("Image"))
        if c["State"] == "running":
            h.systemd = _podman("exec", name, "systemctl", "is-system-running", check=False, timeout=30).stdout.strip() or None
        out.append(h)
    return out
