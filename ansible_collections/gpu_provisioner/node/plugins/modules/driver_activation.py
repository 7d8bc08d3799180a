#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Load an installed NVIDIA module in place of the loaded one where that is safe; otherwise say
why a reboot is needed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: driver_activation
short_description: Load the installed NVIDIA kernel module without a reboot where nothing needs the old one.
description:
  - Reads what holds /dev/nvidia* and the NVIDIA modules' references (module_utils/holders.py, the
    detection C(provision plan) and a MIG change use) and takes the reboot-free activation decision
    on it (holders.activation).
  - Where the decision allows it, stops the provisioner's own GPU daemons that hold the devices,
    checks that the old modules are then unused, unloads them, loads the installed ones (the
    modules that were loaded, in NVIDIA's order), checks the loaded version, and starts the
    daemons again. A step that fails reports that a reboot is needed, and why; the daemons are
    started again wherever the old module is still loaded.
  - In check mode only the decision is taken and reported. Not for containers (no module is
    loaded there); the role does not call it in one.
options:
  version:
    description: The installed module's version (modinfo -F version); the loaded one must equal it afterwards.
    type: str
    required: true
  timeout:
    description: Seconds for each tool the detection runs and each systemctl and modprobe call.
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Load the installed NVIDIA module in place where nothing but our daemons holds the GPUs.
  gpu_provisioner.node.driver_activation:
    version: "580.95.05"
  register: activation
"""

RETURN = r"""
activated:
  description: Whether the installed module is now loaded (no reboot needed).
  type: bool
decision:
  description: holders.activation's answer before acting, {load, why, stop_units}.
  type: dict
why:
  description: What was done, or why a reboot is needed.
  type: str
holders:
  description: The holders the decision stood on (module_utils/holders.read).
  type: list
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_provisioner.node.plugins.module_utils import holders

# Unload order: each module before the one it holds a reference on (holders.DEPENDANTS);
# load order: NVIDIA's (gpu-driver-container's _load_driver: nvidia, nvidia-uvm,
# nvidia-modeset, then nvidia-peermem), with nvidia_drm after nvidia_modeset, which it uses.
UNLOAD = ("nvidia_drm", "nvidia_peermem", "nvidia_uvm", "nvidia_modeset", "nvidia")
LOAD = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")


def _run(argv: list[str], timeout: int) -> tuple[int, str]:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return r.returncode, (r.stderr or r.stdout).strip()[:2000]


def _loaded_version() -> str:
    try:
        with open("/sys/module/nvidia/version") as f:
            return f.read(100).strip()
    except OSError:
        return "none"


def swap(version: str, decision: dict, modules: dict, timeout: int) -> tuple[bool, str]:
    """Stop the decision's units, unload, load, start them again: (activated, why)."""
    units = list(decision["stop_units"])
    for unit in units:
        rc, out = _run(["systemctl", "stop", unit], timeout)
        if rc:
            _start(units, timeout)
            return False, f"systemctl stop {unit} failed ({out}); reboot"
    busy = holders.in_use(holders.loaded_modules())
    if busy:
        _start(units, timeout)
        return False, f"with {', '.join(units) or 'nothing'} stopped, the old module is still in use ({busy}); reboot"
    loaded = [m for m in UNLOAD if m in modules]
    if loaded:
        rc, out = _run(["modprobe", "-r", *loaded], timeout)
        if rc:
            _start(units, timeout)
            return False, f"the old module could not be unloaded (modprobe -r: {out}); reboot"
    for module in [m for m in LOAD if m in modules or m == "nvidia"]:
        rc, out = _run(["modprobe", module], timeout)
        if rc:
            return False, f"modprobe {module} failed after the old module was unloaded ({out}); reboot"
    now = _loaded_version()
    _start(units, timeout)
    if now != version:
        return False, f"modprobe loaded NVIDIA module {now}, not the installed {version}; reboot"
    return True, f"{decision['why']}: NVIDIA module {version} loaded without a reboot"


def _start(units: list[str], timeout: int) -> None:
    for unit in units:
        _run(["systemctl", "start", unit], timeout)


def main() -> None:
    module = AnsibleModule(argument_spec={"version": {"type": "str", "required": True},
                                          "timeout": {"type": "int", "default": 60}},
                           supports_check_mode=True)
    version, timeout = module.params["version"], module.params["timeout"]
    found = holders.collect(timeout)
    decision = found["activation"]
    result = {"decision": decision, "holders": found["holders"]}
    if not decision["load"]:
        module.exit_json(changed=False, activated=False, why=decision["why"], **result)
    if module.check_mode:
        module.exit_json(changed=False, activated=False, why=f"{decision['why']} (check mode: not done)", **result)
    activated, why = swap(version, decision, found["modules"], timeout)
    module.exit_json(changed=activated, activated=activated, why=why, **result)


if __name__ == "__main__":
    main()
