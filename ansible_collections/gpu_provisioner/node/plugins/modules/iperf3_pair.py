#!/usr/bin/python
# -*- coding: utf-8 -*-
"""One side of an iperf3 test between two hosts, for `provision verify --network`: start a
one-off server bound to the address under test (serve), run the client against a peer's
server (measure), stop the server if it is still there (stop). Every step is bounded in
time; nothing is left listening (the server serves one test, is wrapped in `timeout`, and
`stop` ends it)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: iperf3_pair
short_description: Start a bound one-off iperf3 server, measure against a peer, or stop the server.
description:
  - C(serve) starts C(timeout LIFETIME iperf3 --server --one-off --bind ADDRESS --port PORT) in
    its own session and waits (at most C(wait)) until the port listens on that address.
  - C(measure) runs C(iperf3 --client PEER --port PORT --bind ADDRESS --time DURATION --json)
    with a connect time-out and returns its JSON text.
  - C(stop) ends the server started by C(serve) on that port if it still runs.
  - Also C(ibstat) in C(measure), as O(ibstat) says.
options:
  action:
    type: str
    choices: [serve, measure, stop]
    required: true
    description: "serve, measure or stop (see the description)."
  address:
    type: str
    required: true
    description: This host's address under test (the server's and the client's bind address).
  port:
    type: int
    required: true
    description: "The server's port."
  peer:
    type: str
    default: ""
    description: The server's address (measure).
  duration:
    type: int
    default: 5
    description: "Seconds the measurement runs (measure)."
  lifetime:
    type: int
    default: 300
    description: Seconds the server may live at most, whatever happens to the controller.
  wait:
    type: int
    default: 15
    description: "Seconds serve waits for the port to listen."
  ibstat:
    type: str
    choices: ["no", present, "yes"]
    default: "no"
    description: Also read ibstat (measure); present = where /sys/class/infiniband exists.
"""

EXAMPLES = r"""
- name: Start a one-off iperf3 server bound to this host's test address.
  gpu_provisioner.node.iperf3_pair:
    action: serve
    address: 10.0.0.11
    port: 5201
    lifetime: 300

- name: Measure from the other host against it.
  gpu_provisioner.node.iperf3_pair:
    action: measure
    address: 10.0.0.12
    peer: 10.0.0.11
    port: 5201
    duration: 5
  register: measured

- name: Stop the server if it still runs.
  gpu_provisioner.node.iperf3_pair:
    action: stop
    address: 10.0.0.11
    port: 5201
"""

RETURN = r"""
provisioner_network:
  description: >-
    (measure) address, peer, port, rc, json (iperf3's JSON text), stderr, seconds, timed_out;
    ibstat (rc, stdout, missing) where run.
  type: dict
provisioner_network_server:
  description: (serve) address, port, pid, listening.
  type: dict
provisioner_network_stopped:
  description: (stop) whether a server was still there to stop.
  type: bool
"""

import contextlib
import os
import shutil
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

def pidfile(port):
    """The server's pid, where the login user (the check runs without root) may write it."""
    folder = os.environ.get("XDG_RUNTIME_DIR") or os.path.expanduser("~")
    return os.path.join(folder, f".provisioner-iperf3-{port}.pid")


def _hex_port(port):
    return f"{port:04X}"


def listening(port):
    """Whether something listens on TCP `port` (from /proc/net/tcp{,6}; a connection would
    use up the one-off server's single test)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[1].rsplit(":", 1)[1] == _hex_port(port) and fields[3] == "0A":
                        return True
        except (OSError, StopIteration, IndexError):
            continue
    return False


def ours(pid, port):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"iperf3") for a in argv) and str(port).encode() in argv


def stop(port):
    path = pidfile(port)
    try:
        with open(path) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return False
    stopped = False
    if ours(pid, port):
        try:
            os.killpg(pid, signal.SIGTERM)  # the session: timeout and iperf3 under it
            stopped = True
        except OSError:
            pass
    with contextlib.suppress(OSError):
        os.unlink(path)
    return stopped


def server_argv(iperf3: str, address: str, port: int, lifetime: int) -> list[str]:
    """The server: on the address under test only (--bind), for one test (--one-off), and
    killed by `timeout` after `lifetime` seconds if no test came."""
    return ["timeout", str(lifetime), iperf3, "--server", "--one-off", "--bind", address, "--port", str(port)]


def client_argv(iperf3: str, address: str, peer: str, port: int, duration: int) -> list[str]:
    """The client: from the address under test, at most 5 s to connect, `duration` s of test."""
    return [iperf3, "--client", peer, "--port", str(port), "--bind", address, "--time", str(duration), "--json",
            "--connect-timeout", "5000"]


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["serve", "measure", "stop"], "required": True},
            "address": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "peer": {"type": "str", "default": ""},
            "duration": {"type": "int", "default": 5},
            "lifetime": {"type": "int", "default": 300},
            "wait": {"type": "int", "default": 15},
            "ibstat": {"type": "str", "choices": ["no", "present", "yes"], "default": "no"},
        },
        supports_check_mode=True,
    )
    p = module.params
    iperf3 = shutil.which("iperf3", path="/usr/bin:/bin:/usr/local/bin")
    if p["action"] == "stop":
        module.exit_json(changed=False, provisioner_network_stopped=stop(p["port"]))
    if not iperf3:
        module.fail_json(msg="iperf3 is not installed on this host: set network.iperf3: true in the profile and run "
                             "provision up (or apt install iperf3)")
    if p["action"] == "serve":
        stop(p["port"])  # an earlier, interrupted check's server
        if listening(p["port"]):
            module.fail_json(msg=f"port {p['port']} already listens on this host: pick another network.port")
        proc = subprocess.Popen(server_argv(iperf3, p["address"], p["port"], p["lifetime"]), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        try:
            with open(pidfile(p["port"]), "w") as f:
                f.write(str(proc.pid))
        except OSError as exc:
            os.killpg(proc.pid, signal.SIGTERM)  # never a server this check cannot stop later
            module.fail_json(msg=f"cannot record the iperf3 server's pid: {exc}")
        deadline = time.monotonic() + p["wait"]
        while time.monotonic() < deadline and proc.poll() is None and not listening(p["port"]):
            time.sleep(0.1)
        if not listening(p["port"]):
            stop(p["port"])
            module.fail_json(msg=f"iperf3 did not listen on {p['address']}:{p['port']} within {p['wait']} s "
                                 f"(exit {proc.poll()}): is {p['address']} an address of this host?")
        module.exit_json(changed=False, provisioner_network_server={"address": p["address"], "port": p["port"],
                                                                    "pid": proc.pid, "listening": True})
    started = time.monotonic()
    argv = client_argv(iperf3, p["address"], p["peer"], p["port"], p["duration"])
    result = {"address": p["address"], "peer": p["peer"], "port": p["port"], "argv": argv[1:], "timed_out": False}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=p["duration"] + 30, check=False)
        result.update(rc=proc.returncode, json=proc.stdout[-200000:], stderr=proc.stderr[-2000:])
    except subprocess.TimeoutExpired:
        result.update(rc=124, json="", stderr=f"timed out after {p['duration'] + 30} s", timed_out=True)
    result["seconds"] = round(time.monotonic() - started, 3)
    if p["ibstat"] == "yes" or p["ibstat"] == "present" and os.path.exists("/sys/class/infiniband"):
        ib = shutil.which("ibstat", path="/usr/sbin:/usr/bin:/sbin:/bin")
        if ib:
            r = subprocess.run([ib], capture_output=True, text=True, timeout=30, check=False)
            result["ibstat"] = {"rc": r.returncode, "stdout": r.stdout[-100000:], "missing": False}
        else:
            result["ibstat"] = {"rc": 127, "stdout": "", "missing": True}
    module.exit_json(changed=False, provisioner_network=result)


if __name__ == "__main__":
    main()
