"""ansible-core for a bundle's node: the controller's own release and its dependencies, as
wheel files packed in the bundle and pinned by the sha256 of those very files.

A node that applies a bundle at boot must not take whatever ansible-core an index offers
that day (a release below the CVE-2024-11079 fix, or a file swapped on a mirror). So the
bundle carries `wheels/*.whl` and `wheels/requirements.txt` (`name==version
--hash=sha256:...`, the hash computed here from the file packed), and apply.sh installs
them with `pip install --no-index --find-links wheels --require-hashes`: nothing is
fetched at boot, and a changed byte stops the install.

The set is resolved from this controller's installed metadata (ansible-core's exact
version, then each requirement that applies on the node, at the version installed here)
and downloaded with `pip download --no-deps --only-binary=:all:` for the node's system
Python (the profile's OS) on x86_64 Linux. Nothing falls back to an unpinned install: a
version the node's Python cannot run, a package missing here or a failed download is one
error. `--wheels DIR` takes the files from a folder instead (a controller without an index).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging import tags
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from provisioner.errors import ProvisionError

ROOT = "ansible-core"
FOLDER = "wheels"  # in the bundle: the wheels and requirements.txt
REQUIREMENTS = f"{FOLDER}/requirements.txt"
# manylinux wheels built for glibc up to 2.35 (Ubuntu 22.04's; Debian 12 has 2.36 and
# Ubuntu 24.04 2.39) run on every supported node. pip takes the platforms as listed.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(35, 16, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


@dataclass(frozen=True)
class Pin:
    name: str  # as its metadata spells it
    version: str


@dataclass(frozen=True)
class Wheel:
    pin: Pin
    filename: str
    data: bytes  # read once: the bytes packed are the bytes hashed

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _node_environment(python: str) -> dict[str, str]:
    """Marker values of the node's interpreter: CPython `python` on x86_64 Linux."""
    return {"python_version": python, "python_full_version": f"{python}.0", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
            "os_name": "posix", "platform_machine": "x86_64", "extra": ""}


def pins(python: str, system: str) -> list[Pin]:
    """ansible-core as installed here and every requirement of it that applies on the node
    (`system`'s python3, version `python`), at the versions installed here."""
    environment = _node_environment(python)
    found: dict[str, Pin] = {}
    todo: list[tuple[str, Requirement | None]] = [(ROOT, None)]
    while todo:
        name, wanted = todo.pop()
        key = canonicalize_name(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise ProvisionError(f"{name}, which ansible-core needs on the node (Python {python}), is not installed "
                                 "here, so the bundle cannot pin its version", where="provision bundle",
                                 fix=f"install it beside provision (pip install '{wanted or name}') and build again") from None
        version = dist.version
        if wanted is not None and wanted.specifier and not wanted.specifier.contains(version, prereleases=True):
            raise ProvisionError(f"{dist.metadata['Name']} {version} is installed here, but ansible-core's "
                                 f"dependencies need {wanted} on the node", where="provision bundle",
                                 fix=f"pip install '{wanted}' beside provision, then build again")
        needs = dist.metadata.get("Requires-Python")
        if needs and not SpecifierSet(needs).contains(python, prereleases=True):
            raise ProvisionError(f"{dist.metadata['Name']} {version}, which provision runs here, needs Python {needs}; "
                                 f"a {system} node's python3 is {python}", where="provision bundle",
                                 fix="build the bundle from an environment whose ansible-core runs on the node's Python "
                                     "(ansible-core 2.17 runs on 3.10)")
        if key in found:
            continue
        found[key] = Pin(dist.metadata["Name"], version)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(environment):
                todo.append((requirement.name, requirement))
    return [found[key] for key in sorted(found)]


def download(wanted: list[Pin], python: str, dest: Path) -> None:
    """`pip download` the exact files for the node's Python into dest: wheels only, no
    dependency resolution of pip's own (the set is `wanted`). pip's own configuration
    (index, proxy, CA) applies."""
    if importlib.util.find_spec("pip") is None:
        raise ProvisionError(f"the bundle needs ansible-core's wheels, and pip is not installed in the environment "
                             f"provision runs from ({sys.executable})", where="provision bundle",
                             fix="install pip there, or download the wheels elsewhere and pass --wheels DIR")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *(arg for platform in PLATFORMS for arg in ("--platform", platform)),
            "--dest", str(dest), *(f"{pin.name}=={pin.version}" for pin in wanted)]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        raise ProvisionError("downloading ansible-core's wheels for the bundle took over 15 minutes",
                             where="provision bundle", fix="check pip's index and proxy, or pass --wheels DIR") from None
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")] or result.stderr.splitlines()
        raise ProvisionError(f"could not download ansible-core's wheels for the node's Python {python}: "
                             f"{' '.join(errors[-2:]) or f'pip exited {result.returncode}'}", where="provision bundle",
                             fix=f"let pip here reach its index (pip's config, PIP_INDEX_URL, a proxy), or run "
                                 f"`{command(wanted, python, 'DIR')}` where it can and pass --wheels DIR")


def command(wanted: list[Pin], python: str, dest: str) -> str:
    """The pip download command that fills a --wheels folder, for people."""
    return (f"pip download --no-deps --only-binary=:all: --python-version {python} --implementation cp "
            f"--platform manylinux2014_x86_64 -d {dest} " + " ".join(f"{p.name}=={p.version}" for p in wanted))


def _supported(python: str) -> list[tags.Tag]:
    """The wheel tags the node's pip accepts, best first."""
    version = tuple(int(part) for part in python.split("."))
    return [*tags.cpython_tags(version, platforms=PLATFORMS),
            *tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms=PLATFORMS)]


def collect(wanted: list[Pin], python: str, folder: Path) -> list[Wheel]:
    """The one wheel of each pin in folder that the node's Python takes (its best tag),
    with the sha256 of that file. A pin without one is an error naming it."""
    supported = {tag: rank for rank, tag in enumerate(_supported(python))}
    by_pin: dict[tuple[str, Version], list[tuple[int, Path]]] = {}
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.suffix != ".whl" or path.is_symlink() or not path.is_file():
            continue
        try:
            name, version, _, wheel_tags = parse_wheel_filename(path.name)
        except ValueError:
            continue
        ranks = [supported[tag] for tag in wheel_tags if tag in supported]
        if ranks:
            by_pin.setdefault((name, version), []).append((min(ranks), path))
    out = []
    for pin in wanted:
        candidates = sorted(by_pin.get((canonicalize_name(pin.name), Version(pin.version)), []))
        if not candidates:
            raise ProvisionError(f"no wheel of {pin.name} {pin.version} for the node's Python {python} "
                                 f"(x86_64 Linux) in {folder}", where="--wheels",
                                 fix=f"fill the folder with `{command(wanted, python, str(folder))}`")
        path = candidates[0][1]
        out.append(Wheel(pin, path.name, path.read_bytes()))
    return out


def requirements(wheels: list[Wheel], python: str) -> str:
    """wheels/requirements.txt: each pin with the sha256 of the file packed beside it."""
    lines = [f"# Rendered by `provision bundle`: ansible-core as the controller runs it, and its dependencies, for\n"
             f"# Python {python} on x86_64 Linux. apply.sh installs exactly these files (--no-index --require-hashes).\n"]
    lines += [f"{w.pin.name}=={w.pin.version} --hash=sha256:{w.sha256}\n" for w in wheels]
    return "".join(lines)
