#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Bring the GPUs' MIG mode and instances to the declared layout (module_utils/mig_layout.py
plans; this runs the steps as argv lists)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: mig_apply
short_description: Apply a MIG layout with nvidia-smi; a matching layout is left alone.
description:
  - Reads nvidia-smi -q -x and nvidia-smi mig -lgi, plans the steps to the layout and runs them
    in the order NVIDIA requires - stop the units holding the GPUs, enable MIG mode, reset the
    GPU (a failed reset is reported as a reboot needed), destroy differing instances, create the
    GPU instances with their compute instances, start the units again - reading the GPUs again
    after each round.
  - Never kills a process and never destroys an instance processes use unless
    reconfigure_in_use. Check mode reports the planned steps and changes nothing.
options:
  layout:
    type: dict
    required: true
    description: GPU index (a string) -> MIG profile names, in creation order.
  holders:
    type: list
    elements: dict
    default: []
    description: What holds the GPUs, [{unit}] (stopped, started again) or [{pid, name}] (blocks).
  known_units:
    type: list
    elements: str
    default: []
    description: GPU services (nvidia-dcgm.service, ...) added to the holders when systemctl says they are active.
  reconfigure_in_use:
    type: bool
    default: false
    description: Allow destroying differing instances that processes use.
"""

EXAMPLES = r"""
- name: Give every GPU two 3g.71gb instances.
  gpu_provisioner.node.mig_apply:
    layout: {"0": [3g.71gb, 3g.71gb], "1": [3g.71gb, 3g.71gb]}
    holders: [{unit: nvidia-dcgm.service}]
"""

RETURN = r"""
mig:
  description: changed, done (each step with argv, rc, output), planned (check mode), blocked (why
    a GPU was left alone), reboot_required and why_reboot.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_provisioner.node.plugins.module_utils import mig_layout


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "layout": {"type": "dict", "required": True},
            "holders": {"type": "list", "elements": "dict", "default": []},
            "known_units": {"type": "list", "elements": "str", "default": []},
            "reconfigure_in_use": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        want = mig_layout.layout_from(p["layout"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    holders = [h for h in p["holders"] if isinstance(h.get("unit"), str) or isinstance(h.get("pid"), int)]
    for unit in p["known_units"]:
        if {"unit": unit} not in holders and module.run_command(["systemctl", "is-active", "--quiet", unit])[0] == 0:
            holders.append({"unit": unit})

    def run(argv):
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        return rc, out, err

    result = mig_layout.apply(want, holders, p["reconfigure_in_use"], check=module.check_mode, run=run)
    module.exit_json(changed=result["changed"], mig=result)


if __name__ == "__main__":
    main()
