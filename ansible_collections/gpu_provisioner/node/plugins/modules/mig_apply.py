#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Bring the GPUs' MIG mode and instances to the declared layout (module_utils/mig_layout.py
plans; this runs the steps as argv lists)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: mig_apply
short_description: Apply a MIG layout with nvidia-smi; a matching layout is left alone.
description:
  - Reads nvidia-smi -q -x and nvidia-smi mig -lgi and what holds the GPUs (module_utils/holders.py,
    the detection provision plan reports), plans the steps to the layout and runs them in the
    order NVIDIA requires - stop DCGM and the exporter where they hold the GPUs, enable MIG mode, reset the
    GPU (a failed reset is reported as a reboot needed), destroy differing instances, create the
    GPU instances with their compute instances, start the units again - reading the GPUs again
    after each round.
  - nvidia-persistenced and fabric manager stay up. Never kills a process; any other process
    holding the GPUs blocks a mode or instance change, and an instance processes use is never
    destroyed, unless reconfigure_in_use. Check mode reports the planned steps and changes nothing.
options:
  layout:
    type: dict
    required: true
    description: GPU index (a string) -> MIG profile names, in creation order.
  reconfigure_in_use:
    type: bool
    default: false
    description: Go ahead although processes hold the GPUs or use instances that differ (never kills them).
"""

EXAMPLES = r"""
- name: Give every GPU two 3g.71gb instances.
  gpu_provisioner.node.mig_apply:
    layout: {"0": [3g.71gb, 3g.71gb], "1": [3g.71gb, 3g.71gb]}
"""

RETURN = r"""
mig:
  description: changed, done (each step with argv, rc, output), planned (check mode), blocked (why
    a GPU was left alone), reboot_required, why_reboot and holders (what held the GPUs, classified).
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_provisioner.node.plugins.module_utils import holders, mig_layout


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "layout": {"type": "dict", "required": True},
            "reconfigure_in_use": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        want = mig_layout.layout_from(p["layout"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    held = holders.collect()["holders"]

    def run(argv):
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        return rc, out, err

    result = mig_layout.apply(want, held, p["reconfigure_in_use"], check=module.check_mode, run=run)
    module.exit_json(changed=result["changed"], mig=dict(result, holders=held))


if __name__ == "__main__":
    main()
