"""Converged lab hosts, made once and reused: a lab host that `provision up` converged with a
profile, committed as a podman image, from which later hosts start already converged.

Most lab tests need a converged host to work on (drift, rollback, diagnose, verify, the state
timer, distributed runs), not the converge itself; converging from scratch in each of them
cost most of the suite's time. `ensure(profile)` converges one fresh host with the profile
(the product's own `up`, as a user runs it) and commits it as
``localhost/provisioner-lab-converged:<key>``; hosts then start from that image
(`lab.up(..., image=ref)`: the lab user, the lab key, known_hosts as for any host). An image
is made only from a host whose converge ended clean and whose second full converge changed
nothing (`_prove`): tests on its hosts stand on those runs and need not repeat them. Tests that prove convergence itself
(a fresh host, a fleet that loses hosts, a killed controller) still converge fresh hosts.

The key is the digest of everything that decides what the converge leaves on the host: the
resolved profile (the `extends` chain included), the bytes of the profile file, of its CA
certificates and of any extra files a caller names, the wheelhouse's listing, every file of the
product (the Python package and the Ansible collection: any change converges again) and
the base image's tag (its own recipe digest). A host started from the image is a host
that converge would have left, but for what makes a host itself:

- a fresh machine-id (the image's /etc/machine-id is empty: systemd makes one at boot,
  as on the base image) and no D-Bus copy of the old one;
- fresh SSH host keys (removed from the image; the base image's first-boot unit makes new
  ones, and `lab up` records them in known_hosts);
- no journal, no apt proxy line and no lab login key of the host it was made from
  (`lab up` writes the current ones).

What a host from the image is not: one that was never booted after its converge. Its
systemd starts every unit the converge enabled; a unit the roles enable but leave stopped
until a driver module is loaded (fabric manager, nv-hostengine, the exporter of the
CUDA-repository profiles) then starts and fails on a GPU-less host, and `check` reports it.
Images are for profiles whose enabled units run in a container (the lab's driver-only,
state-timer and DDP profiles).

Layers: a profile that extends another profile file (not a built-in) is converged on that
profile's image, not on the base image: the image chain follows the `extends` chain, as an
operator adds a component to hosts already converged (lab-state-timer and lab-ddp on
lab-driver-only). Only what the child adds is converged (and committed: a thin layer), and
the child's image stands on the same two runs as any other. The parent's image ref is part
of the child's key, so a change to the parent makes both again.

Concurrency: the CI's lab stage runs two pytest processes; the first to need an image
makes it while the other waits on a lock file for the same key, then both use it.
Storage: making an image for a profile removes that profile's older converged images.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Callable

from provisioner.errors import ProvisionError
from provisioner.lab import hosts as lab_hosts
from provisioner.lab import image as lab_image
from provisioner.lab import podman

Progress = Callable[[str], None]

IMAGE_REPO = "localhost/provisioner-lab-converged"
LABEL_PROFILE = "io.github.gpu-provisioner.lab.converged.profile"
LABEL_KEY = "io.github.gpu-provisioner.lab.converged.key"
LOCK_DIR = Path(os.environ.get("PROVISIONER_LAB_CONVERGED_LOCKS", "/var/lock/provisioner-lab-converged"))
# Bump when what `_clean` removes, or how an image is made, changes in a way the key does not show.
FORMAT = 2

_PACKAGE = Path(__file__).resolve().parents[1]
# What leaves the host as the one it was made from (see the module's docstring); the
# journal's folder is kept, its files go (a fresh machine-id starts its own).
CLEAN = (
    "apt-get clean && : > /etc/machine-id && rm -f /var/lib/dbus/machine-id /etc/ssh/ssh_host_* "
    f"{lab_hosts.PROXY_DROPIN} /home/{lab_hosts.USER}/.ssh/authorized_keys && "
    "rm -rf /var/log/journal/* /var/lib/apt/lists/partial/* /tmp/* /var/tmp/* /root/.ansible /home/*/.ansible"
)


def _say(progress: Progress | None, msg: str) -> None:
    if progress:
        progress(msg)


def _tree_digest(root: Path, h: "hashlib._Hash") -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        h.update(str(rel).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())


@functools.cache
def product_digest() -> str:
    """Every file of the Python package and of the Ansible collection it runs, read once per
    process: the product this process runs, whatever is edited in the checkout meanwhile."""
    from provisioner import paths

    h = hashlib.sha256()
    for root in (_PACKAGE, paths.ansible_root()):
        h.update(str(root.name).encode())
        _tree_digest(root, h)
    return h.hexdigest()


def key(profile_ref: str, base_image: str, extra_files: Iterable[Path] = ()) -> str:
    """The image key of `profile_ref` converged on `base_image` (see the module's docstring)."""
    from provisioner import profiles

    loaded = profiles.load(profile_ref)
    h = hashlib.sha256()
    parts = {
        "format": FORMAT,
        "profile": loaded.profile.name,
        "profile_sha256": loaded.digest,
        "base_image": base_image,
        "product": product_digest(),
    }
    h.update(json.dumps(parts, sort_keys=True).encode())
    # The controller's files the converge copies to the host: the wheelhouse (by name, size
    # and mtime: hashing gigabytes of wheels on every test start would cost more than it
    # saves) and the CA certificates (by content).
    mirrors = loaded.profile.mirrors
    if mirrors.wheelhouse_source and Path(mirrors.wheelhouse_source).is_dir():
        for w in sorted(Path(mirrors.wheelhouse_source).iterdir()):
            st = w.stat()
            h.update(f"{w.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for f in [Path(profile_ref), *map(Path, mirrors.ca_certificates), *extra_files]:
        if f.is_file():
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def ref_for(image_key: str) -> str:
    return f"{IMAGE_REPO}:{image_key}"


@contextlib.contextmanager
def _locked(image_key: str) -> Iterator[None]:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_DIR / f"{image_key}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        yield


def parent(profile_ref: str) -> str | None:
    """The profile file `profile_ref` extends, when it extends a file rather than a built-in:
    its image is where `profile_ref`'s converge starts (see Layers in the module's docstring)."""
    from provisioner import profiles

    files = profiles.load(profile_ref).files
    if len(files) > 1 and files[1].resolve().parent != profiles.BUILTIN_DIR.resolve():
        return str(files[1])
    return None


def ensure(profile_ref: str, *, extra_files: Iterable[Path] = (), progress: Progress | None = None,
           runs_dir: Path | None = None) -> str:
    """The ref of the converged image for `profile_ref`, converging a host (fresh, or from the
    image of the profile file it extends) and committing it first when there is none yet. A
    converge that does not end clean (exit 0) raises ProvisionError with its verdict, and no
    image is made."""
    from provisioner import profiles

    podman.preflight()
    above = parent(profile_ref)
    base = (ensure(above, progress=progress, runs_dir=runs_dir) if above
            else lab_image.ensure(progress=progress))
    extra = list(extra_files)
    image_key = key(profile_ref, base, extra)
    ref = ref_for(image_key)
    with _locked(image_key):
        if lab_image.image_exists(ref):
            _say(progress, f"converged image {ref} is up to date")
            return ref
        name = profiles.load(profile_ref).profile.name
        t0 = time.monotonic()
        _say(progress, f"making {ref}: converging one host from {base} with profile {name!r}")
        with tempfile.TemporaryDirectory(prefix="provisioner-converged-") as tmp:
            workdir = Path(tmp)
            _build(profile_ref, name, image_key, ref, base, workdir, runs_dir or workdir / "runs", progress)
        _prune(name, keep=ref)
        _say(progress, f"made {ref} in {time.monotonic() - t0:.0f} s")
        return ref


def _build(profile_ref: str, name: str, image_key: str, ref: str, base: str, workdir: Path, runs_dir: Path,
           progress: Progress | None) -> None:
    """Converge one host started from `base` with the profile, clean it (CLEAN) and commit it as `ref`."""
    prefix = f"cv{image_key[:8]}-{os.getpid()}"[:31]
    try:
        lab = lab_hosts.up(1, prefix, workdir / "lab", image=base, progress=progress)
        _prove(profile_ref, name, lab.inventory, runs_dir, progress)
        host = lab.hosts[0].name
        # On the host itself, just before the commit: nothing connects to it afterwards.
        podman.exec_sh(host, CLEAN)
        podman.run("commit", "--quiet", "--change", f"LABEL {LABEL_PROFILE}={name}",
                   "--change", f"LABEL {LABEL_KEY}={image_key}", host, ref, timeout=900)
    finally:
        lab_hosts.down(prefix, workdir / "lab", stop_cache=False)


def _prove(profile_ref: str, name: str, inventory: Path, runs_dir: Path, progress: Progress | None) -> None:
    """The two runs every image stands on, each through the product as a user runs it: a
    converge that ends clean, and a second full converge that changes nothing. Tests on hosts
    from the image need not repeat them; either failing raises with the verdict, and no image
    is made. (Check mode is left to the tests that are about it: one more run per image costs
    more than the few tests that would stand on it.)"""
    from provisioner.engine import commands

    def fail(what: str, report) -> ProvisionError:
        return ProvisionError(f"converged image of profile {name!r}: {what} (exit {report.exit_code}): "
                              f"{report.verdict}", where=str(report.run_dir), fix="read the run folder; no image was made")

    target = commands.prepare(profile_ref, inventory)
    report = commands.execute("up", target, runs_dir=runs_dir)
    if report.exit_code != 0:
        raise fail("the converge of a fresh host did not end clean", report)
    _say(progress, "converged; a second full converge must change nothing")
    report = commands.execute("up", target, runs_dir=runs_dir, full=True)
    changed = [t for h in report.hosts for t in h.changed_tasks]
    if report.exit_code != 0 or changed:
        raise fail(f"the second converge changed {changed}" if changed else "the second converge failed", report)


def _prune(profile_name: str, keep: str) -> list[str]:
    """Remove this profile's other converged images (older keys): one per profile is kept."""
    r = podman.run("images", "--filter", f"label={LABEL_PROFILE}={profile_name}", "--format", "json", check=False)
    gone = []
    for img in json.loads(r.stdout or "[]") or []:
        names = [n for n in img.get("Names") or [] if n.startswith(IMAGE_REPO + ":")]
        if names and keep not in names:
            podman.run("rmi", *names, check=False)  # not -f: one still in use by hosts stays
            gone += names
    return gone



def main(argv: list[str] | None = None) -> int:
    """`python -m provisioner.lab.converged PROFILE...`: make (or find) each profile's converged
    image, in order, printing progress and the refs; CI makes the common ones ahead of the lab
    tests (scripts/ci-stages)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m provisioner.lab.converged", description=main.__doc__)
    ap.add_argument("profiles", nargs="+", help="profile files (or built-in names) to converge and commit")
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep the converges' run folders here")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        for profile in args.profiles:
            ref = ensure(profile, runs_dir=args.runs_dir,
                         progress=lambda m: print(f"[{time.monotonic() - t0:5.0f}s] {m}", file=sys.stderr, flush=True))
            print(ref, flush=True)
    except ProvisionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
