"""NVIDIA's CUDA apt repository as the product knows it offline: a dated, cited snapshot
per repository flavour, and the same shape filled from a live index.

`provisioner/data/catalogue/<flavour>.yml` holds, for one flavour (``ubuntu2204``), the
repository's Release fields and signing key, the `naming:` rules (which packages each
component installs on which driver branch: design knowledge, not versions), and a
snapshot of the package versions, each with the public listing it was seen in
(``source``). The snapshot is advisory: `profiles validate` checks a profile against it
offline and says so; `render`, `preflight`, `plan` and `up` take the versions from the
repository's live signed index instead (`from_index`, profiles/aptindex.py), so the
snapshot never decides what a host gets. The lab's stand-in repository has its own
manifest (provisioner/lab/standin/), so tests can catch a snapshot that is wrong.

Versions compare as dpkg compares them (python-debian), so a prefix such as ``580.95.05``
finds the revision the index carries.
"""

from __future__ import annotations

import functools
import hashlib
import re
from functools import cmp_to_key
from importlib import resources
from pathlib import Path
from typing import Literal

from debian.deb822 import PkgRelation
from debian.debian_support import version_compare
from pydantic import BaseModel, ConfigDict, Field, model_validator

from provisioner.errors import ProvisionError
from provisioner.yamlfile import read_yaml

CATALOGUE_DIR = Path(str(resources.files("provisioner") / "data" / "catalogue"))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackageVersion(_Strict):
    version: str
    arch: str = "amd64"
    depends: list[str] = Field(default_factory=list)   # from a live index (the driver's exact-version siblings)
    source: str = ""                                   # where the name and version were seen

    @model_validator(mode="after")
    def _cited(self) -> PackageVersion:
        if not self.source:
            raise ValueError(f"{self.version}: give a source (the public listing it was seen in)")
        if not VERSION_RE.match(self.version):
            raise ValueError(f"{self.version!r} is not a Debian version")
        return self


class Release(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    origin: str = Field(alias="Origin")
    label: str = Field(alias="Label")
    architecture: str = Field(alias="Architecture")
    source: str
    inferred: str | None = None


class SigningKey(_Strict):
    id: str
    fingerprint: str
    file: str
    uid: str | None = None
    source: str


class NamingRule(_Strict):
    """From driver branch `min_branch` on, a component installs `names` (until a later rule)."""
    min_branch: int = Field(ge=0)
    names: list[str] = Field(min_length=1)


# The only fields a naming rule may name; filled from validated numbers.
NAME_FIELDS = ("branch", "cuda_major", "cuda_minor", "driver_cuda_major")
_NAME_FIELD_RE = re.compile(r"\{([^}]*)\}")


class Snapshot(_Strict):
    """When and how the file's packages were taken: curated by hand from the cited public
    listings, or read from a live index by `provision catalogue refresh`."""
    date: str
    method: Literal["curated", "refresh"]
    packages_sha256: str | None = None
    release_date: str | None = None


class Catalogue(_Strict):
    flavour: str
    snapshot: Snapshot | None = None
    path: str                # e.g. ubuntu2204/x86_64: the repository's directory under .../repos/
    url: str                 # the real repository, for reference
    release: Release
    key: SigningKey
    base_packages: list[str]
    naming: dict[str, list[NamingRule]] = Field(default_factory=dict)
    packages: dict[str, list[PackageVersion]]
    sha256: str = ""
    # What the packages were read from, for messages: "the snapshot of 2026-05-20" or
    # "the index at <url> (Release Date: ...)". Set by load() and from_index().
    origin: str = ""

    @model_validator(mode="after")
    def _naming_fields_known(self) -> Catalogue:
        for component, rules in self.naming.items():
            for r in rules:
                for name in r.names:
                    unknown = set(_NAME_FIELD_RE.findall(name)) - set(NAME_FIELDS)
                    if unknown:
                        raise ValueError(f"naming.{component}: {name!r} names {sorted(unknown)}; "
                                         f"only {', '.join(NAME_FIELDS)} are filled in")
        return self

    def names(self, component: str, branch: int, **numbers: int) -> list[str]:
        """The package names `component` installs on driver `branch` ([] if no rule applies)."""
        rules = [r for r in self.naming.get(component, []) if r.min_branch <= branch]
        if not rules:
            return []
        rule = max(rules, key=lambda r: r.min_branch)
        return [name.format(branch=branch, **numbers) for name in rule.names]         # of the file it was read from (the stand-in's cache key)

    def versions(self, name: str) -> list[str]:
        """The versions of `name`, oldest first (dpkg order); [] if it is not listed."""
        return sorted((p.version for p in self.packages.get(name, [])), key=cmp_to_key(compare_versions))

    def nearest(self, name: str, version: str, n: int = 3) -> list[str]:
        """Up to `n` versions of `name` on each side of `version` in dpkg order: what a
        refusal offers instead."""
        versions = self.versions(name)
        below = [v for v in versions if compare_versions(v.split(":", 1)[-1], version) < 0]
        return below[-n:] + versions[len(below):len(below) + n]

    def entry(self, name: str, version: str) -> PackageVersion | None:
        return next((p for p in self.packages.get(name, []) if p.version == version), None)

    def resolve(self, name: str, version_or_prefix: str) -> str | None:
        """The exact version of `name` that `version_or_prefix` names, or None.

        An exact version wins; otherwise the newest version that starts with the prefix
        followed by a separator (``580.95.05`` -> ``580.95.05-1ubuntu1``; ``580.95`` ->
        the newest ``580.95.*``), never a longer number (``580.9`` does not match ``580.95``)."""
        versions = self.versions(name)
        if version_or_prefix in versions:
            return version_or_prefix
        n = len(version_or_prefix)
        # An epoch (1:4.5.2-1) is not part of what a profile names: compare without it.
        matches = [v for v in versions for bare in (v.split(":", 1)[-1],)
                   if bare == version_or_prefix
                   or (bare.startswith(version_or_prefix) and bare[n:n + 1] in {"-", ".", "+", "~"})]
        return matches[-1] if matches else None


# ----------------------------------------------------------------------------- loading

def flavours() -> list[str]:
    return sorted(p.stem for p in CATALOGUE_DIR.glob("*.yml"))


def load(flavour: str = "ubuntu2204", path: Path | None = None) -> Catalogue:
    """Read and validate one flavour's catalogue (or the file at `path`)."""
    path = Path(path) if path else CATALOGUE_DIR / f"{flavour}.yml"
    try:
        st = path.stat()
    except OSError:
        raise ProvisionError(f"no package catalogue for {flavour!r}", where=str(path),
                             fix=f"one of: {', '.join(flavours())}") from None
    return _load(path.resolve(), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _load(path: Path, mtime_ns: int, size: int) -> Catalogue:
    """Parsed once per process and file version: `provision profiles` loads the nine
    built-ins, and each one's snapshot advisory read the same file again. The models are
    frozen, so the one object can be shared."""
    data = read_yaml(path)
    try:
        cat = Catalogue.model_validate(data)
    except Exception as exc:  # pydantic.ValidationError: name the file
        raise ProvisionError(f"invalid package catalogue: {exc}", where=str(path)) from None
    taken = f"the snapshot of {cat.snapshot.date}" if cat.snapshot else "the package catalogue"
    return cat.model_copy(update={"sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                  "origin": f"{taken} ({path.name}, offline)"})


def from_index(cat: Catalogue, index) -> Catalogue:
    """`cat`'s naming rules and key with the packages a live index (aptindex.Index) lists."""
    where = f"the index at {index.url} (Release Date: {index.release_date or 'not given'})"
    def depends(s: dict[str, str]) -> list[str]:
        return [r.strip() for field in ("Pre-Depends", "Depends") for r in s.get(field, "").split(",") if r.strip()]

    packages = {name: [PackageVersion(version=s["Version"], arch=s.get("Architecture", "all"), source=where,
                                      depends=depends(s))
                       for s in stanzas if VERSION_RE.match(s["Version"])]
                for name, stanzas in index.packages.items()}
    return cat.model_copy(update={"packages": packages, "origin": where})


# ----------------------------------------------------------------------------- Debian versions

VERSION_RE = re.compile(r"^(?:\d+:)?[0-9][A-Za-z0-9.+~-]*$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def parse_relation(relation: str) -> list[tuple[str, str | None, str | None]]:
    """``'a (>= 1) | b'`` -> ``[('a', '>=', '1'), ('b', None, None)]`` (python-debian's parser)."""
    alternatives = PkgRelation.parse_relations(relation)
    # python-debian returns what it cannot parse raw, as a name with spaces in it.
    if len(alternatives) != 1 or any(not NAME_RE.match(a["name"]) for a in alternatives[0]):
        raise ValueError(f"not one Debian relation: {relation!r}")
    out = []
    for alt in alternatives[0]:
        op, want = alt["version"] or (None, None)
        out.append((alt["name"], op, want))
    return out


def compare_versions(a: str, b: str) -> int:
    """<0, 0 or >0 as dpkg --compare-versions orders `a` and `b`."""
    return version_compare(a, b)


def relation_holds(version: str, op: str, want: str) -> bool:
    c = compare_versions(version, want)
    return {"<<": c < 0, "<=": c <= 0, "=": c == 0, ">=": c >= 0, ">>": c > 0}[op]


# ----------------------------------------------------------------------------- refreshing

def _family_patterns(cat: Catalogue) -> list[re.Pattern]:
    """Every package name the naming rules can produce, as patterns ({branch} -> digits)."""
    out = []
    for rules in cat.naming.values():
        for rule in rules:
            for name in rule.names:
                parts = _NAME_FIELD_RE.split(name)          # literal, field, literal, ...
                out.append(re.compile("".join(re.escape(x) if i % 2 == 0 else "[0-9]+" for i, x in enumerate(parts)) + "$"))
    return out


def refresh(cat: Catalogue, index, today: str) -> dict:
    """`cat` as a snapshot of `index` (aptindex.Index): the package families the naming
    rules name, every version the index lists, each citing the index; everything else
    (Release fields, key, naming rules) kept. What `provision catalogue refresh` writes."""
    patterns = _family_patterns(cat)
    cite = f"{index.url} Packages sha256 {index.packages_sha256} (Release Date: {index.release_date})"
    packages = {name: [{"version": s["Version"], "arch": s.get("Architecture", "all"), "source": cite}
                       for s in sorted(stanzas, key=lambda s: cmp_to_key(compare_versions)(s["Version"]))]
                for name, stanzas in sorted(index.packages.items()) if any(p.match(name) for p in patterns)}
    data = cat.model_dump(mode="json", by_alias=True, exclude={"sha256", "origin", "packages", "snapshot"},
                          exclude_none=True)
    return {"snapshot": {"date": today, "method": "refresh", "packages_sha256": index.packages_sha256,
                         "release_date": index.release_date}, **data, "packages": packages}
