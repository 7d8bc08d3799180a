"""The package snapshot of NVIDIA's CUDA repository (provisioner/data/catalogue/): dated,
cited entry by entry, nothing inferred (issue 27); and the catalogue model's reading of it:
versions resolved and compared as dpkg does, Depends checked for closure."""

from __future__ import annotations

import datetime as dt
import itertools
import re
import shutil
import subprocess

import pytest

from provisioner.profiles import catalogue
from provisioner.profiles.catalogue import compare_versions, parse_relation

from .conftest import CATALOGUE_FIXTURE, SNAPSHOT_DIR

FLAVOURS = sorted(p.stem for p in SNAPSHOT_DIR.glob("*.yml"))
# A citation names a commit (owner/repo@<sha>), a public URL or page, or a public thread.
CITATION = re.compile(r"@[0-9a-f]{7,40}\b|https?://|gitlab\.com/|\b(issue|PR) #\d+")


def snapshot(flavour: str):
    return catalogue.load(flavour, SNAPSHOT_DIR / f"{flavour}.yml")


@pytest.fixture(scope="module", params=FLAVOURS)
def cat(request):
    return snapshot(request.param)


def test_flavours_are_ubuntu2204_and_ubuntu2404():
    assert FLAVOURS == ["ubuntu2204", "ubuntu2404"]
    # The tests resolve profiles in the fixture index, which has the same flavours.
    assert catalogue.CATALOGUE_DIR == CATALOGUE_FIXTURE and catalogue.flavours() == FLAVOURS


def test_the_snapshot_says_what_it_is_and_when(cat):
    assert cat.snapshot.method == "curated" and cat.snapshot.packages_sha256 is None
    dt.date.fromisoformat(cat.snapshot.date)
    assert cat.origin == f"the snapshot of {cat.snapshot.date} ({cat.flavour}.yml, offline)"


def test_release_fields_and_key_are_nvidias(cat):
    assert (cat.release.origin, cat.release.label, cat.release.architecture) == ("NVIDIA", "NVIDIA CUDA", "x86_64")
    assert cat.key.fingerprint.endswith(cat.key.id.upper()) and cat.key.file == f"{cat.key.id}.pub"
    assert CITATION.search(cat.release.source) and CITATION.search(cat.key.source) and cat.release.inferred is None


def test_every_entry_is_cited_and_nothing_is_inferred(cat):
    for name, entries in cat.packages.items():
        for e in entries:
            assert e.source and CITATION.search(e.source), (name, e.version)
            # Names and versions only: no listing of Depends/Conflicts/Provides was read.
            assert not e.depends, (name, e.version)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_no_reference_to_an_unpublished_research_file(flavour):
    text = (SNAPSHOT_DIR / f"{flavour}.yml").read_text()
    assert "research14" not in text and "index id" not in text and "inferred:" not in text


def test_an_entry_with_neither_is_refused():
    with pytest.raises(ValueError, match="source"):
        catalogue.PackageVersion(version="1.0-1")


def test_the_jammy_snapshot_holds_only_what_listings_showed():
    cat = snapshot("ubuntu2204")
    assert cat.versions("nvidia-fabricmanager") == ["580.95.05-1", "580.126.16-1"]
    assert cat.versions("libcudnn8") == ["8.9.5.29-1+cuda12.2", "8.9.6.50-1+cuda11.8", "8.9.6.50-1+cuda12.2",
                                         "8.9.7.29-1+cuda12.2"]
    assert cat.versions("libnccl2") == ["2.19.3-1+cuda12.2"]
    assert cat.versions("libnvinfer8") == ["8.6.1.6-1+cuda12.0"] and cat.versions("libnvinfer10") == ["10.8.0.43-1+cuda12.8"]
    for name in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary"):
        assert cat.versions(name) == ["1:4.4.1-1", "1:4.5.2-1", "1:4.5.3-1"], name
    for name in ("datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-proprietary-cuda13"):
        assert cat.versions(name) == ["1:4.5.2-1"], name
    assert cat.versions("datacenter-gpu-manager-exporter") == ["4.5.2-1", "4.6.0-1"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_what_no_listing_showed_is_not_pinned(flavour):
    cat = snapshot(flavour)
    # The R580 driver's ubuntu2204/2404 x86_64 revisions, the pinning package, nscq and the
    # cuda-toolkit meta-packages: no public listing of their exact versions was found.
    for name in cat.packages:
        assert not re.match(r"(cuda-drivers|nvidia-driver|nvidia-dkms|libnvidia-compute|nvidia-utils|"
                            r"libnvidia-nscq|cuda-toolkit-)", name), name
    # The guessed revision of issue 27 (NVIDIA's 580.95.05 is -0ubuntu1) is nowhere.
    assert "580.95.05-1ubuntu1" not in (SNAPSHOT_DIR / f"{flavour}.yml").read_text()


def test_the_noble_snapshot_holds_only_what_listings_showed():
    cat = snapshot("ubuntu2404")
    assert cat.path == "ubuntu2404/x86_64"
    assert cat.versions("nvidia-fabricmanager") == ["580.105.08-1"]
    assert cat.versions("datacenter-gpu-manager-4-core") == ["1:4.4.1-1", "1:4.5.2-1", "1:4.5.3-1", "1:4.6.0-1"]
    assert cat.versions("datacenter-gpu-manager-4-proprietary-cuda13") == ["1:4.5.2-1", "1:4.6.0-1"]
    # NVIDIA's NCCL 2.30 builds target CUDA 13.2/13.3, not 13.0 (issue 27).
    assert cat.versions("libnccl2") == ["2.30.4-1+cuda13.2", "2.30.7-1+cuda13.3"]
    assert not cat.versions("libcudnn8")   # not in 24.04's repository


def test_resolve_exact_and_prefix():
    cat = snapshot("ubuntu2204")
    assert cat.resolve("nvidia-fabricmanager", "580.95.05") == "580.95.05-1"
    assert cat.resolve("nvidia-fabricmanager", "580.126.16-1") == "580.126.16-1"
    assert cat.resolve("nvidia-fabricmanager", "580") == "580.126.16-1"        # newest of the branch
    assert cat.resolve("nvidia-fabricmanager", "580.9") is None                # not a prefix of 580.95
    assert cat.resolve("libcudnn8", "8.9.7") == "8.9.7.29-1+cuda12.2"
    assert cat.resolve("datacenter-gpu-manager-4-core", "4.5.2") == "1:4.5.2-1"  # the epoch is not named
    assert cat.resolve("no-such-package", "1") is None


def test_the_fixture_index_says_it_is_one():
    for path in sorted(CATALOGUE_FIXTURE.glob("*.yml")):
        assert path.read_text().startswith("# TEST FIXTURE, not a claim about NVIDIA's repository"), path
        assert catalogue.load(path.stem, path).packages, path


def test_parse_relation():
    assert parse_relation("ab (>= 1.0) | cd:amd64") == [("ab", ">=", "1.0"), ("cd", None, None)]
    with pytest.raises(ValueError):
        parse_relation("ab (>= )")


@pytest.mark.skipif(not shutil.which("dpkg"), reason="dpkg is not installed")
def test_compare_versions_agrees_with_dpkg():
    versions = ["580.65.06-0ubuntu1", "580.95.05-1ubuntu1", "580.95.05-0ubuntu1", "580.159.04-1ubuntu1", "1:3.3.6",
                "3.3.9", "8.9.7.29-1+cuda12.2", "8.9.7.29-1+cuda12.10", "1.0~rc1-1", "1.0-1", "1.0", "1.0a", "1:0.1",
                "10.8.0.43-1+cuda12.8", "2.19.3-1+cuda12.2"]
    for a, b in itertools.combinations(versions, 2):
        ours = compare_versions(a, b)
        dpkg_lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
        dpkg_eq = subprocess.run(["dpkg", "--compare-versions", a, "eq", b]).returncode == 0
        assert (ours < 0, ours == 0) == (dpkg_lt, dpkg_eq), (a, b, ours)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_dcgm4_installs_the_proprietary_pair_for_the_profiling_metrics(flavour):
    # DCGM_FI_PROF_* need the profiling module, which ships in -4-proprietary (a Recommends
    # of -4-core, so not installed with recommends off): the naming rule names it and its
    # -cuda<N> sibling at DCGM's version (sources in the snapshot's naming comment).
    cat = snapshot(flavour)
    assert cat.names("dcgm4", 580, driver_cuda_major=13) == [
        "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13",
        "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda13"]
    for name in cat.names("dcgm4", 580, driver_cuda_major=13):
        assert "1:4.5.2-1" in cat.versions(name), name
    # The unit tests' fixture index uses the same rules as the product.
    assert catalogue.load(flavour).naming == cat.naming


def test_a_catalogue_is_parsed_once_per_process_and_again_when_its_file_changes(tmp_path):
    # `provision profiles` loads every built-in, and each one's snapshot advisory reads the
    # same catalogue: one parse, shared (the models are frozen); an edited file is read again.
    path = tmp_path / "ubuntu2204.yml"
    shutil.copy(SNAPSHOT_DIR / "ubuntu2204.yml", path)
    first = catalogue.load("ubuntu2204", path)
    assert catalogue.load("ubuntu2204", path) is first
    with pytest.raises(Exception, match="frozen"):
        first.flavour = "other"
    path.write_text(path.read_text().replace("flavour: ubuntu2204", "flavour: ubuntu2204-edited", 1))
    again = catalogue.load("ubuntu2204", path)
    assert again is not first and again.flavour == "ubuntu2204-edited"
    assert again.sha256 != first.sha256
