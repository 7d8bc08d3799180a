#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write what a role applied as its local fact file, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: role_record
short_description: Record what a role applied as a local fact (/etc/ansible/facts.d/<role>.fact).
description:
  - The one way every role of the collection records what it applied; verification, drift
    checks and the state record read it back (as C(ansible_local.<role>)).
  - Writes the fact as JSON (sorted keys, indent 4, as C(to_nice_json)), root-owned, mode
    0644, atomically, and only when its content differs; creates the folder when missing.
    One module run, where ansible.builtin.copy takes a stat, a transfer and a copy.
options:
  role:
    description: The role's name; the file is C(<dir>/<role>.fact).
    type: str
    required: true
  fact:
    description: What the role applied.
    type: dict
    required: true
  dir:
    description: The local facts folder.
    type: path
    default: /etc/ansible/facts.d
"""

EXAMPLES = r"""
- name: Record what this role applied as a local fact (read back by verification and drift checks).
  gpu_provisioner.node.role_record:
    role: nccl
    fact:
      enabled: true
      version: 2.21.5
      packages: {libnccl2: 2.21.5-1+cuda12.4}
"""

RETURN = r"""
path:
  description: The fact file.
  type: str
  returned: always
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import write_atomic

ROLE = re.compile(r"^[a-z][a-z0-9_]*$")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "role": {"type": "str", "required": True},
            "fact": {"type": "dict", "required": True},
            "dir": {"type": "path", "default": "/etc/ansible/facts.d"},
        },
        supports_check_mode=True,
    )
    role, folder = module.params["role"], module.params["dir"]
    if not ROLE.match(role):
        module.fail_json(msg=f"not a role name: {role!r}")
    path = os.path.join(folder, f"{role}.fact")
    content = json.dumps(module.params["fact"], indent=4, sort_keys=True, separators=(",", ": ")) + "\n"
    try:
        with open(path, encoding="utf-8") as f:
            before = f.read()
        st = os.stat(path)
        settled = (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o644)
    except FileNotFoundError:
        before, settled = "", False
    changed = before != content or not settled
    result = {"changed": changed, "path": path, "diff": {"before": before, "after": content,
                                                         "before_header": path, "after_header": path}}
    if changed and not module.check_mode:
        try:
            os.makedirs(folder, mode=0o755, exist_ok=True)
            write_atomic(path, content)
            os.chown(path, 0, 0)
        except OSError as exc:
            module.fail_json(msg=f"cannot write {path}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
