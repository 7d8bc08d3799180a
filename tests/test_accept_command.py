"""`provision accept` (issue 31): the request refused before any host is touched, the
exporter's metric contract judged on real dcgm-exporter scrapes, a measurement job killed at
its bound leaving nothing running and no listener, the judges of what accept_run returns, and
the cost table a report prints."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.engine import accept
from provisioner.errors import ProvisionError
from provisioner.judge import accept as accept_judge
from provisioner.judge import cost
from provisioner.reports.report import Report

from .conftest import FIXTURES, load_module

DCGM = FIXTURES / "dcgm"
T4_SCRAPE = DCGM / "dcgm-exporter-metrics__tesla-t4__460.106.00+470.182.03__datadog.prom"


def test_burn_in_without_a_duration_is_refused_and_drain_needs_fleet():
    with pytest.raises(ProvisionError, match="needs a duration"):
        accept.Request(level="burn-in").check(profiles.load("debian12-lab").profile)
    with pytest.raises(ProvisionError, match="--fleet"):
        accept.Request(run_drain=True).check()
    accept.Request(level="standard", fleet=True, price_per_hour=32, run_drain=True).check()
    assert accept.steps(accept.Request(fleet=True)) == ("verify", "accept", "fleet")


def test_the_verify_play_runs_dcgmi_diag_at_the_levels_run_only_where_dcgm_is_installed():
    h100 = profiles.load("h100-train").profile
    assert accept.verify_extravars(h100, "quick") == {"gpu_verify_dcgm_diag_level": 1}
    assert accept.verify_extravars(h100, "standard") == {"gpu_verify_dcgm_diag_level": 2}
    lab = profiles.load("debian12-lab").profile
    assert not lab.dcgm.enabled and accept.verify_extravars(lab, "standard") == {"gpu_verify_dcgm_diag_level": 0}
    checks = {c.name: c for c in accept.verify_checks(profiles.load("debian12-lab"), {"dcgmi_diag": {"ran": False}})}
    assert checks["accept dcgmi diag"].status == "skip"
    assert checks["accept dcgmi diag"].detail == "not run: DCGM is not installed by this profile (dcgm.enabled)"
    assert checks["accept exporter contract"].status == "skip"
    h100 = {c.name: c for c in accept.verify_checks(profiles.load("h100-train"), {"exporter": {"body": ""}})}
    assert h100["accept exporter contract"].status == "fail" and "not scraped" in h100["accept exporter contract"].detail


def test_metric_contract_is_what_the_dashboard_and_alert_rules_use_and_a_real_t4_scrape_is_judged(tmp_path: Path):
    t4 = profiles.load("t4-infer")
    contract = accept.metric_contract(t4)
    assert contract["DCGM_FI_DEV_GPU_UTIL"] == "dashboard panel 'GPU utilisation'"
    assert set(contract) <= set(t4.profile.dcgm.exporter.collectors)
    # The real scrape (a Tesla T4, datadog's capture) serves no NVLink field: the contract names it and its panel.
    check = accept_judge.judge_metric_contract(contract, T4_SCRAPE.read_text())
    assert check.status == "fail"
    assert check.detail == ("1 field(s) the dashboard or alert rules use are not served: "
                            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (dashboard panel 'NVLink bandwidth (all links)')")
    # A profile that does not collect it: the dashboard drops the panel, the same scrape meets the contract.
    own = tmp_path / "t4-no-nvlink.yml"
    kept = [m for m in t4.profile.dcgm.exporter.collectors if m != "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
    own.write_text("extends: t4-infer\nname: t4-no-nvlink\ndescription: t4 without the NVLink field\n"
                   "dcgm:\n  exporter:\n    collectors: [" + ", ".join(kept) + "]\n")
    narrower = accept.metric_contract(profiles.load(str(own)))
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in narrower
    ok = accept_judge.judge_metric_contract(narrower, T4_SCRAPE.read_text())
    assert ok.status == "pass" and f"all {len(narrower)} field(s)" in ok.detail
    assert accept_judge.judge_metric_contract(narrower, "not { a scrape").status == "fail"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_job_killed_at_its_bound_leaves_no_process_and_no_listener(tmp_path: Path):
    """A measurement job that hangs midway (here: a child that listens and a grandchild that
    sleeps) is killed with its whole process group at the bound; nothing of it survives."""
    mod = load_module("accept_run")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pids = tmp_path / "pids"
    script = (f"import os, socket, subprocess, sys, time\n"
              f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              f"s.bind(('127.0.0.1', {port})); s.listen(1)\n"
              f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
              f"print('measured half', flush=True); time.sleep(600)\n")
    started = time.monotonic()
    job = mod.bounded([sys.executable, "-c", script], 3)
    took = time.monotonic() - started
    assert job["timed_out"] and job["rc"] == 124 and job["job_timeout"] == 3
    assert "measured half" in job["stdout"] and took < 20
    for pid in map(int, pids.read_text().split()):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], pid
    assert not _listening(port)
    # What the judge makes of it: the bound named, a clear failure.
    checks, samples = accept_judge.judge_measurements(profiles.load("debian12-lab").profile, dict(job, data=None))
    assert samples is None and checks[0].status == "fail" and "killed after its bound of 3 s" in checks[0].detail


def test_a_killed_measurement_keeps_the_figures_written_before_and_cpu_figures_are_not_judged():
    """Hand-made: the shape accept_measure.py writes (device cpu), cut short after the GEMM."""
    lab = profiles.load("debian12-lab").profile
    data = {"provision_accept": 1, "device": "cpu", "gpu": "", "gpus": 0,
            "measurements": {"gemm_fp32_tflops": {"cpu": 0.05}}}
    checks, samples = accept_judge.judge_measurements(lab, {"rc": 124, "timed_out": True, "job_timeout": 60,
                                                            "data": data, "stderr": ""})
    assert [c.status for c in checks] == ["fail", "skip"]
    assert "not judged against a GPU" in checks[1].detail and samples is None
    data["reference_workload_samples_per_s"] = 12.5
    checks, samples = accept_judge.judge_measurements(lab, {"rc": 0, "timed_out": False, "data": data})
    assert [c.status for c in checks] == ["skip"] and samples == 12.5


def test_a_node_allreduce_on_a_cpu_host_is_labelled_not_judged_and_a_killed_one_fails_naming_the_bound():
    """Hand-made results in ddp_smoke.py's DDP_RESULT shape."""
    lab = profiles.load("debian12-lab").profile
    rank = {"backend": "gloo", "rank": 0, "world_size": 1, "step_ms": [2.0], "allreduce_mib": 4, "allreduce_ms": 3.0,
            "busbw_GBs": 0.0, "weights_agree": True, "values_right": True}
    job = {"rc": 0, "results": [rank], "nproc_per_node": 1, "gpus": 0, "interface": "lo", "seconds": 9.0}
    checks = {c.name: c for c in accept_judge.judge_allreduce(lab, "n1", job)}
    assert checks["accept allreduce backend"].status == "pass" and "gloo" in checks["accept allreduce backend"].detail
    assert checks["accept allreduce"].status == "pass"
    assert checks["accept allreduce_busbw_gbps"].status == "skip"
    assert "not judged against a GPU" in checks["accept allreduce_busbw_gbps"].detail
    killed = accept_judge.judge_allreduce(lab, "n1", {"rc": 124, "timed_out": True, "job_timeout": 60, "stderr": ""})
    assert len(killed) == 1 and killed[0].status == "fail" and "killed after its bound of 60 s" in killed[0].detail


def test_the_cost_table_prints_per_node_and_fleet_with_the_guidances_arithmetic(tmp_path: Path):
    nodes = [cost.node("a100-cloud", 1200, 32), cost.node("h100-owned", 3800, 18.75)]
    report = Report("accept", "p", "0" * 64, "hosts.ini", tmp_path, started="")
    report.accept = {"level": "quick", "cost": {"per_hour": 32, "nodes": [n.as_dict() for n in nodes],
                                                "fleet": cost.fleet(nodes).as_dict()}}
    lines = report.accept_lines()
    assert "a100-cloud: 1200 samples/s, $32/h, index 37.5," in lines[1]
    assert "h100-owned: 3800 samples/s, $18.75/h, index 202.667," in lines[2]
    assert lines[3].startswith("  fleet: 5000 samples/s, $50.75/h")
    assert Report.from_dict(report.as_dict(), tmp_path).accept == report.accept


def test_the_fleet_figure_is_the_slowest_rank_and_a_host_whose_part_failed_counts_as_zero():
    """Hand-made ddp_run results: the search reads one figure per all-reduce."""
    def part(*busbw):
        return {"rc": 0, "results": [{"rank": i, "busbw_GBs": b} for i, b in enumerate(busbw)]}
    assert accept._fleet_busbw({"a": part(3.5, 3.1), "b": part(3.3)}) == 3.1
    assert accept._fleet_busbw({"a": part(3.5), "b": {"rc": 124, "results": []}}) == 0.0
    assert accept._fleet_busbw({"a": part(3.5), "b": None}) == 0.0


def test_a_round_plan_gives_each_host_set_its_own_job_and_never_one_address_and_port_twice():
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3", "d": "10.0.0.4", "x": "10.0.0.9", "y": "10.0.0.9"}
    plan = accept.round_plan([["a", "b", "c"], ["d", "x"]], addresses, 29600)
    assert plan["c"] == {"nnodes": 3, "node_rank": 2, "master_addr": "10.0.0.1", "master_port": 29600,
                         "local_addr": "10.0.0.3"}
    assert plan["x"] == {"nnodes": 2, "node_rank": 1, "master_addr": "10.0.0.4", "master_port": 29600,
                         "local_addr": "10.0.0.9"}  # a store on another host: the same port
    # Two names for one machine lead two sets: the second store takes the next port.
    shared = accept.round_plan([["x", "a"], ["y", "b"]], addresses, 29600)
    assert [(shared[h]["master_addr"], shared[h]["master_port"]) for h in "ab"] == [("10.0.0.9", 29600),
                                                                                   ("10.0.0.9", 29601)]


def test_the_node_allreduce_rendezvous_listens_on_loopback_only():
    argv = load_module("accept_run").allreduce_argv("/opt/venvs/t/bin/python", "/tmp/s", 8, 29600, 5, 16, 60)
    assert argv[argv.index("--master-addr") + 1] == argv[argv.index("--local-addr") + 1] == "127.0.0.1"
    assert argv[argv.index("--nproc-per-node") + 1] == "8" and "timeout=60" in argv


def test_ddp_results_are_read_when_two_local_ranks_interleave_their_lines():
    """Hand-made, in the shape the accept lab run lost a rank to: with PYTHONUNBUFFERED each
    print() is two writes (text, newline), so two ranks' lines can come out as text, text,
    newline, newline."""
    from ansible_collections.gpu_provisioner.node.plugins.module_utils import ddp_results

    out = ('warning line\nDDP_RESULT {"rank": 0, "busbw_GBs": 0.26, "step_ms": [13.6]}'
           'DDP_RESULT {"rank": 1, "busbw_GBs": 0.27, "step_ms": [13.6]}\n\nDDP_RESULT {"rank": 2, cut\n')
    assert [r["rank"] for r in ddp_results.parse(out)] == [0, 1]
    assert ddp_results.parse("") == [] and ddp_results.parse("DDP_RESULT [1, 2]") == []


def _search(bad: set[str], racks: dict[str, list[str]]):
    """The slow-node search over a hand-made fleet: an all-reduce with a bad host reads 40 GB/s,
    one without 130 GB/s, against a floor of 100."""
    from provisioner.engine import bisect

    hosts = [h for members in racks.values() for h in members]
    return hosts, bisect.find_slow(hosts, 100.0, lambda sets: [40.0 if bad & set(s) else 130.0 for s in sets],
                                   groups=racks)


def test_a_slow_switch_fails_on_each_of_its_hosts_without_a_drain(tmp_path: Path):
    racks = {"leaf-a": ["a1", "a2", "a3", "a4"], "leaf-b": ["b1", "b2", "b3", "b4"]}
    hosts, finding = _search(set(racks["leaf-b"]), racks)
    report, record = Report("accept", "p", "0" * 64, "hosts.ini", tmp_path, started=""), {"drain": None}
    accept.report_finding(report, record, finding, hosts, racks, "100 GB/s (profile)", accept.Request(fleet=True),
                          tmp_path)
    status = {h.name: h.checks[-1].status for h in report.hosts}
    assert status == {**dict.fromkeys(racks["leaf-a"], "pass"), **dict.fromkeys(racks["leaf-b"], "fail")}
    assert "the slow switch of the fleet, leaf-b" in report.hosts[-1].checks[-1].detail
    assert record["drain"] is None and record["finding"]["verdict"] == "group" and report.exit_code == 2


def test_a_slow_node_under_a_switch_gets_its_drain_run_when_asked(tmp_path: Path):
    racks = {"leaf-a": ["a1", "a2", "a3", "a4"], "leaf-b": ["b1", "b2", "b3", "b4"]}
    hosts, finding = _search({"b3"}, racks)
    out = tmp_path / "drained"
    request = accept.Request(fleet=True, drain_hook=f"echo {{host}} > {out}", run_drain=True)
    report, record = Report("accept", "p", "0" * 64, "hosts.ini", tmp_path, started=""), {"drain": None}
    accept.report_finding(report, record, finding, hosts, racks, "100 GB/s (profile)", request, tmp_path)
    assert [h.name for h in report.hosts] == ["b3"] and report.hosts[0].checks[0].status == "fail"
    assert record["drain"] == f"echo b3 > {out}" and record["drain_rc"] == 0 and out.read_text() == "b3\n"


def test_accept_fleet_refuses_a_half_labelled_fleet_before_any_host_is_touched(tmp_path: Path):
    from typer.testing import CliRunner

    from provisioner.cli import app

    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\na ansible_host=10.0.0.1 network_switch=leaf-1\nb ansible_host=10.0.0.2\n")
    profile = Path(__file__).resolve().parent / "data" / "profiles" / "lab-ddp.yml"
    result = CliRunner().invoke(app, ["accept", "-p", str(profile), str(hosts), "--fleet",
                                      "--runs-dir", str(tmp_path / "runs")], env={"COLUMNS": "200"})
    assert result.exit_code == 1 and "network_switch is set for 1 host(s) but not for b" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "runs").exists()
