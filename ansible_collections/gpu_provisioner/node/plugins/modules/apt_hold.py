#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Hold (or release) a list of packages with one apt-mark call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_hold
short_description: Hold or release many packages in one apt-mark call.
description:
  - Reads C(apt-mark showhold) once and runs C(apt-mark hold) (or C(unhold)) once, for the
    packages whose selection differs. A driver's dozen packages cost one task, where
    ansible.builtin.dpkg_selections costs one module run per package (about 15 s on a
    fresh driver host).
  - Changes only what differs, so a second run reports no change; check mode reports what
    it would change and changes nothing.
options:
  name:
    description: Package names. An empty list does nothing.
    type: list
    elements: str
    required: true
  state:
    description: C(held) holds every package named; C(released) releases those of them that are held.
    type: str
    choices: [held, released]
    default: held
"""

EXAMPLES = r"""
- name: Hold the driver packages so apt upgrade cannot move them.
  gpu_provisioner.node.apt_hold:
    name: [nvidia-driver, nvidia-kernel-dkms, nvidia-smi]

- name: Release the kernel packages this role held.
  gpu_provisioner.node.apt_hold:
    name: [linux-image-amd64]
    state: released
"""

RETURN = r"""
changed_packages:
  description: The packages whose selection this run changed (or would change, in check mode).
  type: list
  elements: str
  returned: always
held:
  description: What apt-mark showhold lists after the run (before it, in check mode).
  type: list
  elements: str
  returned: always
"""

import re

from ansible.module_utils.basic import AnsibleModule

# dpkg's package-name grammar: a name is an argument to apt-mark, never an option.
NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$")


def _showhold(module: AnsibleModule) -> list[str]:
    rc, out, err = module.run_command(["apt-mark", "showhold"])
    if rc != 0:
        module.fail_json(msg=f"apt-mark showhold failed (exit {rc}): {err.strip()}")
    return out.split()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
        },
        supports_check_mode=True,
    )
    names = module.params["name"]
    bad = [n for n in names if not NAME.match(n)]
    if bad:
        module.fail_json(msg=f"not a package name: {', '.join(bad)}")
    held = _showhold(module)
    holding = module.params["state"] == "held"
    todo = sorted({n for n in names if (n not in held) == holding})
    result = {"changed": bool(todo), "changed_packages": todo, "held": held,
              "diff": {"before": "".join(f"{n}\n" for n in sorted(held)),
                       "after": "".join(f"{n}\n" for n in sorted(set(held) | set(todo) if holding
                                                                  else set(held) - set(todo)))}}
    if todo and not module.check_mode:
        rc, _out, err = module.run_command(["apt-mark", "hold" if holding else "unhold", *todo])
        if rc != 0:
            module.fail_json(msg=f"apt-mark {'hold' if holding else 'unhold'} failed (exit {rc}): {err.strip()}",
                             **result)
        result["held"] = _showhold(module)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
