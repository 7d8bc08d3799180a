# -*- coding: utf-8 -*-
"""A host's MIG layout: read what nvidia-smi reports, plan the steps to the declared layout,
apply them. Standard library only: the mig_apply module runs it, and at boot provision-mig
(the mig role's unit) runs the same code, so the layout survives a reboot.

Everything nvidia-smi prints is data; every command is an argv list, never a shell line.
The plan is pure (tests/test_mig.py runs it on captured states); `apply` executes it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

NVIDIA_SMI = "nvidia-smi"
# `nvidia-smi mig -lgi`: | GPU  Name  Profile ID  Instance ID  Placement Start:Size |
_LGI_ROW = re.compile(r"^\|\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s+\|\s*$")
_ROUNDS = 4  # enable -> reset -> create: a fresh host needs three; one spare


def _mode(text: str | None) -> bool | None:
    value = (text or "").strip()
    return True if value == "Enabled" else False if value == "Disabled" else None


def _int(text: str | None) -> int | None:
    value = (text or "").strip()
    return int(value) if value.isdigit() else None


def read_lgi(text: str) -> dict[int, list[dict]]:
    """GPU index -> its GPU instances (profile name, profile ID, instance ID, first slice, size)."""
    found: dict[int, list[dict]] = {}
    for line in text.splitlines():
        m = _LGI_ROW.match(line.strip())
        if m:
            gpu, name, pid, gi, start, size = m.groups()
            found.setdefault(int(gpu), []).append({"profile": name, "profile_id": int(pid), "gi": int(gi),
                                                   "start": int(start), "size": int(size)})
    return found


def read_xml(text: str) -> list[dict]:
    """Per GPU, in nvidia-smi's index order: name, MIG mode current and pending (None: no MIG),
    the MIG devices (GPU instance, compute instance) and the GPU instances processes run on."""
    root = ET.fromstring(text.strip())
    gpus = []
    for gpu in root.findall("gpu"):
        devices = [(_int(d.findtext("gpu_instance_id")), _int(d.findtext("compute_instance_id")))
                   for d in gpu.findall("mig_devices/mig_device")]
        busy: dict[int, int] = {}
        for proc in gpu.findall("processes/process_info"):
            gi = _int(proc.findtext("gpu_instance_id"))
            busy[gi if gi is not None else -1] = busy.get(gi if gi is not None else -1, 0) + 1
        gpus.append({"name": (gpu.findtext("product_name") or "").strip(),
                     "current": _mode(gpu.findtext("mig_mode/current_mig")),
                     "pending": _mode(gpu.findtext("mig_mode/pending_mig")),
                     "devices": devices, "busy": busy})
    return gpus


def state(xml_text: str, lgi_text: str) -> dict[int, dict]:
    """What plan() compares: per GPU index the modes, the instances (with whether each has a
    compute instance and how many processes use it)."""
    gis = read_lgi(lgi_text)
    result = {}
    for index, gpu in enumerate(read_xml(xml_text)):
        with_ci = {gi for gi, _ci in gpu["devices"]}
        instances = [dict(i, has_ci=i["gi"] in with_ci, processes=gpu["busy"].get(i["gi"], 0))
                     for i in gis.get(index, [])]
        result[index] = {"name": gpu["name"], "current": gpu["current"], "pending": gpu["pending"],
                         "instances": instances, "processes": sum(gpu["busy"].values())}
    return result


def layout_of(gpu: dict) -> list[str]:
    return sorted(i["profile"] for i in gpu["instances"])


PROFILE_NAME = re.compile(r"^[1-8]g\.[0-9]{1,3}gb(\+me)?$")


def layout_from(layout: dict) -> dict[int, list[str]]:
    """A layout as the role passes it (GPU index as a string -> profile names), checked again
    here: each name becomes an nvidia-smi argument."""
    want = {}
    for key, names in layout.items():
        if not str(key).isdigit() or not isinstance(names, list) or not all(
                isinstance(n, str) and PROFILE_NAME.match(n) for n in names):
            raise ValueError(f"layout: {key!r}: {names!r} is not a GPU index with a list of MIG profile names")
        want[int(key)] = list(names)
    return want


def _step(kind: str, gpu: int | None, argv: list[str], why: str) -> dict:
    return {"kind": kind, "gpu": gpu, "argv": argv, "why": why}


def _gpu_plan(index: int, want: list[str], gpu: dict, reconfigure_in_use: bool) -> tuple[list[dict], list[str]]:
    """The next steps for one GPU (the rest follow once they have run), or why it is left alone."""
    i = str(index)
    if gpu["current"] is None:
        return [], [f"GPU {index} ({gpu['name']}) reports no MIG mode: it does not support MIG"]
    if not gpu["current"]:
        if gpu["pending"]:
            # Enabled but not yet active: the GPU must be reset (or the host rebooted).
            return [_step("reset", index, [NVIDIA_SMI, "-i", i, "-r"],
                          f"GPU {index}: MIG mode is pending; a GPU reset makes it current")], []
        return [_step("enable", index, [NVIDIA_SMI, "-i", i, "-mig", "1"], f"GPU {index}: enable MIG mode")], []
    if layout_of(gpu) == sorted(want):
        missing = [str(x["gi"]) for x in gpu["instances"] if not x["has_ci"]]
        return ([_step("create", index, [NVIDIA_SMI, "mig", "-i", i, "-gi", ",".join(missing), "-cci"],
                       f"GPU {index}: a compute instance for GPU instance(s) {', '.join(missing)}")]
                if missing else []), []
    busy = [x for x in gpu["instances"] if x["processes"]]
    if busy and not reconfigure_in_use:
        return [], [f"GPU {index}: GPU instance(s) {', '.join(str(x['gi']) for x in busy)} "
                    f"({', '.join(x['profile'] for x in busy)}) are in use and differ from the layout "
                    f"({', '.join(want)}); they are left as they are (mig.reconfigure_in_use: true allows it)"]
    steps = []
    if gpu["instances"]:
        steps += [_step("destroy", index, [NVIDIA_SMI, "mig", "-i", i, "-dci"],
                        f"GPU {index}: destroy the compute instances of {', '.join(layout_of(gpu))}"),
                  _step("destroy", index, [NVIDIA_SMI, "mig", "-i", i, "-dgi"],
                        f"GPU {index}: destroy the GPU instances {', '.join(layout_of(gpu))}")]
    steps.append(_step("create", index, [NVIDIA_SMI, "mig", "-i", i, "-cgi", ",".join(want), "-C"],
                       f"GPU {index}: create {', '.join(want)}, each with its compute instance"))
    return steps, []


# What a MIG mode or instance change does with each kind of holder (module_utils/holders.py
# classifies them), as NVIDIA's MIG manager does it: its systemd hooks stop nvidia-dcgm.service
# and dcgm-exporter.service (with nvsm and kubelet) before a mode change and start them after,
# and it runs after nvidia-persistenced and nvidia-fabricmanager, which stay up
# (https://github.com/NVIDIA/mig-parted/blob/main/deployments/systemd/hooks.sh and
# nvidia-gpu-reset.target there). The MIG user guide: "All daemons holding handles on driver
# modules need to be stopped before MIG enablement", naming DCGM
# (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/deployment-considerations.html).
STOPPED_AROUND = frozenset({"dcgm", "dcgm_exporter"})
KEPT_RUNNING = frozenset({"persistenced", "fabric_manager"})


def plan(want: dict[int, list[str]], now: dict[int, dict], holders: list[dict],
         reconfigure_in_use: bool = False) -> dict:
    """The ordered steps from `now` to `want` (GPU index -> instances, largest first).

    holders: what holds the GPUs, classified by module_utils/holders.py (the detection
    `provision plan` reports): [{"pid", "command", "kind", "service_unit", ...}]. A matching
    layout gives no steps. Steps that change the mode or destroy instances need the GPUs free:
    DCGM and the exporter are stopped first and started again last; persistenced and fabric
    manager stay; any other process (a CUDA program, a display server) is never killed and
    blocks the change unless reconfigure_in_use (then a reset it keeps from working means a reboot)."""
    steps: list[dict] = []
    blocked: list[str] = []
    for index, names in sorted(want.items()):
        if index not in now:
            blocked.append(f"GPU {index}: not found (nvidia-smi lists {len(now)} GPU(s))")
            continue
        more, why = _gpu_plan(index, names, now[index], reconfigure_in_use)
        steps += more
        blocked += why
    disruptive = [s for s in steps if s["kind"] in ("enable", "reset", "destroy")]
    if not disruptive:
        return {"steps": steps, "blocked": blocked}
    services = [h for h in holders if h.get("kind") in STOPPED_AROUND and h.get("service_unit")]
    processes = [h for h in holders if h not in services and h.get("kind") not in KEPT_RUNNING]
    if processes and not reconfigure_in_use:
        names = ", ".join(f"{h.get('command', '?')} (pid {h.get('pid', '?')}, {h.get('kind', 'process')})"
                          for h in processes)
        return {"steps": [s for s in steps if s not in disruptive and s["kind"] != "create"],
                "blocked": blocked + [f"processes hold the GPUs: {names}; stop them, then run again "
                                      "(MIG mode changes and instance changes need idle GPUs; "
                                      "mig.reconfigure_in_use: true goes ahead regardless)"]}
    units = list(dict.fromkeys(h["service_unit"] for h in services))
    stop = [_step("stop", None, ["systemctl", "stop", u], f"{u} holds the GPUs") for u in units]
    start = [_step("start", None, ["systemctl", "start", u], f"start {u} again") for u in reversed(units)]
    return {"steps": stop + steps + start, "blocked": blocked}


def _run(argv: list[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return done.returncode, done.stdout, done.stderr


def read_state(xml_text: str, lgi_rc: int | None, lgi_text: str) -> dict[int, dict] | str:
    """state() from what the commands returned, or why it cannot be trusted. `mig -lgi` exits
    non-zero when there is no GPU instance to list (MIG off, or none created): that reads as no
    instances, unless the XML shows MIG devices, which only instances can hold."""
    try:
        devices = bool(ET.fromstring(xml_text.strip()).findall("gpu/mig_devices/mig_device"))
    except ET.ParseError as exc:
        return f"nvidia-smi -q -x printed no readable XML: {exc}"
    if lgi_rc not in (0, None) and devices:
        return f"nvidia-smi mig -lgi failed (rc {lgi_rc}) although MIG devices exist: {lgi_text.strip()[:300]}"
    return state(xml_text, lgi_text if lgi_rc == 0 else "")


def read_host(run=_run) -> dict[int, dict] | str:
    """The host's state, or why it cannot be read (no nvidia-smi, no GPU)."""
    rc, xml_text, err = run([NVIDIA_SMI, "-q", "-x"])
    if rc != 0:
        return f"nvidia-smi -q -x failed (rc {rc}): {(err or xml_text).strip()[:300]}"
    lgi_rc, lgi_text, lgi_err = run([NVIDIA_SMI, "mig", "-lgi"])
    return read_state(xml_text, lgi_rc, lgi_text + lgi_err)


def apply(want: dict[int, list[str]], holders: list[dict], reconfigure_in_use: bool = False,
          check: bool = False, run=_run) -> dict:
    """Plan, run, read again, until the layout matches or a step cannot go on. A reset that
    fails (a GPU in use, or one NVSwitch systems do not reset alone) means a reboot."""
    done: list[dict] = []
    result = {"changed": False, "done": done, "blocked": [], "reboot_required": False, "why_reboot": "",
              "planned": []}
    for _ in range(_ROUNDS):
        now = read_host(run)
        if isinstance(now, str):
            result["blocked"].append(now)
            return result
        step_plan = plan(want, now, holders, reconfigure_in_use)
        result["blocked"] = step_plan["blocked"]
        if not step_plan["steps"]:
            return result
        result["changed"] = True
        if check:
            result["planned"] = step_plan["steps"]
            return result
        for step in step_plan["steps"]:
            rc, out, err = run(step["argv"])
            done.append(dict(step, rc=rc, output=(out + err).strip()[-2000:]))
            if rc != 0 and step["kind"] == "reset":
                result.update(reboot_required=True, why_reboot=f"{step['why']}, but the reset failed: "
                                                               f"{(err or out).strip()[:300]}")
                _start_again(step_plan["steps"], run, done)
                return result
            if rc != 0 and step["kind"] not in ("stop", "start"):
                result["blocked"].append(f"{' '.join(step['argv'])} failed (rc {rc}): {(err or out).strip()[:300]}")
                _start_again(step_plan["steps"], run, done)
                return result
    result["blocked"].append(f"the layout still differs after {_ROUNDS} rounds")
    return result


def _start_again(steps: list[dict], run, done: list[dict]) -> None:
    for step in steps:
        if step["kind"] == "start":
            rc, out, err = run(step["argv"])
            done.append(dict(step, rc=rc, output=(out + err).strip()[-2000:]))


def main(argv: list[str]) -> int:
    """provision-mig CONFIG.json: apply the declared layout at boot (the unit's ExecStart)."""
    with open(argv[0], encoding="utf-8") as f:
        config = json.load(f)
    want = layout_from(config["layout"])
    # No holders: the unit runs before every service that uses the GPUs (and starting one of
    # them from here would wait on this unit).
    result = apply(want, [], bool(config.get("reconfigure_in_use", False)))
    print(json.dumps(result))
    return 1 if result["blocked"] or result["reboot_required"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
