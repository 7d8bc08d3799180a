#!/usr/bin/python
# -*- coding: utf-8 -*-
"""This host's part of `provision verify --ddp`: torchrun (torch.distributed.run) of the
collection's ddp_smoke.py in the profile's Python environment, as node `node_rank` of
`nnodes`, with the static rendezvous on `master_addr:master_port`. Every wait is bounded:
the rendezvous (--rdzv-conf timeout), init_process_group and the collectives (--timeout in
the script), and the whole job (killed with its process group after `job_timeout`)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ddp_run
short_description: Run this host's part of a small torchrun DDP job, bounded in time.
description:
  - Runs torchrun for this host's rank of a small DDP job (all-reduce steps over a tensor) with a bounded time; returns what each step measured.
options:
  script:
    type: path
    required: true
    description: "The DDP script torchrun runs (shipped with the role)."
  python:
    type: str
    default: ""
    description: The environment's Python ("" = the one the python_env role recorded).
  nnodes:
    type: int
    required: true
    description: "How many hosts take part (torchrun --nnodes)."
  node_rank:
    type: int
    required: true
    description: "This host's rank among them (torchrun --node-rank)."
  master_addr:
    type: str
    required: true
    description: "The rendezvous host's address under test."
  master_port:
    type: int
    required: true
    description: "The rendezvous port (the TCPStore listens on master_addr only, for the job's lifetime)."
  local_addr:
    type: str
    required: true
    description: This host's address under test; gloo and NCCL use the interface that holds it.
  timeout:
    type: int
    default: 120
    description: "Seconds the whole job may run before it is stopped."
  steps:
    type: int
    default: 5
    description: "All-reduce steps to time."
  tensor_mib:
    type: int
    default: 16
    description: "Size of the tensor each step all-reduces, in MiB."
  facts_dir:
    type: path
    default: /etc/ansible/facts.d
    description: "Where the roles' local facts are (python_env's record names the environment)."
"""

EXAMPLES = r"""
# One task per host of the job (playbooks/ddp.yml copies the collection's ddp_smoke.py first).
- name: Run this host's rank of a two-host DDP job, bounded in time.
  gpu_provisioner.node.ddp_run:
    script: /tmp/ddp/ddp_smoke.py
    nnodes: 2
    node_rank: "{{ groups['gpu'].index(inventory_hostname) }}"
    master_addr: 10.0.0.11
    master_port: 29500
    local_addr: "{{ ansible_host }}"
    timeout: 120
    steps: 5
    tensor_mib: 16
  register: ddp
"""

RETURN = r"""
provisioner_ddp:
  description: >-
    rc, argv, results (the DDP_RESULT JSON of each local rank), stderr (tail), seconds,
    timed_out, nproc_per_node, interface, python.
  type: dict
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpu_provisioner.node.plugins.module_utils import ddp_results
from ansible_collections.gpu_provisioner.node.plugins.module_utils.owned_env import owner_of


def interface_of(address):
    """The network interface holding `address` (ip -o addr), for GLOO_/NCCL_SOCKET_IFNAME."""
    ip = shutil.which("ip", path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not ip:
        return ""
    out = subprocess.run([ip, "-o", "addr", "show"], capture_output=True, text=True, check=False, timeout=10).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    return ""


def gpu_count():
    smi = shutil.which("nvidia-smi", path="/usr/bin:/bin:/usr/local/nvidia/bin")
    if not smi:
        return 0
    try:
        r = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False, timeout=30)
    except subprocess.TimeoutExpired:
        return 0
    return len(re.findall(r"^GPU \d+:", r.stdout, re.M)) if r.returncode == 0 else 0


def torchrun_argv(python: str, p: dict, nproc: int) -> list[str]:
    """ddp_launch.py (beside the script) is torchrun with its rendezvous store bound to
    master_addr (the address under test) only; the rendezvous waits at most `timeout`."""
    launcher = os.path.join(os.path.dirname(p["script"]), "ddp_launch.py")
    return [python, launcher, "--nnodes", str(p["nnodes"]), "--node-rank", str(p["node_rank"]),
            "--nproc-per-node", str(nproc), "--master-addr", p["master_addr"],
            "--master-port", str(p["master_port"]), "--local-addr", p["local_addr"],
            "--rdzv-conf", f"timeout={p['timeout']}", "--max-restarts", "0", "--monitor-interval", "1",
            p["script"], "--steps", str(p["steps"]), "--tensor-mib", str(p["tensor_mib"]), "--timeout", str(p["timeout"])]


def job_seconds(timeout: int) -> int:
    """The whole job, store included, is killed after this: the rendezvous and
    init_process_group each wait at most `timeout`, plus the torch import and the steps."""
    return 2 * timeout + 60


def main():
    module = AnsibleModule(argument_spec={
        "script": {"type": "path", "required": True},
        "python": {"type": "str", "default": ""},
        "nnodes": {"type": "int", "required": True},
        "node_rank": {"type": "int", "required": True},
        "master_addr": {"type": "str", "required": True},
        "master_port": {"type": "int", "required": True},
        "local_addr": {"type": "str", "required": True},
        "timeout": {"type": "int", "default": 120},
        "steps": {"type": "int", "default": 5},
        "tensor_mib": {"type": "int", "default": 16},
        "facts_dir": {"type": "path", "default": "/etc/ansible/facts.d"},
    }, supports_check_mode=True)
    p = module.params
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
    if os.geteuid() == 0 and owner != "root":
        # The play runs as the login user; logged in as root, the job would run the owner's code as root.
        module.fail_json(msg=f"refusing to run {python} as root: its environment belongs to {owner}, who can put "
                             f"code into it. Run verify --ddp logged in as {owner} (or any user but root).")
    gpus = gpu_count()
    interface = interface_of(p["local_addr"])
    if not interface:
        module.fail_json(msg=f"no interface of this host holds {p['local_addr']} (network_test_address / ansible_host)")
    env = dict(os.environ, GLOO_SOCKET_IFNAME=interface, NCCL_SOCKET_IFNAME=interface, OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    argv = torchrun_argv(python, p, max(gpus, 1))
    job_timeout = job_seconds(p["timeout"])
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=job_timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
    finally:  # nothing of the job outlives this call, whatever happened
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    results = ddp_results.parse(stdout)
    module.exit_json(changed=False, provisioner_ddp={
        "rc": proc.returncode if not timed_out else 124, "argv": argv[1:], "results": results,
        "stderr": stderr[-6000:], "seconds": round(time.monotonic() - started, 3), "timed_out": timed_out,
        "job_timeout": job_timeout, "nproc_per_node": max(gpus, 1), "gpus": gpus, "interface": interface,
        "python": python})


if __name__ == "__main__":
    main()
