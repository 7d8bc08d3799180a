#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Install packages at exact versions with one apt-get call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_install
short_description: Install packages at exact versions with one apt-get call.
description:
  - Reads dpkg's state of the named packages once and runs one C(apt-get install) for those
    not installed at their version. ansible.builtin.apt builds apt's whole pin policy anew
    for every package it is given (C(apt_pkg.Policy) over every package apt knows, about
    0.6 s of CPU each, measured on a Debian 12 lab host with contrib and non-free and the
    driver's pins), so the driver's 7 pinned packages there cost it about 4 s of CPU before
    apt-get starts, and minutes on a loaded machine.
  - Runs apt-get only when a package is missing or at another version, so a second run
    reports no change; then every pinned package named is given to apt (so all of them end
    up marked as installed by hand, as ansible.builtin.apt leaves them). Check mode asks apt to
    simulate the transaction (C(apt-get install -s)), so it fails where the real run would,
    and reports what it would install; it changes nothing.
  - With O(update_cache), it first refreshes apt's lists (C(apt-get update)) when they are older
    than O(cache_valid_time) seconds, read as M(ansible.builtin.apt) reads their age (the mtime of
    C(/var/lib/apt/periodic/update-success-stamp), else of C(/var/lib/apt/lists)), so a role run
    alone on a fresh host finds its packages and a converge refreshes them once, not once per
    role. A refresh alone is no change (a second run stays at changed=0); check mode refreshes
    nothing, as M(ansible.builtin.apt) does not.
options:
  name:
    description:
      - C(package=version) items, or a bare C(package) for any version. An empty list does nothing.
      - A version may end in C(*) (C(nvidia-driver=580.126.20-*)), as with M(ansible.builtin.apt) - an installed
        version that matches is kept; else the newest version apt offers that matches is installed.
    type: list
    elements: str
    required: true
  install_recommends:
    description: Install the packages' recommends too.
    type: bool
    default: false
  allow_downgrade:
    description: Let apt install a version older than the installed one.
    type: bool
    default: false
  allow_change_held_packages:
    description: Let apt move packages that are held.
    type: bool
    default: false
  lock_timeout:
    description: Seconds apt-get waits for dpkg's lock.
    type: int
    default: 60
  update_cache:
    description: Refresh apt's lists first when they are older than O(cache_valid_time).
    type: bool
    default: false
  cache_valid_time:
    description: Seconds apt's lists stay fresh for O(update_cache); 0 refreshes them every time.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Install the driver packages at their exact versions, without recommends.
  gpu_provisioner.node.apt_install:
    name: [nvidia-driver=535.309.01-0+deb12u1, nvidia-smi=535.309.01-0+deb12u1]
    allow_downgrade: true
    allow_change_held_packages: true
"""

RETURN = r"""
changed_packages:
  description: The C(package=version) items this run installed (would install, in check mode).
  type: list
  elements: str
  returned: always
cache_updated:
  description: Whether this run refreshed apt's lists.
  type: bool
  returned: always
stdout:
  description: apt-get's output (its simulation's, in check mode).
  type: str
  returned: when apt-get ran
"""

import fnmatch
import functools
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule

# dpkg's package-name and version grammar: each item is one argument to apt-get, never an option.
# A version may end in "*" (580.126.20-*: the revision the repository carries, which no
# catalogue can know): the newest version apt offers that matches, as ansible.builtin.apt
# takes it (a Version pin at 1001 there).
ITEM = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[0-9][A-Za-z0-9.+~:-]*\*?)?$")
# How old apt's lists are, read as ansible.builtin.apt reads it (its get_cache_mtime()).
UPDATE_STAMPS = ("/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists")


def _lists_age() -> float:
    """Seconds since apt's lists were refreshed (infinite when there is no trace of it)."""
    for path in UPDATE_STAMPS:
        if os.path.exists(path):
            return time.time() - os.stat(path).st_mtime
    return float("inf")


def _update(module: AnsibleModule, lock_timeout: int) -> None:
    """apt-get update; a failure stops the task with apt's own words."""
    rc, out, err = module.run_command(["apt-get", "-q", "-o", f"DPkg::Lock::Timeout={lock_timeout}",
                                       "-o", "Acquire::Retries=3", "update"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"apt-get update failed (exit {rc}): {err.strip() or out.strip()[-2000:]}")


def _installed(module: AnsibleModule, names: list[str]) -> dict[str, str]:
    """name -> installed version, for those of `names` dpkg has installed."""
    _rc, out, _err = module.run_command(["dpkg-query", "-W", "-f=${db:Status-Abbrev}|${Package}|${Version}\n", *names])
    found = {}
    for line in out.splitlines():  # unknown names only make dpkg-query exit 1
        status, _, rest = line.partition("|")
        name, _, version = rest.partition("|")
        if status.startswith("ii"):
            found[name] = version
    return found


def _newest_match(module: AnsibleModule, name: str, pattern: str) -> str | None:
    """The newest version apt offers for `name` that matches the glob `pattern`, or None."""
    _rc, out, _err = module.run_command(["apt-cache", "madison", name], environ_update={"LC_ALL": "C"})
    offered = {cols[1] for cols in (line.split("|") for line in out.splitlines()) if len(cols) >= 3
               and cols[0].strip() == name.partition(":")[0]}
    matching = [v.strip() for v in offered if fnmatch.fnmatchcase(v.strip(), pattern)]

    def older(a: str, b: str) -> int:
        rc, _o, _e = module.run_command(["dpkg", "--compare-versions", a, "lt", b])
        return -1 if rc == 0 else (0 if a == b else 1)

    return max(matching, key=functools.cmp_to_key(older)) if matching else None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "install_recommends": {"type": "bool", "default": False},
            "allow_downgrade": {"type": "bool", "default": False},
            "allow_change_held_packages": {"type": "bool", "default": False},
            "lock_timeout": {"type": "int", "default": 60},
            "update_cache": {"type": "bool", "default": False},
            "cache_valid_time": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [item for item in p["name"] if not ITEM.match(item)]
    if bad:
        module.fail_json(msg=f"not a package or package=version: {', '.join(map(repr, bad))}")
    cache_updated = bool(p["update_cache"]) and _lists_age() > p["cache_valid_time"]
    if cache_updated and not module.check_mode:
        _update(module, p["lock_timeout"])
    wanted = dict(item.partition("=")[::2] for item in p["name"])
    installed = _installed(module, list(wanted)) if wanted else {}

    def satisfied(n: str, v: str) -> bool:
        if n not in installed:
            return False
        return not v or (fnmatch.fnmatchcase(installed[n], v) if v.endswith("*") else installed[n] == v)

    # A glob left to apt-get would be read as a version string: resolve it here, to the
    # version apt would be told, only for what is not installed at a matching version.
    for n, v in list(wanted.items()):
        if v.endswith("*") and not satisfied(n, v):
            newest = _newest_match(module, n, v)
            if newest is None:
                module.fail_json(msg=f"no version of {n} matching {v} is offered by apt's sources "
                                     f"(apt-cache madison {n}); is its repository configured and updated?")
            wanted[n] = newest
    todo = [f"{n}={v}" if v else n for n, v in wanted.items() if not satisfied(n, v)]
    result = {"changed": bool(todo), "changed_packages": todo, "cache_updated": cache_updated,
              "diff": {"before": "".join(f"{n}={installed[n]}\n" for n in sorted(wanted) if n in installed),
                       "after": "".join(f"{n}={v or installed.get(n, '*')}\n" for n, v in sorted(wanted.items()))}}
    if todo:
        argv = ["apt-get", "-y", "-q", "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
                "-o", f"DPkg::Lock::Timeout={p['lock_timeout']}", "install"]
        argv += [] if p["install_recommends"] else ["--no-install-recommends"]
        argv += ["--allow-downgrades"] if p["allow_downgrade"] else []
        argv += ["--allow-change-held-packages"] if p["allow_change_held_packages"] else []
        argv += ["--simulate"] if module.check_mode else []
        # Every pinned item, the installed ones too: apt marks them manually installed, as
        # ansible.builtin.apt does, so no autoremove takes them; a bare name only when missing
        # (given an installed one, apt would upgrade it).
        # (A glob still here is one the installed version matches: named at that version.)
        exact = {n: installed[n] if v.endswith("*") else v for n, v in wanted.items()}
        items = [f"{n}={v}" if v else n for n, v in exact.items() if v or n not in installed]
        rc, out, err = module.run_command(argv + items,
                                          environ_update={"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"})
        result["stdout"] = out
        if rc != 0:
            module.fail_json(msg=f"apt-get install{' --simulate' if module.check_mode else ''} failed (exit {rc}): "
                                 f"{err.strip() or out.strip()[-2000:]}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
