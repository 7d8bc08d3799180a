"""The lab's test-host image: Debian 12 with systemd, sshd and Python, for podman.

Built with mmdebstrap from the same Debian mirror this machine's apt uses (read
from /etc/apt/sources.list and /etc/apt/sources.list.d/ at run time, one-line or
deb822), then `podman import`ed as ``localhost/provisioner-lab:<hash>``. The hash
covers the whole recipe (suite, mirrors, components, packages, hooks, the bytes of
any extra CA certificates), so the image is built once and rebuilt only when the
recipe changes. The newest build is also tagged ``localhost/provisioner-lab:latest``
for tools that need a fixed name (Molecule).

    python -m provisioner.lab.image build [--ca-cert FILE ...] [--force]
    python -m provisioner.lab.image show          # the recipe and its tag, builds nothing
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from debian import deb822

from provisioner.errors import ProvisionError

Progress = Callable[[str], None]

IMAGE_REPO = "localhost/provisioner-lab"
LATEST = f"{IMAGE_REPO}:latest"
# Bump when the build steps below change in a way the recipe fields do not show.
RECIPE_VERSION = 1
SETUP_FIX = "sudo scripts/setup-dev-host"

DEFAULT_SUITE = "bookworm"
DEFAULT_COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
# What a test host needs to be managed like a server: systemd as PID 1, sshd,
# Python with apt bindings for Ansible's apt module, sudo. Packages the roles
# install themselves (pciutils, kmod, gnupg, ...) are left out on purpose, so a
# converge does real work.
DEFAULT_PACKAGES = (
    "apt", "systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "sudo",
    "ca-certificates", "openssh-server", "iproute2", "procps", "curl", "less",
)
DEFAULT_CA_DIR = Path("/usr/local/share/ca-certificates")

# Every container gets its own SSH host keys: the image ships none, this unit
# makes them on first boot, before sshd starts.
HOSTKEYS_UNIT = """\
[Unit]
Description=Generate SSH host keys on first boot (provisioner lab)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""

# Customize hooks run by mmdebstrap with the root directory in "$1".
BASE_HOOKS = (
    # A unique machine-id per container (systemd writes one at boot when empty).
    'rm -f "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; touch "$1/etc/machine-id"',
    # No shared SSH host keys; regenerated per container by the unit above.
    'rm -f "$1"/etc/ssh/ssh_host_*',
    'mkdir -p "$1/etc/systemd/system/multi-user.target.wants" && '
    'printf "%s" "$PROVISIONER_HOSTKEYS_UNIT" > "$1/etc/systemd/system/provisioner-ssh-hostkeys.service" && '
    'ln -sf ../provisioner-ssh-hostkeys.service '
    '"$1/etc/systemd/system/multi-user.target.wants/provisioner-ssh-hostkeys.service"',
    # Units that only make sense on real hardware or fail in a container.
    'chroot "$1" systemctl mask systemd-udevd.service systemd-udev-trigger.service '
    'getty@tty1.service console-getty.service systemd-remount-fs.service >/dev/null 2>&1 || true',
    # Root logs in by key only (the Debian default, written down).
    'mkdir -p "$1/etc/ssh/sshd_config.d" && printf "PermitRootLogin prohibit-password\\nPasswordAuthentication no\\n"'
    ' > "$1/etc/ssh/sshd_config.d/provisioner-lab.conf"',
)


# --------------------------------------------------------------------------- mirrors

@dataclass(frozen=True)
class AptEntry:
    """One `deb` line (or deb822 stanza, one per suite) of the machine's apt sources."""

    uri: str
    suite: str
    components: tuple[str, ...]
    source: str  # the file it came from


def _one_line_entries(path: Path, text: str) -> list[AptEntry]:
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words.pop(0)
            words = words[1:]
        if len(words) < 2:
            continue
        out.append(AptEntry(words[0].rstrip("/"), words[1], tuple(words[2:]), str(path)))
    return out


def _deb822_entries(path: Path, text: str) -> list[AptEntry]:
    out = []
    # python-debian's reader: comment lines dropped, continuation lines joined; keys as written,
    # so they are looked up case-insensitively (apt's own rule).
    stanzas = [{k.lower(): v for k, v in para.items()} for para in deb822.Deb822.iter_paragraphs(text)]
    for st in stanzas:
        if "deb" not in st.get("types", "").split():
            continue
        if st.get("enabled", "yes").lower() in ("no", "false", "0"):
            continue
        comps = tuple(st.get("components", "").split())
        for uri in st.get("uris", "").split():
            for suite in st.get("suites", "").split():
                out.append(AptEntry(uri.rstrip("/"), suite, comps, str(path)))
    return out


def machine_apt_entries(etc_apt: Path = Path("/etc/apt")) -> list[AptEntry]:
    """Every enabled binary source this machine's apt reads, in apt's file order."""
    entries: list[AptEntry] = []
    main_list = etc_apt / "sources.list"
    if main_list.is_file():
        entries += _one_line_entries(main_list, main_list.read_text(errors="replace"))
    d = etc_apt / "sources.list.d"
    if d.is_dir():
        for p in sorted(d.iterdir()):
            if p.suffix == ".list":
                entries += _one_line_entries(p, p.read_text(errors="replace"))
            elif p.suffix == ".sources":
                entries += _deb822_entries(p, p.read_text(errors="replace"))
    return entries


def machine_mirrors(suite: str = DEFAULT_SUITE, etc_apt: Path = Path("/etc/apt")) -> tuple[str, str]:
    """(archive mirror, security mirror) this machine uses for `suite`.

    The archive mirror is the URI that serves `suite`; the security mirror the one
    that serves `suite`-security (falling back to `<archive>-security` when the
    machine has no security line).
    """
    entries = machine_apt_entries(etc_apt)
    archive = next((e.uri for e in entries if e.suite == suite), None)
    security = next((e.uri for e in entries if e.suite == f"{suite}-security"), None)
    if archive is None:
        raise ProvisionError(
            f"this machine's apt has no source for Debian '{suite}', so I don't know which mirror to build the lab image from",
            where=str(etc_apt / "sources.list.d"),
            fix=f"set PROVISIONER_LAB_MIRROR=http://<your-debian-mirror>/debian (and PROVISIONER_LAB_SECURITY_MIRROR) or add a '{suite}' source",
        )
    if security is None:
        security = archive + "-security"
    return archive, security


# --------------------------------------------------------------------------- recipe

@dataclass(frozen=True)
class ImageRecipe:
    """Everything that decides the image's content; its hash is the image tag."""

    mirror: str
    security_mirror: str
    suite: str = DEFAULT_SUITE
    components: tuple[str, ...] = DEFAULT_COMPONENTS
    packages: tuple[str, ...] = DEFAULT_PACKAGES
    extra_ca_certs: tuple[Path, ...] = ()
    hooks: tuple[str, ...] = field(default=BASE_HOOKS)

    @classmethod
    def for_machine(
        cls,
        extra_ca_certs: Iterable[Path] | None = None,
        packages: Sequence[str] | None = None,
        suite: str = DEFAULT_SUITE,
    ) -> "ImageRecipe":
        """The recipe for this machine: its own mirror, and by default its own extra CA
        certificates (every *.crt in /usr/local/share/ca-certificates)."""
        mirror = os.environ.get("PROVISIONER_LAB_MIRROR")
        security = os.environ.get("PROVISIONER_LAB_SECURITY_MIRROR")
        if not mirror:
            mirror, found_security = machine_mirrors(suite)
            security = security or found_security
        security = security or mirror.rstrip("/") + "-security"
        if extra_ca_certs is None:
            extra_ca_certs = sorted(DEFAULT_CA_DIR.glob("*.crt")) if DEFAULT_CA_DIR.is_dir() else []
        certs = tuple(Path(c).resolve() for c in extra_ca_certs)
        for c in certs:
            if not c.is_file():
                raise ProvisionError("extra CA certificate not found", where=str(c),
                                     fix="pass the path of a PEM certificate file")
        return cls(
            mirror=mirror.rstrip("/"),
            security_mirror=security.rstrip("/"),
            suite=suite,
            packages=tuple(packages) if packages else DEFAULT_PACKAGES,
            extra_ca_certs=certs,
        )

    def sources(self) -> list[str]:
        comps = " ".join(self.components)
        return [
            f"deb {self.mirror} {self.suite} {comps}",
            f"deb {self.mirror} {self.suite}-updates {comps}",
            f"deb {self.security_mirror} {self.suite}-security {comps}",
        ]

    def digest(self) -> str:
        d = asdict(self)
        d["extra_ca_certs"] = [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in self.extra_ca_certs]
        d["recipe_version"] = RECIPE_VERSION
        d["hostkeys_unit"] = HOSTKEYS_UNIT
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    @property
    def ref(self) -> str:
        return f"{IMAGE_REPO}:{self.digest()}"


# --------------------------------------------------------------------------- podman helpers

def _need(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise ProvisionError(f"'{tool}' is not installed", where="lab", fix=SETUP_FIX)
    return path


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ProvisionError(
            f"{what} needs root: the lab uses rootful podman (systemd containers with their own IP addresses)",
            where="lab", fix="run it with sudo (after `sudo scripts/setup-dev-host` once)",
        )


def image_exists(ref: str) -> bool:
    podman = _need("podman")
    return subprocess.run([podman, "image", "exists", ref], capture_output=True).returncode == 0


def _say(progress: Progress | None, msg: str) -> None:
    if progress:
        progress(msg)


def build(recipe: ImageRecipe, progress: Progress | None = None, keep_tar: Path | None = None) -> str:
    """Build the image for `recipe` now (even if it exists) and tag it; return its ref."""
    _need_root("building the lab image")
    mmdebstrap = _need("mmdebstrap")
    podman = _need("podman")
    ref = recipe.ref
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="provisioner-lab-image-") as tmp:
        tmpd = Path(tmp)
        tar = tmpd / "rootfs.tar"
        hooks = list(recipe.hooks)
        if recipe.extra_ca_certs:
            certdir = tmpd / "certs"
            certdir.mkdir()
            for i, c in enumerate(recipe.extra_ca_certs):
                # update-ca-certificates only reads *.crt; keep names unique.
                shutil.copyfile(c, certdir / f"provisioner-extra-{i}-{c.stem}.crt")
            hooks.append(f'mkdir -p "$1/usr/local/share/ca-certificates" && '
                         f'cp {certdir}/*.crt "$1/usr/local/share/ca-certificates/"')
            hooks.append('chroot "$1" update-ca-certificates >/dev/null')
        cmd = [
            mmdebstrap, "--variant=minbase", "--mode=root", "--format=tar",
            "--skip=cleanup/apt/lists",  # keep the lists: see docs/lab.md, "gotchas"
            "--components=" + ",".join(recipe.components),
            "--include=" + ",".join(recipe.packages),
            "--aptopt=Acquire::Languages \"none\"",
        ]
        cmd += [f"--customize-hook={h}" for h in hooks]
        cmd += [recipe.suite, str(tar), *recipe.sources()]
        _say(progress, f"building {ref} with mmdebstrap from {recipe.mirror} (about 1-2 minutes)")
        env = dict(os.environ, PROVISIONER_HOSTKEYS_UNIT=HOSTKEYS_UNIT)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise ProvisionError(
                "mmdebstrap failed to build the lab image:\n" + (r.stderr or r.stdout)[-3000:],
                where=recipe.mirror, fix="check that this machine reaches its Debian mirror (apt-get update works)",
            )
        _say(progress, f"importing {tar.stat().st_size // 2**20} MiB rootfs into podman")
        r = subprocess.run(
            [podman, "import",
             "--change", 'CMD ["/sbin/init"]',
             "--change", "STOPSIGNAL SIGRTMIN+3",
             "--change", f"LABEL io.github.gpu-provisioner.lab-image={recipe.digest()}",
             str(tar), ref],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            raise ProvisionError("podman import failed: " + r.stderr.strip(), where=ref, fix=SETUP_FIX)
        if keep_tar:
            shutil.copyfile(tar, keep_tar)
    subprocess.run([podman, "tag", ref, LATEST], check=True, capture_output=True)
    _say(progress, f"built {ref} in {time.monotonic() - t0:.0f} s")
    return ref


def ensure(recipe: ImageRecipe | None = None, progress: Progress | None = None, force: bool = False) -> str:
    """The ref of an image for `recipe` (default: this machine's), building it only when
    missing. Also points ``:latest`` at it."""
    _need("podman")
    recipe = recipe or ImageRecipe.for_machine()
    ref = recipe.ref
    if not force and image_exists(ref):
        _say(progress, f"image {ref} is up to date")
        subprocess.run([shutil.which("podman") or "podman", "tag", ref, LATEST], capture_output=True)
        return ref
    return build(recipe, progress)


# --------------------------------------------------------------------------- CLI

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m provisioner.lab.image", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("build", "show"):
        p = sub.add_parser(name)
        p.add_argument("--ca-cert", action="append", type=Path, default=None,
                       help="extra CA certificate (PEM) to trust in the image; repeatable. "
                            f"Default: every *.crt in {DEFAULT_CA_DIR}")
        p.add_argument("--no-ca-certs", action="store_true", help="add no extra CA certificates")
        if name == "build":
            p.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    args = ap.parse_args(argv)
    try:
        certs = [] if args.no_ca_certs else args.ca_cert
        recipe = ImageRecipe.for_machine(extra_ca_certs=certs)
        if args.cmd == "show":
            d = asdict(recipe)
            d["extra_ca_certs"] = [str(p) for p in recipe.extra_ca_certs]
            d["ref"] = recipe.ref
            d["exists"] = image_exists(recipe.ref) if shutil.which("podman") else None
            print(json.dumps(d, indent=2))
            return 0
        print(ensure(recipe, progress=lambda m: print(m, file=sys.stderr), force=args.force))
        return 0
    except ProvisionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
