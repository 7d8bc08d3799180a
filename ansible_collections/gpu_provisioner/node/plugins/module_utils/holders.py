# -*- coding: utf-8 -*-
"""What holds a host's NVIDIA device files: read and classified on the host, the one holder
detection. `provision plan` and the reboot-free driver activation decision judge what the
probe reports (provisioner/judge/holders.py reads the classified list); a MIG change
(module_utils/mig_layout.py, run by mig_apply) stops or waits on what it finds here.

Read-only and bounded. The tools' own text is read and kept in the report as evidence:
`fuser -v` over every /dev/nvidia* character device (its table goes to stderr and the PIDs to
stdout; fuser flushes each, so one pipe for both gives the table as a terminal shows it),
nvidia-smi's compute applications, each holder's /proc/PID/cgroup (its systemd unit) and the
NVIDIA modules' reference counts. `lsof /dev/nvidia*`'s text is read too, for captures.
Everything the tools print is untrusted: lines that do not parse are skipped, PIDs are
numbers, names are cut and kept as data, never a shell word. Standard library only, like the
rest of module_utils.

Kinds, from the process name and, where the host has it, the systemd unit of its cgroup:
persistenced (nvidia-persistenced), fabric_manager (nv-fabricmanager), dcgm (nv-hostengine),
dcgm_exporter, cuda (a process nvidia-smi lists as a compute application) and process
(anything else: a display server, a monitoring agent, a program between CUDA calls).
fuser cuts names to 15 characters and lsof to 9 ("nvidia-persiste", "nv-fabric"), so names
match by prefix."""

from __future__ import annotations

import glob
import os
import re
import stat
import subprocess

MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem", "nouveau")
# Which loaded module holds a reference on which (lsmod's "Used by"): every other reference
# is an open device file or a kernel user, and the module cannot be unloaded under it. The
# rule of NVIDIA's own driver container (NVIDIA/gpu-driver-container, ubuntu22.04/nvidia-driver,
# _unload_driver: nvidia's references above its loaded dependants, or any reference on
# nvidia_uvm / nvidia_modeset / nvidia_peermem, is "driver is in use"), with nvidia_drm's
# reference on nvidia_modeset, as lsmod shows it ("nvidia_modeset ... 1 nvidia_drm").
DEPENDANTS = {"nvidia": ("nvidia_uvm", "nvidia_modeset", "nvidia_peermem"), "nvidia_modeset": ("nvidia_drm",),
              "nvidia_uvm": (), "nvidia_drm": (), "nvidia_peermem": ()}
# The provisioner's own daemons, which only keep the driver initialised or read it: stopping
# them for the swap and starting them after is what a reboot would do to them anyway.
STOPPABLE = ("persistenced", "dcgm", "dcgm_exporter")
MAX_PIDS = 256          # a host with more holders than this is busy whatever they are
MAX_OUTPUT = 200_000

KINDS = ("persistenced", "fabric_manager", "dcgm", "dcgm_exporter", "cuda", "process")
# (kind, the unit's name, the process names it runs under): name prefixes as fuser (15
# characters) and lsof (9) cut them, and the full names the units' ExecStart runs.
SERVICES = (
    ("persistenced", "nvidia-persistenced.service", ("nvidia-persistenced",)),
    ("fabric_manager", "nvidia-fabricmanager.service", ("nv-fabricmanager",)),
    ("dcgm", "nvidia-dcgm.service", ("nv-hostengine",)),
    ("dcgm_exporter", "dcgm-exporter.service", ("dcgm-exporter",)),
)
# The other unit names NVIDIA's packages have used: DCGM's host engine as nv-hostengine.service,
# and the datacenter-gpu-manager-exporter package's own unit (NVIDIA/dcgm-exporter,
# packaging/config-files/systemd/nvidia-dcgm-exporter.service; the dcgm_exporter role masks it
# for its own). The driver role's nvidia_driver_gpu_holder_units lists these units and the
# table's (tests/test_holders.py keeps the two the same).
UNIT_ALIASES = {"nv-hostengine.service": "dcgm", "nvidia-dcgm-exporter.service": "dcgm_exporter"}
MIN_PREFIX = 9  # lsof's cut: a shorter name matches only whole
_NAME = re.compile(r"[^\x21-\x7e]")
_PID = re.compile(r"^[0-9]{1,10}$")


def _clean(text: str, limit: int = 64) -> str:
    return _NAME.sub("?", text)[:limit]


def _matches(name: str, full: str) -> bool:
    return name == full or (len(name) >= MIN_PREFIX and full.startswith(name))


def _holder(pid: int, command: str, user: str = "") -> dict:
    return {"pid": pid, "command": _clean(command), "user": _clean(user), "devices": [], "unit": "",
            "kind": "process", "service_unit": ""}


def parse_fuser(text: str) -> dict[int, dict]:
    """`fuser -v /dev/nvidia*` (table and PIDs in one stream, as a terminal shows them):
    pid -> holder with every device it holds. A device name alone on its line (a long
    /dev/nvidia-nvswitchN) carries over to the next line; "Cannot stat" and other noise is skipped."""
    holders: dict[int, dict] = {}
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
        h = holders.setdefault(pid, _holder(pid, command, user))
        if device not in h["devices"]:
            h["devices"].append(device)
    return holders


def parse_lsof(text: str) -> dict[int, dict]:
    """`lsof /dev/nvidia*`: COMMAND PID USER FD TYPE DEVICE [SIZE/OFF] NODE NAME (SIZE/OFF is
    empty for mmap'ed "mem" lines) -> pid -> holder."""
    holders: dict[int, dict] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8 or not _PID.match(parts[1]) or parts[4] != "CHR":
            continue
        name = _clean(parts[-1] if parts[-1].startswith("/dev/") else "/dev/" + parts[-1], 200)
        h = holders.setdefault(int(parts[1]), _holder(int(parts[1]), parts[0], parts[2]))
        if name not in h["devices"]:
            h["devices"].append(name)
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


def classify(h: dict, compute_apps: dict[int, str]) -> str:
    for kind, unit, names in SERVICES:
        if h["unit"] == unit or UNIT_ALIASES.get(h["unit"]) == kind or any(_matches(h["command"], n) for n in names):
            return kind
    return "cuda" if h["pid"] in compute_apps else "process"


def service_unit(kind: str, unit: str) -> str:
    """The unit that stops a GPU service holder: the one its cgroup names, else the table's;
    "" for a workload (cuda, process), which is never stopped."""
    return unit or next((u for k, u, _ in SERVICES if k == kind), "")


def read(fuser: str = "", lsof: str = "", compute_apps: str = "", cgroups: dict | None = None) -> list[dict]:
    """Every holder the texts name, classified, by pid: {pid, command, user, devices, unit (from
    its cgroup), kind, service_unit}. Compute applications that no device listing shows
    (another PID namespace) are holders too."""
    holders = parse_lsof(lsof)
    for pid, h in parse_fuser(fuser).items():
        known = holders.setdefault(pid, h)
        known["devices"] = sorted(set(known["devices"]) | set(h["devices"]))
    apps = parse_compute_apps(compute_apps)
    for pid, name in apps.items():
        holders.setdefault(pid, dict(_holder(pid, name), devices=["(nvidia-smi compute application)"]))
    for pid, h in holders.items():
        h["unit"] = unit_of(str((cgroups or {}).get(str(pid)) or ""))
        h["kind"] = classify(h, apps)
        h["service_unit"] = service_unit(h["kind"], h["unit"]) if h["kind"] not in ("cuda", "process") else ""
    return [holders[pid] for pid in sorted(holders)]


def _run(argv: list[str], timeout: int) -> dict:
    """rc and output (stdout and stderr in one pipe, as a terminal shows them); never raises."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=timeout, check=False, env=dict(os.environ, LC_ALL="C"))
    except FileNotFoundError:
        return {"rc": 127, "output": f"{argv[0]}: not found"}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "output": f"timed out after {timeout} s"}
    except OSError as exc:
        return {"rc": 126, "output": str(exc)}
    return {"rc": proc.returncode, "output": proc.stdout[:MAX_OUTPUT]}


def devices() -> list[str]:
    """The NVIDIA character devices (/dev/nvidia-caps is a folder: its devices hold nothing
    the driver's unload waits on that /dev/nvidiactl does not show)."""
    found = []
    for path in sorted(glob.glob("/dev/nvidia*")):
        try:
            if stat.S_ISCHR(os.stat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return found


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def _describe(h: dict) -> str:
    devices = h.get("devices") or []
    where = ", ".join(devices[:3]) + (f" and {len(devices) - 3} more" if len(devices) > 3 else "")
    unit = f", unit {h['unit']}" if h.get("unit") else ""
    return f"{h.get('command') or '?'} (pid {h.get('pid')}{unit}) holds {where}"


def in_use(modules: dict) -> str:
    """Why the loaded NVIDIA modules cannot be unloaded now (references beyond their loaded
    dependants, DEPENDANTS), or "" when they can. `modules`: name -> /sys/module/NAME/refcnt."""
    busy = []
    for name, dependants in DEPENDANTS.items():
        refs = str(modules.get(name, "")).strip()
        if not refs.isdigit():
            continue  # not loaded
        expected = sum(1 for d in dependants if d in modules)
        if int(refs) > expected:
            busy.append(f"{name} has {refs} reference(s), {expected} from the NVIDIA modules loaded on it")
    return "; ".join(busy)


def activation(holders: list, modules: dict) -> dict:
    """The reboot-free driver activation decision, from what this module read: {load, why,
    stop_units}. Load the new module in place only when nothing holds the GPUs but the
    provisioner's own daemons (STOPPABLE: stopped for the swap, started after), nouveau does
    not drive them, and, with nothing to stop, no other reference keeps the old module (in_use;
    with daemons to stop, the role checks that again once they are stopped). A workload, a
    display and fabric manager (it runs the NVSwitch fabric every GPU's NVLink traffic
    crosses, and is not stopped under it) keep the reboot, each holder named."""
    blockers = [h for h in holders if h.get("kind") not in STOPPABLE or not h.get("service_unit")]
    if blockers:
        why = "; ".join(_describe(h) for h in blockers)
        if any(h.get("kind") == "fabric_manager" for h in blockers):
            why += (": fabric manager runs the NVSwitch fabric every GPU's NVLink traffic crosses, and is not "
                    "stopped under it; reboot")
        else:
            why += ": stop these processes (drain the host) or reboot"
        return {"load": False, "why": why, "stop_units": []}
    if str(modules.get("nouveau", "")).strip():
        return {"load": False, "stop_units": [],
                "why": "nouveau is loaded and drives the GPUs; it is blacklisted, so the reboot loads the NVIDIA module"}
    units = sorted({h["service_unit"] for h in holders})
    if not holders:
        busy = in_use(modules)
        if busy:
            return {"load": False, "stop_units": [],
                    "why": f"nothing holds /dev/nvidia*, but the old module is in use ({busy}: a console, a display "
                           "or a kernel user) and cannot be unloaded; reboot"}
        return {"load": True, "stop_units": [],
                "why": "nothing holds /dev/nvidia*: the old module can be unloaded and the new one loaded"}
    return {"load": True, "stop_units": units,
            "why": f"only {', '.join(units)} hold /dev/nvidia*: stopped, the old module unloaded and the new one "
                   "loaded, then started again"}


def collect(timeout: int = 30) -> dict:
    """devices, fuser {rc, output}, compute_apps {rc, output}, cgroups {pid: text}, modules
    {name: refcnt text} (the evidence), holders (read() of it) and the activation decision on
    them; fuser and nvidia-smi are not run where there is no device."""
    found = devices()
    modules = loaded_modules()
    if not found:
        return {"devices": [], "fuser": None, "compute_apps": None, "cgroups": {}, "modules": modules, "holders": [],
                "activation": activation([], modules)}
    fuser = _run(["fuser", "-v", "--"] + found, timeout)
    apps = _run(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"], timeout)
    pids = list(parse_fuser(fuser["output"]))[:MAX_PIDS]
    cgroups = {str(pid): text for pid in pids if (text := _read(f"/proc/{pid}/cgroup")) is not None}
    holders = read(fuser=fuser["output"], compute_apps=apps["output"] if apps["rc"] == 0 else "", cgroups=cgroups)
    return {"devices": found, "fuser": fuser, "compute_apps": apps, "cgroups": cgroups, "modules": modules,
            "holders": holders, "activation": activation(holders, modules)}


def loaded_modules() -> dict:
    """MODULES loaded now: name -> its reference count (/sys/module/NAME/refcnt, what lsmod shows)."""
    return {m: (_read(f"/sys/module/{m}/refcnt") or "").strip() for m in MODULES if os.path.isdir(f"/sys/module/{m}")}
