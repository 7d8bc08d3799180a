"""The profile's `storage` section: local NVMe scratch (one disk, or an mdadm array), its
filesystem and mount. Every value here ends up in an argv list, fstab or mdadm.conf on the
host, so each is checked for what it names: devices by stable /dev/disk/by-id name, mount
options as option words, the mount point a folder we may own.

What may be erased is decided on the host, from what is on its disks, by the
scratch_storage module (plugins/module_utils/scratch.py plan); this only keeps the
profile from asking for something impossible or unsafe.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from provisioner.profiles.field_types import USER_NAME, OwnedDir, single_line
from provisioner.profiles.strict import Strict


def _by_id(value: str) -> str:
    single_line(value)
    # udev's by-id names: bus, model and serial with [A-Za-z0-9._:-] (60-persistent-storage.rules
    # replaces other characters); one path component, never .. or another folder.
    if not re.fullmatch(r"/dev/disk/by-id/[A-Za-z0-9][A-Za-z0-9._:+@-]*", value) or "/.." in value:
        raise ValueError(f"{value!r} is not a stable device name: give the disk's /dev/disk/by-id/ link "
                         "(ls -l /dev/disk/by-id/ on the host), /dev/disk/by-id/nvme-MODEL_SERIAL")
    return value


def _mount_option(value: str) -> str:
    single_line(value)
    # One option word as mount(8) takes it (noatime, discard, inode64, commit=60): never a comma
    # (a second option), a space (a second fstab field) or a quote.
    if not re.fullmatch(r"[a-z][a-z0-9_]*(=[A-Za-z0-9_.:+-]+)?", value):
        raise ValueError(f"{value!r} is not one mount option (a word such as noatime, or word=value; no commas, "
                         "spaces or quotes: give each option as its own list item)")
    if value.split("=")[0] in ("nofail", "defaults"):
        raise ValueError(f"{value!r} is always set by the role (nofail, x-systemd.device-timeout): leave it out")
    return value


ByIdPath = Annotated[str, AfterValidator(_by_id)]
MountOption = Annotated[str, AfterValidator(_mount_option)]


class Scratch(Strict):
    """Local NVMe scratch: one disk or an mdadm array, a filesystem and its mount."""
    enabled: bool = Field(False, description="build and mount the scratch (off when left out)")
    devices: list[ByIdPath] = Field(default_factory=list, description="the disks by their /dev/disk/by-id/ name; "
                                                                     "exclusive with all_unused_nvme")
    all_unused_nvme: bool = Field(False, description="use every local NVMe disk (PCIe, never NVMe over Fabrics) "
                                                     "that holds nothing (no partition table, filesystem or "
                                                     "signature, not mounted, not the root disk): an explicit "
                                                     "choice instead of devices")
    layout: Literal["single", "raid0", "raid1", "raid10"] = Field(
        "raid0", description="single: one disk, no array; raid0/raid1/raid10: an mdadm array (two or more disks)")
    filesystem: Literal["xfs", "ext4"] = Field("xfs", description="the filesystem made on the disk or array")
    mount_point: OwnedDir = Field("/scratch", description="where it is mounted: absolute, never / or a system folder")
    mount_options: list[MountOption] = Field(default_factory=lambda: ["noatime"], description=(
        "mount options, one word each; nofail and x-systemd.device-timeout are always added"))
    device_timeout_s: int = Field(30, ge=1, le=600, description="how long boot waits for the device before going "
                                                                 "on without it (x-systemd.device-timeout)")
    owner: Annotated[str, Field(pattern=USER_NAME)] = Field("root", description="the mount point's owner")
    mode: Annotated[str, Field(pattern=r"^0?[0-7]{3}$|^[0-7]{4}$")] = Field(
        "0755", description="the mount point's mode, octal (1777 for a shared scratch like /tmp)")
    wipe: bool = Field(False, description="erase what the named devices hold (partition table, filesystem, RAID or "
                                          "LVM signature) before use; only with devices, never the root disk or a "
                                          "device in use")

    @model_validator(mode="after")
    def _consistent(self) -> Scratch:
        if self.devices and self.all_unused_nvme:
            raise ValueError("storage.scratch: give devices or all_unused_nvme: true, not both")
        if self.wipe and not self.devices:
            raise ValueError("storage.scratch.wipe erases only devices the profile names: list them in devices "
                             "(by /dev/disk/by-id/), it never applies to all_unused_nvme")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError("storage.scratch.devices names a disk twice")
        if not self.enabled:
            return self
        if not self.devices and not self.all_unused_nvme:
            raise ValueError("storage.scratch is enabled without disks: list devices (by /dev/disk/by-id/) or set "
                             "all_unused_nvme: true")
        # mdadm refuses an array of fewer than 2 devices without --force (Create.c); single is one disk.
        if self.devices and self.layout == "single" and len(self.devices) != 1:
            raise ValueError(f"storage.scratch.layout single takes exactly one device, not {len(self.devices)}: "
                             "use raid0, raid1 or raid10 for more")
        if self.devices and self.layout != "single" and len(self.devices) < 2:
            raise ValueError(f"storage.scratch.layout {self.layout} needs two or more devices (mdadm), "
                             "got one: use layout single for one disk")
        return self


class Storage(Strict):
    scratch: Scratch = Field(default_factory=Scratch, description="local NVMe scratch (off when left out)")
