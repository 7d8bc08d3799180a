"""The stand-in for NVIDIA's CUDA repository (provisioner.lab.cudarepo), built into a
temporary folder: its layout, Packages and Release read back, signatures checked with
gpgv against the exported key, the build deterministic and cached, the few payload files,
apt itself (in a private state folder) accepting it, and the web server's start and stop.

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

from provisioner.profiles import catalogue
from provisioner.lab import cudarepo

from .conftest import COLLECTION

_spec = importlib.util.spec_from_file_location("apt_filters", COLLECTION / "plugins" / "filter" / "apt.py")
APT_FILTERS = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(APT_FILTERS)

pytestmark = pytest.mark.skipif(not (shutil.which("dpkg-deb") and shutil.which("gpg") and shutil.which("gpgv")),
                                reason="dpkg-deb, gpg and gpgv are needed (scripts/setup-dev-host)")


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


@pytest.fixture(scope="module")
def cat():
    return catalogue.load("ubuntu2204")


@pytest.fixture(scope="module")
def repo(tmp_path_factory, cat):
    t0 = time.monotonic()
    r = cudarepo.build(tmp_path_factory.mktemp("cudarepo"), cat=cat)
    print(f"built {r.packages} packages in {time.monotonic() - t0:.1f}s")
    return r


def test_layout_is_nvidias(repo, cat):
    names = {p.name for p in repo.dir.iterdir()}
    assert {"Packages", "Packages.gz", "Release", "InRelease", "Release.gpg", f"{repo.key_id}.pub"} <= names
    debs = sorted(n for n in names if n.endswith(".deb"))
    assert len(debs) == repo.packages == sum(len(v) for v in cat.packages.values())
    assert "datacenter-gpu-manager_3.3.9_amd64.deb" in debs          # the epoch left out of the name
    assert "libnvidia-common-580_580.65.06-0ubuntu1_all.deb" in debs
    assert repo.dir == repo.root / "ubuntu2204" / "x86_64" and repo.key_path == f"ubuntu2204/x86_64/{repo.key_id}.pub"


def test_packages_read_back_match_the_catalogue_and_the_files(repo, cat):
    stanzas = parse_deb822((repo.dir / "Packages").read_text())
    assert gzip.decompress((repo.dir / "Packages.gz").read_bytes()).decode() == (repo.dir / "Packages").read_text()
    seen = {(s["Package"], s["Version"]) for s in stanzas}
    assert seen == {(n, p.version) for n, es in cat.packages.items() for p in es}
    for s in stanzas:
        entry = cat.entry(s["Package"], s["Version"])
        assert s["Architecture"] == entry.arch
        assert s.get("Depends", "") == ", ".join(entry.depends)
        assert s.get("Conflicts", "") == ", ".join(entry.conflicts)
        assert s["Description"].startswith("gpu-provisioner test stand-in for NVIDIA's")
        deb = repo.dir / s["Filename"]
        data = deb.read_bytes()
        assert (int(s["Size"]), s["SHA256"]) == (len(data), hashlib.sha256(data).hexdigest())
    control = subprocess.run(["dpkg-deb", "--field", str(repo.dir / "nvidia-driver-580_580.95.05-1ubuntu1_amd64.deb"),
                              "Version", "Depends", "Conflicts"], capture_output=True, text=True, check=True).stdout
    assert "Version: 580.95.05-1ubuntu1" in control and "nvidia-dkms-580 (= 580.95.05-1ubuntu1)" in control
    assert "Conflicts: nvidia-driver-580-open" in control


def test_release_has_nvidias_fields_and_right_checksums(repo):
    release = parse_deb822((repo.dir / "Release").read_text())[0]
    assert (release["Origin"], release["Label"], release["Architecture"]) == ("NVIDIA", "NVIDIA CUDA", "x86_64")
    assert not {"Suite", "Codename", "Components", "Architectures"} & release.keys()   # flat, as NVIDIA's
    lines = [line.split() for line in release["SHA256"].strip().splitlines()]
    assert {name for _, _, name in lines} == {"Packages", "Packages.gz"}
    for digest, size, name in lines:
        data = (repo.dir / name).read_bytes()
        assert (digest, int(size)) == (hashlib.sha256(data).hexdigest(), len(data))


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


def test_build_is_deterministic_and_cached(repo, cat, tmp_path):
    t0 = time.monotonic()
    again = cudarepo.build(repo.root, cat=cat)
    cached_s = time.monotonic() - t0
    assert again.cached and again.fingerprint == repo.fingerprint and cached_s < 1.0
    other = cudarepo.build(tmp_path / "other", cat=cat)
    assert not other.cached and other.fingerprint != repo.fingerprint    # a new throwaway key
    for f in sorted(repo.dir.iterdir()):
        if f.suffix == ".deb" or f.name in ("Packages", "Packages.gz", "Release"):
            assert f.read_bytes() == (other.dir / f.name).read_bytes(), f.name
            assert f.stat().st_mtime == cudarepo.EPOCH
    print(f"cached build {cached_s:.2f}s; fresh build {other.seconds:.1f}s")


def test_a_changed_catalogue_rebuilds(repo, cat, tmp_path):
    root = tmp_path / "r"
    small = cat.model_copy(update={"packages": {"libnccl2": cat.packages["libnccl2"]}, "sha256": "1" * 64})
    assert not cudarepo.build(root, cat=small).cached
    assert cudarepo.build(root, cat=small).cached
    changed = small.model_copy(update={"sha256": "0" * 64})
    rebuilt = cudarepo.build(root, cat=changed)
    assert not rebuilt.cached and rebuilt.packages == len(cat.packages["libnccl2"])


def test_payloads_are_few_and_only_where_named(repo, cat, tmp_path):
    files = {}
    for deb in sorted(repo.dir.glob("*.deb")):
        listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
        paths = [line.split()[-1] for line in listing.splitlines() if not line.split()[-1].endswith("/")]
        if paths:
            files[deb.name] = paths
    assert set(files) == {cudarepo.deb_name(n, p) for n, es in cat.packages.items() for p in es
                          if [f for f in p.stand_in_files if not f.startswith("DEBIAN/")]}
    # A maintainer script goes into the control area: the toolkit registers the `cuda` alternative.
    info = subprocess.run(["dpkg-deb", "-I", str(repo.dir / "cuda-toolkit-12-2_12.2.2-1_amd64.deb"), "postinst"],
                          capture_output=True, text=True, check=True).stdout
    assert "update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-12.2 122" in info
    assert {p for ps in files.values() for p in ps} == {"." + f for f in cudarepo.PAYLOADS if not f.startswith("DEBIAN/")}
    out = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-x", str(repo.dir / "nvidia-utils-580_580.65.06-0ubuntu1_amd64.deb"), str(out)], check=True)
    smi = subprocess.run([str(out / "usr/bin/nvidia-smi")], capture_output=True, text=True)
    assert smi.returncode == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout
    subprocess.run(["dpkg-deb", "-x", str(repo.dir / "datacenter-gpu-manager-exporter_4.6.0-1_amd64.deb"), str(out)], check=True)
    unit = (out / "lib/systemd/system/nvidia-dcgm-exporter.service").read_text()
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv" in unit


@pytest.mark.skipif(not shutil.which("apt-get"), reason="apt is not installed")
def test_apt_accepts_it_and_sees_nvidias_versions(repo, tmp_path):
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
    assert "Candidate: 580.95.05-1ubuntu1" in policy and "580.65.06-0ubuntu1" in policy
    assert policy.count(f"file:{repo.dir}") == 2, policy
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
    assert table == {"580.95.06-1ubuntu1": -1, "580.95.05-1ubuntu1": 100, "580.95.05-0ubuntu0.22.04.1": -1,
                     "580.65.06-0ubuntu1": 1001}, pinned
    (etc / "sources.list.d" / "cuda.sources").write_text(
        f"Types: deb\nURIs: file:{repo.dir}/\nSuites: /\nSigned-By: {keyring}\n")
    madison = subprocess.run(["apt-cache", *opts, "madison", "libcudnn8"], capture_output=True, text=True).stdout
    assert "8.9.7.29-1+cuda12.2" in madison
    showpkg = subprocess.run(["apt-cache", *opts, "show", "nvidia-fabricmanager=580.95.05-1"], capture_output=True, text=True)
    assert showpkg.returncode == 0 and "gpu-provisioner test stand-in" in showpkg.stdout
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


def test_the_noble_flavour_builds_and_verifies(tmp_path):
    r = cudarepo.build(tmp_path / "noble", flavour="ubuntu2404")
    noble = catalogue.load("ubuntu2404")
    assert r.dir == tmp_path / "noble" / "ubuntu2404" / "x86_64"
    assert r.packages == sum(len(v) for v in noble.packages.values())
    keyring = tmp_path / "k.gpg"
    subprocess.run(["gpg", "--batch", "--dearmor", "-o", str(keyring), str(r.dir / f"{r.key_id}.pub")], check=True)
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(r.dir / "InRelease")], capture_output=True).returncode == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="serve() writes its pidfile under /run/provisioner-lab (root)")
def test_serve_binds_where_asked_and_stop_ends_it(repo):
    port = _free_port()
    url = cudarepo.serve(repo, bind="127.0.0.1", port=port)
    try:
        assert url == f"http://127.0.0.1:{port}/"
        assert cudarepo.serve(repo, bind="127.0.0.1", port=port) == url           # reused
        pid = cudarepo.running().pid
        body = urllib.request.urlopen(url + repo.path + "/InRelease", timeout=5).read().decode()
        assert "Origin: NVIDIA" in body and "BEGIN PGP SIGNATURE" in body
        key = urllib.request.urlopen(url + repo.key_path, timeout=5).read().decode()
        assert "BEGIN PGP PUBLIC KEY BLOCK" in key
    finally:
        assert cudarepo.stop()
    assert cudarepo.running() is None and not Path(f"/proc/{pid}").exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5)
    assert not cudarepo.stop()


def test_two_flavours_share_a_root_and_stay_cached(repo, cat):
    noble = cudarepo.build(repo.root, flavour="ubuntu2404")
    assert not noble.cached and noble.dir == repo.root / "ubuntu2404" / "x86_64"
    again = cudarepo.build(repo.root, cat=cat)
    assert again.cached and again.fingerprint == repo.fingerprint
    assert cudarepo.build(repo.root, flavour="ubuntu2404").cached
