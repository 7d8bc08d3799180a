"""The package catalogue of NVIDIA's CUDA repository (provisioner/data/catalogue/):
closed under one level of Depends, every entry cited or marked inferred, versions
resolved and compared as dpkg does."""

from __future__ import annotations

import itertools
import shutil
import subprocess

import pytest

from provisioner.profiles import catalogue
from provisioner.profiles.catalogue import compare_versions, parse_relation


@pytest.fixture(scope="module", params=catalogue.flavours())
def cat(request):
    return catalogue.load(request.param)


def test_flavours_include_ubuntu2204():
    assert "ubuntu2204" in catalogue.flavours()


def test_release_fields_and_key_are_nvidias(cat):
    assert (cat.release.origin, cat.release.label, cat.release.architecture) == ("NVIDIA", "NVIDIA CUDA", "x86_64")
    assert cat.key.fingerprint.endswith(cat.key.id.upper()) and cat.key.file == f"{cat.key.id}.pub"


def test_every_depends_resolves_inside_the_catalogue_or_the_base_allowlist(cat):
    assert cat.check_depends() == []


def test_check_depends_names_an_unsatisfiable_relation(cat):
    entry = cat.packages["libnccl-dev"][0]
    broken = entry.model_copy(update={"depends": ["libnccl2 (= 9.9.9-1)", "no-such-package"]})
    other = cat.model_copy(update={"packages": {**cat.packages, "libnccl-dev": [broken]}})
    assert other.check_depends() == [f"libnccl-dev {entry.version}: libnccl2 (= 9.9.9-1)",
                                     f"libnccl-dev {entry.version}: no-such-package"]


def test_every_entry_has_a_source_or_an_inferred_note(cat):
    for name, entries in cat.packages.items():
        for e in entries:
            assert e.source or e.inferred, (name, e.version)
    cited = sum(1 for es in cat.packages.values() for e in es if e.source)
    total = sum(len(es) for es in cat.packages.values())
    print(f"{cat.flavour}: {len(cat.packages)} packages, {total} versions, {cited} cited, {total - cited} inferred only")


def test_an_entry_with_neither_is_refused():
    with pytest.raises(ValueError, match="source"):
        catalogue.PackageVersion(version="1.0-1")


@pytest.fixture(scope="module")
def jammy():
    return catalogue.load("ubuntu2204")


def test_the_stacks_the_built_ins_install_are_there(jammy):
    cat = jammy
    want = {
        "cuda-drivers-580": ["580.65.06-0ubuntu1", "580.95.05-1ubuntu1"],
        "nvidia-fabricmanager": ["580.65.06-1", "580.95.05-1"],
        "libnvidia-nscq": ["580.65.06-1", "580.95.05-1"],
        "cuda-toolkit-12-2": ["12.2.2-1"], "cuda-toolkit-13-0": ["13.0.2-1"],
        "libcudnn8": ["8.6.0.163-1+cuda11.8", "8.9.6.50-1+cuda12.2", "8.9.7.29-1+cuda12.2"],
        "libnccl2": ["2.16.5-1+cuda11.8", "2.19.3-1+cuda12.2", "2.25.1-1+cuda12.8", "2.28.9-1+cuda13.0"],
        "libcudnn9-cuda-13": ["9.24.0.43-1"], "cuda-toolkit-11-8": ["11.8.0-1"], "cuda-toolkit-12-4": ["12.4.1-1"],
        "libnvinfer8": ["8.5.3-1+cuda11.8", "8.6.1.6-1+cuda12.0"], "libnvinfer10": ["10.8.0.43-1+cuda12.8"],
        "datacenter-gpu-manager": ["1:3.3.6", "1:3.3.9"],
        "datacenter-gpu-manager-4-cuda13": ["1:4.5.2-1", "1:4.5.3-1"],
        "datacenter-gpu-manager-exporter": ["4.6.0-1"],
    }
    for name, versions in want.items():
        assert cat.versions(name) == versions, name
    for name in ("nvidia-driver-580", "nvidia-driver-580-open", "nvidia-dkms-580", "nvidia-kernel-common-580",
                 "nvidia-utils-580", "nvidia-compute-utils-580", "libnvidia-compute-580", "nvidia-persistenced",
                 "nvidia-modprobe"):
        assert cat.versions(name) == want["cuda-drivers-580"], name
    assert cat.versions("nvidia-driver-pinning-580")


def test_resolve_exact_and_prefix(jammy):
    cat = jammy
    assert cat.resolve("nvidia-driver-580", "580.95.05") == "580.95.05-1ubuntu1"
    assert cat.resolve("nvidia-driver-580", "580.65.06-0ubuntu1") == "580.65.06-0ubuntu1"
    assert cat.resolve("nvidia-driver-580", "580") == "580.95.05-1ubuntu1"        # newest of the branch
    assert cat.resolve("nvidia-driver-580", "580.9") is None                       # not a prefix of 580.95
    assert cat.resolve("nvidia-fabricmanager", "580.65.06") == "580.65.06-1"
    assert cat.resolve("libcudnn8", "8.9.7") == "8.9.7.29-1+cuda12.2"
    assert cat.resolve("datacenter-gpu-manager", "1:3.3.9") == "1:3.3.9"
    assert cat.resolve("no-such-package", "1") is None


def test_noble_has_the_24_04_versions():
    noble = catalogue.load("ubuntu2404")
    assert noble.path == "ubuntu2404/x86_64"
    assert noble.versions("cuda-drivers-580") == ["580.95.05-1ubuntu1", "580.159.04-1ubuntu1"]
    assert noble.resolve("nvidia-fabricmanager", "580.159.04") == "580.159.04-1"
    assert noble.versions("datacenter-gpu-manager-4-core") == ["1:4.5.3-1", "1:4.6.0-1"]
    assert noble.versions("cuda-toolkit-13-0") == ["13.0.2-1", "13.0.3-1"]
    assert not noble.versions("libcudnn8") and not noble.versions("cuda-toolkit-12-2")   # not in 24.04's repository


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
