#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Collect the evidence `provision diagnose` reads, in one call per host: a fixed list of
read-only commands (the controller sends it; `provision diagnose --dry-run` prints the same
list) and a few small files, each bounded in time and size, and the whole bounded in size.
Judges nothing: the controller does (provisioner/judge/diagnose.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: diagnose_collect
short_description: Run a bounded list of read-only commands and read a few files, for provision diagnose.
description:
  - Each command runs without a shell, with its own time-out, and its output is cut to
    O(max_bytes) (the last lines are kept where O(tail_lines) is set; O(keep) keeps only
    the lines holding one of its substrings, for the kernel log). A missing binary or a
    missing O(only_if_path) is reported, not an error.
  - Once O(total_max_bytes) are collected, the remaining output is left out and said so.
  - Read-only; supports check mode (it runs the same read-only commands there).
options:
  commands:
    type: list
    elements: dict
    required: true
    description: "name, argv (list), timeout (s), max_bytes, tail_lines, keep (list), only_if_path, fallback (argv)."
  files:
    type: list
    elements: str
    default: []
    description: Files (or globs) to read, each cut to O(file_max_bytes).
  file_max_bytes:
    type: int
    default: 65536
    description: "Bytes read at most from each file."
  total_max_bytes:
    type: int
    default: 2097152
    description: "Bytes collected at most over all commands and files; the rest is left out and said so."
"""

EXAMPLES = r"""
- name: Collect dkms status and the tail of the kernel log's NVIDIA lines, read-only.
  gpu_provisioner.node.diagnose_collect:
    commands:
      - {name: dkms, argv: [dkms, status], timeout: 30, max_bytes: 65536}
      - {name: kernel-log, argv: [journalctl, -k, -b, --no-pager, -q], timeout: 30, max_bytes: 262144,
         tail_lines: 2000, keep: [NVRM, Xid]}
    files: [/etc/apt/preferences.d/*]
    total_max_bytes: 2097152
  register: evidence
"""

RETURN = r"""
provisioner_diagnose:
  description: >-
    commands (name -> argv, rc, stdout, stderr, seconds, timed_out, missing, skipped, cut,
    lines), files (path -> text or null), total_bytes, left_out (what the size bound cut),
    seconds.
  type: dict
"""

import glob
import os
import shutil
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

PATH = "/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _cut(text, max_bytes, tail_lines, keep):
    lines = text.splitlines()
    total = len(lines)
    if keep:
        lowered = [k.lower() for k in keep]
        lines = [line for line in lines if any(k in line.lower() for k in lowered)]
    if tail_lines and len(lines) > tail_lines:
        lines = lines[-tail_lines:]
    out = "\n".join(lines)
    data = out.encode("utf-8", "replace")
    cut = len(data) > max_bytes
    if cut:  # keep the end: the newest lines matter most
        out = data[-max_bytes:].decode("utf-8", "ignore")
    return out, cut, total


def run(spec, env, budget):
    argv = [str(a) for a in spec["argv"]]
    out = {"argv": argv, "rc": -1, "stdout": "", "stderr": "", "seconds": 0.0, "timed_out": False,
           "missing": False, "skipped": "", "cut": False, "lines": 0}
    only = spec.get("only_if_path") or ""
    if only and not os.path.exists(only):
        out["skipped"] = f"{only} does not exist"
        return out
    exe = shutil.which(argv[0], path=env["PATH"])
    if not exe:
        out.update(rc=127, missing=True, stderr=f"{argv[0]}: not installed")
        return out
    timeout = int(spec.get("timeout") or 30)
    started = time.monotonic()
    try:
        proc = subprocess.run([exe] + argv[1:], capture_output=True, timeout=timeout, check=False, env=env,
                              stdin=subprocess.DEVNULL)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stdout, stderr = 124, exc.stdout or b"", f"timed out after {timeout} s".encode()
        out["timed_out"] = True
    except OSError as exc:
        rc, stdout, stderr = 126, b"", str(exc).encode()
    max_bytes = min(int(spec.get("max_bytes") or 262144), max(budget, 0))
    text, cut, lines = _cut(stdout.decode("utf-8", "replace"), max_bytes, int(spec.get("tail_lines") or 0),
                            spec.get("keep") or [])
    out.update(rc=rc, stdout=text, cut=cut, lines=lines, stderr=stderr.decode("utf-8", "replace")[-2000:],
               seconds=round(time.monotonic() - started, 3))
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "commands": {"type": "list", "elements": "dict", "required": True},
            "files": {"type": "list", "elements": "str", "default": []},
            "file_max_bytes": {"type": "int", "default": 65536},
            "total_max_bytes": {"type": "int", "default": 2097152},
        },
        supports_check_mode=True,
    )
    p = module.params
    started = time.monotonic()
    env = dict(os.environ, PATH=PATH, LC_ALL="C", SYSTEMD_PAGER="", SYSTEMD_COLORS="0")
    budget = p["total_max_bytes"]
    commands, left_out = {}, []
    for spec in p["commands"]:
        name = str(spec.get("name") or spec["argv"][0])
        if budget <= 0:
            left_out.append(name)
            commands[name] = {"argv": [str(a) for a in spec["argv"]], "rc": -1, "stdout": "", "stderr": "",
                              "skipped": "the size bound was reached", "missing": False, "timed_out": False}
            continue
        result = run(spec, env, budget)
        if spec.get("fallback") and not result["skipped"] and (result["rc"] != 0 or not result["stdout"].strip()):
            second = run(dict(spec, argv=spec["fallback"]), env, budget)
            if second["rc"] == 0 and second["stdout"].strip():
                second["fallback_from"] = result["argv"]
                result = second
        budget -= len(result["stdout"].encode("utf-8", "replace")) + len(result["stderr"].encode("utf-8", "replace"))
        commands[name] = result
    files = {}
    for pattern in p["files"]:
        paths = sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        for path in paths:
            if budget <= 0:
                left_out.append(path)
                continue
            try:
                with open(path, "rb") as f:
                    data = f.read(min(p["file_max_bytes"], budget))
                files[path] = data.decode("utf-8", "replace")
                budget -= len(data)
            except OSError:
                files[path] = None
    module.exit_json(changed=False, provisioner_diagnose={
        "commands": commands, "files": files, "total_bytes": p["total_max_bytes"] - budget, "left_out": left_out,
        "seconds": round(time.monotonic() - started, 3)})


if __name__ == "__main__":
    main()
