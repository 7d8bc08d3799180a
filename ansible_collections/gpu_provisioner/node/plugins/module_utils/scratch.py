# -*- coding: utf-8 -*-
"""Local NVMe scratch: what a host's disks hold (read-only), the one decision what may be
done with them, the commands that do it and the lines that keep it across reboots.

Read on the host by the scratch_storage module (apply) and inside provisioner_state's
compare and gpu_probe (check, verify); the same readers and the same `plan` are tested on
disk-image files and captured tool output on the controller. Standard library only:
module_utils runs on the node.

The rule it keeps: it never destroys data it was not told to. A device that holds a
partition table, a filesystem, a RAID or LVM signature is refused with what was found on
it unless the profile names that exact device and sets wipe; a device in use (mounted,
swap, a member of a running array, under a holder such as LVM) and the disk that holds the
root filesystem are refused always. An array whose members are exactly the profile's is
adopted, not rebuilt.

Tool formats read here:
- ``lsblk --json --bytes --output NAME,PATH,TYPE,FSTYPE,MOUNTPOINT`` (util-linux; older
  lsblk prints ``mountpoint``, 2.37+ can print ``mountpoints``; both read), a tree with ``children``.
- ``blkid --probe --output export DEVICE`` (KEY=value lines: TYPE, USAGE, UUID, PTTYPE...;
  exit 2 when nothing is found). USAGE is ``filesystem``, ``raid`` (md, LVM, firmware RAID),
  ``crypto`` or ``other``.
- ``/proc/mdstat`` and ``mdadm --detail --export /dev/mdN`` (MD_LEVEL, MD_UUID,
  MD_DEVICE_<dev>_DEV, ...), ``/proc/swaps``.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess

LSBLK = ["lsblk", "--json", "--bytes", "--output", "NAME,PATH,TYPE,FSTYPE,MOUNTPOINT"]
BY_ID = "/dev/disk/by-id"
ARRAY = "/dev/md/scratch"  # the array's stable name (mdadm --create /dev/md/NAME; the conf line keeps it)
LEVELS = {"raid0": "0", "raid1": "1", "raid10": "10"}
# x-systemd.device-timeout and nofail: systemd.mount(5). A lost disk must not stop the boot.
FSCK_PASS = {"xfs": "0", "ext4": "2"}  # fsck.xfs does nothing (xfs_repair is manual); ext4 is checked after /


# --- readers: text in, plain data out (pure) ------------------------------------------

def parse_lsblk(text: str) -> dict[str, dict]:
    """Every block device lsblk listed, by path: {path, name, type, fstype, mountpoints,
    parent (the path above it in the tree), children (paths)}."""
    devices: dict[str, dict] = {}

    def walk(node: dict, parent: str | None) -> None:
        name = str(node.get("name") or "")
        path = str(node.get("path") or (name if name.startswith("/") else "/dev/" + name))
        points = node.get("mountpoints")
        points = [node.get("mountpoint")] if points is None else points
        entry = devices.setdefault(path, {"path": path, "name": name.rsplit("/", 1)[-1], "type": node.get("type") or "",
                                          "fstype": node.get("fstype") or "", "mountpoints": [],
                                          "parents": [], "children": []})
        # One array below two disks is listed under each: keep every parent.
        entry["mountpoints"] = sorted({*entry["mountpoints"], *(str(p) for p in points if p)})
        if parent and parent not in entry["parents"]:
            entry["parents"].append(parent)
        for child in node.get("children") or []:
            child_path = str(child.get("path") or "/dev/" + str(child.get("name") or ""))
            if child_path not in entry["children"]:
                entry["children"].append(child_path)
            walk(child, path)

    for node in json.loads(text or "{}").get("blockdevices") or []:
        walk(node, None)
    return devices


def parse_export(text: str) -> dict[str, str]:
    """KEY=value lines (blkid -o export, mdadm --export); shell quoting of values undone."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z0-9_]+", key):  # MD_DEVICE_dev_vda1_DEV
            out[key] = re.sub(r"\\(.)", r"\1", value.strip().strip("'\""))
    return out


def parse_mdstat(text: str) -> dict[str, dict]:
    """/proc/mdstat: each array's {state (active/inactive), level, members (kernel names),
    healthy (its [UU_] map has no _; None when the line is absent: raid0 prints none)}."""
    arrays: dict[str, dict] = {}
    current = None
    for line in (text or "").splitlines():
        m = re.match(r"^(md\w+)\s*:\s*(active|inactive)(?:\s+\(\w+(?:-\w+)*\))?\s*(raid\d+|linear)?\s*(.*)$", line)
        if m:
            current = m.group(1)
            members = [re.sub(r"\[\d+\](\([A-Z]\))?$", "", word) for word in m.group(4).split()]
            failed = [re.sub(r"\[\d+\].*$", "", w) for w in m.group(4).split() if w.endswith("(F)")]
            arrays[current] = {"state": m.group(2), "level": m.group(3) or "", "members": members,
                               "failed": failed, "healthy": None}
            continue
        status = re.search(r"\[(\d+)/(\d+)\]\s+\[([U_]+)\]", line)
        if current and status:
            arrays[current]["healthy"] = "_" not in status.group(3) and status.group(1) == status.group(2)
        if not line.strip():
            current = None
    return arrays


def md_members(detail: dict[str, str]) -> list[str]:
    """The member devices mdadm --detail --export names (MD_DEVICE_<x>_DEV), sorted."""
    return sorted(v for k, v in detail.items() if k.startswith("MD_DEVICE_") and k.endswith("_DEV"))


def parse_swaps(text: str) -> list[str]:
    return [line.split()[0] for line in (text or "").splitlines()[1:] if line.split()]


# --- facts: what the host has, read once ----------------------------------------------

def _run(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return done.returncode, done.stdout


def probe(path: str) -> dict[str, str]:
    """What blkid finds written on `path` (a device or a disk-image file), read-only: the
    low-level probe (-p) reads the device itself, never blkid's cache."""
    rc, out = _run(["blkid", "--probe", "--output", "export", path])
    if rc not in (0, 2):  # 2: nothing found. Anything else is not knowing, and unknown is never empty.
        return {"PROBE_ERROR": f"blkid --probe failed (exit {rc})"}
    found = parse_export(out) if rc == 0 else {}
    found.pop("DEVNAME", None)
    return found


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def by_id_links(folder: str = BY_ID) -> dict[str, str]:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return {}
    return {os.path.join(folder, n): os.path.realpath(os.path.join(folder, n)) for n in names}


def nvme_transport(name: str, sys_block: str = "/sys/block") -> str:
    """The NVMe controller's transport (the kernel's `transport` attribute, nvme_ctrl_ops.name:
    "pcie" for a local disk; tcp, rdma, fc for NVMe over Fabrics), "" when unknown. The
    namespace's device is the controller, or with native multipath the subsystem, whose
    controllers are its nvme* children."""
    found = set()
    for pattern in ("device/transport", "device/nvme*/transport"):
        for path in glob.glob(os.path.join(sys_block, name, pattern)):
            found.add(_read(path).strip())
    return found.pop() if len(found) == 1 else ",".join(sorted(found))


def read_facts(paths: list[str] | None = None) -> dict:
    """Everything `plan` decides from, read-only. `paths`: the devices to probe with blkid
    (None: every disk and partition lsblk lists)."""
    rc, lsblk_out = _run(LSBLK)
    devices = parse_lsblk(lsblk_out) if rc == 0 else {}
    mdstat = parse_mdstat(_read("/proc/mdstat"))
    details = {}
    for name in mdstat:
        _, out = _run(["mdadm", "--detail", "--export", "/dev/" + name])
        details["/dev/" + name] = parse_export(out)
    wanted = paths if paths is not None else [p for p, d in devices.items() if d["type"] in ("disk", "part")]
    wanted += [md for md in details if md not in wanted]  # an array's own filesystem: adopt or refuse it
    return {"devices": devices, "by_id": by_id_links(), "signatures": {p: probe(p) for p in wanted},
            "mdstat": mdstat, "md_detail": details, "swaps": parse_swaps(_read("/proc/swaps")),
            "transport": {p: nvme_transport(d["name"]) for p, d in devices.items() if d["name"].startswith("nvme")}}


# --- the decision (pure) ----------------------------------------------------------------

def _subtree(devices: dict, path: str) -> list[str]:
    seen, todo = [], [path]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend((devices.get(p) or {}).get("children") or [])
    return seen


def _disk_of(devices: dict, path: str) -> str:
    while (devices.get(path) or {}).get("parents") and devices[path]["type"] != "disk":
        path = devices[path]["parents"][0]
    return path


def root_disks(devices: dict) -> set[str]:
    """The disks the root filesystem lives on (through partitions, md or LVM: every disk
    whose tree holds /)."""
    return {p for p, d in devices.items() if not d["parents"] and
            any("/" in devices[c]["mountpoints"] for c in _subtree(devices, p) if c in devices)}


def findings(facts: dict, path: str) -> dict[str, list[str]]:
    """What is on `path`: {"in_use": [...], "data": [...]}. In use is refused always; data is
    refused unless the profile names the device and sets wipe."""
    devices, swaps = facts["devices"], set(facts.get("swaps") or [])
    entry = devices.get(path) or {}
    in_use, data = [], []
    if path in root_disks(devices) or _disk_of(devices, path) in root_disks(devices):
        in_use.append("the root filesystem's disk")
    for sub in _subtree(devices, path):
        d = devices.get(sub) or {}
        where = "" if sub == path else f" on {sub}"
        if d.get("mountpoints"):
            in_use.append(f"mounted at {', '.join(d['mountpoints'])}{where}")
        if sub in swaps or d.get("fstype") == "swap":
            in_use.append(f"swap{where}")
        if sub != path and d.get("type") not in ("part", ""):
            in_use.append(f"holds {d['type']} {sub}")
    for name, array in (facts.get("mdstat") or {}).items():
        if entry.get("name") in array["members"]:
            in_use.append(f"a member of the running array /dev/{name} ({array['level'] or array['state']}, "
                          f"members {', '.join(array['members'])})")
    parts = [c for c in entry.get("children") or [] if (devices.get(c) or {}).get("type") == "part"]
    sig = (facts.get("signatures") or {}).get(path)
    if sig is None or "PROBE_ERROR" in sig:  # what is on it is not known: never erased
        in_use.append((sig or {}).get("PROBE_ERROR") or "not probed (blkid)")
        sig = {}
    if sig.get("PTTYPE"):
        data.append(f"a partition table ({sig['PTTYPE']})")
    elif parts:
        data.append(f"partitions ({', '.join(parts)})")
    if sig.get("TYPE"):
        usage = {"filesystem": "a filesystem", "raid": "a RAID or LVM signature", "crypto": "an encrypted volume"}
        label = f", label {sig['LABEL']}" if sig.get("LABEL") else ""
        data.append(f"{usage.get(sig.get('USAGE', ''), 'a signature')} ({sig['TYPE']}{label})")
    elif entry.get("fstype"):
        data.append(f"a signature lsblk reports ({entry['fstype']})")
    return {"in_use": sorted(set(in_use)), "data": data}


def _resolve(spec: dict, facts: dict) -> tuple[list[tuple[str, str]], list[dict]]:
    """The members as (name in the profile, kernel path), or refusals."""
    by_id, devices = facts.get("by_id") or {}, facts["devices"]
    if not spec.get("all_unused_nvme"):
        members, refused = [], []
        for name in spec["devices"]:
            if name not in by_id:
                refused.append({"device": name, "found": ["not present on this host (no such /dev/disk/by-id link)"]})
            else:
                members.append((name, by_id[name]))
        return members, refused
    names = {v: k for k, v in sorted(by_id.items(), reverse=True) if "nvme-" in k}
    members, remote = [], []
    for path, d in sorted(devices.items()):
        # A capture without the TYPE column: a top-level device is a disk.
        if d["type"] in ("disk", "") and not d["parents"] and d["name"].startswith("nvme"):
            transport = (facts.get("transport") or {}).get(path, "")
            if transport == "pcie":
                members.append((names.get(path, path), path))
            else:  # NVMe over Fabrics (tcp, rdma, fc) is not local; unknown is not proven local
                remote.append({"device": names.get(path, path), "found": [
                    f"not a local PCIe NVMe disk (transport: {transport or 'unknown'})"]})
    return members, remote


def plan(spec: dict, facts: dict) -> dict:
    """What to do for the profile's scratch `spec` (devices, all_unused_nvme, layout,
    filesystem, mount_point, wipe, recorded_uuid) on a host with `facts` (read_facts).

    Returns {"action": create | adopt | refuse, "members": [paths], "wipe": [paths],
    "refused": [{device, found}], "skipped": [{device, found}], "array": md path or "",
    "device": what gets the filesystem, "mkfs": bool, "uuid": the adopted filesystem's}."""
    if not facts.get("devices"):  # lsblk failed or listed nothing: no disk can be judged
        return {"action": "refuse", "members": [], "wipe": [], "skipped": [], "array": "", "device": "",
                "mkfs": False, "uuid": "", "refused": [{"device": "storage.scratch", "found": [
                    "lsblk listed no block devices on this host; nothing can be judged safe"]}]}
    members, refused = _resolve(spec, facts)
    layout, wipe = spec["layout"], []
    # all_unused_nvme: the disks it may not take are skipped (listed), not refusals.
    skipped, refused = (refused, []) if spec.get("all_unused_nvme") else ([], refused)
    out = {"action": "refuse", "members": [], "wipe": [], "refused": refused, "skipped": skipped,
           "array": "", "device": "", "mkfs": False, "uuid": ""}
    paths = sorted({p for _, p in members})
    if len(paths) != len(members):
        refused.append({"device": ", ".join(n for n, _ in members), "found": ["two names for one disk"]})
    if refused:  # a named device missing, or named twice: decide nothing on half the set
        return out
    adopted = _adoptable(spec, facts, paths)
    if adopted:
        adopted = {**out, **adopted, "refused": refused + adopted.get("refused", [])}
        return _mount_point_free(adopted, spec, facts)
    for name, path in members:
        found = findings(facts, path)
        if spec.get("all_unused_nvme") and (found["in_use"] or found["data"]):
            skipped.append({"device": name, "found": found["in_use"] + found["data"]})
            continue
        if found["in_use"]:
            refused.append({"device": name, "found": found["in_use"] + found["data"]})
        elif found["data"] and not spec.get("wipe"):
            refused.append({"device": name, "found": found["data"] + [
                "name it in storage.scratch.devices with wipe: true to erase it"]})
        elif found["data"]:
            wipe.append(path)
    usable = sorted(p for n, p in members if not any(n == s["device"] for s in skipped + refused))
    need = 1 if layout == "single" else 2
    if not refused and (len(usable) < need or (layout == "single" and len(usable) != 1)):
        refused.append({"device": "storage.scratch", "found": [
            f"layout {layout} needs {'exactly one device' if layout == 'single' else 'two or more devices'}; "
            f"usable here: {', '.join(usable) or 'none'}"]})
    if refused:
        return out
    array = "" if layout == "single" else ARRAY
    return _mount_point_free({**out, "action": "create", "members": usable, "wipe": sorted(wipe), "array": array,
                              "device": array or usable[0], "mkfs": True}, spec, facts)


def _mount_point_free(p: dict, spec: dict, facts: dict) -> dict:
    """The plan, or a refusal when something else is mounted at the mount point: its fstab line
    would be replaced and its data hidden."""
    if p["action"] == "refuse":
        return p
    mine = {p["device"], os.path.realpath(p["device"]) if p["device"].startswith("/dev/md/") else p["device"]}
    others = sorted(path for path, d in facts["devices"].items()
                    if spec["mount_point"] in d.get("mountpoints", []) and path not in mine)
    if others:
        return {**p, "action": "refuse", "refused": [{"device": spec["mount_point"], "found": [
            f"already the mount point of {', '.join(others)}; choose another storage.scratch.mount_point"]}]}
    return p


def _adoptable(spec: dict, facts: dict, paths: list[str]) -> dict | None:
    """An existing array with exactly these members (and the level asked), or, for a single
    disk, the filesystem the record names: adopted as it is. An array that shares some
    members is refused by the caller (its members are in use)."""
    for md, detail in sorted((facts.get("md_detail") or {}).items()):
        have = md_members(detail)
        # With all_unused_nvme the members are the ones this role chose: the array it recorded.
        ours = bool(spec.get("all_unused_nvme") and spec.get("recorded_uuid")
                    and detail.get("MD_UUID") == spec["recorded_uuid"])
        if have and (have == paths or ours) and spec["layout"] != "single":
            if detail.get("MD_LEVEL") != spec["layout"]:
                return {"refused": [{"device": md, "found": [
                    f"an array of these devices at {detail.get('MD_LEVEL')}, not {spec['layout']}; stop and wipe "
                    "it yourself (mdadm --stop, wipefs) to rebuild it"]}], "action": "refuse"}
            sig = (facts.get("signatures") or {}).get(md) or {}
            mkfs = not sig.get("TYPE")
            if sig.get("TYPE") and sig.get("TYPE") != spec["filesystem"]:
                return {"refused": [{"device": md, "found": [f"the array holds {sig['TYPE']}, not {spec['filesystem']}"]}],
                        "action": "refuse"}
            name = detail.get("MD_DEVNAME", "")
            array = "/dev/md/" + name if re.fullmatch(r"[A-Za-z0-9_.-]+", name) else md
            return {"action": "adopt", "members": have, "array": array, "device": md, "mkfs": mkfs,
                    "uuid": sig.get("UUID", "")}
    if spec["layout"] == "single" and len(paths) == 1:
        sig = (facts.get("signatures") or {}).get(paths[0]) or {}
        mounted_here = spec["mount_point"] in (facts["devices"].get(paths[0]) or {}).get("mountpoints", [])
        if sig.get("TYPE") == spec["filesystem"] and (mounted_here or sig.get("UUID") == spec.get("recorded_uuid")):
            return {"action": "adopt", "members": paths, "device": paths[0], "uuid": sig.get("UUID", "")}
    return None


# --- commands and the lines that persist it (pure) -------------------------------------

def commands(p: dict, spec: dict) -> list[list[str]]:
    """The argv lists that carry out a create plan, in order (never a shell)."""
    argv = [["wipefs", "--all", "--", path] for path in p["wipe"]]
    if p["action"] == "create" and p["array"]:
        argv.append(["mdadm", "--create", p["array"], "--run", "--metadata=1.2", f"--level={LEVELS[spec['layout']]}",
                     f"--raid-devices={len(p['members'])}", "--", *p["members"]])
    if p["mkfs"]:
        argv.append(["mkfs.xfs", "-q", "--", p["device"]] if spec["filesystem"] == "xfs"
                    else ["mkfs.ext4", "-q", "--", p["device"]])
    return argv


def mount_options(spec: dict) -> str:
    return ",".join([*spec["mount_options"], "nofail", f"x-systemd.device-timeout={spec['device_timeout_s']}s"])


def fstab_line(uuid: str, spec: dict) -> str:
    """The fstab entry: by filesystem UUID (a renamed /dev/mdN or nvmeXnY cannot move it) and
    nofail, so a lost disk leaves the mount failed, not the boot."""
    if not re.fullmatch(r"[0-9A-Fa-f-]{8,36}", uuid or ""):
        raise ValueError(f"not a filesystem UUID: {uuid!r}")
    return f"UUID={uuid} {spec['mount_point']} {spec['filesystem']} {mount_options(spec)} 0 {FSCK_PASS[spec['filesystem']]}"


def mdadm_conf_line(detail: dict[str, str], array: str = ARRAY) -> str:
    """The array's line in /etc/mdadm/mdadm.conf (mdadm.conf(5): ARRAY device identity), by the
    array UUID mdadm --detail --export gives, so it assembles under its name at boot."""
    uuid, metadata = detail.get("MD_UUID", ""), detail.get("MD_METADATA", "")
    if not re.fullmatch(r"[0-9a-f]{8}(:[0-9a-f]{8}){3}", uuid):
        raise ValueError(f"not an md array UUID: {uuid!r}")
    meta = f" metadata={metadata}" if re.fullmatch(r"[0-9.]+", metadata) else ""
    return f"ARRAY {array}{meta} UUID={uuid}"


# --- health, for check and verify --------------------------------------------------------

RECORD = "/etc/ansible/facts.d/provisioner_scratch.fact"


def observe(record_path: str = RECORD) -> dict:
    """The scratch the last converge recorded and how it is now: {recorded: {...} or {},
    mounted (the mount point's source device or ""), array: {state, healthy, members,
    failed} or {}}. Reads nothing when there is no record (no scratch)."""
    try:
        with open(record_path, encoding="utf-8") as handle:
            recorded = json.load(handle)
    except (OSError, ValueError):
        return {"recorded": {}}
    if not isinstance(recorded, dict):
        return {"recorded": {}}
    mounts = {}
    for line in _read("/proc/self/mounts").splitlines():
        fields = line.split()
        if len(fields) >= 3:
            mounts[fields[1]] = fields[0]
    out = {"recorded": recorded, "mounted": mounts.get(str(recorded.get("mount_point")), ""), "array": {}}
    array = str(recorded.get("array") or "")
    if array:
        real = os.path.realpath(array)
        state = parse_mdstat(_read("/proc/mdstat")).get(os.path.basename(real))
        _, detail_out = _run(["mdadm", "--detail", "--export", array])
        detail = parse_export(detail_out)
        out["array"] = {**(state or {"state": "missing", "members": [], "failed": [], "healthy": None}),
                        "members": md_members(detail) if detail else [],
                        "uuid": detail.get("MD_UUID", "")}
    return out
