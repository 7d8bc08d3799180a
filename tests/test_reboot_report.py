"""A host the driver role finds needing a reboot: the runner event the role's debug task
produces (its shape as ansible-runner emits it) becomes a reboot check in the report."""

from __future__ import annotations

from pathlib import Path

from provisioner import profiles
from provisioner.engine import commands
from provisioner.reports.report import Report
from provisioner.engine.runner import EventReader, PlaybookRun

from .conftest import ROLES

TASK = "nvidia_driver : Say that a reboot is needed to load NVIDIA module 535.309.01."


def _report_after(reboot: dict) -> Report:
    reader = EventReader()
    reader({"event": "runner_on_ok", "event_data": {"host": "gpu1", "task": TASK,
                                                      "res": {"changed": True, "provisioner_reboot": reboot}}})
    reader({"event": "playbook_on_stats", "event_data": {"ok": {"gpu1": 40}, "changed": {"gpu1": 3}}})
    loaded = profiles.load("h100-train")
    report = Report("up", loaded.profile.name, loaded.digest, "hosts.ini", Path("."), started="now")
    commands._fold(report, "site", PlaybookRun("site", "successful", 0, reader.hosts, Path(".")),
                 commands.Target(loaded, None))
    return report


def test_reboot_needed_but_not_allowed_fails_the_host_with_the_reason_and_the_fix():
    report = _report_after({"required": True, "reason": "the loaded NVIDIA module is 535.129.03,\n the installed one 535.309.01",
                            "rebooting": False, "why_not": "reboot.allowed is false in the profile"})
    [check] = [c for c in report.hosts[0].checks if c.name == "reboot"]
    assert check.status == "fail"
    assert "the loaded NVIDIA module is 535.129.03, the installed one 535.309.01" in check.detail
    assert "reboot.allowed is false in the profile" in check.detail and "reboot.allowed: true" in check.detail
    assert report.exit_code == 2 and "gpu1" in report.verdict


def test_reboot_done_by_the_run_is_a_pass():
    report = _report_after({"required": True, "reason": "the loaded NVIDIA module is none, the installed one 535.309.01",
                            "rebooting": True, "why_not": ""})
    [check] = [c for c in report.hosts[0].checks if c.name == "reboot"]
    assert check.status == "pass" and check.detail.startswith("rebooted: the loaded NVIDIA module is")


# The role's reboot decision (roles/nvidia_driver/vars/main.yml), on the shapes of what
# kernel.yml registers: slurp of /sys/module/nvidia/version, modinfo, `lspci -n -d 10de:`.
NOT_LOADED = {"failed": True, "msg": "file not found: /sys/module/nvidia/version"}
GPU = {"rc": 0, "stdout_lines": ["18:00.0 0302: 10de:2330 (rev a1)"], "stderr": ""}
NO_GPU = {"rc": 0, "stdout_lines": [], "stderr": ""}


def _render(loaded: str | None, pci: dict, **overrides):
    import base64

    from .rolerender import RoleRender, profile_vars

    registered = {
        "nvidia_driver_loaded": {"content": base64.b64encode(loaded.encode()).decode()} if loaded else NOT_LOADED,
        "nvidia_driver_modinfo": {"rc": 0, "stdout": "535.309.01"},
        "nvidia_driver_pci": pci,
    }
    return RoleRender("nvidia_driver", {**profile_vars("h100-train"), **overrides}, registered)


def _decide(loaded: str | None, pci: dict, expects_gpu: bool = True) -> tuple[bool, bool]:
    r = _render(loaded, pci, nvidia_driver_expects_gpu=expects_gpu)
    return r.var("nvidia_driver_reboot_due"), r.var("nvidia_driver_module_unloaded")


def test_a_gpu_host_without_the_installed_module_loaded_is_rebooted():
    assert _decide(None, GPU) == (True, True)
    assert _decide("535.129.03\n", GPU) == (True, True)  # an older module still loaded


def test_no_reboot_when_the_installed_module_is_loaded_or_no_gpu_is_expected():
    assert _decide("535.309.01\n", GPU) == (False, False)
    assert _decide(None, GPU, expects_gpu=False) == (False, False)


def test_no_reboot_loop_when_no_nvidia_device_is_on_the_pci_bus():
    # The module cannot load after a reboot either (GPU off the bus): not rebooted, and said.
    assert _decide(None, NO_GPU) == (False, True)
    assert _decide(None, {"rc": 127, "stdout_lines": [], "stderr": ""}) == (False, True)


def test_services_that_need_the_driver_start_only_once_its_module_is_loaded():
    def ready(loaded, **overrides):
        return _render(loaded, GPU, **overrides).var("nvidia_driver_module_ready")

    assert ready("535.309.01\n") is True
    assert ready(None) is False                   # built, not loaded: reboot needed
    assert ready("535.129.03\n") is False         # the old module still loaded
    assert ready("535.309.01\n", nvidia_driver_in_container=True) is False


def test_who_may_be_rebooted_and_the_reason_given_when_not():
    def may(**overrides):
        r = _render(None, GPU, inventory_hostname="gpu1", **overrides)
        return r.var("nvidia_driver_may_reboot"), r.var("nvidia_driver_no_reboot_reason")

    assert may(nvidia_driver_reboot_allowed=True, ansible_host="10.0.0.5") == (True, "")
    assert may(nvidia_driver_reboot_allowed=False, ansible_host="10.0.0.5") == \
        (False, "reboot.allowed is false in the profile")
    assert may(nvidia_driver_reboot_allowed=True, ansible_connection="local") == (False, "it is the control node")


def test_the_no_reboot_message_names_the_module_and_why_lspci_saw_nothing():
    import yaml
    from .rolerender import trust_as_template


    tasks = yaml.safe_load((ROLES / "nvidia_driver/tasks/kernel.yml").read_text())
    msg = next(t for t in tasks if t["name"].startswith("Say why"))["ansible.builtin.debug"]["msg"]
    r = _render(None, {"rc": 2, "msg": "[Errno 2] No such file or directory: b'lspci'", "stdout_lines": []})
    text = r.templar.template(trust_as_template(msg))
    assert "The NVIDIA module 535.309.01 is installed but not loaded" in text
    assert "(lspci failed: [Errno 2] No such file or directory: b'lspci')" in text
