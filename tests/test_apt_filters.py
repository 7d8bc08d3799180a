"""The collection's apt filters (plugins/filter/apt.py) on real captured output."""

from __future__ import annotations

import importlib.util

import pytest

from .conftest import COLLECTION, DATA

_spec = importlib.util.spec_from_file_location("apt_filters", COLLECTION / "plugins" / "filter" / "apt.py")
apt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(apt)

MADISON = (DATA / "apt" / "madison__debian12-lab-host__nvidia.txt").read_text().splitlines()
DPKG = (DATA / "apt" / "dpkg-query__debian12-lab-host.txt").read_text().splitlines()


def test_madison_lists_each_packages_versions_newest_first():
    avail = apt.madison_versions(MADISON)
    assert avail["nvidia-driver"] == ["535.309.01-0+deb12u1", "535.261.03-1"]
    assert avail["nvidia-persistenced"] == ["535.171.04-1~deb12u1"]
    assert "no-such-package" not in avail  # apt says "N: Unable to locate package no-such-package"
    assert set(avail) == {"nvidia-driver", "nvidia-smi", "nvidia-kernel-dkms", "nvidia-persistenced", "libcuda1"}


def test_dpkg_installed_reads_held_and_plain_packages_only():
    installed = apt.dpkg_installed(DPKG)
    assert installed["nvidia-driver"] == "535.309.01-0+deb12u1"  # held: "hi"
    assert installed["bash"].startswith("5.2.15")                # plain: "ii"
    assert apt.dpkg_installed(["rc |gone|1.0-1", "un |never|", "hi |kept|2.0-1"]) == {"kept": "2.0-1"}


def test_versions_matching_takes_the_newest_revision_of_the_pinned_upstream():
    avail = apt.madison_versions(MADISON)
    assert apt.versions_matching(avail, ["nvidia-driver", "nvidia-smi"], "535.261.03") == {
        "nvidia-driver": "535.261.03-1", "nvidia-smi": "535.261.03-1"}
    assert apt.versions_matching(avail, ["nvidia-driver", "absent"], "535.309.01") == {
        "nvidia-driver": "535.309.01-0+deb12u1", "absent": ""}
    # 535.3 is not a revision of 535.309.01, nor the other way round.
    assert apt.versions_matching(avail, ["nvidia-driver"], "535.3") == {"nvidia-driver": ""}


def test_off_pin_names_what_moved_and_where_to_put_it_back():
    installed = apt.dpkg_installed(DPKG)
    held = ["nvidia-driver", "nvidia-smi", "nvidia-persistenced"]
    assert apt.off_pin(held, installed, "535.309.01", {"nvidia-persistenced": installed["nvidia-persistenced"]}) == {}
    moved = dict(installed, **{"nvidia-smi": "535.261.03-1"})
    del moved["nvidia-driver"]
    assert apt.off_pin(held, moved, "535.309.01", {}) == {
        "nvidia-driver": "535.309.01-*", "nvidia-smi": "535.309.01-*", "nvidia-persistenced": "535.309.01-*"}
    assert apt.off_pin(["nvidia-persistenced"], moved, "535.309.01", {"nvidia-persistenced": "535.171.04-1~deb12u1"}) == {}


# /proc/version as each kind of kernel writes it. Ubuntu's HWE/cloud line is the form NVIDIA's
# gpu-driver-container quotes for 22.04 kernels built with gcc-12 (its PR #20); the Debian line
# is bookworm's 6.1 kernel; the last is this CI machine's own kernel.
@pytest.mark.parametrize(("text", "package"), [
    ("Linux version 6.5.0-1015-aws (buildd@lcy02-amd64-046) (x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) "
     "12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #15~22.04.1-Ubuntu SMP", "gcc-12"),
    ("Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, "
     "GNU ld (GNU Binutils for Ubuntu) 2.38) #101-Ubuntu SMP", "gcc-11"),
    ("Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0, "
     "GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1", "gcc-12"),
    ("Linux version 6.18.44-fc-v669 (builder@sandboxing) (gcc (GCC) 15.3.0, GNU ld (GNU Binutils) 2.46) #1 SMP",
     "gcc-15"),
    ("Linux version 6.8.0 (someone@host) (Ubuntu clang version 18.1.3, Ubuntu LLD 18.1.3) #1 SMP", ""),
    ("", ""),
])
def test_kernel_compiler(text, package):
    assert apt.kernel_compiler(text) == package


def test_pins_offered_unoffered_and_unmet():
    avail = apt.madison_versions(MADISON)
    pins = {"nvidia-driver": "535.309.01-0+deb12u1", "nvidia-smi": "535.1-1"}
    assert apt.pins_unoffered(pins, avail) == ["nvidia-smi=535.1-1"]
    assert apt.pins_if_offered(pins, avail) == {"nvidia-driver": "535.309.01-0+deb12u1", "nvidia-smi": ""}
    installed = apt.dpkg_installed(DPKG)
    unmet = apt.pins_unmet({"nvidia-driver": installed["nvidia-driver"], "nvidia-smi": "0-1", "absent": "1-1"}, installed)
    assert unmet == ["absent=1-1 (installed: none)", f"nvidia-smi=0-1 (installed: {installed['nvidia-smi']})"]


def test_pins_offer_report_names_each_refused_pin_with_what_apt_offers_instead():
    avail = apt.madison_versions(MADISON)
    pins = {"nvidia-driver": "535.309.01-0+deb12u1", "nvidia-smi": "535.1-1", "libcudnn9-cuda-12": "9.1.0.70-1"}
    assert apt.pins_offer_report(pins, avail) == [
        "libcudnn9-cuda-12=9.1.0.70-1 (apt offers: no version of libcudnn9-cuda-12)",
        "nvidia-smi=535.1-1 (apt offers: 535.309.01-0+deb12u1, 535.261.03-1)"]
    assert apt.pins_offer_report({"nvidia-driver": "535.309.01-0+deb12u1"}, avail) == []


def test_apt_preferences_pin_exact_then_repository_then_nothing():
    text = apt.apt_preferences({"libcudnn8": "8.9.7.29-1+cuda12.2"}, "NVIDIA", "NVIDIA CUDA", "cuDNN")
    assert text.split("\n\n")[1:] == [
        "Package: libcudnn8\nPin: version 8.9.7.29-1+cuda12.2\nPin-Priority: 1001",
        "Package: libcudnn8\nPin: release o=NVIDIA,l=NVIDIA CUDA\nPin-Priority: 100",
        "Package: libcudnn8\nPin: version *\nPin-Priority: -1\n"]


@pytest.mark.parametrize(("pins", "origin"), [({"a\nPin-Priority: 1001": "1"}, "NVIDIA"), ({"a": "1\nX: y"}, "NVIDIA"),
                                             ({"a": "1"}, "NVIDIA,l=x"), ({"a": "1"}, "N\nPackage: *")])
def test_apt_preferences_refuses_what_would_become_a_directive(pins, origin):
    with pytest.raises(ValueError):
        apt.apt_preferences(pins, origin, "NVIDIA CUDA", "x")


def test_kept_or_newest_keeps_a_matching_installed_version_else_takes_the_newest_offered():
    avail = apt.madison_versions(MADISON)
    installed = apt.dpkg_installed(DPKG)
    patterns = {"nvidia-driver": r"^535\.", "nvidia-smi": r"^9\.", "libcuda1": r"^535\.261\."}
    got = apt.kept_or_newest(patterns, installed, avail)
    assert got["nvidia-driver"] == installed.get("nvidia-driver", avail["nvidia-driver"][0])
    assert got["nvidia-smi"] == ""                                   # nothing offered matches
    assert got["libcuda1"] == next(v for v in avail["libcuda1"] if v.startswith("535.261."))


def test_installed_matching_and_as_install():
    installed = {"cuda-cudart-12-2": "12.2.140-1", "cuda-cudart-12-4": "12.4.1-1", "libcublas-12-2": "12.2.5.6-1", "vim": "9"}
    assert apt.installed_matching(installed, r"^(cuda|libcu)[a-z0-9-]*-(12-2)$", r"^(12\.2)\.") == {
        "cuda-cudart-12-2": "12.2.140-1", "libcublas-12-2": "12.2.5.6-1"}
    assert apt.as_install(["nvidia-cuda-toolkit", "g++"], {"nvidia-cuda-toolkit": "11.8.89~11.8.0-5~deb12u1"}) == [
        "nvidia-cuda-toolkit=11.8.89~11.8.0-5~deb12u1", "g++"]


def test_install_pending_leaves_out_what_dpkg_has_at_its_version():
    installed = {"nvidia-driver": "535.1-1", "dkms": "3.0", "nvidia-smi": "535.0-1"}
    wanted = {"nvidia-driver": "535.1-1", "nvidia-smi": "535.1-1", "cuda-toolkit-12-8": "12.8.1-1"}
    assert apt.install_pending(list(wanted), wanted, installed) == ["nvidia-smi=535.1-1", "cuda-toolkit-12-8=12.8.1-1"]
    # a bare name is met at any version; missing ones stay
    assert apt.install_pending(["dkms", "gcc-12"], {}, installed) == ["gcc-12"]
    assert apt.install_pending(["nvidia-driver"], wanted, installed) == []
