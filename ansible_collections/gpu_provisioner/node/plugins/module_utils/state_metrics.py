# -*- coding: utf-8 -*-
"""The node's own drift and GPU check, written as a Prometheus textfile.

provision-state.service (started by provision-state.timer, role state_timer) runs this
with plain `python3 -I -S`: no Ansible and no controller on the node, the standard
library only. The drift half is state.py, the very code the provisioner_state module runs
for `provision check`. The GPU half is the cheap nvidia-smi part of verify: one
`nvidia-smi --query-gpu` call, judged here against what the profile expects.

The textfile (node_exporter's textfile collector reads it) holds, and only holds:

  gpu_provisioner_info{profile,profile_sha256,version} 1
  gpu_provisioner_drift_items{kind}                       one series per kind in DRIFT_KINDS, always
  gpu_provisioner_drift_items_detail{kind,item} 1         one per drifted item, at most MAX_DETAIL
  gpu_provisioner_drift_items_detail_dropped              drifted items left out of _detail
  gpu_provisioner_check_status{check} 1|0                 per check in CHECKS that ran (1 pass, 0 fail)
  gpu_provisioner_last_run_timestamp_seconds
  gpu_provisioner_last_run_success                        1: the state was read and compared

and, so that `provision check --from-prometheus` judges exactly what `provision check` does
(provisioner/engine/prometheus.py reads them back), when the state was read:

  gpu_provisioner_components                              how many component series follow
  gpu_provisioner_component_items{component}              held packages, packages and units the record
                                                          lists for a role (what `check` calls installed)
  gpu_provisioner_kernel_images                           installed kernel images, all of them
  gpu_provisioner_kernel_image{kernel} 1                  one per installed image, at most MAX_KERNELS
  gpu_provisioner_dkms_modules                            NVIDIA DKMS (version, kernel) entries, all
  gpu_provisioner_dkms_module{module,version,kernel,state} 1   one per entry (kernel "" for a version
                                                          DKMS only has the source of), at most MAX_MODULES
  gpu_provisioner_dkms_available                          1: dkms is installed
  gpu_provisioner_in_container                            1: a container (it shares its host's kernel)

Cardinality per host is bounded: 1 info, len(DRIFT_KINDS) drift counts, at most
MAX_DETAIL detail series (item labels cut to ITEM_MAX characters), at most len(CHECKS)
checks, at most MAX_COMPONENTS + MAX_KERNELS + MAX_MODULES kernel and component series,
9 more. A check that could not run is absent, never passed: on a host where nvidia-smi
cannot run, `nvidia-smi` is 0 and the GPU checks behind it are absent. A count above what
its series list says the list was cut: a reader must not judge from the cut list.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import time

from ansible_collections.gpu_provisioner.node.plugins.module_utils.kernels import read as read_kernels
from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import KINDS, RECORD, compare, write_atomic

# The kinds drift is counted by: the record's own kinds, `dpkg` (packages an interrupted
# run left half-configured) and `record` (1 when the host has no state record at all).
DRIFT_KINDS = KINDS + ("dpkg", "record")
CHECKS = ("nvidia-smi", "gpu count", "driver version", "persistence mode", "ecc errors")
MAX_DETAIL = 50
ITEM_MAX = 200
MAX_COMPONENTS = 64
MAX_KERNELS = 32
MAX_MODULES = 64
# What `provision check` counts as a component still installed (engine/drift.components_off).
INSTALLED_KINDS = ("held_packages", "packages", "units")
SMI_FIELDS = ("index", "name", "driver_version", "persistence_mode", "ecc.errors.uncorrected.volatile.total")
SMI_TIMEOUT = 30
TEXTFILE = "/var/lib/prometheus/node-exporter/gpu_provisioner.prom"


def run_nvidia_smi(binary: str = "nvidia-smi", timeout: int = SMI_TIMEOUT) -> dict:
    """One `nvidia-smi --query-gpu` call: rc, stdout, stderr; missing / timed_out when it could not run."""
    cmd = [binary, "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    except FileNotFoundError:
        return {"missing": True, "rc": 127, "stdout": "", "stderr": ""}
    except subprocess.TimeoutExpired:
        return {"timed_out": True, "timeout": timeout, "rc": -1, "stdout": "", "stderr": ""}
    return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


def read_gpus(text: str) -> list[dict]:
    """`--format=csv` (with its header, any columns, any order) -> one {field: value} per GPU.
    Units in the header (`memory.total [MiB]`) are dropped from the field names."""
    rows = [row for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if row]
    if not rows or "name" not in [c.split(" [")[0].strip() for c in rows[0]]:
        raise ValueError("no CSV header naming `name` in the first line: " + " ".join(text.split())[:160])
    header = [c.split(" [")[0].strip() for c in rows[0]]
    return [dict(zip(header, (v.strip() for v in row))) for row in rows[1:]]


def _first_line(smi: dict) -> str:
    text = " ".join(f"{smi.get('stdout', '')} {smi.get('stderr', '')}".split())
    return text[:200] or "no output"


def gpu_checks(smi: dict, expect: dict) -> list[dict]:
    """The nvidia-smi checks, each {check, ok, detail}. What could not be checked is left out."""
    if smi.get("missing"):
        return [{"check": "nvidia-smi", "ok": False, "detail": "nvidia-smi could not run: it is not installed"}]
    if smi.get("timed_out"):
        return [{"check": "nvidia-smi", "ok": False,
                 "detail": f"nvidia-smi could not run: no answer within {smi.get('timeout')} s (a hung GPU or driver)"}]
    if smi.get("rc") != 0:
        return [{"check": "nvidia-smi", "ok": False,
                 "detail": f"nvidia-smi could not run (exit {smi.get('rc')}): {_first_line(smi)}; "
                           "GPU checks not run"}]
    try:
        gpus = read_gpus(smi.get("stdout", ""))
    except ValueError as exc:
        return [{"check": "nvidia-smi", "ok": False, "detail": f"nvidia-smi's output could not be read: {exc}"}]
    out = [{"check": "nvidia-smi", "ok": True, "detail": f"answered for {len(gpus)} GPU(s)"}]
    want = int(expect.get("gpu_count", 0))
    out.append({"check": "gpu count", "ok": len(gpus) == want, "detail": f"{len(gpus)} GPU(s), profile expects {want}"})
    if not gpus:
        return out
    driver = expect.get("driver_version")
    if driver:
        seen = sorted({g.get("driver_version", "") for g in gpus})
        out.append({"check": "driver version", "ok": seen == [driver],
                    "detail": f"loaded {', '.join(seen)}, profile pins {driver}"})
    if expect.get("require_persistence"):
        off = [g.get("index", "?") for g in gpus if g.get("persistence_mode", "").lower() != "enabled"]
        out.append({"check": "persistence mode", "ok": not off,
                    "detail": f"off on GPU(s) {', '.join(off)}" if off else "on for every GPU"})
    counts = [(g.get("index", "?"), g.get("ecc.errors.uncorrected.volatile.total", "")) for g in gpus]
    counted = [(i, int(v)) for i, v in counts if v.isdigit()]  # [N/A]: no ECC on this GPU, not judged
    if counted:
        limit = int(expect.get("ecc_uncorrectable_max", 0))
        bad = [f"GPU {i}: {n}" for i, n in counted if n > limit]
        out.append({"check": "ecc errors", "ok": not bad,
                    "detail": (f"uncorrectable ECC errors since the driver loaded over {limit}: {'; '.join(bad)}"
                               if bad else f"uncorrectable ECC errors within {limit} on {len(counted)} GPU(s)")})
    return out


def _label(value: str) -> str:
    """A label value in the text exposition format: backslash, quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def drift_items(state: dict) -> list[dict]:
    """Every drifted item as {kind, item}: the record's differences, dpkg's audit, no record."""
    items = [{"kind": d["kind"], "item": d["item"]} for d in state.get("differences") or []]
    if state.get("dpkg_audit"):
        items.append({"kind": "dpkg", "item": "packages left half-configured by an interrupted run"})
    if not state.get("recorded"):
        items.append({"kind": "record", "item": "no state record: never converged"})
    return items


def textfile(state: dict | None, checks: list[dict], *, version: str, now: float, kernels: dict | None = None) -> str:
    """The whole textfile. state None: the state could not be read (last_run_success 0).
    kernels: kernels.read()'s reading (None: not read, and the kernel families are left out)."""
    lines: list[str] = []

    def family(name: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        for labels, value in samples:
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            number = str(int(value)) if float(value).is_integer() else repr(float(value))  # full precision
            lines.append(f"{name}{{{text}}} {number}" if text else f"{name} {number}")

    record = state or {}
    family("gpu_provisioner_info", "The profile this host's state record names, and the checker's version.",
           [({"profile": record.get("profile", ""), "profile_sha256": record.get("profile_sha256", ""),
              "version": version}, 1)])
    if state is not None:
        items = drift_items(state)
        family("gpu_provisioner_drift_items", "Items that differ from the host's state record, by kind.",
               [({"kind": kind}, sum(1 for i in items if i["kind"] == kind)) for kind in DRIFT_KINDS])
        family("gpu_provisioner_drift_items_detail",
               f"One series per drifted item (at most {MAX_DETAIL} per host; item cut to {ITEM_MAX} characters).",
               [({"kind": i["kind"], "item": i["item"][:ITEM_MAX]}, 1) for i in items[:MAX_DETAIL]])
        family("gpu_provisioner_drift_items_detail_dropped",
               "Drifted items counted in gpu_provisioner_drift_items but left out of the _detail family.",
               [({}, max(0, len(items) - MAX_DETAIL))])
    if state is not None:
        _state_details(family, state, kernels)
    family("gpu_provisioner_check_status", "A check of the cheap nvidia-smi part of verify: 1 pass, 0 fail; "
                                           "absent when it could not run.",
           [({"check": c["check"]}, 1 if c["ok"] else 0) for c in checks])
    family("gpu_provisioner_last_run_timestamp_seconds", "When provision-state last ran (Unix time).", [({}, now)])
    family("gpu_provisioner_last_run_success", "1 when provision-state read and compared the state.",
           [({}, 1 if state is not None else 0)])
    return "\n".join(lines) + "\n"


def _state_details(family, state: dict, kernels: dict | None) -> None:
    """The rest of what `provision check` judges: the record's components, and the kernels
    with NVIDIA's DKMS modules (left out when they could not be read)."""
    components = sorted((state.get("components") or {}).items())
    family("gpu_provisioner_components", "Components (roles) the host's state record lists.", [({}, len(components))])
    family("gpu_provisioner_component_items", "Held packages, packages and units the record lists for a component.",
           [({"component": role}, sum(len(items.get(k) or []) for k in INSTALLED_KINDS))
            for role, items in components[:MAX_COMPONENTS]])
    if kernels is None:
        return
    images = list(kernels.get("images") or [])
    family("gpu_provisioner_kernel_images", "Installed kernel images.", [({}, len(images))])
    family("gpu_provisioner_kernel_image", f"One per installed kernel image (at most {MAX_KERNELS}).",
           [({"kernel": k}, 1) for k in images[:MAX_KERNELS]])
    entries = [({"module": mod.get("module", ""), "version": version, "kernel": kernel, "state": st}, 1)
               for version, mod in sorted((kernels.get("dkms") or {}).items())
               for kernel, st in (sorted((mod.get("kernels") or {}).items()) or [("", "added")])]
    family("gpu_provisioner_dkms_modules", "NVIDIA DKMS module entries (version, kernel).", [({}, len(entries))])
    family("gpu_provisioner_dkms_module", f"One per NVIDIA DKMS module version and kernel (kernel empty: only "
                                          f"added; at most {MAX_MODULES}).", entries[:MAX_MODULES])
    family("gpu_provisioner_dkms_available", "1 when dkms is installed.", [({}, 1 if kernels.get("dkms_rc") == 0 else 0)])
    family("gpu_provisioner_in_container", "1 in a container (it shares its host's kernel).",
           [({}, 1 if kernels.get("in_container") else 0)])


def _read_kernels() -> dict | None:
    try:
        return read_kernels(with_secure_boot=False)
    except Exception:  # noqa: BLE001 - the textfile then says nothing about kernels, and check calls the host unknown
        return None


def run(config: dict, *, smi_binary: str = "nvidia-smi") -> dict:
    """Read the state and the GPUs, write the textfile (and the JSON status beside the config's
    `status` path); returns the status."""
    now = time.time()
    try:
        state = compare(config.get("record", RECORD))
        error = ""
    except Exception as exc:  # noqa: BLE001 - the textfile must still say the run failed
        state, error = None, f"{type(exc).__name__}: {exc}"
    checks = gpu_checks(run_nvidia_smi(smi_binary), config) if config.get("nvidia_smi", True) else []
    version = str(config.get("version", ""))
    kernels = _read_kernels() if state is not None else None
    write_atomic(config.get("textfile", TEXTFILE), textfile(state, checks, version=version, now=now, kernels=kernels))
    status = {"time": now, "version": version, "error": error, "checks": checks,
              "drift": drift_items(state) if state is not None else [],
              "differences": (state or {}).get("differences", []), "profile": (state or {}).get("profile", "")}
    if config.get("status"):
        write_atomic(config["status"], json.dumps(status, indent=2, sort_keys=True) + "\n")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="provision-state", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="/etc/gpu-provisioner/provision-state.json")
    args = parser.parse_args(argv)
    try:
        with open(args.config, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"provision-state: cannot read {args.config}: {exc}", file=sys.stderr)
        return 1
    try:
        status = run(config)
    except OSError as exc:
        print(f"provision-state: cannot write the textfile: {exc}", file=sys.stderr)
        return 1
    # One line per finding, for the journal (journalctl -u provision-state).
    if status["error"]:
        print(f"state not read: {status['error']}")
    for item in status["drift"]:
        print(f"drift [{item['kind']}] {item['item']}")
    for check in status["checks"]:
        print(f"check {check['check']}: {'pass' if check['ok'] else 'FAIL'}: {check['detail']}")
    print(f"{len(status['drift'])} drifted item(s), {sum(not c['ok'] for c in status['checks'])} failed check(s)")
    return 0
