"""verify --network and --ddp off the hosts: the pairing (a ring, never N^2), the address
under test, the iperf3 and ibstat judges on real captures, and the DDP judge on a real
lab job's output (tests/data/diagnose/SOURCES.md says where each capture comes from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.render import inventory as inventory_mod
from provisioner import profiles
from provisioner.engine import network as net
from provisioner.errors import ProvisionError
from provisioner.judge import ddp as ddp_judge
from provisioner.judge import network as net_judge
from provisioner.parsers import iperf3

from .conftest import REPO

CAPTURES = REPO / "tests" / "data" / "diagnose"
LAB = profiles.load(str(REPO / "tests/data/profiles/lab-ddp.yml")).profile
H100 = profiles.load("h100-train").profile


def _with_network(profile, **network):
    data = profile.model_dump()
    data["network"].update(network)
    return type(profile).model_validate(data)


def test_a_ring_has_one_pair_per_host_and_a_sample_is_cut_never_n_squared():
    hosts = [f"n{i:03d}" for i in range(200)]
    ring = net.pairs(hosts)
    assert len(ring) == 200 and {p.client for p in ring} == set(hosts) == {p.server for p in ring}
    assert ring[0] == net.Pair("n000", "n001") and ring[-1] == net.Pair("n199", "n000")
    sample = net.pairs(hosts, "sample", 16, seed=7)
    assert len(sample) == 16 and len({p.client for p in sample}) == 16 and all(p.client != p.server for p in sample)
    assert net.pairs(hosts, "sample", 16, seed=7) == sample and net.pairs(hosts, "sample", 16, seed=8) != sample
    assert net.pairs(["a", "b"]) == [net.Pair("a", "b"), net.Pair("b", "a")]  # both directions of the one link
    assert net.pairs(["a"]) == []


def test_the_address_under_test_is_network_test_address_else_ansible_host_and_is_checked(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\na ansible_host=10.0.0.1 network_test_address=192.168.100.1\nb ansible_host=10.0.0.2\n"
                     "c\nd ansible_host='10.0.0.4;reboot'\n")
    inv = inventory_mod.load(hosts)
    assert [net.test_address(inv, h) for h in "abc"] == ["192.168.100.1", "10.0.0.2", "c"]
    with pytest.raises(ProvisionError, match="neither an IP address nor a host name") as err:
        net.test_address(inv, "d")
    assert "hosts.ini:5" in str(err.value)
    plan, pairs = net.network_plan(LAB, inv, ["a", "b"])
    assert plan["a"] == {"address": "192.168.100.1", "port": 5301, "serve": True, "peer": "10.0.0.2", "peer_port": 5301}
    assert plan["b"]["peer"] == "192.168.100.1" and len(pairs) == 2


def test_the_floor_is_min_gbps_else_seventy_percent_of_the_declared_speed():
    assert LAB.network.floor_gbps == 0.05  # min_gbps wins over 0.7 x ethernet_gbps
    assert _with_network(LAB, ethernet_gbps=100.0, min_gbps=None).network.floor_gbps == 70.0
    assert _with_network(LAB, ethernet_gbps=None, min_gbps=None).network.floor_gbps is None


def test_iperf3_json_from_the_lab_reads_and_is_judged_against_the_floor():
    text = (CAPTURES / "iperf3-client-json__lab-containers__iperf3-3.12.json").read_text()
    run = iperf3.read_iperf3(text)
    assert run.received_gbps and run.received_gbps > 1 and run.sent_gbps >= run.received_gbps * 0.9
    measured = {"json": text, "address": "10.88.0.2", "peer": "10.88.0.3", "port": 5301}
    low = net_judge.judge_pair(_with_network(LAB, min_gbps=0.5), "a", "b", measured)
    high = net_judge.judge_pair(_with_network(LAB, min_gbps=run.received_gbps * 2), "a", "b", measured)
    assert low.status == "pass" and high.status == "fail" and f"{run.received_gbps:g} Gb/s received" in high.detail
    assert low.name == "network a -> b"


def test_iperf3_errors_and_garbage_fail_the_pair_naming_why():
    refused = json.dumps({"start": {"connected": []}, "intervals": [], "end": {},
                          "error": "unable to connect to server - server may have stopped running or use a different "
                                   "port, firewall issue, etc.: Connection refused"})
    check = net_judge.judge_pair(LAB, "a", "b", {"json": refused, "address": "x", "peer": "y", "port": 1})
    assert check.status == "fail" and "Connection refused" in check.detail
    assert net_judge.judge_pair(LAB, "a", "b", {"json": "iperf3: error", "stderr": "boom"}).detail.startswith(
        "not iperf3 --json output")
    assert net_judge.judge_pair(LAB, "a", "b", None).status == "fail"


def test_infiniband_ports_judged_on_real_ibstat_against_the_declared_rate():
    active = {"rc": 0, "stdout": (CAPTURES / "ibstat__8x-ndr400__all-active__gpud.txt").read_text()}
    ndr = net_judge.judge_infiniband(_with_network(H100, infiniband_rate_gbps=400), active)
    assert [c.status for c in ndr] == ["pass"] and "8 InfiniBand port(s), expected 400 Gb/s" in ndr[0].detail
    xdr = net_judge.judge_infiniband(_with_network(H100, infiniband_rate_gbps=800), active)
    assert xdr[0].status == "fail" and "mlx5_0 port 1 at 400" in xdr[0].detail
    some_down = {"rc": 0, "stdout": (CAPTURES / "ibstat__ndr400-and-eth__some-down__gpud.txt").read_text()}
    assert net_judge.judge_infiniband(_with_network(H100, infiniband_rate_gbps=400), some_down)[0].status == "pass"
    assert net_judge.judge_infiniband(H100, None)[0].status == "fail"  # declared, nothing there
    assert net_judge.judge_infiniband(LAB, None) == []  # not declared, not present


def test_ddp_results_of_a_real_two_host_gloo_job_are_judged_per_rank():
    ddp = json.loads((CAPTURES / "ddp-result__2-lab-hosts__gloo__torch-2.13.0-cpu.json").read_text())
    checks = {c.name: c for c in ddp_judge.judge_ddp("a", ddp, 0, ["a", "b"], [])}
    assert checks["ddp backend"].status == "pass" and "gloo" in checks["ddp backend"].detail
    assert checks["ddp"].status == "pass" and "bus bandwidth" in checks["ddp"].detail and "step" in checks["ddp"].detail
    # The same job judged for a GPU profile on a host with GPUs: gloo is the wrong backend.
    gpu = dict(ddp, gpus=8)
    assert {c.name: c for c in ddp_judge.judge_ddp("a", gpu, 8, ["a", "b"], [])}["ddp backend"].status == "fail"
    broken = dict(ddp, rc=1, results=[], stderr="torch.distributed.DistStoreError: Timed out after 31 seconds "
                                                 "waiting for clients. 1/2 clients joined.")
    failed = ddp_judge.judge_ddp("a", broken, 0, ["a", "b"], ["b"])
    assert failed[0].status == "fail" and "lost during the job: b" in failed[0].detail
    assert "DistStoreError" in failed[0].detail


def test_the_iperf3_module_sees_a_listening_port_without_connecting_to_it():
    import socket

    from .conftest import load_module

    mod = load_module("iperf3_pair")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert not mod.listening(port)  # bound, not listening yet
        server.listen(1)
        assert mod.listening(port)  # read from /proc/net/tcp: a connection would use up a one-off server
    assert not mod.listening(port)
    assert mod.stop(port) is False  # no pid file: nothing of ours to stop


def test_verify_network_refuses_a_bad_address_before_any_host_is_touched(tmp_path: Path):
    from typer.testing import CliRunner

    from provisioner.cli import app

    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\na ansible_host=10.0.0.1\nb ansible_host=10.0.0.2 network_test_address='$(reboot)'\n")
    result = CliRunner().invoke(app, ["verify", "-p", str(REPO / "tests/data/profiles/lab-ddp.yml"), str(hosts),
                                      "--network", "--runs-dir", str(tmp_path / "runs")], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "hosts.ini:3" in result.output and "neither an IP address" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "runs").exists()


# --- what listens during a check, where and for how long (issue 28, item 15) ----------------

def test_the_iperf3_server_listens_on_the_address_under_test_for_one_test_and_a_bounded_time():
    from .conftest import load_module

    mod = load_module("iperf3_pair")
    argv = mod.server_argv("/usr/bin/iperf3", "10.0.0.11", 5201, 160)
    assert argv[:2] == ["timeout", "160"]  # killed after its lifetime if no test came
    assert argv[argv.index("--bind") + 1] == "10.0.0.11" and "--one-off" in argv  # one address, one test
    client = mod.client_argv("/usr/bin/iperf3", "10.0.0.12", "10.0.0.11", 5201, 5)
    assert client[client.index("--bind") + 1] == "10.0.0.12" and client[client.index("--connect-timeout") + 1] == "5000"


def test_the_iperf3_servers_lifetime_follows_the_test_duration():
    assert net.server_lifetime(LAB.network.duration_s) == 4 * (LAB.network.duration_s + 30)
    assert net.server_lifetime(5) == 140


def test_the_ddp_rendezvous_is_bound_to_the_address_under_test_and_the_job_to_a_time():
    from .conftest import load_module

    mod = load_module("ddp_run")
    p = {"script": "/tmp/ddp/ddp_smoke.py", "nnodes": 2, "node_rank": 0, "master_addr": "10.0.0.11",
         "master_port": 29500, "local_addr": "10.0.0.11", "timeout": 120, "steps": 5, "tensor_mib": 4}
    argv = mod.torchrun_argv("/opt/env/bin/python", p, 1)
    # ddp_launch.py, not torchrun: it hands the TCPStore a socket bound to --master-addr only
    assert argv[1] == "/tmp/ddp/ddp_launch.py" and argv[argv.index("--master-addr") + 1] == "10.0.0.11"
    assert argv[argv.index("--rdzv-conf") + 1] == "timeout=120" and argv[argv.index("--max-restarts") + 1] == "0"
    assert mod.job_seconds(120) == 300  # then the job, store and all, is killed with its process group
    launcher = (REPO / "ansible_collections/gpu_provisioner/node/playbooks/files/ddp_launch.py").read_text()
    assert 'listener.bind((addr, port))' in launcher and 'options["master_listen_fd"] = listener.fileno()' in launcher
