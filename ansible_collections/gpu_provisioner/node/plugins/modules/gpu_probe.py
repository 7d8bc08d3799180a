#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Everything verification judges about one host, in one module call: nvidia-smi's XML,
topo -m, nvlink -s, the loaded kernel module, the units, nvcc, the torch probe, the
kernel log's NVIDIA lines since boot and, with long_runs, nccl-tests, dcgmi diag and the
exporter's scrape. Read-only; judges nothing (the controller does)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_probe
short_description: Collect what provision verify judges, in one call, changing nothing.
description:
  - Runs each probe with a bounded time and returns its argv, rc, stdout, stderr, seconds
    and whether it timed out or was missing. Read-only; supports check mode (it runs the
    same read-only probes there).
  - With C(long_runs), the same call also runs nccl-tests' all_reduce_perf and
    C(dcgmi diag) (where installed and a GPU is seen) and fetches dcgm-exporter's
    C(/metrics) (where the exporter is expected or its unit is active). So one module call
    per host returns everything verify judges, as C(provisioner_verify), the record the
    controller reads (no set_fact or debug per host, which cost a third of verify's time
    at 100 hosts; bench/fleet.py).
options:
  timeout:
    type: int
    default: 60
    description: Seconds each probe may run.
  torch_timeout:
    type: int
    default: 300
    description: >-
      Seconds the torch import, each framework probe, nccl-tests and dcgmi diag may each run
      (a cold import on a network filesystem is slow; the long runs take minutes).
  python:
    type: str
    default: ""
    description: The environment's Python ("" = the one the python_env role recorded in its local fact).
  torch_snippet:
    type: str
    default: ""
    description: >-
      The Python the torch probe runs; it prints one JSON line. Empty skips the torch probe.
      It runs as the environment's owner (whoever but root owns its folder or site-packages,
      else the owner python_env recorded), in a minimal environment: never as root for an
      environment another user can write.
  framework_envs:
    type: list
    elements: dict
    default: []
    description: >-
      The TensorFlow and JAX environments to probe, each C({name, python, owner, framework}) as
      the controller rendered them from the profile. Each runs C(framework_snippets[framework])
      with its Python, as its owner (as the torch probe does); the runs are returned under
      C(framework_probes), keyed by name.
  framework_snippets:
    type: dict
    default: {}
    description: The Python each framework's probe runs (tensorflow, jax); it prints one JSON line.
  facts_dir:
    type: path
    default: /etc/ansible/facts.d
    description: "Where the roles' local facts are read from."
  fabric_manager_unit:
    type: str
    default: nvidia-fabricmanager.service
    description: "The fabric manager's systemd unit, whose state is read."
  exporter_unit:
    type: str
    default: dcgm-exporter.service
    description: "dcgm-exporter's systemd unit, whose state is read."
  nccl_candidates:
    type: list
    elements: str
    default: []
    description: Paths of all_reduce_perf to look for (the first that exists is returned as nccl_binary).
  max_output_chars:
    type: int
    default: 400000
    description: Each probe's stdout is cut to this many characters.
  infiniband:
    type: bool
    default: false
    description: Also read the InfiniBand ports (/sys/class/infiniband, and ibstat where installed).
  preflight:
    type: bool
    default: false
    description: >-
      Also return C(provisioner_preflight) and C(provisioner_state) (what
      gpu_provisioner.node.preflight_probe returns), so `provision up` makes one call per
      host for preflight and verification; then C(in_recorded_state) says whether the
      record matches C(expect_profile)/C(expect_sha256) with nothing moved since.
  state_path:
    type: path
    default: /etc/ansible/facts.d/provisioner.fact
    description: The state record (with preflight).
  expect_profile:
    type: str
    default: ""
    description: The profile's name the host should have recorded (with preflight).
  expect_sha256:
    type: str
    default: ""
    description: The profile's sha256 (with this host's overrides) the host should have recorded (with preflight).
  containers_runtime:
    type: str
    default: ""
    description: >-
      The profile's container engine (docker, containerd, podman; "" reads none). Its own view
      (docker info, containerd config dump, podman info --format json), nvidia-container-cli
      info, the CDI specs under /etc/cdi and /var/run/cdi and where the toolkit's tools are are
      returned as C(containers).
  packages:
    type: list
    elements: str
    default: []
    description: >-
      With preflight, the packages whose installed version and hold to return as
      C(provisioner_packages) (the profile's packages: what `provision plan` compares with the
      versions it would install).
  long_runs:
    type: bool
    default: false
    description: >-
      Also run the long probes: all_reduce_perf (the first of C(nccl_candidates)) with
      C(nccl_args) and C(-g <GPUs seen>), C(dcgmi diag -r dcgm_diag_level) when the level is
      above 0, each only where installed and a GPU is seen, and the exporter's scrape. With
      preflight, only on a host in its recorded state (C(in_recorded_state)): a host about to
      be converged runs them in verify, after its converge.
  nccl_args:
    type: list
    elements: str
    default: ["-b", "8", "-e", "1G", "-f", "2"]
    description: all_reduce_perf's arguments before C(-g).
  dcgm_diag_level:
    type: int
    default: 0
    choices: [0, 1, 2, 3]
    description: C(dcgmi diag -r) level; 0 runs no diagnostic.
  metrics_max_chars:
    type: int
    default: 200000
    description: The exporter's C(/metrics) body is cut to this many characters.
"""

EXAMPLES = r"""
- name: Read everything provision verify judges, in one call.
  gpu_provisioner.node.gpu_probe:
    timeout: 60
    infiniband: true
  register: probe

- name: The same, plus the preflight facts and the state record compared, as provision up's survey.
  gpu_provisioner.node.gpu_probe:
    preflight: true
    state_path: /etc/ansible/facts.d/provisioner.fact
    packages: [nvidia-driver, nvidia-kernel-dkms]
  register: survey
"""

RETURN = r"""
provisioner_verify:
  description: >-
    The record the controller judges (provisioner/judge/verify.py); its shape is described
    in roles/gpu_verify/README.md. An rc of -1 means "did not run".
  type: dict
  contains:
    probe:
      description: >-
        commands (nvidia_smi_xml, topo, nvlink, nvcc, torch, kernel_log: argv, rc, stdout,
        stderr, seconds, timed_out, missing; kernel_log also lines), framework_probes (per
        framework_envs name: the same, plus ran, python, owner), module_version, units
        (fabric_manager, exporter: systemctl show properties), fabric_manager_version,
        local_facts (the facts.d files), gpus_seen, nccl_binary, dcgmi, container (systemd's
        name for it, "" on a machine), peermem_loaded, infiniband (with the infiniband option:
        present, sysfs port values, ibstat), kernels (module_utils/kernels.py), scratch
        (module_utils/scratch.py observe), containers (with containers_runtime: runtime, engine,
        container_cli, cdi_specs, cdi_left_out, toolkit), long_runs (whether the long probes
        ran), seconds; with preflight, also in_recorded_state.
      type: dict
    nccl_tests:
      description: all_reduce_perf's run (ran, binary, rc, stdout).
      type: dict
    exporter:
      description: >-
        expected (the dcgm_exporter local fact), unit_state (ActiveState, or not-found), url,
        rc (0 on HTTP 200, 1 otherwise, -1 when not fetched), status (the HTTP status, -1 when
        nothing answered) and body (on HTTP 200, cut to metrics_max_chars).
      type: dict
    dcgmi_diag:
      description: dcgmi diag's run (ran, rc, stdout).
      type: dict
provisioner_preflight:
  description: With preflight, what provisioner/judge/preflight.py judges (see preflight_probe).
  type: dict
provisioner_state:
  description: With preflight, the host compared with its record, and its kernels (see provisioner_state).
  type: dict
provisioner_packages:
  description: With preflight, each of C(packages) -> {version, hold}, or null where it is not installed.
  type: dict
provisioner_holders:
  description: >-
    With preflight, what holds the NVIDIA device files (module_utils/holders.py): devices,
    fuser -v's table, nvidia-smi's compute applications, each holder's cgroup, the NVIDIA
    modules' reference counts (the evidence) and holders, each classified. The controller
    reads holders and modules (provisioner/judge/holders.py).
  type: dict
"""

import glob
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils import holders, kernels, mig_layout, scratch
from ansible_collections.gpu_provisioner.node.plugins.module_utils.owned_env import as_owner, owner_of
from ansible_collections.gpu_provisioner.node.plugins.module_utils.preflight_facts import collect
from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import compare, read_state

PATH_EXTRA = "/usr/local/cuda/bin:/usr/local/nvidia/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def run(argv, timeout, limit, env=None, owner=None):
    """One probe: never raises; a missing binary is rc 127, a timeout rc 124. With an owner,
    it runs as that user in a minimal environment (owned_env.as_owner); rc 126 where it cannot."""
    started = time.monotonic()
    out = {"argv": argv, "rc": -1, "stdout": "", "stderr": "", "timed_out": False, "missing": False, "timeout": timeout}
    exe = shutil.which(argv[0], path=(env or os.environ).get("PATH")) if not os.path.isabs(argv[0]) else argv[0]
    if not exe or not os.path.exists(exe):
        out.update(rc=127, missing=True, stderr=f"{argv[0]}: not found")
        return out
    try:
        child = {"env": env} if owner is None else as_owner(owner, {k: env[k] for k in ("PATH", "LC_ALL") if k in (env or {})})
        proc = subprocess.run([exe] + argv[1:], capture_output=True, text=True, errors="replace", timeout=timeout,
                              check=False, **child)
        out.update(rc=proc.returncode, stdout=proc.stdout[:limit], stderr=proc.stderr[-4000:])
    except subprocess.TimeoutExpired as exc:
        out.update(rc=124, timed_out=True, stdout=(exc.stdout or b"")[:limit].decode(errors="replace")
                   if isinstance(exc.stdout, bytes) else (exc.stdout or "")[:limit],
                   stderr=f"timed out after {timeout} s")
    except (OSError, LookupError) as exc:  # PermissionError (not root) is an OSError
        out.update(rc=126, stderr=str(exc))
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def local_facts(folder):
    facts = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.fact"))):
        try:
            with open(path) as f:
                facts[os.path.basename(path)[:-5]] = json.load(f)
        except (OSError, ValueError):
            continue
    return facts


def units(names, timeout):
    """name -> systemctl show properties, one systemctl call for all."""
    r = run(["systemctl", "show", "-p", "Id", "-p", "LoadState", "-p", "ActiveState", "-p", "SubState",
             "-p", "UnitFileState", "--"] + list(names.values()), timeout, 20000)
    blocks = [b for b in r["stdout"].strip().split("\n\n") if b.strip()]
    found = {}
    for key, block in zip(names, blocks):
        found[key] = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
    return found


def kernel_log(timeout, limit):
    """The NVIDIA lines of the kernel log since boot: journalctl -k -b, else dmesg."""
    r = run(["journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q"], timeout, 50_000_000)
    if r["rc"] != 0 or not r["stdout"].strip():
        d = run(["dmesg", "--time-format", "iso"], timeout, 50_000_000)
        if (d["rc"] == 0 and d["stdout"].strip()) or (d["stderr"] and not r["stderr"]):
            r = d
    lines = r["stdout"].splitlines()
    nvrm = [line for line in lines if "NVRM" in line or "nvidia" in line.lower()]
    r["lines"] = len(lines)
    r["stdout"] = "\n".join(nvrm[-2000:])[:limit]
    return r


def fm_version(timeout):
    r = run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n",
             "nvidia-fabricmanager*", "cuda-drivers-fabricmanager*"], timeout, 20000)
    for line in r["stdout"].splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ii" and parts[1].startswith("nvidia-fabricmanager"):
            return parts[2]
    return ""


def infiniband(timeout, limit, env):
    """The HCAs' ports, for InfiniBand profiles: each port's state, phys_state, rate and
    link_layer from /sys/class/infiniband (plain reads) and ibstat where it is installed.
    present is False where the folder is absent: no HCA (or a container that sees none)."""
    root = "/sys/class/infiniband"
    if not os.path.isdir(root):
        return {"present": False}
    ports = {}
    for folder in sorted(glob.glob(os.path.join(root, "*", "ports", "*"))):
        values = {}
        for key in ("state", "phys_state", "rate", "link_layer"):
            try:
                with open(os.path.join(folder, key)) as f:
                    values[key] = f.read().strip()
            except OSError:
                values[key] = ""
        ports[folder.split("/")[-3] + "/" + os.path.basename(folder)] = values
    return {"present": True, "sysfs": ports, "ibstat": run(["ibstat"], timeout, limit, env)}


def container():
    """What systemd says this host is a container of ("podman", "docker", ...; "" on a machine):
    /run/systemd/container, which systemd writes at boot inside a container."""
    try:
        with open("/run/systemd/container") as f:
            return f.read().strip()
    except OSError:
        return ""


# The engine's own view of its runtimes, by the profile's runtime name (fixed argv, no profile word).
ENGINE_INFO = {"docker": ["docker", "info"], "containerd": ["containerd", "config", "dump"],
               "podman": ["podman", "info", "--format", "json"]}
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")  # the CDI specification's default spec directories
CDI_MAX_FILES = 16
CDI_MAX_BYTES = 1_000_000


def cdi_specs():
    """The spec files under CDI_DIRS (regular files, not links), each cut to CDI_MAX_BYTES; what is
    left out is named."""
    specs, left_out = {}, []
    for folder in CDI_DIRS:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if not name.endswith((".yaml", ".yml", ".json")) or os.path.islink(path) or not os.path.isfile(path):
                continue
            if len(specs) >= CDI_MAX_FILES:
                left_out.append(path)
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    specs[path] = f.read(CDI_MAX_BYTES)
            except OSError as exc:
                left_out.append(f"{path}: {exc}")
    return specs, left_out


def containers(runtime, timeout, limit, env):
    """The engine's own view, nvidia-container-cli info, the CDI specs and where the toolkit's tools
    are ("" where absent): what judge/containers.py judge_host reads."""
    specs, left_out = cdi_specs()
    argv = ENGINE_INFO.get(runtime)
    return {"runtime": runtime,
            "engine": run(argv, timeout, limit, env) if argv else {},
            "container_cli": run(["nvidia-container-cli", "info"], timeout, limit, env),
            "cdi_specs": specs, "cdi_left_out": left_out,
            "toolkit": {tool: shutil.which(tool, path=env["PATH"]) or "" for tool in ("nvidia-ctk", "nvidia-container-cli")}}


def truthy(value):
    """A local fact's flag as Ansible's bool filter reads it (the roles write JSON booleans)."""
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def unit_state(props):
    """A unit's ActiveState (active, inactive, failed, ...), or not-found where systemd has no such unit."""
    return str(props.get("ActiveState") or "unknown") if props.get("LoadState") == "loaded" else "not-found"


def exporter_url(fact):
    """Where dcgm-exporter answers on this host, from the dcgm_exporter role's record (its
    listen address and port): a wildcard address is fetched on the loopback."""
    host = str(fact.get("listen_address") or "")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return "http://%s:%s/metrics" % ("[%s]" % host if ":" in host else host, fact.get("port") or 9400)


def scrape(url, timeout, limit):
    """The exporter's /metrics, fetched directly (this host's own service: never through a
    proxy from the environment). rc 0 on HTTP 200, else 1; the body only on 200."""
    out = {"rc": 1, "status": -1, "body": ""}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            out["status"] = response.status
            if response.status == 200:
                out["body"] = response.read(limit * 4).decode("utf-8", "replace")[:limit]
    except urllib.error.HTTPError as exc:
        out["status"] = exc.code
    except (OSError, ValueError) as exc:  # refused, timed out (URLError is an OSError), a bad URL
        out["error"] = str(exc)
    out["rc"] = 0 if out["status"] == 200 else 1
    return out


def long_runs(p, probe, facts, env, run_them):
    """nccl-tests, dcgmi diag and the exporter's scrape, in the record's shape (rc -1 where one
    did not run). nccl-tests and the diagnostic need a GPU; the scrape runs where the exporter
    is expected (its local fact) or its unit is active."""
    gpus, limit, timeout = probe["gpus_seen"], p["max_output_chars"], p["torch_timeout"]
    fact = facts.get("dcgm_exporter") if isinstance(facts.get("dcgm_exporter"), dict) else {}
    nccl = {"ran": False, "binary": probe["nccl_binary"], "rc": -1, "stdout": ""}
    exporter = {"expected": truthy(fact.get("enabled")), "unit_state": unit_state(probe["units"].get("exporter") or {}),
                "url": exporter_url(fact), "rc": -1, "status": -1, "body": ""}
    diag = {"ran": False, "rc": -1, "stdout": ""}
    if run_them and probe["nccl_binary"] and gpus > 0:
        r = run([probe["nccl_binary"]] + p["nccl_args"] + ["-g", str(gpus)], timeout, limit, env)
        nccl.update(ran=True, rc=r["rc"], stdout=r["stdout"], stderr=r["stderr"])
    if run_them and (exporter["expected"] or exporter["unit_state"] == "active"):
        exporter.update(scrape(exporter["url"], 30, p["metrics_max_chars"]))
    if run_them and probe["dcgmi"] and p["dcgm_diag_level"] > 0 and gpus > 0:
        r = run(["dcgmi", "diag", "-r", str(p["dcgm_diag_level"])], timeout, limit, env)
        diag.update(ran=True, rc=r["rc"], stdout=r["stdout"], stderr=r["stderr"])
    return {"nccl_tests": nccl, "exporter": exporter, "dcgmi_diag": diag}


def main():
    module = AnsibleModule(
        argument_spec={
            "timeout": {"type": "int", "default": 60},
            "torch_timeout": {"type": "int", "default": 300},
            "python": {"type": "str", "default": ""},
            "torch_snippet": {"type": "str", "default": ""},
            "framework_envs": {"type": "list", "elements": "dict", "default": []},
            "framework_snippets": {"type": "dict", "default": {}},
            "facts_dir": {"type": "path", "default": "/etc/ansible/facts.d"},
            "fabric_manager_unit": {"type": "str", "default": "nvidia-fabricmanager.service"},
            "exporter_unit": {"type": "str", "default": "dcgm-exporter.service"},
            "nccl_candidates": {"type": "list", "elements": "str", "default": []},
            "max_output_chars": {"type": "int", "default": 400000},
            "infiniband": {"type": "bool", "default": False},
            "preflight": {"type": "bool", "default": False},
            "state_path": {"type": "path", "default": "/etc/ansible/facts.d/provisioner.fact"},
            "expect_profile": {"type": "str", "default": ""},
            "expect_sha256": {"type": "str", "default": ""},
            "packages": {"type": "list", "elements": "str", "default": []},
            "containers_runtime": {"type": "str", "default": ""},
            "long_runs": {"type": "bool", "default": False},
            "nccl_args": {"type": "list", "elements": "str", "default": ["-b", "8", "-e", "1G", "-f", "2"]},
            "dcgm_diag_level": {"type": "int", "default": 0, "choices": [0, 1, 2, 3]},
            "metrics_max_chars": {"type": "int", "default": 200000},
        },
        supports_check_mode=True,
    )
    p = module.params
    started = time.monotonic()
    env = dict(os.environ, PATH=PATH_EXTRA + ":" + os.environ.get("PATH", ""), LC_ALL="C")
    limit, timeout = p["max_output_chars"], p["timeout"]
    facts = local_facts(p["facts_dir"])
    commands = {
        "nvidia_smi_xml": run(["nvidia-smi", "-q", "-x"], timeout, limit, env),
    }
    smi_ok = commands["nvidia_smi_xml"]["rc"] == 0
    if smi_ok:
        commands["topo"] = run(["nvidia-smi", "topo", "-m"], timeout, limit, env)
        commands["nvlink"] = run(["nvidia-smi", "nvlink", "-s"], timeout, limit, env)
    if smi_ok and "<current_mig>Enabled</current_mig>" in commands["nvidia_smi_xml"]["stdout"]:
        # The instances' profile names are only in `mig -lgi` (the XML has instance IDs).
        commands["mig_lgi"] = run(["nvidia-smi", "mig", "-lgi"], timeout, limit, env)
    commands["nvcc"] = run(["nvcc", "--version"], timeout, limit, env)
    commands["kernel_log"] = kernel_log(timeout, limit)
    python = p["python"] or str((facts.get("python_env") or {}).get("python") or "")
    if p["torch_snippet"] and python:
        # The environment is its owner's code: it runs as them, never as root for another owner.
        owner = owner_of(python, facts.get("python_env"))
        commands["torch"] = run([python, "-c", p["torch_snippet"]], p["torch_timeout"], limit, env, owner=owner)
        commands["torch"].update(ran=True, python=python, owner=owner)
    elif p["torch_snippet"]:
        commands["torch"] = {"ran": False, "rc": -1, "stdout": "", "python": "",
                             "stderr": "no Python environment recorded on this host"}
    framework_probes = {}
    for item in p["framework_envs"]:
        snippet = p["framework_snippets"].get(str(item.get("framework")), "")
        env_python, name = str(item.get("python") or ""), str(item.get("name") or "")
        if not snippet or not name:
            continue
        if not os.path.exists(env_python):
            framework_probes[name] = {"ran": False, "rc": -1, "stdout": "", "python": env_python,
                                      "stderr": f"no environment at {env_python}"}
            continue
        # As the torch probe: the environment's code runs as its owner, never as root for another.
        owner = owner_of(env_python, {"python": env_python, "owner": item.get("owner")})
        framework_probes[name] = run([env_python, "-c", snippet], p["torch_timeout"], limit, env, owner=owner)
        framework_probes[name].update(ran=True, python=env_python, owner=owner)
    try:
        with open("/sys/module/nvidia/version") as f:
            module_version = f.read().strip()
    except OSError:
        module_version = ""
    gpus_seen = len(re.findall(r"<gpu id=", commands["nvidia_smi_xml"]["stdout"])) if smi_ok else 0
    result = {
        "commands": commands,
        "framework_probes": framework_probes,
        "module_version": module_version,
        "units": units({"fabric_manager": p["fabric_manager_unit"], "exporter": p["exporter_unit"]}, timeout),
        "fabric_manager_version": fm_version(timeout),
        "local_facts": facts,
        "gpus_seen": gpus_seen,
        "nccl_binary": next((c for c in p["nccl_candidates"] if os.path.isfile(c) and os.access(c, os.X_OK)), ""),
        "dcgmi": bool(shutil.which("dcgmi", path=env["PATH"])),
        "container": container(),
        "peermem_loaded": os.path.isdir("/sys/module/nvidia_peermem"),
        "kernels": kernels.read(),
        "scratch": scratch.observe(),  # the local scratch: mounted, its array whole (judge/scratch.py)
    }
    if smi_ok:
        # MIG mode and instances per GPU, as the mig role reads them (module_utils/mig_layout.py).
        lgi = commands.get("mig_lgi") or {"rc": None, "stdout": ""}
        result["mig"] = mig_layout.read_state(commands["nvidia_smi_xml"]["stdout"], lgi["rc"],
                                              lgi["stdout"] + lgi.get("stderr", ""))
    if p["infiniband"]:
        result["infiniband"] = infiniband(timeout, limit, env)
    if p["containers_runtime"] not in ("", "none"):
        result["containers"] = containers(p["containers_runtime"], timeout, limit, env)
    extra = {}
    if p["preflight"]:
        # The same reading provisioner_state's compare gives preflight and check.
        state = dict(compare(p["state_path"]), kernels=result["kernels"], mig=result.get("mig"))
        # What `provision plan` compares with what up would install, and what holds the GPUs.
        extra = {"provisioner_preflight": collect(), "provisioner_state": state,
                 "provisioner_packages": read_state({"held_packages": p["packages"]})["held_packages"],
                 "provisioner_holders": holders.collect(timeout)}
        # Only steers whether the role runs its long probes now; the controller decides
        # (provisioner/engine/drift.py in_recorded_state) which hosts are converged.
        result["in_recorded_state"] = bool(
            state["recorded"] and not state["differences"] and not state["dpkg_audit"]
            and (state["profile"], state["profile_sha256"]) == (p["expect_profile"], p["expect_sha256"]))
    # The survey runs the long probes only on a host that needs no converge; a host about to
    # be converged runs them in verify, after.
    result["long_runs"] = p["long_runs"] and (not p["preflight"] or result["in_recorded_state"])
    record = dict(long_runs(p, result, facts, env, result["long_runs"]), probe=result)
    result["seconds"] = round(time.monotonic() - started, 3)
    module.exit_json(changed=False, provisioner_verify=record, **extra)


if __name__ == "__main__":
    main()
