"""The stand-in for NVIDIA's CUDA repository (provisioner.lab.cudarepo), built into a
temporary folder from its own manifest (provisioner/lab/standin/<flavour>.yml): the manifest
closed and cited, different from the product's catalogue on purpose, its layout, Packages
and Release read back, signatures checked with gpgv against the exported key, the build
deterministic and cached, the few payload files, apt itself (in a private state folder)
accepting it and resolving installs against it, and the web server's start and stop.

What this proves and what it cannot: see the module docstring of provisioner.lab.cudarepo
(apt's logic against NVIDIA's names, versions and Depends, for real; nothing about NVIDIA's
binaries)."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from provisioner.lab import cudarepo, manifest
from provisioner.lab.manifest import Manifest, StandInPackage

from .conftest import COLLECTION, REPO

_spec = importlib.util.spec_from_file_location("apt_filters", COLLECTION / "plugins" / "filter" / "apt.py")
APT_FILTERS = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(APT_FILTERS)

HAVE_TOOLS = bool(shutil.which("dpkg-deb") and shutil.which("gpg") and shutil.which("gpgv"))
needs_tools = pytest.mark.skipif(not HAVE_TOOLS, reason="dpkg-deb, gpg and gpgv are needed (scripts/setup-dev-host)")
# The product's catalogue, read as plain YAML only: the stand-in must not depend on its code.
CATALOGUE = REPO / "provisioner" / "data" / "catalogue"


def parse_deb822(text: str) -> list[dict[str, str]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line[1:]
            else:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        out.append(fields)
    return out


def release_of(man: Manifest, name: str, upstream: str) -> str:
    """The manifest's version of `name` for upstream version `upstream` (580.95.05 -> its revision)."""
    found = [v for v in man.versions(name) if v.split(":", 1)[-1].startswith(upstream + "-")]
    assert len(found) == 1, (name, upstream, man.versions(name))
    return found[0]


def catalogue_versions(flavour: str) -> dict[str, set[str]]:
    data = yaml.safe_load((CATALOGUE / f"{flavour}.yml").read_text())
    return {name: {str(e["version"]) for e in entries} for name, entries in data["packages"].items()}


@pytest.fixture(scope="module")
def man():
    return manifest.load("ubuntu2204")


@pytest.fixture(scope="module")
def repo(tmp_path_factory, man):
    if not HAVE_TOOLS:
        pytest.skip("dpkg-deb, gpg and gpgv are needed (scripts/setup-dev-host)")
    t0 = time.monotonic()
    r = cudarepo.build(tmp_path_factory.mktemp("cudarepo"), manifest=man)
    print(f"built {r.packages} packages in {time.monotonic() - t0:.1f}s")
    return r


# ----------------------------------------------------------------------------- the manifest

@pytest.mark.parametrize("flavour", manifest.flavours())
def test_the_manifest_is_closed_under_its_depends(flavour):
    m = manifest.load(flavour)
    assert m.check_depends() == []
    assert (m.release.origin, m.release.label, m.release.architecture) == ("NVIDIA", "NVIDIA CUDA", "x86_64")
    assert m.path == f"{flavour}/x86_64"


def test_check_depends_names_an_unsatisfiable_relation(man):
    entry = man.packages["libnccl-dev"][0]
    broken = entry.model_copy(update={"depends": ["libnccl2 (= 9.9.9-1)", "no-such-package", "dkms | no-such-package"]})
    other = man.model_copy(update={"packages": {**man.packages, "libnccl-dev": [broken]}})
    assert other.check_depends() == [f"libnccl-dev {entry.version}: libnccl2 (= 9.9.9-1)",
                                     f"libnccl-dev {entry.version}: no-such-package"]
    # A Provides satisfies an unversioned Depends.
    virtual = man.model_copy(update={"packages": {**man.packages, "libnccl-dev": [
        entry.model_copy(update={"depends": ["nccl-runtime"]})], "libnccl2": [
        p.model_copy(update={"provides": ["nccl-runtime"]}) for p in man.packages["libnccl2"]]}})
    assert virtual.check_depends() == []


@pytest.mark.parametrize("flavour", manifest.flavours())
def test_every_version_names_its_listing_and_only_the_pin_is_unconfirmed(flavour):
    m = manifest.load(flavour)
    for name, pkg in m.entries():
        assert pkg.source.strip(), (name, pkg.version)
        assert set(pkg.stand_in_files) <= cudarepo.PAYLOADS.keys(), (name, pkg.version)
    # A version no public listing showed is served only where a profile cannot do without it,
    # and says so: the branch pin every R580 profile installs first.
    unconfirmed = {(n, p.version) for n, p in m.entries() if p.unconfirmed}
    assert unconfirmed == ({("nvidia-driver-pinning-580", "580-1ubuntu1")} if flavour == "ubuntu2204" else set())


def test_an_entry_without_a_source_or_a_debian_version_is_refused():
    with pytest.raises(ValueError, match="source"):
        StandInPackage(version="1.0-1")
    with pytest.raises(ValueError, match="Debian version"):
        StandInPackage(version="not a version", source="x")
    with pytest.raises(ValueError, match="relation"):
        StandInPackage(version="1.0-1", source="x", depends=["a (>= 1), b"])


def test_a_manifest_with_a_version_twice_is_refused(man):
    data = man.model_dump(by_alias=True, exclude={"sha256"})
    data["packages"]["libnccl2"].append(data["packages"]["libnccl2"][0])
    with pytest.raises(ValueError, match="listed twice"):
        Manifest.model_validate(data)


def test_the_stand_in_differs_from_the_catalogue_on_purpose(man):
    """The rule: a stand-in is built from its own manifest, never from the data it is meant
    to check, and differs from it on purpose (provisioner/lab/standin/ubuntu2204.yml's header)."""
    cat = catalogue_versions("ubuntu2204")
    # 1. The 580.95.05 driver release at its real revision; the snapshot lists no revision of
    # the driver's packages at all (no public listing showed one): a pin can only come from the index.
    for name in ("cuda-drivers-580", "nvidia-driver-580", "nvidia-driver-580-open", "nvidia-utils-580",
                 "libnvidia-compute-580", "nvidia-kernel-common-580"):
        mine = release_of(man, name, "580.95.05")
        assert mine == "580.95.05-0ubuntu1", name
        assert not cat.get(name, set()) & set(man.versions(name)), name
    # 2. A newer R580 release the catalogue lacks, the whole family, so a profile can converge it.
    newest = man.versions("cuda-drivers-580")[-1]
    upstream = newest.split("-")[0]
    assert all(not v.startswith(upstream + "-") for v in cat.get("cuda-drivers-580", ()))
    for meta in ("nvidia-driver-580", "nvidia-driver-580-open"):
        v = release_of(man, meta, upstream)
        assert v == newest
        for dep in man.entry(meta, v).depends:
            dep_name, op, want = manifest.relation(dep)[0]
            assert op == "=" and want == newest and man.entry(dep_name, want), dep
    for name in ("nvidia-fabricmanager", "libnvidia-nscq"):
        assert f"{upstream}-1" in man.versions(name) and f"{upstream}-1" not in cat.get(name, ())
    assert man.versions("nvidia-driver-pinning-580")
    # 3. A CUDA toolkit the catalogue lacks, with what the toolkit role reads.
    assert man.versions("cuda-toolkit-12-8") and "cuda-toolkit-12-8" not in cat
    assert "DEBIAN/postinst#cuda-12.8" in man.entry("cuda-toolkit-12-8", "12.8.1-1").stand_in_files
    # 4. A version the catalogue has and the stand-in does not (no built-in profile or lab test installs it).
    for name in ("libcudnn8", "libcudnn8-dev"):
        assert "8.9.6.50-1+cuda12.2" in cat[name] and "8.9.6.50-1+cuda12.2" not in man.versions(name)


def test_the_noble_stand_in_differs_from_its_catalogue_too():
    noble, cat = manifest.load("ubuntu2404"), catalogue_versions("ubuntu2404")
    assert release_of(noble, "cuda-drivers-580", "580.95.05") == "580.95.05-0ubuntu1"
    assert "580.95.05-0ubuntu1" not in cat.get("cuda-drivers-580", ())
    assert "cuda-toolkit-12-8" in noble.packages and "cuda-toolkit-12-8" not in cat


# ----------------------------------------------------------------------------- the built repository

@needs_tools
def test_layout_is_nvidias(repo, man):
    names = {p.name for p in repo.dir.iterdir()}
    assert {"Packages", "Packages.gz", "Release", "InRelease", "Release.gpg", f"{repo.key_id}.pub"} <= names
    debs = sorted(n for n in names if n.endswith(".deb"))
    assert len(debs) == repo.packages == len(man.entries())
    assert "datacenter-gpu-manager-4-core_4.5.2-1_amd64.deb" in debs          # the epoch left out of the name
    assert "libnvidia-common-580_580.65.06-0ubuntu1_all.deb" in debs
    assert repo.dir == repo.root / "ubuntu2204" / "x86_64" and repo.key_path == f"ubuntu2204/x86_64/{repo.key_id}.pub"


@needs_tools
def test_packages_read_back_match_the_manifest_and_the_files(repo, man):
    stanzas = parse_deb822((repo.dir / "Packages").read_text())
    assert gzip.decompress((repo.dir / "Packages.gz").read_bytes()).decode() == (repo.dir / "Packages").read_text()
    seen = {(s["Package"], s["Version"]) for s in stanzas}
    assert seen == {(n, p.version) for n, p in man.entries()}
    for s in stanzas:
        entry = man.entry(s["Package"], s["Version"])
        assert s["Architecture"] == entry.arch
        assert s.get("Depends", "") == ", ".join(entry.depends)
        assert s.get("Conflicts", "") == ", ".join(entry.conflicts)
        assert s["Description"].startswith("gpu-provisioner test stand-in for NVIDIA's")
        deb = repo.dir / s["Filename"]
        data = deb.read_bytes()
        assert (int(s["Size"]), s["SHA256"]) == (len(data), hashlib.sha256(data).hexdigest())
    v = release_of(man, "nvidia-driver-580", "580.95.05")
    control = subprocess.run(["dpkg-deb", "--field", str(repo.dir / f"nvidia-driver-580_{v}_amd64.deb"),
                              "Version", "Depends", "Conflicts", "Description"], capture_output=True, text=True, check=True).stdout
    assert f"Version: {v}" in control and f"nvidia-dkms-580 (= {v})" in control
    assert "Conflicts: nvidia-driver-580-open" in control and "stand-in manifest" in control


@needs_tools
def test_release_has_nvidias_fields_and_right_checksums(repo):
    release = parse_deb822((repo.dir / "Release").read_text())[0]
    assert (release["Origin"], release["Label"], release["Architecture"]) == ("NVIDIA", "NVIDIA CUDA", "x86_64")
    assert not {"Suite", "Codename", "Components", "Architectures"} & release.keys()   # flat, as NVIDIA's
    lines = [line.split() for line in release["SHA256"].strip().splitlines()]
    assert {name for _, _, name in lines} == {"Packages", "Packages.gz"}
    for digest, size, name in lines:
        data = (repo.dir / name).read_bytes()
        assert (digest, int(size)) == (hashlib.sha256(data).hexdigest(), len(data))


@needs_tools
def test_signatures_verify_with_gpgv_against_the_exported_key(repo, tmp_path):
    keyring = tmp_path / "standin.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(keyring), str(repo.dir / f"{repo.key_id}.pub")],
                   check=True, capture_output=True)
    ok = subprocess.run(["gpgv", "--keyring", str(keyring), str(repo.dir / "InRelease")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert repo.fingerprint in ok.stderr.replace(" ", "") or repo.key_id.upper() in ok.stderr.upper()
    ok = subprocess.run(["gpgv", "--keyring", str(keyring), str(repo.dir / "Release.gpg"), str(repo.dir / "Release")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    tampered = tmp_path / "Release"
    tampered.write_text((repo.dir / "Release").read_text().replace("NVIDIA CUDA", "NVIDIA CUDB"))
    bad = subprocess.run(["gpgv", "--keyring", str(keyring), str(repo.dir / "Release.gpg"), str(tampered)],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "BAD signature" in bad.stderr
    assert repo.fingerprint.endswith(repo.key_id.upper()) and len(repo.fingerprint) == 40


@needs_tools
def test_build_is_deterministic_and_cached(repo, man, tmp_path):
    t0 = time.monotonic()
    again = cudarepo.build(repo.root, manifest=man)
    cached_s = time.monotonic() - t0
    assert again.cached and again.fingerprint == repo.fingerprint and cached_s < 1.0
    other = cudarepo.build(tmp_path / "other", manifest=man)
    assert not other.cached and other.fingerprint != repo.fingerprint    # a new throwaway key
    for f in sorted(repo.dir.iterdir()):
        if f.suffix == ".deb" or f.name in ("Packages", "Packages.gz", "Release"):
            assert f.read_bytes() == (other.dir / f.name).read_bytes(), f.name
            assert f.stat().st_mtime == cudarepo.EPOCH
    print(f"cached build {cached_s:.2f}s; fresh build {other.seconds:.1f}s")


@needs_tools
def test_a_changed_manifest_rebuilds(repo, man, tmp_path):
    root = tmp_path / "r"
    small = man.model_copy(update={"packages": {"libnccl2": man.packages["libnccl2"]}, "sha256": "1" * 64})
    assert not cudarepo.build(root, manifest=small).cached
    assert cudarepo.build(root, manifest=small).cached
    changed = small.model_copy(update={"sha256": "0" * 64})                  # another file
    rebuilt = cudarepo.build(root, manifest=changed)
    assert not rebuilt.cached and rebuilt.packages == len(man.packages["libnccl2"])
    fewer = changed.model_copy(update={"packages": {"libnccl2": man.packages["libnccl2"][:1]}})   # same hash, other content
    assert cudarepo.build(root, manifest=fewer).packages == 1


@needs_tools
def test_payloads_are_few_and_only_where_named(repo, man, tmp_path):
    files = {}
    for deb in sorted(repo.dir.glob("*.deb")):
        listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
        paths = [line.split()[-1] for line in listing.splitlines() if not line.split()[-1].endswith("/")]
        if paths:
            files[deb.name] = paths
    assert set(files) == {cudarepo.deb_name(n, p) for n, p in man.entries()
                          if [f for f in p.stand_in_files if not f.startswith("DEBIAN/")]}
    # A maintainer script goes into the control area: the toolkit registers the `cuda` alternative.
    for deb, line in (("cuda-toolkit-12-2_12.2.2-1_amd64.deb", "/usr/local/cuda-12.2 122"),
                      ("cuda-toolkit-12-8_12.8.1-1_amd64.deb", "/usr/local/cuda-12.8 128")):
        info = subprocess.run(["dpkg-deb", "-I", str(repo.dir / deb), "postinst"],
                              capture_output=True, text=True, check=True).stdout
        assert f"update-alternatives --install /usr/local/cuda cuda {line}" in info, deb
    # Exactly the files the manifest names (PAYLOADS also holds the toolkit stand-in's stubs: test_toolkitrepo).
    named = {f for _, p in man.entries() for f in p.stand_in_files if not f.startswith("DEBIAN/")}
    assert {p for ps in files.values() for p in ps} == {"." + f for f in named}
    out = tmp_path / "x"
    # nvcc names the toolkit release the role checks (NVIDIA's wording).
    for deb, release in (("cuda-nvcc-12-2_12.2.140-1_amd64.deb", "release 12.2, V12.2.140"),
                         ("cuda-nvcc-12-8_12.8.93-1_amd64.deb", "release 12.8, V12.8.93")):
        subprocess.run(["dpkg-deb", "-x", str(repo.dir / deb), str(out)], check=True)
        major_minor = release.split(",")[0].split()[-1]
        nvcc = subprocess.run([str(out / f"usr/local/cuda-{major_minor}/bin/nvcc"), "--version"],
                              capture_output=True, text=True, check=True).stdout
        assert f"Cuda compilation tools, {release}" in nvcc, nvcc
    subprocess.run(["dpkg-deb", "-x", str(repo.dir / "nvidia-utils-580_580.65.06-0ubuntu1_amd64.deb"), str(out)], check=True)
    smi = subprocess.run([str(out / "usr/bin/nvidia-smi")], capture_output=True, text=True)
    assert smi.returncode == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout
    subprocess.run(["dpkg-deb", "-x", str(repo.dir / "datacenter-gpu-manager-exporter_4.6.0-1_amd64.deb"), str(out)], check=True)
    unit = (out / "lib/systemd/system/nvidia-dcgm-exporter.service").read_text()
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv" in unit


@needs_tools
@pytest.mark.skipif(not shutil.which("apt-get"), reason="apt is not installed")
def test_apt_accepts_it_and_sees_nvidias_versions(repo, man, tmp_path):
    """apt on this machine, in a private state folder (touches nothing of the system's):
    update checks InRelease against the signed-by key; policy and madison list the versions."""
    keyring = tmp_path / "standin.asc"
    shutil.copy(repo.dir / f"{repo.key_id}.pub", keyring)
    etc = tmp_path / "etc"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "preferences.d").mkdir()
    (etc / "apt.conf.d").mkdir()
    (etc / "sources.list.d" / "cuda.sources").write_text(
        f"Types: deb\nURIs: file:{repo.dir}/\nSuites: /\nSigned-By: {keyring}\n")
    (etc / "sources.list").write_text("")
    state = tmp_path / "state"
    (state / "lists" / "partial").mkdir(parents=True)
    cache = tmp_path / "cache"
    (cache / "archives" / "partial").mkdir(parents=True)
    opts = [f"-oDir::Etc={etc}", f"-oDir::State={state}", f"-oDir::Cache={cache}", "-oDir::State::status=/dev/null",
            "-oAPT::Architecture=amd64", "-oAPT::Architectures::=amd64", "-oAPT::Sandbox::User=root"]
    t0 = time.monotonic()
    upd = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True)
    assert upd.returncode == 0 and "W:" not in upd.stderr and "E:" not in upd.stderr, upd.stdout + upd.stderr
    policy = subprocess.run(["apt-cache", *opts, "policy", "cuda-drivers-580"], capture_output=True, text=True).stdout
    drivers = man.versions("cuda-drivers-580")                          # oldest first, three releases
    assert f"Candidate: {drivers[-1]}" in policy and all(v in policy for v in drivers), policy
    assert policy.count(f"file:{repo.dir}") == len(drivers), policy
    releases = subprocess.run(["apt-cache", *opts, "policy"], capture_output=True, text=True).stdout
    assert "release o=NVIDIA,l=NVIDIA CUDA" in releases, releases
    # Another archive (Origin Ubuntu) with its own build of the same upstream version and a
    # newer one: as the Ubuntu archive's nvidia-graphics-drivers would carry them.
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "Packages").write_text("".join(
        f"Package: cuda-drivers-580\nVersion: {v}\nArchitecture: amd64\nFilename: ./x_{i}.deb\nSize: 1\n"
        "Description: another archive's build\n\n" for i, v in enumerate(("580.95.05-0ubuntu0.22.04.1", "580.95.06-1ubuntu1"))))
    (archive / "Release").write_text("Origin: Ubuntu\nLabel: Ubuntu\nArchitecture: amd64\n")
    with (etc / "sources.list.d" / "cuda.sources").open("a") as f:
        f.write(f"\nTypes: deb\nURIs: file:{archive}/\nSuites: /\nTrusted: yes\n")
    assert subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True).returncode == 0
    # The pins the roles write (pinned_packages, through the apt_preferences filter):
    # the exact version wins even downward; NVIDIA's other versions stay listed at 100;
    # the other archive's builds, the same upstream version included, are never candidates.
    (etc / "preferences.d" / "nvidia").write_text(
        APT_FILTERS.apt_preferences({"cuda-drivers-580": "580.65.06-0ubuntu1"}, "NVIDIA", "NVIDIA CUDA", "the driver"))
    pinned = subprocess.run(["apt-cache", *opts, "policy", "cuda-drivers-580"], capture_output=True, text=True).stdout
    assert "Candidate: 580.65.06-0ubuntu1" in pinned, pinned
    table = {m[1]: int(m[2]) for m in re.finditer(r"^ {5}(\S+) (-?\d+)$", pinned, re.M)}
    assert table == {**dict.fromkeys(drivers, 100), "580.65.06-0ubuntu1": 1001,
                     "580.95.06-1ubuntu1": -1, "580.95.05-0ubuntu0.22.04.1": -1}, pinned
    (etc / "sources.list.d" / "cuda.sources").write_text(
        f"Types: deb\nURIs: file:{repo.dir}/\nSuites: /\nSigned-By: {keyring}\n")
    madison = subprocess.run(["apt-cache", *opts, "madison", "libcudnn8"], capture_output=True, text=True).stdout
    assert "8.9.7.29-1+cuda12.2" in madison
    showpkg = subprocess.run(["apt-cache", *opts, "show", "nvidia-fabricmanager=580.95.05-1"], capture_output=True, text=True)
    assert showpkg.returncode == 0 and "gpu-provisioner test stand-in" in showpkg.stdout
    # Installs resolve against the stand-in alone (and the distribution packages its Depends
    # name, given here by a small trusted archive): the newest driver release, proprietary or
    # open, with fabric manager, nscq and the branch pin; a toolkit; a library stack.
    (etc / "preferences.d" / "nvidia").unlink()
    base = tmp_path / "base"
    base.mkdir()
    (base / "Packages").write_text("".join(
        f"Package: {name}\nVersion: 1:99\nArchitecture: amd64\nFilename: ./{name}.deb\nSize: 1\nDescription: base\n\n"
        for name in man.base_packages))
    (base / "Release").write_text("Origin: base\nLabel: base\nArchitecture: amd64\n")
    with (etc / "sources.list.d" / "cuda.sources").open("a") as f:
        f.write(f"\nTypes: deb\nURIs: file:{base}/\nSuites: /\nTrusted: yes\n")
    assert subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True).returncode == 0
    upstream = drivers[-1].split("-")[0]
    fm = [f"nvidia-fabricmanager={upstream}-1", f"libnvidia-nscq={upstream}-1",
          f"nvidia-driver-pinning-580={man.versions('nvidia-driver-pinning-580')[-1]}"]
    for want in ([f"cuda-drivers-580={drivers[-1]}", f"nvidia-driver-580={drivers[-1]}", *fm],
                 [f"nvidia-driver-580-open={release_of(man, 'nvidia-driver-580-open', upstream)}", *fm],
                 # as the roles pin them: every package of a stack at its exact version
                 ["cuda-toolkit-12-8=12.8.1-1", "cuda-toolkit-12-2=12.2.2-1", "libcudnn8=8.9.7.29-1+cuda12.2",
                  "libcudnn8-dev=8.9.7.29-1+cuda12.2", "libnccl2=2.19.3-1+cuda12.2", "libnccl-dev=2.19.3-1+cuda12.2",
                  "libnvinfer8=8.6.1.6-1+cuda12.0", "libnvinfer-plugin8=8.6.1.6-1+cuda12.0",
                  "datacenter-gpu-manager-4-core=1:4.5.2-1", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1",
                  "datacenter-gpu-manager-exporter=4.6.0-1"]):
        sim = subprocess.run(["apt-get", *opts, "-s", "install", "--no-install-recommends", *want],
                             capture_output=True, text=True)
        assert sim.returncode == 0, sim.stdout + sim.stderr
        for w in want:
            name, version = w.split("=", 1)
            assert f"Inst {name} ({version} " in sim.stdout, (w, sim.stdout)
    # A release other than the newest: apt takes a Depends' Candidate (the newest sibling), so
    # the exact-version siblings install only with the driver's packages pinned to the
    # release, as the nvidia_driver role pins them (templates/preferences.j2: name globs at
    # `Pin: version <the repository's revision>`).
    older = release_of(man, "nvidia-driver-580", "580.95.05")
    (etc / "preferences.d" / "nvidia-driver").write_text(
        f"Package: nvidia-* libnvidia-* xserver-xorg-video-nvidia* cuda-drivers*\nPin: version {older}\nPin-Priority: 1001\n")
    sim = subprocess.run(["apt-get", *opts, "-s", "install", "--no-install-recommends", f"cuda-drivers-580={older}",
                          f"nvidia-driver-580={older}"], capture_output=True, text=True)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert f"Inst libnvidia-compute-580 ({older} " in sim.stdout and f"Inst nvidia-dkms-580 ({older} " in sim.stdout, sim.stdout
    print(f"apt update + queries {time.monotonic() - t0:.1f}s\n{policy}")
    # A key that is not the repository's is refused.
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    subprocess.run(["gpg", "--batch", "--homedir", str(other), "--passphrase", "", "--quick-gen-key", "x <x@x.invalid>",
                    "ed25519", "sign", "never"], check=True, capture_output=True)
    keyring.write_bytes(subprocess.run(["gpg", "--batch", "--homedir", str(other), "--armor", "--export"],
                                       check=True, capture_output=True).stdout)
    subprocess.run(["gpgconf", "--homedir", str(other), "--kill", "all"], capture_output=True)
    shutil.rmtree(state / "lists")
    (state / "lists" / "partial").mkdir(parents=True)
    bad = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True)
    assert "NO_PUBKEY" in bad.stdout + bad.stderr or "not signed" in bad.stdout + bad.stderr, bad.stdout + bad.stderr


@needs_tools
def test_the_noble_flavour_builds_and_verifies(tmp_path):
    r = cudarepo.build(tmp_path / "noble", flavour="ubuntu2404")
    noble = manifest.load("ubuntu2404")
    assert r.dir == tmp_path / "noble" / "ubuntu2404" / "x86_64"
    assert r.packages == len(noble.entries())
    keyring = tmp_path / "k.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring), str(r.dir / f"{r.key_id}.pub")], check=True)
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(r.dir / "InRelease")], capture_output=True).returncode == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_tools
@pytest.mark.skipif(os.geteuid() != 0, reason="serve() writes its pidfile under /run/provisioner-lab (root)")
def test_serve_binds_where_asked_and_stop_ends_it(repo):
    # Its own port, so a lab's stand-in server on the default port is neither reused nor stopped.
    port = _free_port()
    url = cudarepo.serve(repo, bind="127.0.0.1", port=port)
    try:
        assert url == f"http://127.0.0.1:{port}/"
        assert cudarepo.serve(repo, bind="127.0.0.1", port=port) == url           # reused
        pid = cudarepo.running(port).pid
        body = urllib.request.urlopen(url + repo.path + "/InRelease", timeout=5).read().decode()
        assert "Origin: NVIDIA" in body and "BEGIN PGP SIGNATURE" in body
        key = urllib.request.urlopen(url + repo.key_path, timeout=5).read().decode()
        assert "BEGIN PGP PUBLIC KEY BLOCK" in key
    finally:
        assert cudarepo.stop(port)
    assert cudarepo.running(port) is None and not Path(f"/proc/{pid}").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5)
    assert not cudarepo.stop(port)


@needs_tools
def test_two_flavours_share_a_root_and_stay_cached(repo, man):
    noble = cudarepo.build(repo.root, flavour="ubuntu2404")
    assert not noble.cached and noble.dir == repo.root / "ubuntu2404" / "x86_64"
    again = cudarepo.build(repo.root, manifest=man)
    assert again.cached and again.fingerprint == repo.fingerprint
    assert cudarepo.build(repo.root, flavour="ubuntu2404").cached
