"""The lab's stand-in for NVIDIA's libnvidia-container repository (provisioner.lab.toolkitrepo,
issue 29): its own manifest closed, cited and different from the product's data on purpose,
built to NVIDIA's layout (stable/deb/amd64, flat), its stubs saying what they are, and apt
itself (in a private state folder) accepting it and resolving the four packages at one exact
version, as the install guide installs them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner.lab import toolkitrepo

from .conftest import REPO
from .test_cudarepo import HAVE_TOOLS, parse_deb822

FOUR = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]
DATA = REPO / "provisioner" / "data" / "container_toolkit.yml"   # the product's data, read as plain YAML


@pytest.fixture(scope="module")
def man():
    return toolkitrepo.load()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if not HAVE_TOOLS:
        pytest.skip("dpkg-deb, gpg and gpgv are needed (scripts/setup-dev-host)")
    return toolkitrepo.build(tmp_path_factory.mktemp("toolkitrepo"))


def test_the_manifest_is_closed_cited_and_serves_the_four_packages(man):
    assert man.check_depends() == []
    assert sorted(man.packages) == sorted(FOUR)
    assert {tuple(man.versions(n)) for n in FOUR} == {("1.17.8-1", "1.17.9-1", "1.18.1-1")}
    assert all(p.source for _, p in man.entries())
    unconfirmed = sorted((n, p.version) for n, p in man.entries() if p.unconfirmed)
    assert unconfirmed == [("libnvidia-container-tools", "1.17.9-1"), ("libnvidia-container1", "1.17.9-1")]


def test_the_stand_in_differs_from_the_products_data_on_purpose(man):
    data = set(yaml.safe_load(DATA.read_text())["packages"]["versions"])
    served = set(man.versions("nvidia-container-toolkit"))
    assert served - data == {"1.17.9-1"}
    assert data - served == {"1.18.0-1", "1.19.0-1", "1.20.0-1"}


def test_layout_release_and_stubs_are_nvidias_names(repo, man, tmp_path):
    assert repo.dir == repo.root / "stable" / "deb" / "amd64"
    release = parse_deb822((repo.dir / "Release").read_text())[0]
    assert release["Architecture"] == "amd64" and not {"Suite", "Components"} & release.keys()
    stanzas = {(s["Package"], s["Version"]): s for s in parse_deb822((repo.dir / "Packages").read_text())}
    toolkit = stanzas[("nvidia-container-toolkit", "1.18.1-1")]
    assert toolkit["Depends"] == ("nvidia-container-toolkit-base (= 1.18.1-1), libnvidia-container-tools (= 1.18.1-1), "
                                  "libnvidia-container-tools (<< 2.0.0)")
    assert "libnvidia-container repository" in toolkit["Description"]
    # nvidia-ctk lives in -base, as NVIDIA's packaging/debian/*.install has it; a stub that says so.
    out = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-x", str(repo.dir / "nvidia-container-toolkit-base_1.18.1-1_amd64.deb"), str(out)], check=True)
    assert sorted(p.name for p in (out / "usr" / "bin").iterdir()) == ["nvidia-container-runtime", "nvidia-ctk"]
    ctk = out / "usr" / "bin" / "nvidia-ctk"
    configure = subprocess.run([str(ctk), "runtime", "configure"], capture_output=True, text=True)
    assert configure.returncode == 1 and "stub" in configure.stderr
    # cdi generate: a spec that says it is a stub, for the driver library this machine has, or
    # (no libcuda.so.1, as on most controllers) a failure as NVIDIA's own without a driver.
    generate = subprocess.run([str(ctk), "cdi", "generate"], capture_output=True, text=True)
    if Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists():
        assert generate.returncode == 0 and "A STUB CDI spec" in generate.stdout
    else:
        assert generate.returncode == 1 and "stub" in generate.stderr and not generate.stdout


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt is needed")
def test_apt_installs_the_four_at_one_exact_version(repo, tmp_path: Path):
    keyring = tmp_path / "standin.asc"
    shutil.copy(repo.dir / f"{repo.key_id}.pub", keyring)
    etc = tmp_path / "etc"
    for d in ("sources.list.d", "preferences.d", "apt.conf.d"):
        (etc / d).mkdir(parents=True)
    (etc / "sources.list").write_text("")
    (etc / "sources.list.d" / "nvidia-container-toolkit.list").write_text(f"deb [signed-by={keyring}] file:{repo.dir} /\n")
    (tmp_path / "state" / "lists" / "partial").mkdir(parents=True)
    (tmp_path / "cache" / "archives" / "partial").mkdir(parents=True)
    status = tmp_path / "status"
    status.write_text("Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\nArchitecture: amd64\n\n")
    opts = [f"-oDir::Etc={etc}", f"-oDir::State={tmp_path / 'state'}", f"-oDir::Cache={tmp_path / 'cache'}",
            f"-oDir::State::status={status}", "-oAPT::Architecture=amd64", "-oAPT::Architectures::=amd64",
            "-oAPT::Sandbox::User=root"]
    upd = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True)
    assert upd.returncode == 0 and "W:" not in upd.stderr and "E:" not in upd.stderr, upd.stdout + upd.stderr
    plan = subprocess.run(["apt-get", *opts, "-s", "install", *(f"{n}=1.17.8-1" for n in FOUR)],
                          capture_output=True, text=True)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert sorted(line.split()[1:3] for line in plan.stdout.splitlines() if line.startswith("Inst ")) == sorted(
        [n, "(1.17.8-1"] for n in FOUR)
    # The toolkit alone at 1.17.8-1 cannot take the newest -base: its Depends are exact.
    mixed = subprocess.run(["apt-get", *opts, "-s", "install", "nvidia-container-toolkit=1.17.8-1",
                            "nvidia-container-toolkit-base=1.18.1-1"], capture_output=True, text=True)
    assert mixed.returncode != 0 and "nvidia-container-toolkit-base (= 1.17.8-1)" in mixed.stdout + mixed.stderr
