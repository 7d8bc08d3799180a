#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Enable the archive components a release needs in apt's own source files, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_components
short_description: Enable archive components in the distribution's apt sources, in one call.
description:
  - Adds each of O(components) that is missing to every entry for one of O(suites), in the
    one-line file O(sources_list) (C(deb) and C(deb-src) lines) and in the deb822 file
    O(deb822_file) (the C(Components) field of each stanza whose C(Suites) name one of them).
    A file that does not exist is left alone. Other entries, comments and options stay as
    they were.
  - One module run, where ansible.builtin.replace with a loop costs a stat per file and one
    run per component and file (six on a fresh Debian 12 lab host).
  - Changes a file only when an entry lacks a component, so a second run reports no change;
    check mode reports the change (with a diff) and writes nothing.
options:
  suites:
    description: The distribution's suites whose entries get the components (C(bookworm), C(bookworm-updates)...).
    type: list
    elements: str
    required: true
  components:
    description: The components every such entry must have, in the order they are added.
    type: list
    elements: str
    required: true
  sources_list:
    description: The one-line sources file.
    type: path
    default: /etc/apt/sources.list
  deb822_file:
    description: The distribution's deb822 sources file.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Ensure Debian 12's sources enable contrib and non-free.
  gpu_provisioner.node.apt_components:
    suites: [bookworm, bookworm-updates, bookworm-security]
    components: [main, contrib, non-free, non-free-firmware]
    deb822_file: /etc/apt/sources.list.d/debian.sources
"""

RETURN = r"""
changed_files:
  description: The files this run changed (would change, in check mode).
  type: list
  elements: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils.apt_components import deb822, one_line
from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import write_atomic


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "suites": {"type": "list", "elements": "str", "required": True},
            "components": {"type": "list", "elements": "str", "required": True},
            "sources_list": {"type": "path", "default": "/etc/apt/sources.list"},
            "deb822_file": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    changed, diffs = [], []
    for path, edit in ((p["sources_list"], one_line), (p["deb822_file"], deb822)):
        try:
            with open(path, encoding="utf-8") as f:
                before = f.read()
        except FileNotFoundError:
            continue
        after = edit(before, p["suites"], p["components"])
        if after == before:
            continue
        changed.append(path)
        diffs.append({"before": before, "after": after, "before_header": path, "after_header": path})
        if not module.check_mode:
            try:
                st = os.stat(path)
                write_atomic(path, after, st.st_mode & 0o7777)
                os.chown(path, st.st_uid, st.st_gid)
            except OSError as exc:
                module.fail_json(msg=f"cannot write {path}: {exc}", changed_files=changed)
    module.exit_json(changed=bool(changed), changed_files=changed, diff=diffs)


if __name__ == "__main__":
    main()
