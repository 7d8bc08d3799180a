#!/usr/bin/python
# -*- coding: utf-8 -*-
"""This host's part of `provision accept`: in the profile's Python environment, as its owner
(module_utils/owned_env), (1) an all-reduce across this node's GPUs (torchrun of the
collection's ddp_smoke.py with one rank per GPU, on loopback: NCCL with GPUs, two gloo ranks
without)
and (2) the collection's accept_measure.py for the steps asked (GEMM, copies, the reference
workload). Each job runs in its own process group and is killed with it after `timeout`
seconds; its output folder is removed whatever happened. Nothing is installed or changed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: accept_run
short_description: Run this node's acceptance measurements in the profile's Python environment, bounded in time.
description:
  - This host's part of C(provision accept), run in the profile's Python environment as its owner.
  - An all-reduce across this node's GPUs (torchrun of the collection's ddp_smoke.py, one rank per GPU, on
    loopback; two gloo ranks without GPUs), then the collection's accept_measure.py for the steps asked.
  - Each job runs in its own process group, killed with it after O(timeout) seconds; its output folder is
    removed whatever happened. Nothing is installed or changed.
options:
  scripts_dir:
    type: path
    required: true
    description: Where the play copied ddp_launch.py, ddp_smoke.py and accept_measure.py (readable by the owner).
  python:
    type: str
    default: ""
    description: The environment's Python ("" = the one the python_env role recorded).
  allreduce:
    type: bool
    default: true
    description: Run the node all-reduce (torchrun of ddp_smoke.py, one rank per GPU).
  port:
    type: int
    default: 29500
    description: The loopback port of the node all-reduce's rendezvous (bound to 127.0.0.1 only).
  steps:
    type: int
    default: 5
    description: All-reduce steps the node all-reduce times.
  tensor_mib:
    type: int
    default: 16
    description: The size in MiB of the tensor each all-reduce step reduces.
  measure:
    type: list
    elements: str
    default: []
    description: accept_measure.py's steps to run (gemm, copies, workload); none, no measurement job.
  timeout:
    type: int
    default: 300
    description: Seconds each job may run before its whole process group is killed.
  facts_dir:
    type: path
    default: /etc/ansible/facts.d
    description: Where the python_env role's local fact (python_env.fact) names the environment's Python and owner.
"""

EXAMPLES = r"""
- name: Measure this node (standard level, with the cost workload).
  gpu_provisioner.node.accept_run:
    scripts_dir: /tmp/provisioner-accept.x1y2
    port: 29600
    measure: [gemm, copies, workload]
    timeout: 300
"""

RETURN = r"""
provisioner_accept:
  description: >-
    allreduce (rc, results, stderr, seconds, timed_out, job_timeout, nproc_per_node, gpus, interface),
    measure (rc, data: the accept measurements capture, stderr, seconds, timed_out, job_timeout, steps), owner.
  type: dict
"""

import contextlib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils import ddp_results
from ansible_collections.gpu_provisioner.node.plugins.module_utils.owned_env import as_owner, owner_of

MEASURE_STEPS = ("gemm", "copies", "workload")


def bounded(argv: list[str], timeout: float, **popen) -> dict:
    """Run argv in its own process group; after `timeout` seconds the whole group is killed
    (TERM, then KILL), and nothing of it outlives this call whatever happened."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True, **popen)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        # A killed process is still running its exit for a moment (holding its sockets): wait
        # until none of the group is left but zombies, so nothing of the job outlives this call.
        deadline = time.monotonic() + 10
        while _group_running(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"rc": 124 if timed_out else proc.returncode, "stdout": stdout, "stderr": stderr[-4000:],
            "seconds": round(time.monotonic() - started, 3), "timed_out": timed_out, "job_timeout": timeout}


def _group_running(pgid: int) -> bool:
    """Whether any process of the group is still there other than as a zombie (/proc's stat:
    the state is the field after the parenthesised name, the group the third after it)."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def gpu_count() -> int:
    smi = shutil.which("nvidia-smi", path="/usr/bin:/bin:/usr/local/nvidia/bin")
    if not smi:
        return 0
    try:
        r = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False, timeout=30)
    except subprocess.TimeoutExpired:
        return 0
    return len(re.findall(r"^GPU \d+:", r.stdout, re.M)) if r.returncode == 0 else 0


def allreduce_argv(python: str, scripts: str, nproc: int, port: int, steps: int, tensor_mib: int,
                   timeout: int) -> list[str]:
    """One node, one rank per GPU: torchrun (ddp_launch.py) with its store bound to 127.0.0.1."""
    return [python, os.path.join(scripts, "ddp_launch.py"), "--nnodes", "1", "--node-rank", "0",
            "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1", "--master-port", str(port),
            "--local-addr", "127.0.0.1", "--rdzv-conf", f"timeout={timeout}", "--max-restarts", "0",
            "--monitor-interval", "1", os.path.join(scripts, "ddp_smoke.py"), "--steps", str(steps),
            "--tensor-mib", str(tensor_mib), "--timeout", str(timeout)]


def main():
    module = AnsibleModule(argument_spec={
        "scripts_dir": {"type": "path", "required": True},
        "python": {"type": "str", "default": ""},
        "allreduce": {"type": "bool", "default": True},
        "port": {"type": "int", "default": 29500},
        "steps": {"type": "int", "default": 5},
        "tensor_mib": {"type": "int", "default": 16},
        "measure": {"type": "list", "elements": "str", "default": []},
        "timeout": {"type": "int", "default": 300},
        "facts_dir": {"type": "path", "default": "/etc/ansible/facts.d"},
    }, supports_check_mode=True)
    p = module.params
    bad = [s for s in p["measure"] if s not in MEASURE_STEPS]
    if bad:
        module.fail_json(msg=f"unknown measurement step(s) {bad}: choose from {list(MEASURE_STEPS)}")
    try:
        with open(os.path.join(p["facts_dir"], "python_env.fact")) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        recorded = {}
    recorded = recorded if isinstance(recorded, dict) else {}
    python = p["python"] or str(recorded.get("python") or "")
    if not python or not os.path.exists(python):
        module.fail_json(msg="no Python environment recorded on this host (python_env.enabled in the profile, then "
                             "provision up)")
    owner = owner_of(python, recorded)
    gpus = gpu_count()
    env = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1"}
    try:
        child = as_owner(owner, env)
    except (LookupError, PermissionError) as exc:
        module.fail_json(msg=str(exc))
    out = {"owner": owner, "gpus": gpus}
    if p["allreduce"]:
        # One rank per GPU; without GPUs two gloo ranks, so the all-reduce really crosses processes.
        ranks = gpus or 2
        job = bounded(allreduce_argv(python, p["scripts_dir"], ranks, p["port"], p["steps"], p["tensor_mib"],
                                     p["timeout"]), p["timeout"], **as_owner(owner, dict(env, OMP_NUM_THREADS="1")))
        results = ddp_results.parse(job.pop("stdout"))
        out["allreduce"] = dict(job, results=results, nproc_per_node=ranks, gpus=gpus, interface="lo")
    if p["measure"]:
        folder = tempfile.mkdtemp(prefix="provisioner-accept-out.")
        try:
            uid = child.get("user")
            if uid is not None:
                os.chown(folder, uid, child["group"])
            path = os.path.join(folder, "measurements.json")
            job = bounded([python, os.path.join(p["scripts_dir"], "accept_measure.py"), path, "--only",
                           ",".join(p["measure"])], p["timeout"], **child)
            job.pop("stdout")
            try:  # written after every figure: a job killed midway keeps what it measured
                with open(path) as f:
                    job["data"] = json.load(f)
            except (OSError, ValueError):
                job["data"] = None
            out["measure"] = dict(job, steps=p["measure"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    module.exit_json(changed=False, provisioner_accept=out)


if __name__ == "__main__":
    main()
