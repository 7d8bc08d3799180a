"""`provision accept --fleet` finds a slow host among 8 real lab hosts (podman systemd
containers started from lab-ddp's converged image: the CPU torch wheel, gloo across hosts).

One host's egress is rate-limited from the lab machine: a token bucket (`tc qdisc ... tbf`) on
its interface, set through its network namespace with nsenter (lab hosts have no CAP_NET_ADMIN,
and this kernel has tbf but no netem). The shaped rate (16 Mbit/s, about 0.002 GB/s of bus
bandwidth) sits far below the fleet floor this test sets (0.01 GB/s), and a healthy gloo
all-reduce over the lab bridge far above it even on two busy cores: the network, not the CPU,
decides. The inventory groups the hosts under two switches (`network_switch`), so the search
halves by switch, then measures the slow switch's hosts each beside cleared hosts, and must name
the shaped host, not its switch, within ceil(log2 8) + 2 = 5 rounds, with its drain command
printed and not run. Afterwards the tbf rule is gone (the namespace's `tc qdisc show`) and no
host listens on anything it did not listen on before (`ss -ltn`).

What it cannot prove: NCCL over a real fabric, a slow GPU, or a faulty switch (every host sits on
one podman bridge); the bisection's handling of those is tested on simulated noisy measurements
(tests/test_accept.py).

    sudo .venv/bin/pytest -q tests/integration/test_accept_fleet_lab.py

Measured 2026-12-03 on the 2-core development machine (load average 8-15 from other runs), one
ddp play per round (each round's all-reduces side by side): 344 s in all, the lab up of 8 hosts
from the images 21 s, the accept run 315 s: verify 19 s, the node all-reduce 71 s, rounds of 56,
50, 44 and 75 s (4 rounds, each mostly 16 torch start-ups: torchrun and its worker per host). It
was 905 s with 9 ddp plays, one per measurement. Shaped readings 0.002 GB/s, healthy 0.16 to 0.36
GB/s. Making the two converged images (shared with test_accept_lab.py, made once per product) is
not counted: 19 min here under load.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from provisioner.engine import accept, bisect, commands

from . import labtools
from .labtools import podman

# In CI (lab shard 2, beside test_accept_lab, whose lab-ddp image it shares): 344 s measured
# at load 8-15, over issue 31's 240 s allowance; the whole run stays within its 60 minutes.
pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None or shutil.which("nsenter") is None \
        or shutil.which("tc") is None:
    pytest.skip("lab hosts need root, podman, nsenter and tc (scripts/setup-dev-host)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "tests" / "data" / "profiles" / "lab-ddp.yml")
WHEELHOUSE = Path(os.environ.get("PROVISIONER_WHEELHOUSE") or "/opt/wheels")
RATE = "16mbit"   # the shaped host's egress: 2 MB/s, about 0.002 GB/s of bus bandwidth
FLOOR = 0.01      # GB/s: five times the shaped figure; a healthy lab all-reduce measures far more


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not list(WHEELHOUSE.glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip(f"no torch 2.13.0+cpu wheel for Python 3.11 in {WHEELHOUSE} (set PROVISIONER_WHEELHOUSE)")
    with labtools.lab_hosts(8, "fl", tmp_path_factory, converged=PROFILE) as result:
        yield result


def _netns(host: str, *args: str) -> subprocess.CompletedProcess:
    """A command in the host's network namespace, run from the lab machine."""
    pid = podman("inspect", "-f", "{{.State.Pid}}", host, check=True).stdout.strip()
    return subprocess.run(["nsenter", "-t", pid, "-n", *args], capture_output=True, text=True, timeout=30)


def _interface(host: str, ip: str) -> str:
    for line in _netns(host, "ip", "-o", "-4", "addr", "show").stdout.splitlines():
        if f" {ip}/" in line:
            return line.split()[1]
    raise AssertionError(f"no interface of {host} holds {ip}")


def _listeners(host: str) -> set[str]:
    """The host's listening TCP sockets (local address:port), as `ss -Hltn` prints them."""
    return {line.split()[3] for line in podman("exec", host, "ss", "-Hltn").stdout.splitlines() if line.strip()}


def _play_seconds(runs: Path) -> str:
    """Where the run's time went: each play's wall time (its ansible-runner folder, from the
    command it was given to its exit code)."""
    plays = sorted((d.joinpath("command").stat().st_mtime, d) for d in runs.glob("*/artifacts/*")
                   if (d / "command").is_file() and (d / "rc").is_file())
    return ", ".join(f"{d.name} {(d / 'rc').stat().st_mtime - started:.0f} s" for started, d in plays)


def test_accept_fleet_names_the_shaped_host_within_five_rounds_and_leaves_nothing(lab, tmp_path: Path):
    hosts = sorted(lab.hosts, key=lambda h: h.name)
    names = [h.name for h in hosts]
    slow = hosts[5]
    inventory = tmp_path / "hosts.ini"  # the lab's inventory, the hosts under two switches
    inventory.write_text(lab.inventory.read_text() + "\n[leaf_a]\n" + "\n".join(names[:4])
                         + "\n[leaf_b]\n" + "\n".join(names[4:])
                         + "\n[leaf_a:vars]\nnetwork_switch=leaf-a\n[leaf_b:vars]\nnetwork_switch=leaf-b\n")
    profile = tmp_path / "lab-accept-fleet.yml"
    profile.write_text(f"extends: {PROFILE}\nname: lab-accept-fleet\ndescription: lab-ddp, a fleet floor\n"
                       f"accept:\n  floors:\n    fleet_allreduce_busbw_gbps: {FLOOR}\n"
                       "network:\n  ddp:\n    tensor_mib: 1\n    steps: 1\n")
    before = {n: _listeners(n) for n in names}
    device = _interface(slow.name, slow.ip)
    shaped = _netns(slow.name, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", RATE,
                    "burst", "32kbit", "latency", "400ms")
    assert shaped.returncode == 0, shaped.stderr
    try:
        started = time.monotonic()
        report = commands.execute("accept", commands.prepare(str(profile), inventory), runs_dir=tmp_path,
                                  accept=accept.Request(level="quick", fleet=True))
        took = time.monotonic() - started
    finally:
        removed = _netns(slow.name, "tc", "qdisc", "del", "dev", device, "root")
    fleet = report.accept["fleet"]
    finding = fleet["finding"]
    print(f"accept --level quick --fleet, 8 lab hosts, {slow.name} shaped to {RATE}: {took:.1f} s, "
          f"{len(finding['rounds'])} round(s); plays: {_play_seconds(tmp_path)}\n" + "\n".join(
              f"round {n}: " + ", ".join(f"{'+'.join(m['hosts'])} {m['busbw_gbps']:g} GB/s" for m in r)
              for n, r in enumerate(finding["rounds"], 1)))
    assert removed.returncode == 0, removed.stderr
    assert (finding["verdict"], finding["culprit"]) == ("node", slow.name), finding["why"]
    assert len(finding["rounds"]) <= bisect.bound(8) == 5
    assert [len(m["hosts"]) for m in finding["rounds"][1]] == [4, 4]  # the two switches first
    assert fleet["drain"].startswith(f"scontrol update nodename={slow.name} state=drain") and not fleet["drain_ran"]
    checks = {h.name: {c.name: c for c in h.checks} for h in report.hosts}
    assert checks[slow.name]["accept fleet"].status == "fail"
    assert "the slow node of the fleet" in checks[slow.name]["accept fleet"].detail
    assert all("accept fleet" not in checks[n] or checks[n]["accept fleet"].status != "fail"
               for n in names if n != slow.name)
    assert report.exit_code == 2 and not report.interrupted
    # Nothing left: no shaping rule in the host's namespace, no listener it did not have before.
    assert "tbf" not in _netns(slow.name, "tc", "qdisc", "show", "dev", device).stdout
    for name in names:
        assert _listeners(name) == before[name], name
