"""A stand-in for NVIDIA's CUDA apt repository, served on the lab network.

Built from its own manifest (``provisioner/lab/standin/<flavour>.yml``, read by
provisioner.lab.manifest), never from the product's package catalogue
(``provisioner/data/catalogue/``): a stand-in built from the data it is meant to check
would agree with that data's mistakes, and CI would stay green. The manifest differs from
the catalogue on purpose (its header lists where and why: the 580.95.05 driver at its real
revision -0ubuntu1 where the catalogue says -1ubuntu1, a newer R580 release and a CUDA
toolkit the catalogue lacks, a version the catalogue has and the stand-in does not), so a
lab run fails if the product takes a version from the catalogue where it should take it
from the repository's index. Every version in the manifest names the public listing it
mirrors; its Depends are subsets written for apt's logic.

One ``.deb`` per manifest version, with NVIDIA's package name, version, architecture,
Depends/Conflicts/Provides, and a Description that says it is a gpu-provisioner test
stand-in. The layout is NVIDIA's: a flat repository at ``<root>/ubuntu2204/x86_64/``
holding the .debs, ``Packages``, ``Packages.gz``, ``Release`` (``Origin: NVIDIA``,
``Label: NVIDIA CUDA``, ``Architecture: x86_64``, MD5Sum/SHA1/SHA256, no Suite or
Components), ``InRelease`` and ``Release.gpg``, and the signing key as ``<keyid>.pub``. It
is signed with a throwaway GnuPG key made for the build (no passphrase, in a temporary
GNUPGHOME that is deleted afterwards, so the private key is kept nowhere); NVIDIA's key
(3bf863cc) is not imitated.

What it proves: apt's side of the ``cuda_repo`` path, for real. A host trusts it only
through a ``signed-by`` keyring (apt checks InRelease's signature); apt resolves NVIDIA's
names and versions against it (exact pins by origin ``o=NVIDIA``/``l=NVIDIA CUDA``,
holds, versioned Depends between the driver's packages, Conflicts between the open and
proprietary kernel modules, unbounded ``>=`` meta-packages, three driver releases for a
rolling upgrade and a newest Candidate), in the order and with the privilege the roles
use; and, because it is not the catalogue, that the product installs what the index
carries rather than what its own data assumes.

What it cannot prove: anything about NVIDIA's binaries, or that NVIDIA's repository is
exactly this. The packages are empty but for a few files a role needs to exist
(``PAYLOADS``: the units the roles enable, an ``nvidia-smi`` that prints what the real one
prints without a driver and exits 9, nvcc's version line, the toolkits' ``cuda``
alternative). There is no kernel module, no DKMS build, no library, no GPU. Depends are
subsets, not NVIDIA's full lists; a version the public listings did not show is marked
``unconfirmed`` in the manifest.

The build is deterministic (sorted, fixed mtimes, ``SOURCE_DATE_EPOCH``; only the
signatures differ between builds) and cached: a build whose inputs (the manifest file,
payloads, this format) hash to the recorded key returns at once.

``serve(root)`` runs ``python -m http.server`` bound to the podman bridge's gateway address
only (like the apt cache, never 0.0.0.0); ``stop()`` ends it. Its pidfile is under
/run/provisioner-lab/.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import ProvisionError
from provisioner.lab import manifest as manifest_mod
from provisioner.lab import podman
from provisioner.lab.manifest import Manifest, StandInPackage

FORMAT = 2                               # bump when the build's output changes
EPOCH = 1754006400                       # 2025-08-01T00:00:00Z: every mtime, and the Release Date
MAINTAINER = "gpu-provisioner lab <lab@gpu-provisioner.invalid>"
DEFAULT_ROOT = Path(os.environ.get("PROVISIONER_LAB_CUDAREPO_DIR", "/var/cache/provisioner-lab/cudarepo"))
PORT = int(os.environ.get("PROVISIONER_LAB_CUDAREPO_PORT", "3143"))
RUN_DIR = Path("/run/provisioner-lab")
LOG_DIR = Path("/var/log/provisioner-lab")
STAMP = ".stand-in-{flavour}.json"       # one per flavour: several can share a root

def _postinst(release: str) -> str:
    """The toolkit's postinst: /usr/local/cuda-<release> as the `cuda` alternative (priority 122 for 12.2)."""
    return ("#!/bin/sh\nset -e\n# gpu-provisioner test stand-in: register the toolkit as NVIDIA's packages do.\n"
            "if [ \"$1\" = configure ]; then\n"
            f"  update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-{release} {release.replace('.', '')}\nfi\n")


# nvidia-ctk's stand-in: `cdi generate` prints a STUB spec (it says so) for the installed
# driver's library, the one NVIDIA thing a GPU-less lab host has (Debian's libcuda1), so the
# lab can show an engine resolving CDI devices and a spec for another driver found and
# rewritten. It names no device node: there is no GPU. Without libcuda.so.1 it fails, as
# NVIDIA's does without a driver; any other command exits 1 as the other stubs do.
_NVIDIA_CTK = r"""#!/bin/sh
# gpu-provisioner test stand-in for NVIDIA's nvidia-ctk: no NVIDIA software is installed.
if [ "$1 $2" != "cdi generate" ]; then
    echo 'stand-in nvidia-ctk: a gpu-provisioner lab stub, it only prints a stub CDI spec' >&2
    exit 1
fi
lib=$(readlink -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>/dev/null)
case "$lib" in
    */libcuda.so.[0-9]*.[0-9]*) version=${lib##*/libcuda.so.} ;;
    *) echo 'stand-in nvidia-ctk (a gpu-provisioner lab stub): no libcuda.so.1, no driver installed' >&2; exit 1 ;;
esac
cat <<SPEC
# A STUB CDI spec from the gpu-provisioner lab's stand-in nvidia-ctk, not NVIDIA's:
# no GPU and no device node, only the installed driver's library ($version).
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: all
  containerEdits:
    env:
    - NVIDIA_VISIBLE_DEVICES=void
containerEdits:
  env:
  - NVIDIA_CTK_LAB_STUB=1
  mounts:
  - hostPath: $lib
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.$version
    options: [ro, nosuid, nodev, bind]
SPEC
"""


def _nvcc(years: str, *lines: str) -> str:
    """An nvcc that prints `nvcc --version`'s text and compiles nothing."""
    text = ["nvcc: NVIDIA (R) Cuda compiler driver", f"Copyright (c) {years} NVIDIA Corporation", *lines]
    return ("#!/bin/sh\n# gpu-provisioner test stand-in for NVIDIA's nvcc: it compiles nothing.\n"
            + "".join(f"echo '{line}'\n" for line in text))


# The few files a stand-in package carries, by path: (mode, content). Each is named by a
# manifest entry's stand_in_files; nothing else is shipped.
PAYLOADS: dict[str, tuple[int, str]] = {
    # What NVIDIA's nvidia-smi prints, and its exit code 9, when it cannot reach a driver
    # (shared/fixtures/nvidia-smi/errors/nvidia-smi__no-driver__*.txt).
    "/usr/bin/nvidia-smi": (0o755, (
        "#!/bin/sh\n"
        "# gpu-provisioner test stand-in for NVIDIA's nvidia-smi: no NVIDIA software is installed.\n"
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\"\n"
        "exit 9\n")),
    # NVIDIA/dcgm-exporter packaging/config-files/systemd/nvidia-dcgm-exporter.service (research14 s7).
    "/lib/systemd/system/nvidia-dcgm-exporter.service": (0o644, (
        "[Unit]\nDescription=NVIDIA DCGM-exporter service\nWants=nvidia-dcgm.service\nAfter=nvidia-dcgm.service\n"
        "[Service]\nUser=root\nPrivateTmp=false\nStandardOutput=append:/var/log/dcgm-exporter.log\n"
        "StandardError=append:/var/log/dcgm-exporter.log\n"
        "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv\nRestart=on-abort\n"
        "[Install]\nWantedBy=multi-user.target\n")),
    # Inferred: the roles enable these units, so they must exist; their binaries do not
    # (starting them fails, as it should without a GPU).
    "/lib/systemd/system/nvidia-persistenced.service": (0o644, (
        "# gpu-provisioner test stand-in (the binary is not shipped)\n"
        "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n"
        "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --verbose\n"
        "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n"
        "[Install]\nWantedBy=multi-user.target\n")),
    "/lib/systemd/system/nvidia-fabricmanager.service": (0o644, (
        "# gpu-provisioner test stand-in (the binary is not shipped)\n"
        "[Unit]\nDescription=NVIDIA fabric manager service\nAfter=network-online.target\nRequires=network-online.target\n"
        "[Service]\nUser=root\nPrivateTmp=false\nType=forking\n"
        "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\nLimitCORE=infinity\n"
        "[Install]\nWantedBy=multi-user.target\n")),
    # DCGM's host engine unit, as DCGM's packages name it (nvidia-dcgm.service); the
    # binary is not shipped.
    "/lib/systemd/system/nvidia-dcgm.service": (0o644, (
        "# gpu-provisioner test stand-in (the binary is not shipped)\n"
        "[Unit]\nDescription=NVIDIA DCGM service\n"
        "[Service]\nUser=root\nPrivateTmp=false\nExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm\n"
        "Restart=on-abort\n[Install]\nWantedBy=multi-user.target\n")),
    # The exporter's binary: exits as the real one does without a host engine to reach.
    "/usr/bin/dcgm-exporter": (0o755, (
        "#!/bin/sh\n# gpu-provisioner test stand-in for NVIDIA's dcgm-exporter: no NVIDIA software is installed.\n"
        "echo 'stand-in dcgm-exporter: no DCGM host engine to connect to' >&2\nexit 1\n")),
    # A maintainer script (a payload path under DEBIAN/; what follows '#' only tells payloads
    # apart). NVIDIA's toolkit packages register /usr/local/cuda as the `cuda` alternative
    # (inferred: cuda-toolkit-12-2-config-common's postinst); the meta-package's stand-in does.
    "DEBIAN/postinst#cuda-12.2": (0o755, _postinst("12.2")),
    "DEBIAN/postinst#cuda-12.8": (0o755, _postinst("12.8")),
    # nvcc's --version, in the real 12.2 Update 2 wording (V12.2.140): the role checks the
    # release it names. It compiles nothing.
    "/usr/local/cuda-12.2/bin/nvcc": (0o755, _nvcc("2005-2023", "Cuda compilation tools, release 12.2, V12.2.140")),
    # The NVIDIA Container Toolkit's programs (the stand-in of NVIDIA's libnvidia-container
    # repository, lab/toolkitrepo.py), in the packages NVIDIA/nvidia-container-toolkit's
    # packaging/debian/*.install puts them in: stubs that say so and exit 1. They configure
    # no engine and start no container; nvidia-ctk prints a stub CDI spec (_NVIDIA_CTK).
    **{f"/usr/bin/{tool}": (0o755, (
        f"#!/bin/sh\n# gpu-provisioner test stand-in for NVIDIA's {tool}: no NVIDIA software is installed.\n"
        f"echo 'stand-in {tool}: a gpu-provisioner lab stub, it does nothing' >&2\nexit 1\n"))
       for tool in ("nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-cli")},
    "/usr/bin/nvidia-ctk": (0o755, _NVIDIA_CTK),
    # 12.8 Update 1's (cuda-nvcc-12-8 12.8.93-1), as public `nvcc --version` logs print it
    # (public-code index ids 66318288920, 28166917175).
    "/usr/local/cuda-12.8/bin/nvcc": (0o755, _nvcc("2005-2025", "Built on Fri_Feb_21_20:23:50_PST_2025",
                                                   "Cuda compilation tools, release 12.8, V12.8.93",
                                                   "Build cuda_12.8.r12.8/compiler.35583870_0")),
}


@dataclass(frozen=True)
class Repo:
    root: Path            # what serve() serves
    dir: Path             # the flat repository: <root>/<flavour path>
    path: str             # e.g. ubuntu2204/x86_64 (relative URL of the repository)
    key_path: str         # e.g. ubuntu2204/x86_64/1a2b3c4d.pub (relative URL of the key)
    key_id: str           # short id, lowercase, as NVIDIA names its key file
    fingerprint: str
    packages: int         # .deb files
    cached: bool          # True when this call found the build already there
    seconds: float


def _cache_key(m: Manifest) -> str:
    """The manifest file's hash (and its content, for a manifest made in memory), the
    payloads and this format."""
    h = hashlib.sha256()
    h.update(f"format {FORMAT}\n{m.flavour}\n{m.sha256}\n".encode())
    h.update(m.model_dump_json(exclude={"sha256"}).encode())
    h.update(json.dumps(PAYLOADS, sort_keys=True).encode())
    return h.hexdigest()


def deb_name(name: str, pkg: StandInPackage) -> str:
    """NVIDIA's file name: the epoch left out (datacenter-gpu-manager-4-core_4.5.2-1_amd64.deb)."""
    return f"{name}_{pkg.version.split(':', 1)[-1]}_{pkg.arch}.deb"


def build(root: Path = DEFAULT_ROOT, flavour: str = "ubuntu2204", manifest: Manifest | None = None) -> Repo:
    """Build (or find cached) the stand-in repository for `flavour` under `root`, from the
    stand-in's manifest (provisioner/lab/standin/<flavour>.yml, or `manifest`)."""
    t0 = time.monotonic()
    m = manifest or manifest_mod.load(flavour)
    root = Path(root)
    repo_dir = root / m.path
    key = _cache_key(m)
    stamp = root / STAMP.format(flavour=m.flavour)
    if stamp.exists():
        try:
            info = json.loads(stamp.read_text())
            if info.get("cache_key") == key and (repo_dir / "InRelease").exists():
                return Repo(root, repo_dir, m.path, info["key_path"], info["key_id"], info["fingerprint"],
                            info["packages"], True, time.monotonic() - t0)
        except (OSError, ValueError, KeyError):
            pass
    for tool in ("dpkg-deb", "gpg"):
        if not shutil.which(tool):
            raise ProvisionError(f"{tool} is not installed (the stand-in CUDA repository needs it)", where="lab",
                                 fix="run `sudo scripts/setup-dev-host` (dpkg and gnupg)")
    entries = m.entries()
    missing = sorted({f for _, p in entries for f in p.stand_in_files} - PAYLOADS.keys())
    if missing:
        raise ProvisionError(f"the stand-in manifest names files with no payload: {missing}", where="cudarepo.PAYLOADS")
    if repo_dir.exists():
        shutil.rmtree(repo_dir)
    stamp.unlink(missing_ok=True)
    repo_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="cudarepo-") as tmp:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda np: _build_deb(np[0], np[1], m, Path(tmp), repo_dir), entries))
        packages = "\n".join(_stanza(n, p, m, repo_dir) for n, p in entries)
        (repo_dir / "Packages").write_text(packages)
        with open(repo_dir / "Packages.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=EPOCH, filename="") as gz:
            gz.write(packages.encode())
        (repo_dir / "Release").write_text(_release(m, repo_dir))
        key_id, fingerprint = _sign(repo_dir, Path(tmp) / "gnupg", m.flavour)
    for p in repo_dir.iterdir():
        os.utime(p, (EPOCH, EPOCH))
    key_path = f"{m.path}/{key_id}.pub"
    stamp.write_text(json.dumps({"cache_key": key, "key_path": key_path, "key_id": key_id, "fingerprint": fingerprint,
                                 "packages": len(entries), "flavour": m.flavour}, indent=2) + "\n")
    return Repo(root, repo_dir, m.path, key_path, key_id, fingerprint, len(entries), False, time.monotonic() - t0)


def _control(name: str, pkg: StandInPackage, m: Manifest) -> str:
    lines = [f"Package: {name}", f"Version: {pkg.version}", f"Architecture: {pkg.arch}", f"Maintainer: {MAINTAINER}",
             "Section: multiverse/devel", "Priority: optional"]
    for field, values in (("Depends", pkg.depends), ("Conflicts", pkg.conflicts), ("Provides", pkg.provides)):
        if values:
            lines.append(f"{field}: {', '.join(values)}")
    lines.append(f"Description: gpu-provisioner test stand-in for NVIDIA's {name} {pkg.version}")
    lines.append(f" Metadata only (name, version, a subset of the dependencies, as in {m.path} of NVIDIA's")
    lines.append(f" {m.repository}, per the lab's stand-in manifest). It contains no NVIDIA software.")
    return "\n".join(lines) + "\n"


def _build_deb(name: str, pkg: StandInPackage, m: Manifest, tmp: Path, repo_dir: Path) -> None:
    tree = tmp / f"{name}_{pkg.version.replace(':', '%')}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(_control(name, pkg, m))
    for path in sorted(pkg.stand_in_files):
        mode, content = PAYLOADS[path]
        dest = tree / path.split("#", 1)[0].lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content)
        dest.chmod(mode)
    for p in sorted(tree.rglob("*"), reverse=True):
        os.utime(p, (EPOCH, EPOCH), follow_symlinks=False)
    os.utime(tree, (EPOCH, EPOCH))
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH))
    r = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(repo_dir / deb_name(name, pkg))],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        raise ProvisionError(f"dpkg-deb failed for {name} {pkg.version}: {r.stderr.strip()}", where="cudarepo.build")


def _hashes(path: Path) -> dict[str, str]:
    data = path.read_bytes()
    return {"MD5sum": hashlib.md5(data).hexdigest(), "SHA1": hashlib.sha1(data).hexdigest(),
            "SHA256": hashlib.sha256(data).hexdigest(), "Size": str(len(data))}


def _stanza(name: str, pkg: StandInPackage, m: Manifest, repo_dir: Path) -> str:
    deb = repo_dir / deb_name(name, pkg)
    control = _control(name, pkg, m)
    head, _, desc = control.partition("Description:")
    h = _hashes(deb)
    return (head + f"Filename: ./{deb.name}\nSize: {h['Size']}\nMD5sum: {h['MD5sum']}\nSHA1: {h['SHA1']}\n"
            f"SHA256: {h['SHA256']}\nDescription:{desc}").rstrip("\n") + "\n"


def _release(m: Manifest, repo_dir: Path) -> str:
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(EPOCH))
    files = [repo_dir / "Packages", repo_dir / "Packages.gz"]
    out = [f"Origin: {m.release.origin}", f"Label: {m.release.label}", f"Architecture: {m.release.architecture}",
           f"Date: {date}"]
    for field, algo in (("MD5Sum", "MD5sum"), ("SHA1", "SHA1"), ("SHA256", "SHA256")):
        out.append(f"{field}:")
        for f in files:
            h = _hashes(f)
            out.append(f" {h[algo]} {int(h['Size']):>16} {f.name}")
    out.append("Acquire-By-Hash: no")
    return "\n".join(out) + "\n"


def _sign(repo_dir: Path, home: Path, flavour: str) -> tuple[str, str]:
    """Make a throwaway key, sign Release (InRelease, Release.gpg), export the public key
    as <keyid>.pub (ASCII-armoured, like NVIDIA's). Returns (short id, fingerprint)."""
    home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    env.pop("GPG_AGENT_INFO", None)

    def gpg(*args: str, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(["gpg", "--batch", "--quiet", "--no-tty", *args], capture_output=True, env=env, **kw)
        if r.returncode:
            raise ProvisionError(f"gpg {args[0]} failed: {r.stderr.decode(errors='replace').strip()}", where="cudarepo.build")
        return r

    uid = f"gpu-provisioner lab stand-in for NVIDIA CUDA {flavour} (throwaway) <lab@gpu-provisioner.invalid>"
    try:
        gpg("--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never")
        colons = gpg("--with-colons", "--list-secret-keys").stdout.decode()
        fingerprint = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
        key_id = fingerprint[-8:].lower()
        release = repo_dir / "Release"
        gpg("--local-user", fingerprint, "--digest-algo", "SHA256", "--clearsign", "-o", str(repo_dir / "InRelease"), str(release))
        gpg("--local-user", fingerprint, "--digest-algo", "SHA256", "--armor", "--detach-sign", "-o",
            str(repo_dir / "Release.gpg"), str(release))
        (repo_dir / f"{key_id}.pub").write_bytes(gpg("--armor", "--export", fingerprint).stdout)
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True)
    return key_id, fingerprint


# ----------------------------------------------------------------------------- serving

@dataclass(frozen=True)
class Served:
    url: str              # http://<gateway>:<port>/ : the root; repository at url + repo.path + "/"
    pid: int
    root: str
    bind: str


# One server per port (PROVISIONER_LAB_CUDAREPO_PORT, or serve()'s port): a server on another
# port (a lab of its own, a test's) neither shares nor stops it.
def _pidfile(port: int) -> Path:
    return RUN_DIR / f"cudarepo-http-{port}.pid"


def _state_file(port: int) -> Path:
    return RUN_DIR / f"cudarepo-http-{port}.json"


def running(port: int = PORT) -> Served | None:
    """The stand-in's web server on `port` if it is running (by its pidfile and its command line)."""
    try:
        pid = int(_pidfile(port).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = json.loads(_state_file(port).read_text())
    except (OSError, ValueError):
        return None
    if b"http.server" not in cmdline:
        return None
    return Served(**state, pid=pid)



def serve(root: Path | Repo = DEFAULT_ROOT, bind: str | None = None, port: int = PORT) -> str:
    """Serve `root` over HTTP on the podman bridge's gateway (or `bind`) only; return the
    root URL (``http://10.88.0.1:3143/``). Reuses a server already serving `root` there."""
    if isinstance(root, Repo):
        root = root.root
    root = Path(root).resolve()
    if bind is None:
        bind = podman.network_gateway()
    url = f"http://{bind}:{port}/"
    cur = running(port)
    if cur and cur.root == str(root) and cur.bind == bind and cur.url == url and podman.port_open(bind, port):
        return url
    if cur:
        stop(port)
    if podman.port_open(bind, port):
        raise ProvisionError(f"something else already listens on {bind}:{port}", where="lab stand-in CUDA repository",
                             fix="stop it, or set PROVISIONER_LAB_CUDAREPO_PORT")
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOG_DIR / "cudarepo-http.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", bind, "--directory", str(root)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True)
    _pidfile(port).write_text(f"{proc.pid}\n")
    _state_file(port).write_text(json.dumps({"url": url, "root": str(root), "bind": bind}) + "\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if podman.port_open(bind, port):
            return url
        time.sleep(0.1)
    stop(port)
    raise ProvisionError(f"the stand-in CUDA repository's web server did not start on {url}",
                         where=str(LOG_DIR / "cudarepo-http.log"), fix="read that log")


def stop(port: int = PORT) -> bool:
    """Stop the stand-in's web server on `port` (the built repository stays). True if one ran."""
    cur = running(port)
    _state_file(port).unlink(missing_ok=True)
    if not cur:
        _pidfile(port).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(cur.pid, 15)
    for _ in range(50):
        if not Path(f"/proc/{cur.pid}").exists():
            break
        with contextlib.suppress(ChildProcessError):  # reap it when this process started it
            os.waitpid(cur.pid, os.WNOHANG)
        time.sleep(0.1)
    _pidfile(port).unlink(missing_ok=True)
    return True
