"""The stand-in CUDA repository's own manifest: what it serves, per repository flavour.

``provisioner/lab/standin/<flavour>.yml`` lists the Release fields, the distribution
packages a Depends may point at (``base_packages``) and the packages the stand-in serves:
name -> versions, each with its architecture, Depends/Conflicts/Provides (Debian relation
strings), the few files its .deb carries (``stand_in_files``, see cudarepo.PAYLOADS), the
public listing its name and version were seen in (``source``, required), what is written
for apt's logic rather than read from a listing (``note``), and, for a version no listing
showed, why it is served anyway (``unconfirmed``).

It is NOT the product's package catalogue (provisioner/data/catalogue/, which render
trusts), and it is not built from it: a stand-in built from the data it is meant to check
would agree with that data's mistakes. The manifest differs from the catalogue on purpose
(each file's header says where and why), so a lab run fails if the product takes a version
from the catalogue where it should take it from the repository's index.

Versions compare as dpkg compares them (python-debian); `Manifest.check_depends` reports
every Depends that nothing in the manifest (nor a base package) satisfies.
"""

from __future__ import annotations

import hashlib
from functools import cmp_to_key
from pathlib import Path

from debian.debian_support import Version, version_compare
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from provisioner.errors import ProvisionError
from provisioner.profiles.catalogue import parse_relation as relation
from provisioner.profiles.catalogue import NAME_RE, relation_holds
from provisioner.yamlfile import read_yaml

MANIFEST_DIR = Path(__file__).resolve().parent / "standin"

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StandInPackage(_Strict):
    version: str
    arch: str = "amd64"
    depends: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)
    provides: list[str] = Field(default_factory=list)
    source: str = Field(min_length=1)        # the public listing the name and version were seen in
    note: str | None = None                  # what is not from a listing (a Depends subset written for apt)
    unconfirmed: str | None = None           # no listing showed this version: why it is served anyway
    stand_in_files: list[str] = Field(default_factory=list)

    @field_validator("version")
    @classmethod
    def _debian_version(cls, v: str) -> str:
        try:
            Version(v)
        except ValueError:
            raise ValueError(f"{v!r} is not a Debian version") from None
        if v != v.strip() or " " in v:
            raise ValueError(f"{v!r} is not a Debian version")
        return v

    @field_validator("depends", "conflicts", "provides")
    @classmethod
    def _relations(cls, values: list[str]) -> list[str]:
        for v in values:
            relation(v)
        return values


class Release(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    origin: str = Field(alias="Origin")
    label: str = Field(alias="Label")
    architecture: str = Field(alias="Architecture")
    source: str = Field(min_length=1)


class Manifest(_Strict):
    flavour: str
    path: str                # e.g. ubuntu2204/x86_64: the repository's directory under .../repos/
    url: str                 # the real repository it stands in for, for reference
    repository: str = "CUDA repository"   # what the packages' Description says they stand in for
    release: Release
    base_packages: list[str]
    packages: dict[str, list[StandInPackage]]
    sha256: str = ""         # of the file it was read from (the stand-in's cache key)

    @model_validator(mode="after")
    def _one_entry_per_version(self) -> Manifest:
        for name, entries in self.packages.items():
            if not NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a Debian package name")
            seen = [e.version for e in entries]
            dup = sorted({v for v in seen if seen.count(v) > 1})
            if dup:
                raise ValueError(f"{name}: version listed twice: {', '.join(dup)}")
        return self

    def versions(self, name: str) -> list[str]:
        """The versions of `name`, oldest first (dpkg order); [] if it is not served."""
        return sorted((p.version for p in self.packages.get(name, [])), key=cmp_to_key(version_compare))

    def entry(self, name: str, version: str) -> StandInPackage | None:
        return next((p for p in self.packages.get(name, []) if p.version == version), None)

    def entries(self) -> list[tuple[str, StandInPackage]]:
        """Every (name, version entry), by name then dpkg version order."""
        return [(name, self.entry(name, v)) for name in sorted(self.packages) for v in self.versions(name)]

    def check_depends(self) -> list[str]:
        """Every Depends relation no version in the manifest (nor a base package) satisfies,
        as ``'<name> <version>: <relation>'``; [] when the manifest is closed."""
        return [f"{name} {pkg.version}: {rel}" for name, pkg in self.entries() for rel in pkg.depends
                if not any(self._satisfies(*alt) for alt in relation(rel))]

    def _satisfies(self, dep: str, op: str | None, want: str | None) -> bool:
        if dep in self.base_packages:
            return True
        if op is None and any(dep in [relation(p)[0][0] for p in e.provides]
                              for es in self.packages.values() for e in es):
            return True
        return any(op is None or relation_holds(e.version, op, want) for e in self.packages.get(dep, []))


def flavours() -> list[str]:
    return sorted(p.stem for p in MANIFEST_DIR.glob("*.yml"))


def load(flavour: str = "ubuntu2204", path: Path | None = None) -> Manifest:
    """Read and validate one flavour's stand-in manifest (or the file at `path`)."""
    path = Path(path) if path else MANIFEST_DIR / f"{flavour}.yml"
    if not path.exists():
        raise ProvisionError(f"no stand-in manifest for {flavour!r}", where=str(path),
                             fix=f"one of: {', '.join(flavours())}")
    try:
        manifest = Manifest.model_validate(read_yaml(path))
    except ValueError as exc:  # pydantic.ValidationError: name the file
        raise ProvisionError(f"invalid stand-in manifest: {exc}", where=str(path)) from None
    return manifest.model_copy(update={"sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
