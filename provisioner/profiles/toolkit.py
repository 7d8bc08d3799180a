"""The NVIDIA Container Toolkit a profile installs: its repository and exact package versions,
resolved before any host is touched, as packages.py resolves NVIDIA's CUDA packages.

The repository is NVIDIA's libnvidia-container one (a flat repository per architecture,
data/container_toolkit.yml cites its URL, key and layout), or the profile's mirror of it
(mirrors.container_toolkit_url and _key_fingerprint). `pins()` reads that repository's signed
index (profiles/aptindex.py: InRelease checked against the pinned key) and refuses a
containers.toolkit_version it does not carry, naming the index and what it does carry; every
one of the four packages must be there at exactly that version (NVIDIA's install guide
installs them together, and nvidia-container-toolkit Depends on the others at its own
version). Offline ($PROVISION_PACKAGE_INDEX=snapshot, the unit tests) the version must be
one the data file lists with its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from provisioner.errors import ProvisionError
from provisioner.profiles.models import Profile

if TYPE_CHECKING:  # aptindex (urllib, ssl, gzip, lzma) is imported where an index is read
    from provisioner.profiles import aptindex

DATA = Path(str(resources.files("provisioner") / "data" / "container_toolkit.yml"))
FIELD = "containers.toolkit_version"


@dataclass(frozen=True)
class Data:
    url: str                  # the repository root's stable/deb/ folder (the architecture is appended)
    key_url: str
    fingerprint: str
    names: tuple[str, ...]
    versions: tuple[str, ...]  # the ones a public source confirms (offline validation only)


@cache
def data() -> Data:
    raw = yaml.safe_load(DATA.read_text())
    repo, pkgs = raw["repository"], raw["packages"]
    return Data(url=repo["url"], key_url=repo["key_url"], fingerprint=repo["key_fingerprint"],
                names=tuple(pkgs["names"]), versions=tuple(pkgs["versions"]))


def enabled(p: Profile) -> bool:
    return p.containers.runtime != "none"


def base_url(p: Profile) -> str:
    """The repository root the hosts use (the folder holding stable/)."""
    mirror = p.mirrors.container_toolkit_url
    return str(mirror).rstrip("/") + "/" if mirror else data().url.removesuffix("stable/deb/")


def key_url(p: Profile) -> str:
    """NVIDIA publishes the key as gpgkey beside stable/ (the install guide); a mirror mirrors it there."""
    return base_url(p) + "gpgkey"


def fingerprint(p: Profile) -> str:
    return p.mirrors.container_toolkit_key_fingerprint or data().fingerprint


def repository(p: Profile, arch: str = "amd64") -> aptindex.Repository:
    from provisioner.profiles import aptindex

    return aptindex.Repository(url=f"{base_url(p)}stable/deb/{arch}/", key_url=key_url(p), fingerprint=fingerprint(p))


def check_key_fingerprint(p: Profile) -> None:
    """Refuse a fingerprint that can never match: NVIDIA's own repository with another key."""
    m = p.mirrors
    if enabled(p) and m.container_toolkit_key_fingerprint and not m.container_toolkit_url \
            and m.container_toolkit_key_fingerprint != data().fingerprint:
        raise ProvisionError(f"mirrors.container_toolkit_key_fingerprint {m.container_toolkit_key_fingerprint} can never "
                             f"match: the key comes from NVIDIA's repository, whose fingerprint is {data().fingerprint}",
                             where="mirrors.container_toolkit_key_fingerprint",
                             fix="leave it out for NVIDIA's key, or set mirrors.container_toolkit_url to the mirror "
                                 "whose key it is")


def check_engine(p: Profile) -> None:
    """Refuse containerd on Ubuntu 22.04: the role reads and merges containerd's config.toml on
    the host with Python's tomllib (3.11+); 22.04's Python is 3.10, and the distribution package
    of tomli that would stand in for it is not confirmed by any listing this product cites, so
    nothing is installed for it and the profile is refused before any host is touched."""
    if p.containers.runtime == "containerd" and p.os == "ubuntu-22.04":
        raise ProvisionError("containers.runtime containerd is not supported on ubuntu-22.04: the role merges "
                             "/etc/containerd/config.toml with Python's tomllib (3.11+), and Ubuntu 22.04's "
                             "Python is 3.10", where="containers.runtime",
                             fix="use os ubuntu-24.04 or debian-12 for containerd, or runtime docker or podman on 22.04")


def snapshot_pins(p: Profile) -> dict[str, str]:
    """Offline: the version must be one the data file cites."""
    version = p.containers.toolkit_version
    if version not in data().versions:
        raise ProvisionError(f"NVIDIA Container Toolkit {version} is not among the versions "
                             f"{DATA.name} cites ({', '.join(data().versions)})", where=FIELD,
                             fix="pick one of those, or resolve against the repository's live index")
    return dict.fromkeys(data().names, version)


def index_pins(p: Profile, index: aptindex.Index) -> dict[str, str]:
    """Every toolkit package at exactly the profile's version, as the index lists it."""
    version = p.containers.toolkit_version
    missing = [n for n in data().names if version not in index.versions(n)]
    if missing:
        have = index.versions(data().names[0])
        raise ProvisionError(f"{', '.join(missing)} {version} is not in {index.url} (Release Date {index.release_date}; "
                             f"it carries {data().names[0]} {', '.join(have[-8:]) or 'in no version'})",
                             where=FIELD, fix="pick a version the repository carries")
    return dict.fromkeys(data().names, version)


def pins(p: Profile, mode: str = "live") -> tuple[dict[str, str], dict[str, str] | None]:
    """The toolkit's {package: exact version} and the provenance of the index they came from
    (None offline); empty when the profile has no container runtime."""
    if not enabled(p):
        return {}, None
    if mode == "snapshot":
        return snapshot_pins(p), None
    from provisioner.profiles import aptindex

    repo = repository(p)
    index = (aptindex.cached(repo) if mode == "recorded" else None) or aptindex.read(repo)
    return index_pins(p, index), index.provenance
