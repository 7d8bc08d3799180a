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
    differences (item, recorded, now per item that differs), dpkg_audit (dpkg --audit output).
  type: dict
"""

import hashlib
import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils.pip_freeze import diff as freeze_diff
from ansible_collections.gpu_provisioner.node.plugins.module_utils.pip_freeze import parse as parse_freeze

KINDS = ("held_packages", "packages", "files", "units", "python_envs")


def _packages(names: list[str]) -> dict[str, dict]:
    """name -> {version, hold} for installed packages (one dpkg-query for all)."""
    if not names:
        return {}
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}|${Package}|${Version}|${Status}\n", *names],
                         capture_output=True, text=True, check=False).stdout
    found = {}
    for line in out.splitlines():
        abbrev, name, version, status = (line.split("|") + ["", "", "", ""])[:4]
        if abbrev[1:2] == "i":
            found[name] = {"version": version, "hold": status.startswith("hold ")}
    return found


def _files(paths: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                found[path] = hashlib.sha256(f.read()).hexdigest()
        except FileNotFoundError:
            found[path] = None
    return found


def _units(names: list[str]) -> dict[str, dict]:
    """name -> {enabled, active}, from one `systemctl show` for all."""
    if not names:
        return {}
    out = subprocess.run(["systemctl", "show", "-p", "Id", "-p", "UnitFileState", "-p", "ActiveState", "--", *names],
                         capture_output=True, text=True, check=False).stdout
    found, blocks = {}, [b for b in out.strip().split("\n\n") if b.strip()]
    for name, block in zip(names, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[name] = {"enabled": props.get("UnitFileState") or "absent", "active": props.get("ActiveState", "")}
    return found


def _python_envs(pythons: list[str]) -> dict[str, dict | None]:
    """python -> {package: version} of its environment (None: the Python is gone)."""
    found: dict[str, dict | None] = {}
    for python in pythons:
        try:
            r = subprocess.run([python, "-m", "pip", "freeze", "--disable-pip-version-check"],
                               capture_output=True, text=True, check=False, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            found[python] = None
            continue
        found[python] = parse_freeze(r.stdout.splitlines()) if r.returncode == 0 else None
    return found


def read_state(managed: dict) -> dict:
    installed = _packages(managed.get("held_packages", []) + managed.get("packages", []))  # one dpkg-query
    return {
        "held_packages": {n: installed.get(n) for n in managed.get("held_packages", [])},
        "packages": {n: (n in installed) for n in managed.get("packages", [])},
        "files": _files(managed.get("files", [])),
        "units": _units(managed.get("units", [])),
        "python_envs": _python_envs(managed.get("python_envs", [])),
    }


def _show_package(p: dict | None) -> str:
    if not p:
        return "not installed"
    return p["version"] + (" (held)" if p["hold"] else " (not held)")


def differences(recorded: dict, now: dict) -> list[dict]:
    """Every item whose state differs from the record, in a stable order."""
    diffs = []
    for name, was in sorted(recorded.get("held_packages", {}).items()):
        cur = now["held_packages"].get(name)
        if was and cur and was["version"] == cur["version"] and was["hold"] and not cur["hold"]:
            diffs.append({"item": f"hold removed: {name}", "recorded": "held", "now": "not held"})
        elif was != cur:
            diffs.append({"item": f"package {name}", "recorded": _show_package(was), "now": _show_package(cur)})
    for name, was in sorted(recorded.get("packages", {}).items()):
        if was and not now["packages"].get(name):
            diffs.append({"item": f"package {name}", "recorded": "installed", "now": "not installed"})
    for path, was in sorted(recorded.get("files", {}).items()):
        cur = now["files"].get(path)
        if cur != was:
            what = "deleted" if cur is None else ("created" if was is None else "changed")
            diffs.append({"item": f"file {path} {what}", "recorded": f"sha256 {was}" if was else "absent",
                          "now": f"sha256 {cur}" if cur else "absent"})
    for name, was in sorted(recorded.get("units", {}).items()):
        cur = now["units"].get(name) or {}
        for key in ("enabled", "active"):
            if was.get(key) != cur.get(key):
                diffs.append({"item": f"unit {name} {key}", "recorded": was.get(key), "now": cur.get(key)})
    for python, was in sorted(recorded.get("python_envs", {}).items()):
        cur = now.get("python_envs", {}).get(python)
        if cur is None:
            if was is not None:
                diffs.append({"item": f"python env {python}", "recorded": f"{len(was)} packages", "now": "gone"})
            continue
        change = freeze_diff(was or {}, cur)
        for name, version in change["removed"].items():
            diffs.append({"item": f"python package {name} removed ({python})", "recorded": version, "now": "absent"})
        for name, version in change["added"].items():
            diffs.append({"item": f"python package {name} added ({python})", "recorded": "absent", "now": version})
        for name, versions in change["changed"].items():
            diffs.append({"item": f"python package {name} changed ({python})", **versions})
    return diffs


def _dpkg_audit() -> str:
    return subprocess.run(["dpkg", "--audit"], capture_output=True, text=True, check=False).stdout.strip()


def _load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


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
    old = _load(p["path"])
    if p["action"] == "compare":
        if old is None:
            module.exit_json(changed=False, provisioner_state={
                "recorded": False, "profile": "", "profile_sha256": "", "differences": [], "dpkg_audit": _dpkg_audit()})
        state = old.get("state") or {}
        managed = {k: sorted(state.get(k, {})) for k in KINDS}
        module.exit_json(changed=False, provisioner_state={
            "recorded": True, "profile": old.get("profile", ""), "profile_sha256": old.get("profile_sha256", ""),
            "differences": differences(state, read_state(managed)), "dpkg_audit": _dpkg_audit()})

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
