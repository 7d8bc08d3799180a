#!/usr/bin/python
# -*- coding: utf-8 -*-
"""A Python environment's installed packages, read from its metadata without running it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: env_packages
short_description: List a Python environment's packages as pip freeze does, without running its Python.
description:
  - Reads the C(*.dist-info) and C(*.egg-info) metadata in the environment's site-packages
    (found from its layout, C(<prefix>/lib/pythonX.Y/site-packages)) with the Python that
    runs this module. Nothing of the environment is imported or run, so a C(.pth) file its
    owner put there does not run as root (module_utils/owned_env.py).
  - The lines are what C(pip freeze) prints for ordinary wheels (C(name==version), or
    C(name @ url) for a direct reference); editable installs are left out.
  - Read-only; runs the same in check mode.
options:
  python:
    type: path
    required: true
    description: The environment's Python (C(<prefix>/bin/python)); it is not run.
"""

EXAMPLES = r"""
- name: Read the environment's installed packages.
  gpu_provisioner.node.env_packages:
    python: /opt/venvs/pytorch_env/bin/python
  register: packages
"""

RETURN = r"""
found:
  description: Whether the environment is there (its Python exists).
  type: bool
frozen:
  description: Its packages as pip freeze lines, sorted as pip sorts them; empty when not found.
  type: list
  elements: str
site_packages:
  description: The site-packages folder(s) read.
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils.owned_env import frozen, site_packages


def main() -> None:
    module = AnsibleModule(argument_spec={"python": {"type": "path", "required": True}}, supports_check_mode=True)
    folders = site_packages(module.params["python"])
    module.exit_json(changed=False, found=folders is not None, site_packages=folders or [],
                     frozen=frozen(folders) if folders else [])


if __name__ == "__main__":
    main()
