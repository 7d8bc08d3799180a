"""Local NVMe scratch (issue 32, item 2): the safety decision, the mdadm plan, the boot lines
and the drift, on disk-image files read by the real blkid and on captured tool outputs
(tests/data/scratch/SOURCES.md). Where a test needs a host's /dev/disk/by-id links or an
lsblk tree around a captured mdadm output, it builds them here and says HAND-MADE."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from ansible_collections.gpu_provisioner.node.plugins.module_utils import scratch
from provisioner import profiles
from provisioner.judge import scratch as judge
from provisioner.profiles.storage import Scratch
from provisioner.render import role_specs, role_vars

from .conftest import DATA, MODULES, require

D = DATA / "scratch"
SPEC = {"devices": [], "all_unused_nvme": False, "layout": "single", "filesystem": "ext4", "mount_point": "/scratch",
        "mount_options": ["noatime"], "device_timeout_s": 30, "wipe": False, "recorded_uuid": ""}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def image_facts(path: Path, by_id: str) -> dict:
    """Facts for one disk-image file as the module gathers them for a disk: the by-id link and
    lsblk's entry are HAND-MADE (a file has neither); the signature is the real blkid --probe
    through the module's own reader."""
    return {"devices": {str(path): {"path": str(path), "name": path.name, "type": "disk", "fstype": "",
                                     "mountpoints": [], "parents": [], "children": []}},
            "by_id": {by_id: str(path)}, "signatures": {str(path): scratch.probe(str(path))},
            "mdstat": {}, "md_detail": {}, "swaps": []}


@pytest.fixture
def images(tmp_path: Path) -> dict[str, Path]:
    require("blkid")
    require("mkfs.ext4")
    out = {}
    for name in ("mdraid-1", "gpt", "lvm2"):
        out[name] = tmp_path / f"{name}.img"
        out[name].write_bytes(lzma.decompress((D / f"{name}.img.xz").read_bytes()))
    out["ext4"] = tmp_path / "ext4.img"
    with out["ext4"].open("wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", str(out["ext4"])], check=True, stdin=subprocess.DEVNULL)
    return out


@pytest.mark.parametrize("kind,found", [
    ("ext4", "a filesystem (ext4"), ("gpt", "a partition table (gpt)"),
    ("mdraid-1", "a RAID or LVM signature (linux_raid_member, label troy.t-8ch.de:0)"),
    ("lvm2", "a RAID or LVM signature (LVM2_member)")])
def test_a_data_bearing_image_is_refused_and_left_byte_identical(images, kind, found):
    path, name = images[kind], f"/dev/disk/by-id/nvme-IMAGE_{kind}"
    before = sha256(path)
    # wipefs -n: what a wipe would erase, read only (it must see the same signature).
    assert subprocess.run(["wipefs", "--no-act", str(path)], capture_output=True, text=True).stdout.strip()
    p = scratch.plan({**SPEC, "devices": [name]}, image_facts(path, name))
    assert p["action"] == "refuse" and scratch.commands(p, SPEC) == []
    assert p["refused"][0]["device"] == name
    assert any(found in f for f in p["refused"][0]["found"]), p["refused"]
    assert "wipe: true" in p["refused"][0]["found"][-1]
    assert sha256(path) == before


def test_all_unused_nvme_never_takes_a_data_bearing_disk(images):
    facts = image_facts(images["gpt"], "/dev/disk/by-id/nvme-IMAGE")
    facts["devices"][str(images["gpt"])]["name"] = "nvme0n1"
    facts["transport"] = {str(images["gpt"]): "pcie"}
    p = scratch.plan({**SPEC, "all_unused_nvme": True}, facts)
    assert p["action"] == "refuse" and p["skipped"][0]["found"] == ["a partition table (gpt)"]


def test_a_named_image_with_wipe_is_wiped_made_and_then_adopted(images):
    path, name = images["ext4"], "/dev/disk/by-id/nvme-IMAGE_ext4"
    old_uuid = scratch.probe(str(path))["UUID"]
    spec = {**SPEC, "devices": [name], "wipe": True}
    p = scratch.plan(spec, image_facts(path, name))
    assert (p["action"], p["wipe"], p["device"]) == ("create", [str(path)], str(path))
    argv = scratch.commands(p, spec)
    assert argv == [["wipefs", "--all", "--", str(path)], ["mkfs.ext4", "-q", "--", str(path)]]
    for cmd in argv:  # the role's very commands, on the file
        subprocess.run(cmd, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    made = scratch.probe(str(path))
    assert made["TYPE"] == "ext4" and made["UUID"] != old_uuid
    # The second run: the filesystem it recorded is adopted, nothing runs.
    again = scratch.plan({**spec, "recorded_uuid": made["UUID"]}, image_facts(path, name))
    assert (again["action"], scratch.commands(again, spec)) == ("adopt", [])
    # Without the record (and not mounted there) the same disk is data, and wipe would be needed again.
    assert scratch.plan({**spec, "wipe": False}, image_facts(path, name))["action"] == "refuse"


# --- captured outputs --------------------------------------------------------------------

AWS_BY_ID = {"/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_A": "/dev/nvme1n1",  # HAND-MADE links
             "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_B": "/dev/nvme0n1"}


def aws_facts() -> dict:
    """The captured lsblk tree; by-id links, NVMe transports (sysfs) and blkid's findings
    (nothing on any device: rc 2) HAND-MADE."""
    devices = scratch.parse_lsblk((D / "lsblk-aws-nvme-root.json").read_text())
    return {"devices": devices, "by_id": dict(AWS_BY_ID), "signatures": {p: {} for p in devices},
            "mdstat": {}, "md_detail": {}, "swaps": [], "transport": {"/dev/nvme0n1": "pcie", "/dev/nvme1n1": "pcie"}}


def test_root_disk_is_found_through_its_partition_and_never_taken():
    facts = aws_facts()
    assert scratch.root_disks(facts["devices"]) == {"/dev/nvme0n1"}
    p = scratch.plan({**SPEC, "all_unused_nvme": True}, facts)
    assert (p["action"], p["members"]) == ("create", ["/dev/nvme1n1"])
    assert p["skipped"][0]["device"] == "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_B"
    root = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_B"
    refused = scratch.plan({**SPEC, "devices": [root], "wipe": True}, facts)
    assert refused["action"] == "refuse"
    found = refused["refused"][0]["found"]
    assert "the root filesystem's disk" in found and "mounted at / on /dev/nvme0n1p1" in found


def test_all_unused_nvme_takes_only_local_pcie_disks(tmp_path):
    facts = aws_facts()
    facts["transport"]["/dev/nvme1n1"] = "tcp"
    p = scratch.plan({**SPEC, "all_unused_nvme": True}, facts)
    assert p["action"] == "refuse"
    assert {"device": "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_A",
            "found": ["not a local PCIe NVMe disk (transport: tcp)"]} in p["skipped"]
    # The kernel's attribute, read the way the module reads sysfs (a HAND-MADE tree: a
    # multipath namespace whose subsystem holds the controller).
    (tmp_path / "nvme0n1/device/nvme0").mkdir(parents=True)
    (tmp_path / "nvme0n1/device/nvme0/transport").write_text("pcie\n")
    assert scratch.nvme_transport("nvme0n1", str(tmp_path)) == "pcie"
    assert scratch.nvme_transport("nvme9n1", str(tmp_path)) == ""


def test_a_mount_point_that_something_else_uses_is_refused():
    facts = aws_facts()
    p = scratch.plan({**SPEC, "all_unused_nvme": True, "mount_point": "/boot/efi"}, facts)
    assert p["refused"] == [{"device": "/boot/efi", "found": [
        "already the mount point of /dev/nvme0n1p15; choose another storage.scratch.mount_point"]}]


def test_what_cannot_be_read_is_never_erased():
    facts = aws_facts()
    facts["signatures"]["/dev/nvme1n1"] = {"PROBE_ERROR": "blkid --probe failed (exit 4)"}
    named = {**SPEC, "devices": ["/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_A"], "wipe": True}
    assert scratch.plan(named, facts)["refused"][0]["found"] == ["blkid --probe failed (exit 4)"]
    del facts["signatures"]["/dev/nvme1n1"]
    assert scratch.plan(named, facts)["refused"][0]["found"] == ["not probed (blkid)"]
    assert scratch.plan(named, {**facts, "devices": {}})["refused"][0]["found"] == [
        "lsblk listed no block devices on this host; nothing can be judged safe"]


def test_a_device_not_on_the_host_is_refused():
    p = scratch.plan({**SPEC, "devices": ["/dev/disk/by-id/nvme-GONE"]}, aws_facts())
    assert p["refused"] == [{"device": "/dev/disk/by-id/nvme-GONE",
                             "found": ["not present on this host (no such /dev/disk/by-id link)"]}]


def two_disk_facts() -> dict:
    """HAND-MADE: two empty NVMe disks beside the captured AWS root disk."""
    facts = aws_facts()
    facts["devices"]["/dev/nvme2n1"] = {**facts["devices"]["/dev/nvme1n1"], "path": "/dev/nvme2n1", "name": "nvme2n1"}
    facts["by_id"]["/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_C"] = "/dev/nvme2n1"
    facts["transport"]["/dev/nvme2n1"] = "pcie"
    facts["signatures"]["/dev/nvme2n1"] = {}
    return facts


def test_raid0_create_plan_is_argv_lists():
    devs = ["/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_A", "/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_C"]
    spec = {**SPEC, "devices": devs, "layout": "raid0", "filesystem": "xfs"}
    p = scratch.plan(spec, two_disk_facts())
    assert scratch.commands(p, spec) == [
        ["mdadm", "--create", "/dev/md/scratch", "--run", "--metadata=1.2", "--level=0", "--raid-devices=2", "--",
         "/dev/nvme1n1", "/dev/nvme2n1"],
        ["mkfs.xfs", "-q", "--", "/dev/md/scratch"]]


def raid0_host(fs: str = "xfs") -> dict:
    """The captured raid0 (mdadm --detail --export: vda1 + vda2) on a HAND-MADE lsblk tree and
    by-id links of that host; the array's filesystem signature HAND-MADE too."""
    tree = {"blockdevices": [{"name": "vda", "type": "disk", "children": [
        {"name": "vda1", "type": "part", "fstype": "linux_raid_member", "children": [{"name": "md0", "type": "raid0"}]},
        {"name": "vda2", "type": "part", "fstype": "linux_raid_member", "children": [{"name": "md0", "type": "raid0"}]}]},
        {"name": "vdb", "type": "disk"}]}
    detail = scratch.parse_export((D / "mdadm-detail-export-raid0.txt").read_text())
    return {"devices": scratch.parse_lsblk(json.dumps(tree)),
            "by_id": {"/dev/disk/by-id/virtio-A-part1": "/dev/vda1", "/dev/disk/by-id/virtio-A-part2": "/dev/vda2",
                      "/dev/disk/by-id/virtio-B": "/dev/vdb"},
            "signatures": {"/dev/md0": {"TYPE": fs, "UUID": "0b6c4a35-1d8e-4c47-9b0a-3c1f5e2d7a10"}},
            "mdstat": {"md0": {"state": "active", "level": "raid0", "members": ["vda1", "vda2"], "failed": [],
                               "healthy": None}},
            "md_detail": {"/dev/md0": detail}, "swaps": []}


def test_an_array_with_the_same_members_is_adopted_and_nothing_runs():
    spec = {**SPEC, "devices": ["/dev/disk/by-id/virtio-A-part2", "/dev/disk/by-id/virtio-A-part1"], "layout": "raid0",
            "filesystem": "xfs"}
    p = scratch.plan(spec, raid0_host())
    assert (p["action"], p["members"], p["device"], p["mkfs"]) == ("adopt", ["/dev/vda1", "/dev/vda2"], "/dev/md0", False)
    assert scratch.commands(p, spec) == []
    # Same members, another filesystem or level: refused, never rebuilt.
    assert scratch.plan(spec, raid0_host("ext4"))["refused"][0]["found"] == ["the array holds ext4, not xfs"]
    assert "at raid0, not raid1" in scratch.plan({**spec, "layout": "raid1"}, raid0_host())["refused"][0]["found"][0]


def test_an_array_with_other_members_is_refused_even_with_wipe():
    spec = {**SPEC, "devices": ["/dev/disk/by-id/virtio-A-part1", "/dev/disk/by-id/virtio-B"], "layout": "raid0",
            "wipe": True}
    p = scratch.plan(spec, raid0_host())
    assert p["action"] == "refuse" and scratch.commands(p, spec) == []
    found = p["refused"][0]["found"]
    assert p["refused"][0]["device"] == "/dev/disk/by-id/virtio-A-part1"
    assert "holds raid0 /dev/md0" in found
    assert "a member of the running array /dev/md0 (raid0, members vda1, vda2)" in found


def test_mdstat_capture_health():
    arrays = scratch.parse_mdstat((D / "mdstat-node-exporter-492.txt").read_text())
    assert arrays["md6"] == {"state": "active", "level": "raid1", "members": ["sdb2", "sda2"], "failed": [],
                             "healthy": False}
    assert arrays["md127"]["healthy"] is True and arrays["md3"]["members"][0] == "sda1"
    assert arrays["md4"]["state"] == "inactive"


def test_mdadm_conf_line_and_fstab_line():
    detail = scratch.parse_export((D / "mdadm-detail-export-raid0.txt").read_text())
    assert scratch.mdadm_conf_line(detail) == "ARRAY /dev/md/scratch metadata=1.2 UUID=7e81a856:abb9c1c2:4b71237a:9778cc66"
    with pytest.raises(ValueError, match="not an md array UUID"):
        scratch.mdadm_conf_line(scratch.parse_export((D / "mdadm-detail-export-raid1-no-uuid.txt").read_text()))
    spec = {**SPEC, "filesystem": "xfs", "mount_options": ["noatime", "inode64"]}
    line = scratch.fstab_line("0b6c4a35-1d8e-4c47-9b0a-3c1f5e2d7a10", spec)
    assert line == ("UUID=0b6c4a35-1d8e-4c47-9b0a-3c1f5e2d7a10 /scratch xfs "
                    "noatime,inode64,nofail,x-systemd.device-timeout=30s 0 0")
    assert scratch.fstab_line("0b6c4a35-1d8e-4c47-9b0a-3c1f5e2d7a10", SPEC).endswith(" ext4 noatime,nofail,"
                                                                                       "x-systemd.device-timeout=30s 0 2")
    with pytest.raises(ValueError):
        scratch.fstab_line("x /etc/shadow", SPEC)


# --- the profile, the rendered variables and drift ----------------------------------------

def scratch_profile(**scratch_fields):
    base = profiles.as_dict(profiles.load("debian12-lab").profile)
    base["storage"] = {"scratch": {"enabled": True, **scratch_fields}}
    return profiles.Profile.model_validate(base)


def test_profile_rules():
    ok = Scratch(enabled=True, devices=["/dev/disk/by-id/nvme-A", "/dev/disk/by-id/nvme-B"], layout="raid10")
    assert ok.mount_options == ["noatime"]
    for bad, message in [
            ({"enabled": True}, "without disks"),
            ({"enabled": True, "devices": ["/dev/nvme0n1", "/dev/disk/by-id/x"]}, "not a stable device name"),
            ({"enabled": True, "devices": ["/dev/disk/by-id/../sda"]}, "not a stable device name"),
            ({"enabled": True, "all_unused_nvme": True, "wipe": True}, "only devices the profile names"),
            ({"enabled": True, "layout": "raid1", "devices": ["/dev/disk/by-id/a"]}, "two or more"),
            ({"mount_point": "/var"}, "system folder"), ({"mount_options": ["noatime,exec"]}, "one mount option"),
            ({"mount_options": ["nofail"]}, "always set")]:
        with pytest.raises(ValidationError, match=message):
            Scratch(**bad)


def test_role_vars_only_when_on_and_the_role_accepts_them(tmp_path):
    assert not any(k.startswith("scratch_") for k in role_vars(profiles.load("debian12-lab")))
    path = tmp_path / "scratch.yml"
    path.write_text("extends: debian12-lab\nname: scratch\ndescription: d\nstorage:\n  scratch:\n    enabled: true\n"
                    "    devices: [/dev/disk/by-id/nvme-A, /dev/disk/by-id/nvme-B]\n    layout: raid1\n    mode: '1777'\n")
    loaded = profiles.load(str(path))
    variables = role_vars(loaded)
    assert {k: v for k, v in variables.items() if k.startswith("scratch_")} == {
        "scratch_enabled": True, "scratch_devices": ["/dev/disk/by-id/nvme-A", "/dev/disk/by-id/nvme-B"],
        "scratch_all_unused_nvme": False, "scratch_layout": "raid1", "scratch_filesystem": "xfs",
        "scratch_mount_point": "/scratch", "scratch_mount_options": ["noatime"], "scratch_device_timeout_s": 30,
        "scratch_owner": "root", "scratch_mode": "1777", "scratch_wipe": False}
    assert role_specs.problems(variables) == []


def observed(mounted: str = "/dev/md127", **array) -> dict:
    rec = {"mount_point": "/scratch", "array": "/dev/md/scratch", "members": ["/dev/sda2", "/dev/sdb2"]}
    return {"recorded": rec, "mounted": mounted,
            "array": {"state": "active", "members": ["/dev/sda2", "/dev/sdb2"], "failed": [], "healthy": True, **array}}


def test_drift_from_captured_states():
    prof = scratch_profile(devices=["/dev/disk/by-id/a", "/dev/disk/by-id/b"], layout="raid1")
    assert judge.problems(prof, observed()) == []
    assert judge.judge(prof, observed())[0].status == "pass"
    assert judge.problems(prof, observed(mounted=""))[0][1].startswith("not mounted")
    # md6 of the captured mdstat: raid1, [2/1] [U_]
    md6 = scratch.parse_mdstat((D / "mdstat-node-exporter-492.txt").read_text())["md6"]
    (item, detail), = judge.problems(prof, observed(**{**md6, "members": ["/dev/sda2", "/dev/sdb2"]}))
    assert item == "scratch array /dev/md/scratch" and detail.startswith("degraded")
    (_, changed), = judge.problems(prof, observed(members=["/dev/sda2", "/dev/sdc2"]))
    assert changed == "members changed: recorded /dev/sda2, /dev/sdb2; now /dev/sda2, /dev/sdc2"
    assert "not running (mdstat: inactive)" in judge.problems(prof, observed(state="inactive"))[0][1]
    assert "no record" in judge.problems(prof, {"recorded": {}})[0][1]
    assert judge.judge(prof, observed(mounted=""))[0].status == "fail"
    assert judge.problems(profiles.load("debian12-lab").profile, {}) == []


def test_observe_reads_nothing_without_a_record(tmp_path):
    assert scratch.observe(str(tmp_path / "none.fact")) == {"recorded": {}}
    (tmp_path / "bad.fact").write_text("[1, 2]")
    assert scratch.observe(str(tmp_path / "bad.fact")) == {"recorded": {}}


def test_lsblk_reader_takes_old_and_new_mountpoint_columns():
    old = scratch.parse_lsblk('{"blockdevices": [{"name": "sda", "path": "/dev/sda", "type": "disk", '
                              '"mountpoint": "/data"}]}')
    assert old["/dev/sda"]["mountpoints"] == ["/data"]
    assert scratch.parse_lsblk("") == {}


@pytest.mark.ansible
def test_the_module_refuses_before_touching_anything(tmp_path):
    """scratch_storage as Ansible runs it (its file, arguments on stdin), in check mode on this
    machine's real disks, read-only: a device that is not there fails the task, naming it."""
    args = {"devices": ["/dev/disk/by-id/nvme-NOT_ON_THIS_MACHINE"], "layout": "single", "mount_point": "/scratch",
            "record": str(tmp_path / "scratch.fact"), "mdadm_conf": str(tmp_path / "mdadm.conf"),
            "fstab": str(tmp_path / "fstab"), "_ansible_check_mode": True}
    r = subprocess.run([sys.executable, str(MODULES / "scratch_storage.py")],
                       input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    result = json.loads(r.stdout)
    assert result["failed"] is True and result["commands"] == []
    assert result["msg"] == ("Local scratch refused, nothing was changed: /dev/disk/by-id/nvme-NOT_ON_THIS_MACHINE: "
                             "not present on this host (no such /dev/disk/by-id link)")
    assert not any(tmp_path.iterdir())


def test_check_folds_an_unmounted_scratch_into_drift(tmp_path):
    """`provision check`'s fold of one host's provisioner_state reading: the scratch's record
    says /scratch on the array; now nothing is mounted there and the array is md6 of the
    captured mdstat (degraded): two drift items, exit 2."""
    from provisioner.engine import commands
    from provisioner.engine.runner import HostRun, PlaybookRun
    from provisioner.render.inventory import load as load_inventory
    from provisioner.reports.report import Report

    path = tmp_path / "scratch.yml"
    path.write_text("extends: debian12-lab\nname: scratch\ndescription: d\nstorage:\n  scratch:\n    enabled: true\n"
                    "    devices: [/dev/disk/by-id/a, /dev/disk/by-id/b]\n    layout: raid1\n")
    inv = tmp_path / "hosts.ini"
    inv.write_text("gpu-1\n")
    target = commands.Target(profiles.load(str(path)), load_inventory(inv))
    md6 = scratch.parse_mdstat((D / "mdstat-node-exporter-492.txt").read_text())["md6"]
    state = {"recorded": True, "profile": "scratch", "profile_sha256": target.loaded.digest, "differences": [],
             "scratch": observed(mounted="", **{**md6, "members": ["/dev/sda2", "/dev/sdb2"]})}
    report = Report("check", "scratch", target.loaded.digest, str(inv), tmp_path, started="now")
    run = PlaybookRun("check", "successful", 0, {"gpu-1": HostRun("gpu-1", reported={"provisioner_state": state})},
                      tmp_path)
    commands._fold(report, "check", run, target)
    (h,) = report.hosts
    assert h.status == "drift" and h.changed_tasks == ["scratch /scratch", "scratch array /dev/md/scratch"]
    assert h.diffs["scratch array /dev/md/scratch"].startswith("degraded")
    assert report.exit_code == 2
