#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Everything `provision preflight` judges about one host, in one module call: the OS,
CPUs, memory, free space, NVIDIA PCI devices, InfiniBand/NVMe devices, and the host
compared with the state recorded at its last converge. Read-only; judges nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_probe
short_description: Collect what provision preflight judges, in one call, changing nothing.
description:
  - Returns C(provisioner_preflight) (distribution, distribution_version, kernel,
    architecture, virtualization_type/role (module_utils/preflight_facts.py); vcpus,
    memtotal_mb from /proc; disk_free from df; lspci_rc and lspci; infiniband and nvme
    device paths) and C(provisioner_state) (the host compared with its record, as
    gpu_provisioner.node.provisioner_state action=compare returns it, with the kernels).
  - Read-only; supports check mode.
options:
  path:
    type: path
    default: /etc/ansible/facts.d/provisioner.fact
    description: The state record to compare the host with.
"""

EXAMPLES = r"""
- name: Read the hardware, the OS and the state record in one call, changing nothing.
  gpu_provisioner.node.preflight_probe:
    path: /etc/ansible/facts.d/provisioner.fact
  register: preflight
"""

RETURN = r"""
provisioner_preflight:
  description: What provisioner/judge/preflight.py judges.
  type: dict
provisioner_state:
  description: recorded, profile, profile_sha256, differences, dpkg_audit (see provisioner_state).
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils import kernels
from ansible_collections.gpu_provisioner.node.plugins.module_utils.preflight_facts import collect
from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import compare


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "path", "default": "/etc/ansible/facts.d/provisioner.fact"}},
                           supports_check_mode=True)
    module.exit_json(changed=False, provisioner_preflight=collect(),
                     provisioner_state=dict(compare(module.params["path"]), kernels=kernels.read()))


if __name__ == "__main__":
    main()
