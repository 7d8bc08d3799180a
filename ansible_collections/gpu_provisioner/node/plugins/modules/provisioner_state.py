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
  - C(snapshot) (start of a converge) returns the packages installed before the roles run,
    so C(record) can keep which managed packages we installed (C(ours)); given another
    profile than the record's, it marks the record C(pending) until C(record) ends the
    converge (a rollback of a host left halfway returns it to its recorded profile).
  - C(retire) (end of a converge, before C(record)) removes what the last record managed
    and no role manages now (a component turned off or dropped from the profile); it stops and
    disables its units, releases its holds, purges the packages we installed (never one
    that was there before us), removes its files, and reloads systemd. Check mode says what
    it would remove.
  - C(record) also keeps each role's items (C(components)), the resolved profile
    (O(profile_yaml)) and, when the profile changed, the record before as C(previous)
    (profile, its YAML and held package versions), which C(provision up --rollback) reads.
options:
  action:
    type: str
    choices: [record, compare, snapshot, retire]
    required: true
    description: "record, compare, snapshot or retire (see the description)."
  path:
    type: path
    default: /etc/ansible/facts.d/provisioner.fact
    description: "The state record's file."
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
      What each role manages (record, retire): held_packages, packages, files, units, python_envs
      (each a list; python_envs names environments' Python interpreters, whose packages are
      recorded as pip freeze would list them, read from their metadata: the environment's
      Python is never run), merged.
  managed_names:
    type: list
    elements: str
    description: The role variable each item of O(managed) came from, in the same order (record, retire).
  profile_yaml:
    type: str
    description: The resolved profile (record), kept for a rollback.
  installed_before:
    type: list
    elements: str
    description: The packages C(snapshot) found before the roles ran (record).
  package_index:
    type: dict
    description: >-
      The repository index the pins came from (record): its C(url), C(release_date) and
      C(packages_sha256). Kept only when the profile installs from NVIDIA's repository.
  mig:
    type: bool
    default: false
    description: >-
      With C(compare), also read the GPUs' MIG mode and instances (nvidia-smi -q -x and mig -lgi), which
      the controller compares with the profile's mig.layout (a layout lost at reboot is drift).
"""

EXAMPLES = r"""
- name: Compare the host with the state its last converge recorded (what provision check runs).
  gpu_provisioner.node.provisioner_state:
    action: compare
    path: /etc/ansible/facts.d/provisioner.fact
  register: drift
"""

RETURN = r"""
provisioner_state:
  description: >-
    (compare) recorded (a record was found), profile and profile_sha256 from the record,
    differences (kind, item, recorded, now per item that differs), dpkg_audit (dpkg --audit output),
    kernels (installed kernel images, dkms status, Secure Boot state: module_utils/kernels.py),
    scratch (the local scratch's record and how it is now: module_utils/scratch.py observe).
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
# The reading and the comparison live in module_utils/state.py: the same code the node's
# own checker (provision-state.timer, plain python3) runs, so both see the same drift.
# The kernels, their DKMS-built NVIDIA modules and Secure Boot: judged by preflight and check.
from ansible_collections.gpu_provisioner.node.plugins.module_utils import kernels, mig_layout
# The local scratch the scratch role built, and how it is now (judged by provisioner/judge/scratch.py).
from ansible_collections.gpu_provisioner.node.plugins.module_utils import scratch
from ansible_collections.gpu_provisioner.node.plugins.module_utils import container_runtime
from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import (
    ENGINE_UNITS, KINDS, compare, dependencies, installed_packages, leftovers, load, merge, ours, previous, purgeable,
    read_state, runtime_item, write_atomic)


def _components(p: dict) -> dict[str, dict]:
    names = p["managed_names"] or [f"role{n}" for n in range(len(p["managed"]))]
    if len(names) != len(p["managed"]):
        raise ValueError("managed_names must name each item of managed")
    return {name.removesuffix("_managed"): {k: sorted(set(item.get(k) or [])) for k in KINDS}
            for name, item in zip(names, p["managed"])}


def _write(path: str, record: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def _retire(module: AnsibleModule, old: dict | None, managed: dict) -> None:
    gone = leftovers(old, managed)
    todo = any(gone[k] for k in ("units", "unhold", "purge", "files", "runtimes"))
    result = {"changed": todo, "retired": gone}
    if module.check_mode or not todo:
        module.exit_json(**result)

    def run(argv: list[str], ok: tuple[int, ...] = (0,)) -> None:
        rc, out, err = module.run_command(argv, environ_update={"DEBIAN_FRONTEND": "noninteractive"})
        if rc not in ok:
            module.fail_json(msg=f"{' '.join(argv)} failed (exit {rc}): {(err or out).strip()[-2000:]}", **result)

    # The nvidia runtime out of the engine's configuration first (only our keys or block; the
    # user's settings stay), and the engine restarted if it runs, before its runtime's packages go.
    for item in gone["runtimes"]:
        engine, path = runtime_item(item)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        remove = container_runtime.docker_remove if engine == "docker" else container_runtime.containerd_remove
        try:
            new, changed = remove(text)
        except container_runtime.ConfigError as exc:
            module.fail_json(msg=f"{path}: {exc}", **result)
        if changed:
            if new is None:
                os.unlink(path)
            else:
                write_atomic(path, new, os.stat(path).st_mode & 0o7777)
            run(["systemctl", "try-restart", "--", ENGINE_UNITS[engine]], ok=(0, 5))
    for unit in gone["units"]:
        # One at a time: a unit its role removed already (or whose package is gone) fails to
        # disable ("does not exist", exit 1) and must not keep the others running.
        run(["systemctl", "disable", "--now", "--", unit], ok=(0, 1, 5))
    if gone["unhold"]:
        run(["apt-mark", "unhold", *gone["unhold"]])
    if gone["purge"]:
        # Never one that a package staying depends on (a driver change leaves the old
        # driver's companions to the new one): those are only unheld, named as needed.
        gone["purge"], gone["needed"] = purgeable(gone["purge"], dependencies())
    if gone["purge"]:
        run(["apt-get", "purge", "-y", "-q", "--allow-change-held-packages", *gone["purge"]])
    # A file a package ships (its conffile, which we edited) is the package's: purged with
    # it, or left with a package that was there before us.
    _, owned_out, _ = module.run_command(["dpkg-query", "-S", *gone["files"]]) if gone["files"] else (0, "", "")
    owned = {line.split(": ", 1)[1] for line in owned_out.splitlines() if ": " in line}
    gone["files_kept"] = sorted(set(gone["files"]) & owned)
    for path in gone["files"]:
        if path not in owned and (os.path.isfile(path) or os.path.islink(path)):
            os.unlink(path)
    if gone["units"] or any(path.startswith("/etc/systemd/") for path in gone["files"]):
        run(["systemctl", "daemon-reload"])  # forget the removed units and masks
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["record", "compare", "snapshot", "retire"], "required": True},
            "path": {"type": "path", "default": "/etc/ansible/facts.d/provisioner.fact"},
            "profile": {"type": "str"},
            "profile_sha256": {"type": "str"},
            "managed": {"type": "list", "elements": "dict", "default": []},
            "managed_names": {"type": "list", "elements": "str", "default": []},
            "profile_yaml": {"type": "str", "default": ""},
            "installed_before": {"type": "list", "elements": "str"},
            "package_index": {"type": "dict", "default": {}},
            "mig": {"type": "bool", "default": False},
        },
        required_if=[("action", "record", ("profile", "profile_sha256"))],
        supports_check_mode=True,
    )
    p = module.params
    old = load(p["path"])
    if p["action"] == "compare":
        extra = {"mig": mig_layout.read_host(lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}))} \
            if p["mig"] else {}
        module.exit_json(changed=False, provisioner_state=dict(compare(p["path"]), kernels=kernels.read(),
                                                               scratch=scratch.observe(), **extra))
    if p["action"] == "snapshot":
        if old is not None and p["profile_sha256"] and old.get("profile_sha256") != p["profile_sha256"] \
                and not module.check_mode:
            # A converge with another profile begins: until its record is written, a rollback
            # returns this host to the profile it has on record (module_utils/state.py rollback_to).
            _write(p["path"], {**old, "pending": {"profile": p["profile"], "profile_sha256": p["profile_sha256"]}})
        module.exit_json(changed=False, installed=installed_packages())

    try:
        components = _components(p)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    managed = merge(components)
    if p["action"] == "retire":
        _retire(module, old, managed)
    same_spec = old is not None and all(
        sorted((old.get("state") or {}).get(k, {})) == managed[k] for k in KINDS)
    same_profile = old is not None and (old.get("profile"), old.get("profile_sha256")) == (p["profile"], p["profile_sha256"])
    if module.check_mode:
        # What a converge would leave is not knowable here; the check-mode play's other tasks say that.
        module.exit_json(changed=not (same_spec and same_profile))
    new = {"profile": p["profile"], "profile_sha256": p["profile_sha256"], "state": read_state(managed),
           "components": components, "ours": ours(old, managed, p["installed_before"]),
           "profile_yaml": p["profile_yaml"], "previous": previous(old, p["profile_sha256"]),
           **({"package_index": p["package_index"]} if p["package_index"] else {})}
    if old is not None and not old.get("pending") and {k: old.get(k) for k in new} == new:
        module.exit_json(changed=False)
    _write(p["path"], new)
    module.exit_json(changed=True, diff={"before": json.dumps(old, indent=2, sort_keys=True) + "\n" if old else "",
                                         "after": json.dumps(new, indent=2, sort_keys=True) + "\n"})


if __name__ == "__main__":
    main()
