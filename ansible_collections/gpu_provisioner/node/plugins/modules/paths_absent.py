#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Remove a list of files, links and folders in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: paths_absent
short_description: Remove many files, links and folders in one module call.
description:
  - Removes each path that exists (a file or a link is unlinked, never followed; a folder is
    removed with what it holds). A role turned off removes its units and files with one
    task, where ansible.builtin.file with a loop costs one module run per path (each a round
    trip to the host; on a fresh lab host the converge of lab-driver-only made ten of them
    for paths that were not there).
  - Changes only what exists, so a second run reports no change; check mode reports what it
    would remove and removes nothing.
options:
  path:
    description: Absolute paths at least two folders deep (never C(/), C(/etc) or a path ending in C(/)). An empty list does nothing.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Remove the exporter's unit and collectors file.
  gpu_provisioner.node.paths_absent:
    path:
      - /etc/systemd/system/dcgm-exporter.service
      - /etc/dcgm-exporter/collectors.csv
"""

RETURN = r"""
removed:
  description: The paths this run removed (would remove, in check mode), in the order given.
  type: list
  elements: str
  returned: always
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "list", "elements": "path", "required": True}},
        supports_check_mode=True,
    )
    paths = module.params["path"]
    # The root in any spelling ("/", "//", "/..", "/./": normpath keeps a leading "//"), a
    # folder directly under it ("/etc", "/usr/"), and a path ending in "/" (what
    # "/etc/systemd/system/{{ unit }}" becomes when the variable is empty) are refused
    # before anything goes: no path a role removes is any of these, and each is what a
    # mistake in a variable makes. This runs as root; an rmtree of "//" once emptied a
    # controller's /etc.
    def wrong(p: str) -> bool:
        parts = [x for x in os.path.normpath(p).split("/") if x]
        return not os.path.isabs(p) or p.endswith("/") or len(parts) < 2

    bad = [p for p in paths if wrong(p)]
    if bad:
        module.fail_json(msg=f"not an absolute path below a top-level folder (or it ends in /): {', '.join(map(repr, bad))}")
    # lexists: a dangling link is there to remove too.
    todo = list(dict.fromkeys(p for p in paths if os.path.lexists(p)))
    result = {"changed": bool(todo), "removed": todo,
              "diff": {"before": "".join(f"{p}\n" for p in todo), "after": ""}}
    if not module.check_mode:
        for path in todo:
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except FileNotFoundError:
                pass  # gone meanwhile (inside a folder removed before it): absent is what was asked
            except OSError as exc:
                module.fail_json(msg=f"cannot remove {path}: {exc}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
