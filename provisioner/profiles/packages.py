"""What a profile installs from NVIDIA's CUDA repository: exact package names and versions,
resolved before any host is touched.

The roles never work out NVIDIA's package names or versions themselves: render gives each
one `{package: exact version}` (its `*_pins` variable) from `resolve()`. Names come from
the flavour's `naming:` rules (branch-suffixed up to R580, branch-less with a pinning
package from R590); versions from the repository's live signed index (profiles/aptindex.py):
the one the hosts will use (the profile's mirror, else NVIDIA's). So a pin names the Debian
revision the repository really carries (580.95.05 -> 580.95.05-0ubuntu1), never a guess,
and never the Ubuntu archive's own build of the same upstream version. A profile asking for
a version the index lacks is refused here, naming the field, the index's URL and Release
Date, and the nearest versions it carries. The committed snapshot (catalogue.py) only
advises offline (`profiles validate`), or stands in where asked ($PROVISION_PACKAGE_INDEX).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from provisioner.profiles import catalogue, compat, toolkit
from provisioner.profiles.catalogue import Catalogue
from provisioner.errors import ProvisionError
from provisioner.profiles.models import Profile

if TYPE_CHECKING:  # aptindex (urllib, ssl, gzip, lzma) is imported where an index is read
    from provisioner.profiles import aptindex

# The CUDA repository folder NVIDIA publishes for each OS a profile can name.
OS_FLAVOUR = {"ubuntu-22.04": "ubuntu2204", "ubuntu-24.04": "ubuntu2404", "debian-12": "debian12"}

_BUILD_RE = re.compile(r"\+cuda(\d+)\.(\d+)$")

Pins = dict[str, str]


def flavour(p: Profile) -> str:
    """The repository flavour: the profile's mirrors.cuda_repo_flavour, else its OS's."""
    return p.mirrors.cuda_repo_flavour or OS_FLAVOUR.get(p.os, "")


def uses_cuda_repo(p: Profile) -> bool:
    """Whether any component comes from NVIDIA's repository (DCGM has no other source)."""
    return p.driver.source == "cuda_repo" or p.dcgm.enabled or (p.cuda.source == "cuda_repo" and (
        p.cuda.enabled or p.cudnn.enabled or p.nccl.enabled or p.tensorrt.enabled))


def load_catalogue(p: Profile) -> Catalogue:
    name = flavour(p)
    if name not in catalogue.flavours():
        field = "mirrors.cuda_repo_flavour" if p.mirrors.cuda_repo_flavour else "os"
        raise ProvisionError(
            f"profile {p.name}: NVIDIA's CUDA repository flavour {name!r} (from {field}) has no package catalogue",
            where=field,
            fix=f"set mirrors.cuda_repo_flavour to one of {', '.join(catalogue.flavours())}, "
                "or take the components from the distribution (driver.source / cuda.source: distro)")
    return catalogue.load(name)


def _strip_epoch(v: str) -> str:
    return v.split(":", 1)[1] if ":" in v else v


class _Resolver:
    def __init__(self, p: Profile, cat: Catalogue):
        self.p, self.cat = p, cat
        toolkit = p.cuda.default.split(".")
        self.numbers = {"cuda_major": int(toolkit[0]), "cuda_minor": int(toolkit[1]),
                        "driver_cuda_major": compat.driver_cuda_major(p.driver.version) or int(toolkit[0])}

    def names(self, component: str, field: str, **numbers: int) -> list[str]:
        names = self.cat.names(component, self.p.driver.branch, **{**self.numbers, **numbers})
        if not names:
            raise self._refuse(field, f"the {self.cat.flavour} naming rules name no {component} packages "
                                      f"for driver branch {self.p.driver.branch}", "pick a driver branch it has")
        return names

    def exact(self, name: str, version: str, field: str) -> str:
        """The catalogue version of `name` that `version` names (Catalogue.resolve: itself, or
        the newest it is the upstream prefix of: ``580.95.05`` -> ``580.95.05-1ubuntu1``, CUDA
        ``12.2`` -> ``12.2.2-1``, DCGM ``4.5.2`` -> ``1:4.5.2-1``). Refuses a version the
        flavour does not carry."""
        found = self.cat.resolve(name, version)
        if found:
            return found
        near = self.cat.nearest(name, version)
        raise self._refuse(field, f"{name} {version} is not in {self.cat.origin} "
                                  f"(nearest it carries: {', '.join(near) or 'no version of it'})",
                           "pick a version it carries")

    def for_cuda(self, name: str, version: str, field: str, toolkit: str) -> str:
        """The build of library `name` `version` made for the toolkit's CUDA: the newest
        `<version>-N+cudaX.Y` with X the toolkit's major and X.Y not newer than it, or a
        build-less `<version>-N` (cuDNN 9 names the CUDA major in the package instead)."""
        major, minor = (int(x) for x in toolkit.split(".")[:2])
        fits = []
        for v in self.cat.versions(name):
            if not v.startswith(version + "-"):
                continue
            m = _BUILD_RE.search(v)
            if m is None or (int(m[1]) == major and int(m[2]) <= minor):
                fits.append(v)
        if fits:
            return fits[-1]                # versions() lists oldest first
        have = [v for v in self.cat.versions(name) if v.startswith(version + "-")]
        raise self._refuse(field, f"{name} {version} has no build for CUDA {toolkit} in {self.cat.origin} "
                                  f"(it carries: {', '.join(have or self.cat.nearest(name, version)) or 'none'})",
                           "pick a version built for this CUDA major, or change cuda.default")

    def exact_closure(self, pins: Pins) -> Pins:
        """The packages `pins` Depend on at one exact version (``libnvidia-compute-580 (=
        580.95.05-0ubuntu1)``), and theirs, as the index lists them: what apt would install
        with the driver, pinned and held with it so no sibling drifts on its own."""
        out: Pins = {}
        todo = list(pins.items())
        while todo:
            name, version = todo.pop()
            entry = self.cat.entry(name, version)
            for relation in entry.depends if entry else []:
                try:
                    alternatives = catalogue.parse_relation(relation)
                except ValueError:
                    continue
                if len(alternatives) != 1:
                    continue                      # a choice is apt's to make, not a pin
                dep, op, want = alternatives[0]
                if op == "=" and dep not in pins and dep not in out and self.cat.entry(dep, want):
                    out[dep] = want
                    todo.append((dep, want))
        return out

    def _refuse(self, field: str, what: str, fix: str) -> ProvisionError:
        return ProvisionError(what, where=field, fix=fix)


def plan(p: Profile, cat: Catalogue) -> dict[str, Pins]:
    """component -> {package: exact version} for what comes from NVIDIA's repository.

    Components: driver (with its pinning package from R580 on), fabric_manager (with nscq:
    DCGM needs it on NVSwitch systems), cuda_toolkit, cudnn, nccl, tensorrt, dcgm,
    dcgm_exporter (the packaged one, unless the profile gives a binary)."""
    if not uses_cuda_repo(p):
        return {}
    r = _Resolver(p, cat)
    out: dict[str, Pins] = {}
    repo_libs = p.cuda.source == "cuda_repo"
    if p.driver.source == "cuda_repo":
        names = r.names(f"driver_{p.driver.kernel_modules}", "driver.version")
        pins = {n: r.exact(n, p.driver.version, "driver.version") for n in names}
        pins.update(r.exact_closure(pins))
        for n in r.cat.names("driver_pinning", p.driver.branch, **r.numbers):
            # The pinning package is versioned by branch (580-1ubuntu1), not by the driver: the
            # index's build of it. It only locks the branch, so an index without it (no listing
            # shows one for every flavour) installs the driver unlocked rather than refusing it.
            if r.cat.versions(n):
                pins[n] = r.exact(n, str(p.driver.branch), "driver.branch")
        out["driver"] = pins
    if p.fabric_manager.enabled or p.driver.source == "cuda_repo":
        # Also when the profile leaves it off: the role installs it anyway on a host where it
        # finds an NVSwitch. Fabric manager means NVSwitch, and DCGM needs nscq there.
        fm = p.fabric_manager.version or p.driver.version
        names = r.names("fabric_manager", "fabric_manager.version") + r.names("nscq", "fabric_manager.version")
        if compat.nvlink5(p):    # NVLink 5: its subnet manager and NVSwitch telemetry, at fabric manager's version
            names += r.names("nvlink5", "fabric_manager.version")
        out["fabric_manager"] = {n: r.exact(n, fm, "fabric_manager.version") for n in names}
    if p.cuda.enabled and repo_libs:
        pins = {}
        for tk in p.cuda.toolkits:
            major, minor = (int(x) for x in tk.split(".")[:2])
            for n in r.names("cuda_toolkit", "cuda.toolkits", cuda_major=major, cuda_minor=minor):
                pins[n] = r.exact(n, tk, "cuda.toolkits")
        out["cuda_toolkit"] = pins
    toolkit = p.cuda.default
    if p.cudnn.enabled and repo_libs:
        component = "cudnn9" if p.cudnn.version.startswith("9.") else "cudnn8"
        out["cudnn"] = {n: r.for_cuda(n, p.cudnn.version, "cudnn.version", toolkit)
                        for n in r.names(component, "cudnn.version")}
    if p.nccl.enabled and repo_libs:
        out["nccl"] = {n: r.for_cuda(n, p.nccl.version, "nccl.version", toolkit) for n in r.names("nccl", "nccl.version")}
    if p.tensorrt.enabled and repo_libs:
        component = f"tensorrt{p.tensorrt.version.split('.')[0]}"
        out["tensorrt"] = {n: r.for_cuda(n, p.tensorrt.version, "tensorrt.version", toolkit)
                           for n in r.names(component, "tensorrt.version")}
    if p.dcgm.enabled:
        version = p.dcgm.version or _strip_epoch(r.cat.versions("datacenter-gpu-manager-4-core")[-1])
        component = "dcgm3" if version.startswith("3.") else "dcgm4"
        out["dcgm"] = {n: r.exact(n, version, "dcgm.version") for n in r.names(component, "dcgm.version")}
        ex = p.dcgm.exporter
        if ex.enabled and not ex.binary:
            names = r.names("dcgm_exporter", "dcgm.exporter.version")
            out["dcgm_exporter"] = {n: r.exact(n, ex.version or _strip_epoch(r.cat.versions(n)[-1]),
                                               "dcgm.exporter.version") for n in names}
    return out


# ----------------------------------------------------------------------------- resolving

# "snapshot": take versions from the committed snapshot instead of the live index, offline
# (a controller with no route to the repository, the unit tests); every plan says so.
INDEX_ENV = "PROVISION_PACKAGE_INDEX"
Mode = Literal["live", "recorded", "snapshot"]


@dataclass(frozen=True)
class Plan:
    """What a run installs from NVIDIA's repository, and which index said it exists."""
    pins: dict[str, Pins] = field(default_factory=dict)
    origin: str = ""                              # Catalogue.origin of the versions
    index: dict[str, str] | None = None           # aptindex.Index.provenance, from a live index
    toolkit_index: dict[str, str] | None = None   # the same, of the container toolkit's repository

    def get(self, component: str, default: Pins | None = None) -> Pins:
        return self.pins.get(component, default if default is not None else {})


def repository(p: Profile, cat: Catalogue) -> aptindex.Repository:
    """The repository the hosts will use: the profile's mirror, else NVIDIA's, and its key."""
    from provisioner.profiles import aptindex

    m = p.mirrors
    url = f"{str(m.cuda_repo_url).rstrip('/')}/{cat.path}/" if m.cuda_repo_url else cat.url
    return aptindex.Repository(url=url, key_url=str(m.cuda_repo_key_url or f"{url}{cat.key.file}"),
                               fingerprint=m.cuda_repo_key_fingerprint or cat.key.fingerprint)


def resolve(p: Profile, mode: Mode = "live") -> Plan:
    """NVIDIA's CUDA packages (_resolve_cuda) and the container toolkit's (profiles/toolkit.py),
    each from its own repository's index: component container_toolkit holds the latter."""
    cuda = _resolve_cuda(p, mode)
    if not toolkit.enabled(p):
        return cuda
    offline = os.environ.get(INDEX_ENV, "") == "snapshot" or mode == "snapshot"
    pins, provenance = toolkit.pins(p, "snapshot" if offline else mode)
    return Plan({**cuda.pins, "container_toolkit": pins}, cuda.origin, cuda.index, provenance)


def _resolve_cuda(p: Profile, mode: Mode) -> Plan:
    """The plan from the repository's live signed index (`live`); from the index the last
    live resolution read (`recorded`: check and verify, so the archive moving on is not
    drift; live when there is none); or from the snapshot (`snapshot`, or $PROVISION_PACKAGE_INDEX).
    Refuses what the index lacks, before any host is touched."""
    if not uses_cuda_repo(p):
        return Plan()
    snap = load_catalogue(p)
    if os.environ.get(INDEX_ENV, "") == "snapshot" or mode == "snapshot":
        return Plan(plan(p, snap), snap.origin)
    from provisioner.profiles import aptindex

    repo = repository(p, snap)
    index = aptindex.cached(repo) if mode == "recorded" else None
    index = index or aptindex.read(repo)
    live = catalogue.from_index(snap, index)
    return Plan(plan(p, live), live.origin, index.provenance)


def check_key_fingerprint(p: Profile) -> None:
    """Refuse a fingerprint that can never match: the key comes from NVIDIA's own repository
    (no mirror, no key URL of the profile's) and the profile names another key."""
    m = p.mirrors
    if not uses_cuda_repo(p) or not m.cuda_repo_key_fingerprint or m.cuda_repo_url or m.cuda_repo_key_url:
        return
    nvidia = load_catalogue(p).key
    if m.cuda_repo_key_fingerprint != nvidia.fingerprint:
        raise ProvisionError(f"mirrors.cuda_repo_key_fingerprint {m.cuda_repo_key_fingerprint} can never match: the key "
                             f"comes from NVIDIA's repository ({nvidia.file}), whose fingerprint is {nvidia.fingerprint}",
                             where="mirrors.cuda_repo_key_fingerprint",
                             fix="leave mirrors.cuda_repo_key_fingerprint out for NVIDIA's key, or set mirrors.cuda_repo_url "
                                 "(or cuda_repo_key_url) to the mirror whose key it is")


def snapshot_advisory(p: Profile) -> str | None:
    """What the offline snapshot says of the profile's versions, when it lacks one: an
    advisory (the live index decides), never a refusal."""
    if toolkit.enabled(p):
        try:
            toolkit.snapshot_pins(p)
        except ProvisionError as exc:
            return f"{exc.where}: {exc.message} (advisory: render, preflight and up resolve against the repository's live index)"
    if not uses_cuda_repo(p):
        return None
    cat = load_catalogue(p)                 # a flavour with no snapshot at all is refused
    try:
        plan(p, cat)
    except ProvisionError as exc:
        return (f"{exc.where}: {exc.message} (advisory: render, preflight and up resolve against the repository's "
                "live index)")
    return None
