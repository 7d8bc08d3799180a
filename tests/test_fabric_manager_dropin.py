"""fabric_manager's systemd drop-in (issue 27, item 6): nvidia-fabricmanager starts only where
there are NVSwitch devices and the NVIDIA module is loaded, as linux-system-roles/hpc's drop-ins
have it; written after pinned_packages (after apt's offer is checked), before the unit is
enabled, with a daemon-reload only when it changed. Rendered and read here, no host."""

from __future__ import annotations

import yaml

from .conftest import ROLES
from .rolerender import RoleRender

ROLE = ROLES / "fabric_manager"
DROPIN = "/etc/systemd/system/nvidia-fabricmanager.service.d/10-provisioner-start-conditions.conf"


def _directives(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_drop_in_holds_exactly_the_two_start_conditions():
    render = RoleRender("fabric_manager", {})
    text = render.template("start-conditions.conf.j2")
    assert _directives(text) == ["[Unit]", "ConditionPathExists=/dev/nvidia-nvswitch0", "ConditionPathExists=/dev/nvidiactl"]
    assert text.startswith("# Ansible managed\n")
    assert render.var("fabric_manager_dropin_file") == DROPIN


def test_an_nvlink5_system_has_no_nvswitch_device_condition_and_loads_ib_umad():
    # HGX B200: fourth-generation NVSwitches are no /dev/nvidia-nvswitch*; the condition would
    # keep fabric manager from ever starting. render says which systems are NVLink 5.
    from provisioner import profiles
    from provisioner.render import role_vars

    assert role_vars(profiles.load("b200-train"))["fabric_manager_nvlink5"] is True
    assert role_vars(profiles.load("h100-train"))["fabric_manager_nvlink5"] is False
    render = RoleRender("fabric_manager", {"fabric_manager_nvlink5": True})
    assert _directives(render.template("start-conditions.conf.j2")) == ["[Unit]", "ConditionPathExists=/dev/nvidiactl"]
    tasks = {t["name"]: t for t in yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())}
    load = tasks["Load ib_umad at every boot for fabric manager's NVLink 5 precheck."]
    assert load["ansible.builtin.copy"]["content"].endswith("ib_umad\n") and load["when"] == "fabric_manager_nvlink5 | bool"
    assert tasks["Load ib_umad now (NVLink 5; not in a container, which has the machine's kernel)."][
        "ansible.builtin.command"]["argv"] == ["modprobe", "ib_umad"]


def _stat(*present: str) -> dict:
    return {"results": [{"item": path, "stat": {"exists": path in present}}
                        for path in ("/dev/nvidia-nvswitch0", "/dev/nvidiactl")]}


def test_the_role_starts_the_unit_only_where_systemd_would_not_skip_it():
    def starts(paths: dict, loaded: bool = True, container: bool = False) -> tuple[bool, list[str]]:
        render = RoleRender("fabric_manager", {"fabric_manager_condition_paths": paths, "fabric_manager_driver_loaded": loaded,
                                               "fabric_manager_in_container": container})
        return render.var("fabric_manager_starts | bool"), render.var("fabric_manager_missing_devices")

    both = _stat("/dev/nvidia-nvswitch0", "/dev/nvidiactl")
    assert starts(both) == (True, [])
    assert starts(_stat("/dev/nvidiactl")) == (False, ["/dev/nvidia-nvswitch0"])  # a PCIe box
    assert starts(_stat()) == (False, ["/dev/nvidia-nvswitch0", "/dev/nvidiactl"])
    assert starts(both, loaded=False)[0] is False                                 # the module is not loaded yet
    assert starts(both, container=True)[0] is False


def _module(task: dict) -> str:
    return next(key for key in task if "." in key)


def test_the_drop_in_comes_after_the_pins_and_before_the_unit_with_a_reload_only_on_change():
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    index = {_module(t): i for i, t in reversed(list(enumerate(tasks)))}  # first of each module
    pins = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.include_role", {}).get("name", "").endswith(
        ".pinned_packages"))
    (dropin_at,) = [i for i, t in enumerate(tasks) if t.get("ansible.builtin.template", {}).get("dest")
                    == "{{ fabric_manager_dropin_file }}"]
    dropin = tasks[dropin_at]
    unit_at = index["ansible.builtin.systemd_service"]
    folder_at = index["ansible.builtin.file"]
    assert pins < folder_at < dropin_at < unit_at
    assert tasks[folder_at]["ansible.builtin.file"] == {"path": "{{ fabric_manager_dropin_dir }}", "state": "directory",
                                                        "owner": "root", "group": "root", "mode": "0755"}
    unit = tasks[unit_at]["ansible.builtin.systemd_service"]
    assert unit["name"] == "nvidia-fabricmanager.service"
    assert unit["daemon_reload"] == "{{ " + dropin["register"] + " is changed }}"
    assert "fabric_manager_starts" in unit["state"]
    # provision check watches the drop-in like the role's other files.
    managed = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["fabric_manager_managed"]
    assert "fabric_manager_dropin_file" in managed["files"]
