"""The controller's side of asking the host's own distribution archive (issue 27, driver.source
/ cuda.source: distro): what a profile takes from it (profiles/distro.py, from the roles' own
vars files), what render hands the plays, and the judgement of apt_offer's answer
(judge/distro.py), on apt output captured from Debian 12's archive (tests/data/apt). A
refused version keeps the host out of the converge. The module itself: tests/test_apt_offer.py."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import yaml

from ansible_collections.gpu_provisioner.node.plugins.filter import apt as role_filters
from ansible_collections.gpu_provisioner.node.plugins.module_utils import apt_offer as host
from provisioner import profiles
from provisioner.engine import commands
from provisioner.judge import distro as judge
from provisioner.profiles import distro
from provisioner.profiles.models import Profile
from provisioner.render import PROFILE_FIELD, role_vars
from provisioner.verdicts.checks import failed, passed

from .conftest import DATA, ROLES
from .test_apt_offer import COMPONENTS, MADISON, SUITES, FakeApt, _etc


def lab(**changes) -> Profile:
    raw = profiles.as_dict(profiles.load("debian12-lab").profile)
    for dotted, value in changes.items():
        section, field = dotted.split("__")
        raw[section][field] = value
    return Profile.model_validate(raw)


# --------------------------------------------------------------------------- what the profile takes

def test_the_package_names_are_the_roles_own():
    drv = yaml.safe_load((ROLES / "nvidia_driver/vars/Debian-12.yml").read_text())
    tk = yaml.safe_load((ROLES / "cuda_toolkit/vars/Debian-12.yml").read_text())
    want = distro.wanted(profiles.load("debian12-lab").profile)
    assert list(want) == (drv["nvidia_driver_os_packages"]["distro"]["proprietary"]
                          + drv["nvidia_driver_os_persistence_packages"]["distro"] + tk["cuda_toolkit_os_distro_pinned"])
    assert want["nvidia-driver"] == distro.Want("535.309.01", "upstream", "driver.version")
    assert want["nvidia-cuda-toolkit"] == distro.Want(tk["cuda_toolkit_os_distro_release"], "release", "cuda.toolkits")
    assert "nvidia-open-kernel-dkms" in distro.wanted(lab(driver__kernel_modules="open"))
    # Ubuntu's names carry the branch; prebuilt takes the release's no-DKMS set.
    raw = profiles.as_dict(profiles.load("debian12-lab").profile)
    raw.update(os="ubuntu-22.04")
    raw["cuda"].update(toolkits=["11.5"], default="11.5")
    raw["python_envs"][0].update(python="3.10")
    raw["driver"].update(secure_boot="prebuilt")
    jammy = Profile.model_validate(raw)
    assert set(distro.wanted(jammy)) == {"nvidia-headless-no-dkms-535-server", "nvidia-utils-535-server",
                                         "nvidia-cuda-toolkit"}
    assert distro.archive(jammy)["suites"] == ["jammy", "jammy-updates", "jammy-security", "jammy-backports"]
    # NVIDIA's repository: nothing asked of the distribution's archive.
    assert distro.wanted(profiles.load("h100-train").profile) == {}


def test_render_hands_the_plays_the_packages_and_the_archive():
    loaded = profiles.load("debian12-lab")
    rv = role_vars(loaded)
    assert rv["provisioner_distro_packages"]["nvidia-driver"] == "535.309.01"
    assert rv["provisioner_distro_packages"]["nvidia-cuda-toolkit"] == "11.8"
    assert rv["provisioner_distro_archive"] == {
        "suites": SUITES, "components": COMPONENTS,
        "component_files": ["/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources"]}
    assert {"provisioner_distro_packages", "provisioner_distro_archive"} <= set(PROFILE_FIELD)
    driver_only = role_vars(profiles.load(str(DATA / "profiles" / "lab-driver-only.yml")))
    assert "nvidia-cuda-toolkit" not in driver_only["provisioner_distro_packages"]


# --------------------------------------------------------------------------- the judge

def _offer(p: Profile | None = None) -> dict:
    """What apt_offer returns for `p`'s packages on a host whose apt answers with the captures."""
    p = p or profiles.load("debian12-lab").profile
    etc = _etc(Path(tempfile.mkdtemp()))
    try:
        return host.offer(sorted(distro.packages(p)), SUITES, COMPONENTS,
                          [str(etc / "sources.list")], etc_apt=str(etc), origin="Debian", run=FakeApt())
    finally:
        shutil.rmtree(etc.parent)


def test_each_package_passes_with_its_exact_version_source_and_release_date():
    checks = {c.name: c for c in judge.judge(profiles.load("debian12-lab").profile, _offer())}
    assert checks["archive nvidia-driver"] == passed(
        "archive nvidia-driver", "nvidia-driver 535.309.01-0+deb12u1 from http://deb.debian.org/debian-security "
                                 "bookworm-security (Release Date: Mon, 30 Nov 2026 00:22:33 UTC)")
    assert checks["archive nvidia-cuda-toolkit"].detail == (
        "nvidia-cuda-toolkit 11.8.89~11.8.0-5~deb12u1 from http://deb.debian.org/debian bookworm "
        "(Release Date: Sat, 11 Jul 2026 10:16:37 UTC)")
    assert checks["archive nvidia-persistenced"].detail.startswith("nvidia-persistenced 535.171.04-1~deb12u1 from")
    assert {c.status for c in checks.values()} == {"pass"} and len(checks) == 8


def test_the_judge_picks_what_the_roles_then_install():
    """Same madison, same choice: the role nvidia_driver's versions_matching and the role
    cuda_toolkit's kept_or_newest (nothing installed) against the judge's."""
    avail = role_filters.madison_versions(MADISON)
    p = profiles.load("debian12-lab").profile
    offer = _offer()
    chosen = {c.name.split(" ", 1)[1]: c.detail.split()[1] for c in judge.judge(p, offer)}
    names = [n for n, w in distro.wanted(p).items() if w.rule == "upstream"]
    assert {n: chosen[n] for n in names} == role_filters.versions_matching(avail, names, p.driver.version)
    assert chosen["nvidia-cuda-toolkit"] == role_filters.kept_or_newest(
        {"nvidia-cuda-toolkit": r"^11\.8\."}, {}, avail)["nvidia-cuda-toolkit"]


def test_a_version_the_archive_lacks_fails_naming_sources_dates_neighbours_and_the_fix():
    p = lab(driver__version="535.999.99")
    checks = {c.name: c for c in judge.judge(p, _offer(p))}
    bad = checks["archive nvidia-driver"]
    assert bad.status == "fail"
    for part in ("nvidia-driver 535.999.99 (driver.version) is not in the host's archive",
                 "http://deb.debian.org/debian bookworm (Release Date: Sat, 11 Jul 2026 10:16:37 UTC)",
                 "http://deb.debian.org/debian-security bookworm-security (Release Date: Mon, 30 Nov 2026 00:22:33 UTC)",
                 "nearest versions it carries: 535.261.03-1 (bookworm), 535.309.01-0+deb12u1 (bookworm-security)",
                 "pick a version the archive carries (driver.version in the profile)", "fix the host's apt sources"):
        assert part in bad.detail, bad.detail
    # A vendor's source that reused the codename is said to be left out, with why.
    assert "download.docker.com/linux/debian bookworm (not used: its Release file's Origin is 'Docker'" in bad.detail
    # The toolkit is still there.
    assert checks["archive nvidia-cuda-toolkit"].status == "pass"


def test_open_modules_lag_behind_in_debian_and_are_refused_before_the_converge():
    p = lab(driver__kernel_modules="open")
    checks = {c.name: c for c in judge.judge(p, _offer(p))}
    assert checks["archive nvidia-open-kernel-dkms"].status == "fail"
    assert "nearest versions it carries: 535.261.03-1 (bookworm)" in checks["archive nvidia-open-kernel-dkms"].detail


def test_an_unreadable_archive_or_a_missing_answer_fails_and_other_profiles_are_not_asked():
    p = profiles.load("debian12-lab").profile
    (only,) = judge.judge(p, {"error": "apt-get did not finish within 300 s", "sources": []})
    assert only.status == "fail" and "apt-get did not finish within 300 s" in only.detail
    (missing,) = judge.judge(p, None)
    assert missing.status == "fail" and "provision preflight" in missing.detail
    assert judge.judge(profiles.load("h100-train").profile, None) == []


def test_a_host_in_its_recorded_state_is_not_stopped_by_the_archive():
    checks = [passed("os", "Debian 12"), failed("archive nvidia-driver", "nvidia-driver 535.309.01 is not ...")]
    relaxed = judge.in_recorded_state(checks)
    assert relaxed[0] == checks[0] and relaxed[1].status == "skip"
    assert relaxed[1].detail.startswith("not converged (in its recorded state)")


def test_a_refused_version_stops_up_before_the_converge(tmp_path, monkeypatch):
    """The survey's answer fails the host's archive check: site and verify never run."""
    from provisioner.engine.runner import HostRun, PlaybookRun
    from provisioner.render.inventory import load as load_inventory

    inv = tmp_path / "hosts.ini"
    inv.write_text("lab-1\n")
    target = commands.Target(profiles.load(str(_child(tmp_path))), load_inventory(inv))
    played = []

    def fake_run(name, inventory_dir, run_dir, **kw):
        played.append(name)
        facts = {"distribution": "Debian", "distribution_version": "12.12", "vcpus": 4, "memtotal_mb": 8192,
                 "disk_free": ["/ 107374182400"], "lspci_rc": 0, "lspci": []}
        return PlaybookRun(name, "successful", 0, {"lab-1": HostRun("lab-1", ok=2, reported={
            "provisioner_preflight": facts, "provisioner_apt_offer": _offer()})}, run_dir)

    monkeypatch.setattr(commands, "run_playbook", fake_run)
    report = commands.execute("up", target, runs_dir=tmp_path / "runs")
    assert played == ["survey"]
    (h,) = report.hosts
    assert [c.name for c in h.checks if c.status == "fail"] == [
        "archive firmware-nvidia-gsp", "archive libcuda1", "archive libnvidia-ptxjitcompiler1",
        "archive nvidia-driver", "archive nvidia-kernel-dkms", "archive nvidia-smi"]
    assert report.exit_code != 0
    saved = json.loads((report.run_dir / "report.json").read_text())
    assert "535.999.99" in json.dumps(saved)


def _child(tmp_path: Path) -> Path:
    path = tmp_path / "missing-version.yml"
    path.write_text("extends: debian12-lab\nname: debian12-lab-missing\ndescription: a version Debian lacks\n"
                    "driver:\n  version: 535.999.99\n")
    return path
