#!/usr/bin/python
# -*- coding: utf-8 -*-
"""This host's part of `provision accept`: in the profile's Python environment, as its owner
(module_utils/owned_env), (1) an all-reduce across this node's GPUs (torchrun of the
collection's ddp_smoke.py with one rank per GPU, on loopback: NCCL with GPUs, two gloo ranks
without)
and (2) the collection's accept_measure.py for the steps asked (GEMM, copies, the reference
workload), and (3) at burn-in, accept_measure.py's sustained GEMM load for `burn_in` seconds
with nvidia-smi sampled every few seconds (before, during, after) and the kernel log's Xid lines
read before and after. Each job runs in its own process group and is killed with it at its
bound; its output folder is removed whatever happened. Nothing is installed or changed."""

from __future__ import annotations

DOCUMENTATION = r"""
module: accept_run
short_description: Run this node's acceptance measurements in the profile's Python environment, bounded in time.
description:
  - This host's part of C(provision accept), run in the profile's Python environment as its owner.
  - An all-reduce across this node's GPUs (torchrun of the collection's ddp_smoke.py, one rank per GPU, on
    loopback; two gloo ranks without GPUs), then the collection's accept_measure.py for the steps asked.
  - At burn-in (O(burn_in) > 0), accept_measure.py's sustained GEMM load for that many seconds, nvidia-smi
    sampled every O(sample_every) seconds before, during and after it, and the kernel log's Xid lines read
    before and after.
  - Each job runs in its own process group, killed with it after O(timeout) seconds (the burn-in after
    O(burn_in) + O(timeout)); its output folder is removed whatever happened. Nothing is installed or changed.
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
  burn_in:
    type: int
    default: 0
    description: Seconds of sustained GEMM load (burn-in); 0, none.
  sample_every:
    type: int
    default: 5
    description: Seconds between two nvidia-smi samples during the burn-in.
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
    measure (rc, data: the accept measurements capture, stderr, seconds, timed_out, job_timeout, steps),
    burn_in (rc, data, stderr, seconds, timed_out, job_timeout, samples (phase, csv), sampler (why not sampled,
    or null), kernel_log (read, why, new: the Xid lines that appeared)), owner.
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


def bounded(argv: list[str], timeout: float, tick=None, every: float = 5, **popen) -> dict:
    """Run argv in its own process group; after `timeout` seconds the whole group is killed
    (TERM, then KILL), and nothing of it outlives this call whatever happened. `tick`, when
    given, is called every `every` seconds while the job runs (burn-in's sampler)."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True, **popen)
    timed_out = False
    try:
        while True:  # communicate may be called again after its time-out (the output is kept)
            left = started + timeout - time.monotonic()
            try:
                stdout, stderr = proc.communicate(timeout=max(0.0, min(left, every if tick else left)))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= started + timeout:
                    raise
                tick()
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


SAMPLE_FIELDS = ("index,clocks.current.sm,clocks.max.sm,temperature.gpu,power.draw,{reasons},"
                 "ecc.errors.uncorrected.volatile.total")
# The throttle bitmask's name: clocks_event_reasons.active in newer drivers, clocks_throttle_reasons.active in
# older ones; an unknown field fails the whole query, so the first that answers is kept.
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


class Sampler:
    """nvidia-smi's --query-gpu CSV (with its header: it names the columns) once per call,
    each call bounded; `why` says why nothing is sampled (no GPU, no nvidia-smi, refused)."""

    def __init__(self, gpus: int):
        self.samples: list[dict] = []
        self.smi = shutil.which("nvidia-smi", path="/usr/bin:/bin:/usr/local/nvidia/bin")
        self.why = None if gpus and self.smi else "not run: no GPU" if not gpus else "not run: no nvidia-smi"
        self.fields = None
        self.started = time.monotonic()

    def sample(self, phase: str) -> None:
        if self.why:
            return
        for reasons in [self.fields] if self.fields else REASON_FIELDS:
            fields = SAMPLE_FIELDS.format(reasons=reasons)
            try:
                r = subprocess.run([self.smi, f"--query-gpu={fields}", "--format=csv,nounits"], capture_output=True,
                                   text=True, check=False, timeout=30)
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.samples.append({"phase": phase, "t": self._t(), "csv": "", "error": f"nvidia-smi: {exc}"})
                return
            if r.returncode == 0:
                self.fields = reasons
                self.samples.append({"phase": phase, "t": self._t(), "csv": r.stdout[-20000:]})
                return
        said = (r.stdout + r.stderr).strip()[-300:]
        if self.fields:  # it answered before: a GPU lost during the load is evidence, kept as such
            self.samples.append({"phase": phase, "t": self._t(), "csv": "", "error": f"exit {r.returncode}: {said}"})
        elif not self.samples:
            self.why = f"not run: nvidia-smi refused the query: {said}"

    def _t(self) -> float:
        return round(time.monotonic() - self.started, 1)


def xid_lines(timeout: int = 30) -> tuple[list[str] | None, str]:
    """The kernel log's Xid lines since boot (journalctl -k -b, else dmesg), or None and why not."""
    why = ""
    for argv in (["journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q"], ["dmesg", "--time-format", "iso"]):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"{argv[0]}: {exc}"
            continue
        if r.returncode == 0 and r.stdout.strip():
            return [line for line in r.stdout.splitlines() if "NVRM: Xid" in line], ""
        why = f"{argv[0]} exited {r.returncode}: {r.stderr.strip()[-200:] or 'no output'}"
    return None, why


def measure_job(python: str, scripts: str, args: list[str], timeout: float, child: dict, **bounds) -> dict:
    """accept_measure.py run as the environment's owner within `timeout`, its figures read from
    the file it writes as it goes (a job killed midway keeps what it had measured) into a
    folder of its own that is removed afterwards."""
    folder = tempfile.mkdtemp(prefix="provisioner-accept-out.")
    try:
        if child.get("user") is not None:
            os.chown(folder, child["user"], child["group"])
        path = os.path.join(folder, "figures.json")
        job = bounded([python, os.path.join(scripts, "accept_measure.py"), path, *args], timeout, **bounds, **child)
        job.pop("stdout")
        try:
            with open(path) as f:
                job["data"] = json.load(f)
        except (OSError, ValueError):
            job["data"] = None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return job


def burn_in(python: str, scripts: str, seconds: int, timeout: int, every: int, gpus: int, child: dict) -> dict:
    """The sustained load, sampled before, during and after, with the Xid lines it added."""
    before, why = xid_lines()
    sampler = Sampler(gpus)
    sampler.sample("before")
    job = measure_job(python, scripts, ["--burn-in", str(seconds)], seconds + timeout, child,
                      tick=lambda: sampler.sample("load"), every=every)
    sampler.sample("after")
    after, why_after = xid_lines()
    if before is None or after is None:
        kernel = {"read": False, "why": why or why_after, "new": ""}
    else:
        seen = set(before)
        kernel = {"read": True, "why": "", "new": "\n".join(line for line in after if line not in seen)[-20000:]}
    return dict(job, samples=sampler.samples, sampler=sampler.why, kernel_log=kernel, burn_in_s=seconds)


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
        "burn_in": {"type": "int", "default": 0},
        "sample_every": {"type": "int", "default": 5},
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
        job = measure_job(python, p["scripts_dir"], ["--only", ",".join(p["measure"])], p["timeout"], child)
        out["measure"] = dict(job, steps=p["measure"])
    if p["burn_in"] > 0:
        out["burn_in"] = burn_in(python, p["scripts_dir"], p["burn_in"], p["timeout"], max(1, p["sample_every"]),
                                 gpus, child)
    module.exit_json(changed=False, provisioner_accept=out)


if __name__ == "__main__":
    main()
