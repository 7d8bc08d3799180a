"""Kernels, DKMS and Secure Boot: the host-side parsers (module_utils/kernels.py) on real
`dkms status` captures (tests/data/dkms/SOURCES.md), the role's filters, the controller's
judgement (provisioner/judge/kernels.py) and the profile options (driver.hold_kernel,
driver.secure_boot)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from ansible_collections.gpu_provisioner.node.plugins.filter import kernels as filters
from ansible_collections.gpu_provisioner.node.plugins.module_utils import kernels as host
from provisioner import profiles
from provisioner.engine import commands, drift
from provisioner.judge import kernels as judge
from provisioner.profiles.models import Profile
from provisioner.render import PROFILE_FIELD, role_vars

DATA = Path(__file__).parent / "data" / "dkms"
LAB = "lab-driver-only"
LAB_PROFILE = Path(__file__).parent / "data" / "profiles" / "lab-driver-only.yml"


def lab_profile(**driver) -> Profile:
    raw = profiles.as_dict(profiles.load(str(LAB_PROFILE)).profile)
    raw["driver"].update(driver)
    return Profile.model_validate(raw)


# --- dkms status --------------------------------------------------------------------------

def test_dkms_2_line_is_read():
    (entry,) = host.parse_dkms_status((DATA / "status-dkms2.txt").read_text())
    assert entry == {"module": "nvidia", "version": "460.91.03", "kernel": "5.11.0-36-generic", "arch": "x86_64",
                     "state": "installed", "note": ""}


def test_dkms_3_lines_are_read_and_only_nvidia_modules_count():
    entries = host.parse_dkms_status((DATA / "status-dkms3.txt").read_text())
    assert [(e["module"], e["version"], e["kernel"], e["state"]) for e in entries] == [
        ("nvidia", "535.86.05", "6.5.0-060500rc5-generic", "installed"),
        ("rtl8852bu", "1.19.3", "6.5.0-060500rc5-generic", "installed")]
    assert host.nvidia_modules(entries) == {
        "535.86.05": {"module": "nvidia", "kernels": {"6.5.0-060500rc5-generic": "installed"}}}


def test_dkms_error_lines_are_kept_apart_not_taken_for_modules():
    entries = host.parse_dkms_status((DATA / "status-error.txt").read_text())
    assert {e["state"] for e in entries} == {"unparsed"}
    assert host.nvidia_modules(entries) == {}


def test_added_built_and_noted_states():
    text = ("nvidia-current/535.309.01: added\n"
            "nvidia-current/535.261.03, 6.1.0-40-amd64, x86_64: built\n"
            "nvidia-current/535.261.03, 6.1.0-41-amd64, x86_64: installed (WARNING! Diff between built and installed module!)\n")
    entries = host.parse_dkms_status(text)
    assert entries[2]["note"] == "WARNING! Diff between built and installed module!"
    mods = host.nvidia_modules(entries)
    assert host.module_states(mods, "535.309.01", ["6.1.0-41-amd64"]) == {"6.1.0-41-amd64": "added"}
    assert host.module_states(mods, "535.261.03", ["6.1.0-40-amd64", "6.1.0-41-amd64", "6.1.0-42-amd64"]) == {
        "6.1.0-40-amd64": "built", "6.1.0-41-amd64": "installed", "6.1.0-42-amd64": "added"}
    assert host.module_states(mods, "580.95.05", ["6.1.0-41-amd64"]) == {"6.1.0-41-amd64": "absent"}


def test_lab_captures_are_read(tmp_path):
    for path in sorted(DATA.glob("status-lab-*.txt")):
        entries = host.parse_dkms_status(path.read_text())
        assert entries and all(e["state"] != "unparsed" for e in entries), path.name
        assert "535.309.01" in host.nvidia_modules(entries), path.name


def test_dkms_tree_reads_what_dkms_status_would_say(tmp_path):
    # DKMS's own layout (dkms 3.0.10 on the lab host): <module>/<version>/{source,<kernel>/<arch>/module},
    # and <module>/kernel-<kernel>-<arch> -> <version>/<kernel>/<arch> once installed.
    mod = tmp_path / "nvidia-current"
    (mod / "535.309.01").mkdir(parents=True)
    (mod / "535.309.01" / "source").symlink_to("/usr/src/nvidia-current-535.309.01")
    for kver in ("6.1.0-57-amd64", "6.1.0-58-amd64"):
        (mod / "535.309.01" / kver / "x86_64" / "module").mkdir(parents=True)
    (mod / "kernel-6.1.0-57-amd64-x86_64").symlink_to("535.309.01/6.1.0-57-amd64/x86_64")
    (tmp_path / "rtl8852bu" / "1.19.3").mkdir(parents=True)  # not NVIDIA's
    (tmp_path / "nvidia-old" / "470.1").mkdir(parents=True)   # added only
    assert host.dkms_tree(str(tmp_path)) == {
        "535.309.01": {"module": "nvidia-current", "kernels": {"6.1.0-57-amd64": "installed", "6.1.0-58-amd64": "built"}},
        "470.1": {"module": "nvidia-old", "kernels": {}}}
    assert host.module_states(host.dkms_tree(str(tmp_path)), "470.1", ["6.1.0-57-amd64"]) == {"6.1.0-57-amd64": "added"}
    # The same answer as parsing `dkms status` of that state.
    status = ("nvidia-current/535.309.01, 6.1.0-57-amd64, x86_64: installed\n"
              "nvidia-current/535.309.01, 6.1.0-58-amd64, x86_64: built\n")
    assert host.nvidia_modules(host.parse_dkms_status(status))["535.309.01"] == host.dkms_tree(str(tmp_path))["535.309.01"]


def test_kernel_images_are_those_with_a_vmlinuz(tmp_path):
    boot, mods = tmp_path / "boot", tmp_path / "modules"
    for name in ("vmlinuz-6.1.0-41-amd64", "vmlinuz-6.1.0-40-amd64", "config-6.1.0-41-amd64", "initrd.img-6.1.0-41-amd64"):
        (boot / name).parent.mkdir(exist_ok=True)
        (boot / name).write_text("")
    for kver in ("6.1.0-41-amd64", "6.1.0-39-amd64", "6.8.0-45-generic"):
        (mods / kver).mkdir(parents=True)
    (mods / "6.8.0-45-generic" / "vmlinuz").write_text("")  # kept beside the modules (some distributions)
    found = host.kernel_images([str(p) for p in boot.iterdir()], [str(p) for p in mods.iterdir()])
    assert found == {"images": ["6.1.0-40-amd64", "6.1.0-41-amd64", "6.8.0-45-generic"], "without_image": ["6.1.0-39-amd64"]}


def test_read_on_this_machine_gives_every_field():
    r = host.read()
    assert set(r) == {"running", "images", "without_image", "dkms", "dkms_rc", "dkms_error", "secure_boot", "in_container"}
    assert r["running"] == os.uname().release
    assert r["secure_boot"]["state"] in ("enabled", "disabled", "no-efi", "unknown")


# --- Secure Boot --------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "state"), [
    ("SecureBoot enabled\n", "enabled"),
    ("SecureBoot disabled\nPlatform is in Setup Mode\n", "disabled"),
    ("EFI variables are not supported on this system\n", "no-efi"),
    ("This system doesn't support Secure Boot\n", "no-efi"),
    ("", "unknown"),
])
def test_mokutil_sb_state(text, state):
    assert host.parse_mokutil_sb_state(text) == state


def test_secure_boot_efi_variable_is_four_attribute_bytes_then_the_value():
    attrs = (0x06).to_bytes(4, "little")  # BOOTSERVICE_ACCESS | RUNTIME_ACCESS
    assert host.parse_secure_boot_efivar(attrs + b"\x01") == "enabled"
    assert host.parse_secure_boot_efivar(attrs + b"\x00") == "disabled"
    assert host.parse_secure_boot_efivar(attrs) == "unknown"
    assert host.parse_secure_boot_efivar(None) == "unknown"
    import base64
    assert filters.secure_boot_state({"content": base64.b64encode(attrs + b"\x01").decode()}) == "enabled"
    assert filters.secure_boot_state({"failed": True, "msg": "file not found"}) == "unknown"


# --- the role's filters -------------------------------------------------------------------

def test_filters_kernels_states_and_signing_keys():
    files = [{"path": "/boot/vmlinuz-6.1.0-41-amd64"}, {"path": "/boot/vmlinuz-6.1.0-40-amd64"}, {"path": "/boot/vmlinuz-"}]
    assert filters.kernel_versions(files) == ["6.1.0-40-amd64", "6.1.0-41-amd64"]
    status = "nvidia-current/535.309.01, 6.1.0-41-amd64, x86_64: installed\nnvidia-current/535.309.01: added\n"
    assert filters.dkms_states(status, "535.309.01", ["6.1.0-40-amd64", "6.1.0-41-amd64"]) == {
        "6.1.0-40-amd64": "added", "6.1.0-41-amd64": "installed"}
    assert filters.dkms_module_name(status, "535.309.01", "nvidia") == "nvidia-current"
    assert filters.dkms_module_name("", "535.309.01", "nvidia") == "nvidia"
    # openssl x509 -serial against modinfo -F sig_key (colons, case, a leading zero).
    assert filters.same_key_id("serial=0A1B2C3D", "A:1B:2C:3D")
    assert filters.same_key_id("serial=0a1b2c3d", "0A:1B:2C:3D")
    assert not filters.same_key_id("serial=0A1B2C3D", "0A:1B:2C:3E")
    assert not filters.same_key_id("", "")
    results = [{"item": "k1", "stdout": "0A:1B"}, {"item": "k2", "stdout": ""}, {"item": "k3", "stdout": "FF:00"},
               {"item": "k4", "skipped": True}]
    assert filters.not_signed_by(results, "serial=0A1B") == ["k2", "k3"]


# --- the controller's judgement -----------------------------------------------------------

KVER, NEW = "6.1.0-41-amd64", "6.1.0-42-amd64"


def reading(images, dkms, **extra):
    return {"running": "6.1.0-99-cloud-amd64", "images": images, "without_image": [], "dkms": dkms, "dkms_rc": 0,
            "dkms_error": "", "secure_boot": {"state": "disabled", "source": "mokutil --sb-state"},
            "in_container": False, **extra}


def built(*kernels, version="535.309.01"):
    return {version: {"module": "nvidia-current", "kernels": dict.fromkeys(kernels, "installed")}}


def test_every_kernel_with_its_module_passes_and_names_them():
    (check,) = judge.judge_modules(lab_profile(), reading([KVER, NEW], built(KVER, NEW)))
    assert check.status == "pass" and KVER in check.detail and NEW in check.detail


def test_a_kernel_without_the_module_fails_naming_it_and_the_fix():
    checks = judge.judge_modules(lab_profile(), reading([KVER, NEW], built(KVER)))
    assert [(c.name, c.status) for c in checks] == [(f"kernel {NEW}", "fail")]
    detail = checks[0].detail
    assert f"nvidia-current/535.309.01 module built and installed for kernel {NEW} (dkms: added)" in detail
    assert f"dkms install nvidia-current/535.309.01 -k {NEW}" in detail and f"linux-headers-{NEW}" in detail


def test_a_module_of_another_driver_version_does_not_count():
    checks = judge.judge_modules(lab_profile(), reading([KVER], built(KVER, version="535.261.03")))
    assert [(c.name, c.status) for c in checks] == [(f"kernel {KVER}", "fail")]
    assert "(dkms: absent)" in checks[0].detail


def test_before_up_a_missing_module_is_what_up_builds_not_a_stop():
    (check,) = judge.judge_modules(lab_profile(), reading([KVER], {}), before_up=True)
    assert check.status == "skip" and "provision up builds it now" in check.detail


def test_no_dkms_means_every_kernel_lacks_the_module():
    (check,) = judge.judge_modules(lab_profile(), reading([KVER], {}, dkms_rc=127, dkms_error="dkms: not found"))
    assert check.status == "fail" and "dkms is not installed" in check.detail


def test_a_container_without_a_kernel_image_is_skipped_with_the_reason_never_ok():
    (check,) = judge.judge_modules(lab_profile(), reading([], {}, in_container=True))
    assert check.status == "skip" and "a container" in check.detail and "no installed kernel image" in check.detail
    assert judge.judge_modules(lab_profile(), None) == []  # nothing read: nothing claimed


def test_secure_boot_refuse_fails_naming_the_two_other_settings():
    on = reading([KVER], built(KVER), secure_boot={"state": "enabled", "source": "mokutil --sb-state"})
    (check,) = judge.judge_secure_boot(lab_profile(), on)
    assert check.status == "fail" and "driver.secure_boot: sign" in check.detail and "prebuilt" in check.detail
    (check,) = judge.judge_secure_boot(lab_profile(secure_boot="sign"), on)
    assert check.status == "pass" and "enroll the key at the next boot" in check.detail


@pytest.mark.parametrize(("sb", "in_container", "status"), [
    ({"state": "disabled", "source": "mokutil --sb-state"}, False, "pass"),
    ({"state": "no-efi", "source": "/sys/firmware/efi"}, False, "pass"),
    ({"state": "unknown", "source": "", "detail": "mokutil is not installed"}, False, "skip"),
    ({"state": "enabled", "source": "mokutil --sb-state"}, True, "skip"),
])
def test_secure_boot_states(sb, in_container, status):
    (check,) = judge.judge_secure_boot(lab_profile(), reading([], {}, secure_boot=sb, in_container=in_container))
    assert check.status == status, check


def test_up_converges_a_recorded_host_when_a_kernel_lacks_the_module(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    n1:\n      ansible_host: 192.0.2.1\n")
    target = commands.prepare(str(LAB_PROFILE), inventory)
    state = {"recorded": True, "profile": target.loaded.profile.name, "profile_sha256": target.digest_for("n1"),
             "differences": [], "dpkg_audit": ""}
    assert drift.in_recorded_state(dict(state, kernels=reading([KVER], built(KVER))), target, "n1")
    assert not drift.in_recorded_state(dict(state, kernels=reading([KVER, NEW], built(KVER))), target, "n1")


# --- the profile options ------------------------------------------------------------------

def test_defaults_refuse_secure_boot_and_leave_the_kernel_unheld():
    p = lab_profile()
    assert (p.driver.secure_boot, p.driver.hold_kernel) == ("refuse", False)


def test_prebuilt_is_refused_where_the_os_has_no_signed_modules():
    with pytest.raises(ValidationError, match="driver.secure_boot: prebuilt needs Ubuntu's signed precompiled modules"):
        lab_profile(secure_boot="prebuilt")  # Debian 12


def test_options_are_rendered_and_listed_in_profile_field():
    loaded = profiles.load(str(Path(__file__).parent / "data" / "profiles" / "lab-kernel.yml"))
    out = role_vars(loaded)
    assert (out["nvidia_driver_hold_kernel"], out["nvidia_driver_secure_boot"]) == (True, "sign")
    assert PROFILE_FIELD["nvidia_driver_hold_kernel"] == "driver.hold_kernel"
    assert PROFILE_FIELD["nvidia_driver_secure_boot"] == "driver.secure_boot"
