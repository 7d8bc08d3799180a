"""What holds a host's NVIDIA devices, and whether the driver can be swapped without a reboot.

The one place that reads holders: `provision plan` lists them in a host's disruption class,
the reboot-free driver activation decision (`activation`) stands on them, and a MIG change
(which needs the GPUs free) reads them here too. The host sends the tools' own text
(plugins/module_utils/holders.py: `fuser -v /dev/nvidia*`, nvidia-smi's compute
applications, /proc/PID/cgroup); this module reads that text, and `lsof /dev/nvidia*`'s
as well, for captures. Everything a host sends is untrusted: lines that do not parse are
skipped, PIDs are numbers, names are cut and kept as data, never a shell word.

Kinds, from the process name and, where the host sent it, the systemd unit of its cgroup:
persistenced (nvidia-persistenced), fabric_manager (nv-fabricmanager), dcgm (nv-hostengine),
dcgm_exporter, cuda (a process nvidia-smi lists as a compute application) and process
(anything else: a display server, a monitoring agent, a program between CUDA calls).
fuser cuts names to 15 characters and lsof to 9 ("nvidia-persiste", "nv-fabric"), so names
match by prefix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["persistenced", "fabric_manager", "dcgm", "dcgm_exporter", "cuda", "process"]

# (kind, the unit's name, the process names it runs under): name prefixes as fuser (15
# characters) and lsof (9) cut them, and the full names the units' ExecStart runs.
SERVICES: tuple[tuple[Kind, str, tuple[str, ...]], ...] = (
    ("persistenced", "nvidia-persistenced.service", ("nvidia-persistenced",)),
    ("fabric_manager", "nvidia-fabricmanager.service", ("nv-fabricmanager",)),
    ("dcgm", "nvidia-dcgm.service", ("nv-hostengine",)),
    ("dcgm_exporter", "dcgm-exporter.service", ("dcgm-exporter",)),
)
# DCGM's host engine under the other unit name NVIDIA's packages have used (the driver role's
# nvidia_driver_gpu_holder_units lists both).
UNIT_ALIASES = {"nv-hostengine.service": "dcgm"}
# The provisioner's own daemons, which only keep the driver initialised or read it: stopping
# them for the swap and starting them after is what a reboot would do to them anyway.
STOPPABLE: frozenset[str] = frozenset({"persistenced", "dcgm", "dcgm_exporter"})
MIN_PREFIX = 9  # lsof's cut: a shorter name matches only whole
_NAME = re.compile(r"[^\x21-\x7e]")
_PID = re.compile(r"^[0-9]{1,10}$")


@dataclass
class Holder:
    pid: int
    command: str
    user: str = ""
    devices: list[str] = field(default_factory=list)
    unit: str = ""
    kind: Kind = "process"

    def describe(self) -> str:
        where = ", ".join(self.devices[:3]) + (f" and {len(self.devices) - 3} more" if len(self.devices) > 3 else "")
        unit = f", unit {self.unit}" if self.unit else ""
        return f"{self.command} (pid {self.pid}{unit}) holds {where}"


def _clean(text: str, limit: int = 64) -> str:
    return _NAME.sub("?", text)[:limit]


def _matches(name: str, full: str) -> bool:
    return name == full or (len(name) >= MIN_PREFIX and full.startswith(name))


def parse_fuser(text: str) -> dict[int, Holder]:
    """`fuser -v /dev/nvidia*` (table and PIDs in one stream, as a terminal shows them):
    pid -> Holder with every device it holds. A device name alone on its line (a long
    /dev/nvidia-nvswitchN) carries over to the next line; "Cannot stat" and other noise is skipped."""
    holders: dict[int, Holder] = {}
    device = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        m = re.match(r"^(/dev/\S+):(.*)$", line)
        if m:
            device, line = _clean(m.group(1), 200), " " + m.group(2)
        parts = line.split()
        if len(parts) < 4 or not raw[:1].isspace() and not m or not _PID.match(parts[1]) or not device:
            continue
        user, pid, access, command = parts[0], int(parts[1]), parts[2], " ".join(parts[3:])
        if not re.match(r"^[A-Za-z.]{1,8}$", access):
            continue
        h = holders.setdefault(pid, Holder(pid, _clean(command), _clean(user)))
        if device not in h.devices:
            h.devices.append(device)
    return holders


def parse_lsof(text: str) -> dict[int, Holder]:
    """`lsof /dev/nvidia*`: COMMAND PID USER FD TYPE DEVICE [SIZE/OFF] NODE NAME (SIZE/OFF is
    empty for mmap'ed "mem" lines) -> pid -> Holder."""
    holders: dict[int, Holder] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8 or not _PID.match(parts[1]) or parts[4] != "CHR":
            continue
        name = parts[-1] if parts[-1].startswith("/dev/") else "/dev/" + parts[-1]
        h = holders.setdefault(int(parts[1]), Holder(int(parts[1]), _clean(parts[0]), _clean(parts[2])))
        if _clean(name, 200) not in h.devices:
            h.devices.append(_clean(name, 200))
    return holders


def parse_compute_apps(text: str) -> dict[int, str]:
    """nvidia-smi --query-compute-apps=pid,process_name --format=csv[,noheader]: pid -> name."""
    apps = {}
    for line in text.splitlines():
        pid, _, name = line.partition(",")
        if _PID.match(pid.strip()):
            apps[int(pid.strip())] = _clean(name.strip(), 200)
    return apps


def unit_of(cgroup: str) -> str:
    """The systemd service a process runs in, from /proc/PID/cgroup ("0::/system.slice/x.service")."""
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            if re.match(r"^[A-Za-z0-9@._:-]{1,200}\.service$", part):
                return part
    return ""


def classify(h: Holder, compute_apps: dict[int, str]) -> Kind:
    for kind, unit, names in SERVICES:
        if h.unit == unit or UNIT_ALIASES.get(h.unit) == kind or any(_matches(h.command, n) for n in names):
            return kind
    return "cuda" if h.pid in compute_apps else "process"


def read(fuser: str = "", lsof: str = "", compute_apps: str = "", cgroups: dict[str, str] | None = None) -> list[Holder]:
    """Every holder the texts name, classified, by pid; compute applications that no device
    listing shows (another PID namespace) are holders too."""
    holders = parse_lsof(lsof)
    for pid, h in parse_fuser(fuser).items():
        known = holders.setdefault(pid, h)
        known.devices = sorted(set(known.devices) | set(h.devices))
    apps = parse_compute_apps(compute_apps)
    for pid, name in apps.items():
        holders.setdefault(pid, Holder(pid, name, devices=["(nvidia-smi compute application)"]))
    for pid, h in holders.items():
        h.unit = unit_of(str((cgroups or {}).get(str(pid)) or ""))
        h.kind = classify(h, apps)
    return [holders[pid] for pid in sorted(holders)]


def from_probe(reported: Any) -> list[Holder]:
    """The survey's provisioner_holders (module_utils/holders.py) -> holders."""
    r = reported if isinstance(reported, dict) else {}

    def output(key: str) -> str:
        part = r.get(key)
        return str(part.get("output") or "") if isinstance(part, dict) else ""

    cgroups = r.get("cgroups") if isinstance(r.get("cgroups"), dict) else {}
    return read(fuser=output("fuser"), compute_apps=output("compute_apps"),
                cgroups={str(k): str(v) for k, v in cgroups.items()})


@dataclass(frozen=True)
class Activation:
    """Whether a new driver module can be loaded in place of the old one, without a reboot:
    `load` True with the units to stop first (and start after), or False and why not."""
    load: bool
    why: str
    stop_units: tuple[str, ...] = ()


def activation(holders: list[Holder], modules: dict[str, str] | None = None) -> Activation:
    """The reboot-free activation decision. Only when nothing holds the GPUs but the
    provisioner's own daemons (persistenced, DCGM, the exporter: stopped for the swap and
    started after) and no module outside our reach holds the driver (nvidia_drm used by a
    console or display). Fabric manager is never stopped under a live NVLink fabric, and a
    workload is never stopped: those say why not, naming each holder."""
    blockers = [h for h in holders if h.kind not in STOPPABLE]
    if blockers:
        fm = [h for h in blockers if h.kind == "fabric_manager"]
        why = "; ".join(h.describe() for h in blockers)
        if fm:
            why += (": fabric manager runs the NVSwitch fabric every GPU's NVLink traffic crosses, and is not "
                    "stopped under it; reboot")
        else:
            why += ": stop these processes (drain the host) or reboot"
        return Activation(False, why)
    drm = (modules or {}).get("nvidia_drm", "")
    if drm.isdigit() and int(drm) > 0:
        return Activation(False, f"module nvidia_drm is in use ({drm} references: a console or display server uses "
                                 "the GPU) and cannot be unloaded; reboot")
    units = tuple(sorted({h.unit or _unit_for(h.kind) for h in holders}))
    if not holders:
        return Activation(True, "nothing holds /dev/nvidia*: the old module can be unloaded and the new one loaded")
    return Activation(True, f"only {', '.join(units)} hold /dev/nvidia*: stopped, the old module unloaded and the new "
                            "one loaded, then started again", units)


def _unit_for(kind: str) -> str:
    return next(unit for k, unit, _ in SERVICES if k == kind)
