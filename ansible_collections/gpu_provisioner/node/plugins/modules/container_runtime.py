#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Register (or take out) the nvidia runtime in a container engine's own configuration file."""

from __future__ import annotations

DOCUMENTATION = r"""
module: container_runtime
short_description: Register the nvidia runtime in Docker's daemon.json or containerd's config.toml, keeping the user's settings.
description:
  - The effect of C(nvidia-ctk runtime configure) (provisioner/data/container_toolkit.yml cites
    what it writes), done by module_utils/container_runtime.py so that every other setting in the
    file stays as it was; the file is written (atomically, its mode and owner kept) only when its
    content changes, so C(changed) says whether the engine must restart.
  - Docker (C(/etc/docker/daemon.json)) - C(runtimes.nvidia), C(default-runtime) when I(default),
    C(features.cdi) when I(cdi). Taking out (I(state=absent)) removes the runtime and a default
    naming it, and deletes a file left empty.
  - containerd (C(/etc/containerd/config.toml), version 2 or 3) - one appended block between
    marker comments holding the runtime's table; taking out removes that block only. I(default)
    and I(cdi) are refused for containerd (a RuntimeClass selects the runtime; see the module_utils).
  - A file that cannot be merged (not JSON, TOML version 1, an nvidia runtime of the user's that
    differs) fails with what is wrong and the fix, and nothing is written. Check mode reports what
    would change and writes nothing.
options:
  engine:
    description: The engine whose configuration is edited.
    type: str
    choices: [docker, containerd]
    required: true
  path:
    description: The configuration file (the engine's default when not given).
    type: path
  state:
    description: C(present) registers the runtime; C(absent) takes out what C(present) writes.
    type: str
    choices: [present, absent]
    default: present
  default:
    description: Docker only - make nvidia the default runtime (and stop making it so when false).
    type: bool
    default: false
  cdi:
    description: Docker only - turn on Docker's CDI feature (features.cdi).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Register the nvidia runtime with Docker, keeping every other daemon.json setting.
  gpu_provisioner.node.container_runtime:
    engine: docker
  register: containers_registration
"""

RETURN = r"""
registration:
  description: What the file says of the nvidia runtime after the run (before it, in check mode).
  type: dict
  returned: always
path:
  description: The file read (and written).
  type: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpu_provisioner.node.plugins.module_utils import container_runtime as cr

DEFAULT_PATHS = {"docker": "/etc/docker/daemon.json", "containerd": "/etc/containerd/config.toml"}


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _new_text(engine, state, text, default, cdi):
    if engine == "docker":
        return cr.docker_merge(text, default, cdi) if state == "present" else cr.docker_remove(text)
    return cr.containerd_merge(text) if state == "present" else cr.containerd_remove(text)


def _state(engine, text):
    return cr.docker_state(text) if engine == "docker" else cr.containerd_state(text)


def main():
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "choices": ["docker", "containerd"], "required": True},
            "path": {"type": "path"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "default": {"type": "bool", "default": False},
            "cdi": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    engine, path = p["engine"], p["path"] or DEFAULT_PATHS[p["engine"]]
    if engine == "containerd" and (p["default"] or p["cdi"]):
        module.fail_json(msg="default and cdi are for docker only: with containerd a RuntimeClass "
                             "(handler nvidia) selects the runtime, and CDI is containerd's own enable_cdi setting")
    text = _read(path)
    try:
        new, changed = _new_text(engine, p["state"], text, p["default"], p["cdi"])
    except cr.ConfigError as exc:
        module.fail_json(msg=f"{path}: {exc}", path=path)
    result = {"changed": changed, "path": path, "diff": {"before": text or "", "after": new or "",
                                                          "before_header": path, "after_header": path}}
    if changed and not module.check_mode:
        if new is None:
            os.unlink(path)
        else:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            tmp = f"{path}.provisioner-tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(new)
            if text is not None:
                st = os.stat(path)
                os.chmod(tmp, st.st_mode & 0o7777)
                os.chown(tmp, st.st_uid, st.st_gid)
            module.atomic_move(tmp, path)
    result["registration"] = _state(engine, new if changed and not module.check_mode else text)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
