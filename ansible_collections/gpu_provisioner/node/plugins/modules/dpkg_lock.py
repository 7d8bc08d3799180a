#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Wait (up to a bound) until no other process holds dpkg's locks, and say who holds them."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dpkg_lock
short_description: Wait until dpkg's locks are free, naming the process that holds them.
description:
  - Tries dpkg's own fcntl locks (lock-frontend, then lock) without blocking, releasing
    them at once; repeats every second up to O(timeout) seconds.
  - Fails with the holder's pid and command line when the locks stay held, so a run never
    queues behind an unattended-upgrades or a stuck apt forever.
  - Once the locks are free it asks C(dpkg --audit) (read-only, also in check mode) whether an
    interrupted run left packages half-installed, so the caller needs no second module call.
options:
  timeout:
    description: Seconds to wait; 0 only looks.
    type: int
    default: 300
  paths:
    description: Lock files to try, in dpkg's order.
    type: list
    elements: path
    default: [/var/lib/dpkg/lock-frontend, /var/lib/dpkg/lock]
"""

EXAMPLES = r"""
- name: Look whether dpkg is locked right now, without waiting.
  gpu_provisioner.node.dpkg_lock:
    timeout: 0
  register: lock

- name: Wait up to five minutes for the holder (unattended-upgrades, say) to finish.
  gpu_provisioner.node.dpkg_lock:
    timeout: 300
  when: lock.held
"""

RETURN = r"""
held:
  description: Whether a lock was held when the module gave up (only true on failure or with timeout 0).
  type: bool
holder:
  description: pid and command line of the process holding the lock, when one does.
  type: str
waited:
  description: Seconds waited.
  type: float
audit:
  description: What C(dpkg --audit) printed (empty when dpkg's state is sound), when the locks were free.
  type: str
"""

import fcntl
import os
import time

from ansible.module_utils.basic import AnsibleModule


def _holder(path: str) -> str:
    """The pid and command line holding a POSIX lock on `path`, read from /proc/locks."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks") as locks:
            for line in locks:
                fields = line.split()
                # 1: POSIX  ADVISORY  WRITE 1234 00:2a:5678 0 EOF
                if len(fields) >= 6 and fields[5].split(":")[-1] == str(inode):
                    pid = fields[4]
                    with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                        command = cmd.read().replace(b"\0", b" ").decode(errors="replace").strip()
                    return f"pid {pid} ({command})"
    except OSError:
        pass
    return "an unknown process"


def _held(paths: list[str]) -> str | None:
    """The first lock file another process holds, or None."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_UN)
        except OSError:
            return path
        finally:
            os.close(fd)
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={"timeout": {"type": "int", "default": 300},
                       "paths": {"type": "list", "elements": "path",
                                 "default": ["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"]}},
        supports_check_mode=True,
    )
    timeout, paths = module.params["timeout"], module.params["paths"]
    start = time.monotonic()
    while True:
        path = _held(paths)
        waited = round(time.monotonic() - start, 1)
        if path is None:
            _rc, audit, _err = module.run_command(["dpkg", "--audit"], environ_update={"LC_ALL": "C"})
            module.exit_json(changed=False, held=False, holder="", waited=waited, audit=audit)
        if waited >= timeout:
            holder = _holder(path)
            if timeout == 0:
                module.exit_json(changed=False, held=True, holder=holder, waited=waited)
            module.fail_json(
                msg=f"dpkg is locked by {holder} ({path}); waited {waited:g} s, the bound is {timeout} s. "
                    "Let that finish or stop it, then re-run provision up for this host "
                    "(common_apt_lock_timeout sets the bound).",
                held=True, holder=holder, waited=waited)
        time.sleep(1)


if __name__ == "__main__":
    main()
