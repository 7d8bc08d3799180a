"""`provision plan`'s judge (judge/plan.py) on survey answers shaped as the probe returns them
(hand-made dicts, each labelled; the holders in them are the captured fuser outputs of
tests/data/holders, classified by the host-side detection, module_utils/holders.py, as the probe reports them), and the CLI's exit codes and JSON on a plan. What a real survey returns
and what up then does is compared on lab hosts (tests/integration/test_plan_lab.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpu_provisioner.node.plugins.module_utils import holders as detect

from provisioner import profiles
from provisioner.judge import plan as plan_mod

from .conftest import DATA

HOLDERS = DATA / "holders"
DRIVER = {"nvidia-driver-580": "580.95.05-0ubuntu1", "nvidia-dkms-580": "580.95.05-0ubuntu1"}
PINS = {"driver": DRIVER, "nccl": {"libnccl2": "2.27.7-1+cuda12.9"}}


def _profile(name: str = "h100-train"):
    return profiles.load(name).profile


def _survey(packages: dict, *, fuser: str = "", container: str = "", module: str = "570.86.15",
            lspci: list[str] | None = None, recorded: bool = True) -> dict:
    """A hand-made survey answer, in the shape gpu_probe (preflight: true) returns it."""
    return {
        "provisioner_verify": {"probe": {"container": container, "module_version": module}},
        "provisioner_preflight": {"lspci": ["17:00.0 3D controller [0302]: NVIDIA Corporation [10de:2330]"]
                                  if lspci is None else lspci},
        "provisioner_state": {"recorded": recorded, "profile": "h100-train", "differences": []},
        "provisioner_packages": packages,
        "provisioner_holders": _holders(fuser),
    }


def _holders(fuser: str) -> dict:
    """provisioner_holders as module_utils/holders.collect reports it: the holders the captured
    fuser text shows and the decision the host takes on them."""
    found, modules = detect.read(fuser=fuser), {"nvidia_drm": "0"}
    return {"fuser": {"rc": 0, "output": fuser}, "modules": modules, "holders": found,
            "activation": detect.activation(found, modules)}


def _plan(survey: dict, *, profile=None, pins=PINS, in_record: bool = False, removed=()):
    return plan_mod.host_plan("gpu-1", profile or _profile(), pins, survey, in_record=in_record, drift=[],
                              removed=list(removed))


def test_a_host_in_its_recorded_state_has_nothing_to_do():
    p = _plan(_survey({}), in_record=True)
    assert (p.status, p.changes, p.disruption, p.reboot) == ("unchanged", [], "none", False)


def test_a_driver_upgrade_on_a_gpu_host_reboots_and_names_the_blocking_holder():
    held = {n: {"version": "570.86.15-0ubuntu1", "hold": True} for n in DRIVER} | {
        "libnccl2": {"version": "2.27.7-1+cuda12.9", "hold": True}}
    p = _plan(_survey(held, fuser=(HOLDERS / "h200-nvswitch-fabricmanager-vllm.fuser.txt").read_text()))
    assert [c.describe() for c in p.changes] == [
        "upgrade nvidia-dkms-580 570.86.15-0ubuntu1 -> 580.95.05-0ubuntu1",
        "upgrade nvidia-driver-580 570.86.15-0ubuntu1 -> 580.95.05-0ubuntu1"]
    assert p.status == "changes" and p.holds == [] and p.reboot
    assert p.disruption == "reboot" and "nv-fabricmanage (pid 4334)" in p.disruption_why
    assert {h.kind for h in p.holders} == {"fabric_manager", "process"}


def test_a_driver_downgrade_with_only_persistenced_swaps_the_module_without_a_reboot():
    installed = {n: {"version": "590.44.01-0ubuntu1", "hold": True} for n in DRIVER}
    p = _plan(_survey(installed, fuser=(HOLDERS / "persistenced-only.fuser.txt").read_text()))
    assert {c.action for c in p.changes} == {"downgrade", "install"}  # libnccl2 is not installed
    assert p.disruption == "driver unload" and p.activation.stop_units == ("nvidia-persistenced.service",)
    assert not p.reboot and "only nvidia-persistenced.service hold" in p.disruption_why


def test_secure_boot_signing_keeps_the_reboot_the_role_does_not_try():
    installed = {n: {"version": "590.44.01-0ubuntu1", "hold": True} for n in DRIVER}
    signing = _profile().model_copy(update={"driver": _profile().driver.model_copy(update={"secure_boot": "sign"})})
    p = _plan(_survey(installed, fuser=(HOLDERS / "persistenced-only.fuser.txt").read_text()), profile=signing)
    assert p.disruption == "reboot" and p.reboot and "Secure Boot signing" in p.disruption_why


def test_a_host_without_the_decision_is_planned_with_a_reboot():
    """A host whose collection predates the decision (hand-made: no `activation` key)."""
    survey = _survey({n: {"version": "590.44.01-0ubuntu1", "hold": True} for n in DRIVER})
    del survey["provisioner_holders"]["activation"]
    p = _plan(survey)
    assert p.disruption == "reboot" and p.reboot and "no activation decision" in p.disruption_why


def test_a_driver_change_in_a_container_restarts_services_and_never_reboots():
    p = _plan(_survey({}, container="podman", module="", lspci=[]))
    assert {c.action for c in p.changes} == {"install"} and p.holds == sorted([*DRIVER, "libnccl2"])
    assert p.disruption == "service restart" and not p.reboot and "podman container" in p.disruption_why


def test_a_library_change_disrupts_nothing():
    installed = {n: {"version": v, "hold": True} for n, v in DRIVER.items()} | {
        "libnccl2": {"version": "2.26.2-1+cuda12.8", "hold": True}}
    p = _plan(_survey(installed, module="580.95.05"))
    assert [c.describe() for c in p.changes] == ["upgrade libnccl2 2.26.2-1+cuda12.8 -> 2.27.7-1+cuda12.9"]
    assert (p.disruption, p.reboot) == ("none", False)


def test_a_component_turned_off_restarts_services():
    installed = {n: {"version": v, "hold": True} for n, v in DRIVER.items()} | {
        "libnccl2": {"version": "2.27.7-1+cuda12.9", "hold": True}}
    p = _plan(_survey(installed, module="580.95.05"),
              removed=[("component dcgm_exporter is off in the profile", "still on this host; provision up removes it")])
    assert p.changes == [] and p.disruption == "service restart" and p.status == "changes"


def test_distribution_packages_take_the_version_the_hosts_archive_offers():
    profile = _profile("debian12-lab")
    survey = _survey({"nvidia-driver": {"version": "535.261.03-1", "hold": True}}, container="podman", lspci=[])
    survey["provisioner_apt_offer"] = {"packages": {"nvidia-driver": [
        {"version": "535.261.03-1", "uri": "u", "suite": "bookworm"},
        {"version": "535.309.01-0+deb12u1", "uri": "u", "suite": "bookworm-security"}]}}
    p = _plan(survey, profile=profile, pins={})
    assert "upgrade nvidia-driver 535.261.03-1 -> 535.309.01-0+deb12u1" in [c.describe() for c in p.changes]


def test_untrusted_survey_values_do_not_break_the_plan():
    survey = _survey({"nvidia-driver-580": "not a dict", "x": None})
    survey["provisioner_holders"] = "garbage"
    survey["provisioner_apt_offer"] = {"packages": ["not", "a", "dict"]}
    p = _plan(survey)
    assert {c.action for c in p.changes} == {"install"} and p.holders == []


@pytest.mark.parametrize(("statuses", "code"), [(["unchanged"], 0), (["unchanged", "changes"], 2),
                                                (["changes", "unreachable"], 1)])
def test_fleet_exit_codes(statuses: list[str], code: int):
    fleet = plan_mod.FleetPlan("p", [plan_mod.HostPlan(f"h{i}", s) for i, s in enumerate(statuses)])
    assert fleet.exit_code == code and fleet.as_dict()["exit_code"] == code


def test_fleet_summary_and_lines():
    p = _plan(_survey({}, container="podman", module="", lspci=[]))
    fleet = plan_mod.FleetPlan("h100-train", [p, plan_mod.HostPlan("gpu-2")])
    lines = fleet.lines()
    assert lines[0] == ("plan h100-train: 1 of 2 host(s) change (3 install); worst disruption: service restart; "
                        "0 reboot(s)")
    assert "gpu-2: unchanged" not in "\n".join(lines) and "gpu-2: unchanged" in "\n".join(fleet.lines(verbose=True))
    assert "  install nvidia-driver-580 580.95.05-0ubuntu1  [driver]" in lines
