#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Build, adopt and mount the local NVMe scratch, never erasing what it was not told to."""

from __future__ import annotations

DOCUMENTATION = r"""
module: scratch_storage
short_description: Local NVMe scratch (one disk or an mdadm array), its filesystem, mount and boot lines.
description:
  - Reads the host's disks read-only (lsblk, blkid --probe, /proc/mdstat, mdadm --detail
    --export, /proc/swaps, /dev/disk/by-id) and decides with module_utils/scratch.py plan,
    the code the controller tests on disk images and captured outputs. A device that holds
    a partition table, filesystem, RAID or LVM signature is refused with what was found on
    it unless it is named in O(devices) and O(wipe) is set; a device in use (mounted, swap,
    a member of a running array, under LVM) and the root filesystem's disk are refused always.
  - An array whose members are exactly the named devices (or, with O(all_unused_nvme), the
    array it recorded) is adopted as it is; a second run changes nothing.
  - Every command is an argv list (wipefs, mdadm --create, mkfs, mount). The array's line in
    O(mdadm_conf) and the fstab entry (by filesystem UUID, with nofail and
    x-systemd.device-timeout) keep it across reboots. Check mode reports the plan and changes nothing.
options:
  devices: {type: list, elements: str, default: [], description: "Disks by /dev/disk/by-id/ name."}
  all_unused_nvme: {type: bool, default: false, description: Use every local NVMe disk that holds nothing.}
  layout: {type: str, choices: [single, raid0, raid1, raid10], default: raid0, description: One disk or an mdadm array.}
  filesystem: {type: str, choices: [xfs, ext4], default: xfs, description: The filesystem made on it.}
  mount_point: {type: path, required: true, description: Where it is mounted.}
  mount_options: {type: list, elements: str, default: [noatime], description: Mount option words.}
  device_timeout_s: {type: int, default: 30, description: x-systemd.device-timeout in seconds.}
  owner: {type: str, default: root, description: Owner of the mounted filesystem's root folder.}
  mode: {type: str, default: "0755", description: Mode of the mounted filesystem's root folder.}
  wipe: {type: bool, default: false, description: Erase what the named devices hold.}
  record: {type: path, default: /etc/ansible/facts.d/provisioner_scratch.fact, description: What was built (for check and verify).}
  mdadm_conf: {type: path, default: /etc/mdadm/mdadm.conf, description: mdadm's configuration file.}
  fstab: {type: path, default: /etc/fstab, description: The fstab file.}
"""

EXAMPLES = r"""
- name: Build and mount the scratch array.
  gpu_provisioner.node.scratch_storage:
    devices: [/dev/disk/by-id/nvme-MODEL_SERIAL1, /dev/disk/by-id/nvme-MODEL_SERIAL2]
    layout: raid0
    mount_point: /scratch
"""

RETURN = r"""
plan: {description: "The decision (module_utils/scratch.py plan): action, members, wipe, refused, skipped.", type: dict, returned: always}
commands: {description: The argv lists run (or, in check mode, that would run)., type: list, returned: always}
mdadm_conf_changed: {description: The array's line in mdadm.conf was written (the initramfs needs it)., type: bool, returned: always}
"""

import json
import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils import scratch
from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import write_atomic


def _refusal(p: dict) -> str:
    lines = [f"{r['device']}: {'; '.join(r['found'])}" for r in p["refused"]]
    passed_over = [f"{r['device']}: {'; '.join(r['found'])}" for r in p["skipped"]]
    return ("Local scratch refused, nothing was changed: " + " | ".join(lines)
            + (" (disks not taken by all_unused_nvme: " + " | ".join(passed_over) + ")" if passed_over else ""))


def _with_line(path: str, line: str, same) -> tuple[str, bool]:
    """The file's text with `line` in place of the one `same(line)` matches (or appended)."""
    try:
        with open(path, encoding="utf-8") as handle:
            old = handle.read()
    except FileNotFoundError:
        old = ""
    kept = [x for x in old.splitlines() if not same(x)]
    new = "\n".join([*kept, line]) + "\n"
    return new, new != old


def main() -> None:
    module = AnsibleModule(argument_spec={
        "devices": {"type": "list", "elements": "str", "default": []},
        "all_unused_nvme": {"type": "bool", "default": False},
        "layout": {"type": "str", "choices": ["single", "raid0", "raid1", "raid10"], "default": "raid0"},
        "filesystem": {"type": "str", "choices": ["xfs", "ext4"], "default": "xfs"},
        "mount_point": {"type": "path", "required": True},
        "mount_options": {"type": "list", "elements": "str", "default": ["noatime"]},
        "device_timeout_s": {"type": "int", "default": 30},
        "owner": {"type": "str", "default": "root"},
        "mode": {"type": "str", "default": "0755"},
        "wipe": {"type": "bool", "default": False},
        "record": {"type": "path", "default": scratch.RECORD},
        "mdadm_conf": {"type": "path", "default": "/etc/mdadm/mdadm.conf"},
        "fstab": {"type": "path", "default": "/etc/fstab"},
    }, supports_check_mode=True)
    spec = dict(module.params)
    old = scratch.observe(spec["record"])["recorded"]
    spec["recorded_uuid"] = str(old.get("array_uuid") or old.get("uuid") or "")
    p = scratch.plan(spec, scratch.read_facts())
    argv = scratch.commands(p, spec)
    result = {"changed": bool(argv), "plan": p, "commands": argv, "mdadm_conf_changed": False}
    if p["action"] == "refuse":
        module.fail_json(msg=_refusal(p), **result)
    if module.check_mode:
        module.exit_json(**result)

    def run(cmd: list[str]) -> str:
        rc, out, err = module.run_command(cmd)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(cmd)} failed (exit {rc}): {(err or out).strip()[-2000:]}", **result)
        return out

    for cmd in argv:
        run(cmd)
    if p["array"]:
        detail = scratch.parse_export(run(["mdadm", "--detail", "--export", p["array"]]))
        conf_line = scratch.mdadm_conf_line(detail, p["array"])
        text, changed = _with_line(spec["mdadm_conf"], conf_line,
                                   lambda x: x.split()[:2] == ["ARRAY", p["array"]] or detail["MD_UUID"] in x)
        if changed:
            os.makedirs(os.path.dirname(spec["mdadm_conf"]), exist_ok=True)
            write_atomic(spec["mdadm_conf"], text)
            result.update(changed=True, mdadm_conf_changed=True)
    uuid = scratch.probe(p["device"]).get("UUID", "")
    fstab_line = scratch.fstab_line(uuid, spec)
    text, changed = _with_line(spec["fstab"], fstab_line,
                               lambda x: x.split()[1:2] == [spec["mount_point"]] and not x.lstrip().startswith("#"))
    if changed:
        write_atomic(spec["fstab"], text)
        result["changed"] = True
    if not os.path.isdir(spec["mount_point"]):
        os.makedirs(spec["mount_point"], mode=0o755)
        result["changed"] = True
    if not os.path.ismount(spec["mount_point"]):
        run(["mount", "--", spec["mount_point"]])  # from the fstab line just written
        result["changed"] = True
    try:
        user = pwd.getpwnam(spec["owner"])
    except KeyError:
        module.fail_json(msg=f"storage.scratch.owner {spec['owner']!r} is not a user on this host; create it first "
                             "(it is mounted, its fstab line written)", **result)
    st = os.stat(spec["mount_point"])
    mode = int(spec["mode"], 8)
    if (st.st_uid, st.st_mode & 0o7777) != (user.pw_uid, mode):
        os.chown(spec["mount_point"], user.pw_uid, -1)
        os.chmod(spec["mount_point"], mode)
        result["changed"] = True
    record = {"mount_point": spec["mount_point"], "array": p["array"], "members": p["members"], "uuid": uuid,
              "array_uuid": detail["MD_UUID"] if p["array"] else "", "layout": spec["layout"],
              "filesystem": spec["filesystem"]}
    if record != old:
        os.makedirs(os.path.dirname(spec["record"]), exist_ok=True)
        write_atomic(spec["record"], json.dumps(record, indent=2, sort_keys=True) + "\n")
        result["changed"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
