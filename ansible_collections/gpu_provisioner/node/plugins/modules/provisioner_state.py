#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Record the managed state of a host after a converge, and compare the host with that
record later, in one module call (the fast drift check)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: provisioner_state
short_description: Record a host's managed state after a converge; compare the host with it later.
description:
  - C(record) (end of a converge) reads the state of everything the roles declared they
    manage (held packages with their versions, other packages, files, systemd units) and
    writes it with the profile's name and sha256 to O(path). In check mode it reads
    nothing and reports a change only when the profile or the list of managed items differs.
  - C(compare) reads the record, reads the same items again and returns every
    difference, plus packages dpkg left half-configured. It changes nothing. One call
    per host replaces a whole check-mode play for C(provision check).
options:
  action:
    type: str
    choices: [record, compare]
    required: true
  path:
    type: path
    default: /etc/ansible/facts.d/provisioner.fact
  profile:
    type: str
    description: Profile name (record).
  profile_sha256:
    type: str
    description: Profile sha256 (record).
  managed:
    type: list
    elements: dict
    description: >-
      What each role manages (record): held_packages, packages, files, units, python_envs
      (each a list; python_envs names environments' Python interpreters, whose pip freeze is
      recorded), merged.
"""

RETURN = r"""
provisioner_state:
  description: >-
    (compare) recorded (a record was found), profile and profile_sha256 from the record,
    differences (kind, item, recorded, now per item that differs), dpkg_audit (dpkg --audit output),
    kernels (installed kernel images, dkms status, Secure Boot state: module_utils/kernels.py).
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
# The reading and the comparison live in module_utils/state.py: the same code the node's
# own checker (provision-state.timer, plain python3) runs, so both see the same drift.
from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import KINDS, compare, load, read_state
# The kernels, their DKMS-built NVIDIA modules and Secure Boot: judged by preflight and check.
from ansible_collections.gpu_provisioner.node.plugins.module_utils import kernels


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["record", "compare"], "required": True},
            "path": {"type": "path", "default": "/etc/ansible/facts.d/provisioner.fact"},
            "profile": {"type": "str"},
            "profile_sha256": {"type": "str"},
            "managed": {"type": "list", "elements": "dict", "default": []},
        },
        required_if=[("action", "record", ("profile", "profile_sha256"))],
        supports_check_mode=True,
    )
    p = module.params
    old = load(p["path"])
    if p["action"] == "compare":
        module.exit_json(changed=False, provisioner_state=dict(compare(p["path"]), kernels=kernels.read()))

    managed = {k: sorted({item for role in p["managed"] for item in role.get(k) or []}) for k in KINDS}
    same_spec = old is not None and all(
        sorted((old.get("state") or {}).get(k, {})) == managed[k] for k in KINDS)
    same_profile = old is not None and (old.get("profile"), old.get("profile_sha256")) == (p["profile"], p["profile_sha256"])
    if module.check_mode:
        # What a converge would leave is not knowable here; the check-mode play's other tasks say that.
        module.exit_json(changed=not (same_spec and same_profile))
    new = {"profile": p["profile"], "profile_sha256": p["profile_sha256"], "state": read_state(managed)}
    if old is not None and {k: old.get(k) for k in new} == new:
        module.exit_json(changed=False)
    os.makedirs(os.path.dirname(p["path"]), exist_ok=True)
    tmp = p["path"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(new, f, indent=2, sort_keys=True)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, p["path"])
    module.exit_json(changed=True, diff={"before": json.dumps(old, indent=2, sort_keys=True) + "\n" if old else "",
                                         "after": json.dumps(new, indent=2, sort_keys=True) + "\n"})


if __name__ == "__main__":
    main()
