"""Acceptance (issue 31): floors per GPU model as cited data, the judges on real captures
(nccl-tests, dcgmi diag, nvbandwidth), the cost arithmetic against the guidance's two rows, and
the slow-node search over many seeded noisy simulations."""

from __future__ import annotations

import functools
import json
import math
import random
import shlex
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.engine import bisect
from provisioner.errors import ProvisionError
from provisioner.judge import accept, captures, cost, verify
from provisioner.parsers import dcgm, nccl_tests, nvbandwidth
from provisioner.profiles import skus

from .conftest import DATA

ACCEPT = DATA / "accept"
FIXTURES = DATA / "fixtures"


@functools.cache
def _base():
    return profiles.load("h100-train").profile


def _profile(model: str, count: int, interconnect: str = "nvswitch", **extra):
    base = _base()
    hardware = base.hardware.model_copy(update={"gpu": base.hardware.gpu.model_copy(update={"model": model, "count": count}),
                                                "interconnect": interconnect})
    verify_ = base.verify.model_copy(update={"nccl_min_busbw_gbps": None})  # h100-train sets its own: left out here
    return base.model_copy(update={"hardware": hardware, "verify": verify_, **extra})


# -- floors as data -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "NVIDIA A100-SXM4-80GB",
                                  "NVIDIA L40S", "Tesla T4", "NVIDIA A10", "NVIDIA GeForce RTX 5090"])
def test_every_datasheet_figure_has_its_source(name):
    sheet = skus.sku(name)["datasheet"]
    figures = [k for k in ("tflops", "memory_gbps", "nvlink_gbps") if k in sheet]
    assert figures
    for key, source in (("tflops", "tflops_source"), ("memory_gbps", "memory_source"), ("nvlink_gbps", "nvlink_source")):
        if key in sheet:
            assert sheet[source].startswith("https://"), (name, key)


def test_an_a100_name_never_takes_the_a10_figures():
    assert skus.datasheet_peak("NVIDIA A100 80GB PCIe", "memory_gbps") == (None, "")
    assert skus.datasheet_peak("NVIDIA A10", "memory_gbps")[0] == 600


def test_every_published_floor_is_cited():
    data = skus._data("gpu_skus.yml")
    for entry in data["published_floors"]:
        assert entry["measure"] in skus.MEASURES and entry["source"].startswith("https://github.com/")
        assert entry["basis"]


def test_the_most_specific_cited_floor_wins_and_the_profile_wins_over_all():
    h200 = _profile("H200", 8)
    assert skus.floor(h200, "NVIDIA H200", 8, "allreduce_busbw_gbps").value == 431  # Azure, not NVSentinel's 150
    assert skus.floor(h200, "NVIDIA H200", 4, "allreduce_busbw_gbps").value == 150  # NVLink loopback default
    assert skus.floor(_profile("H200", 8, "pcie"), "NVIDIA H200", 2, "allreduce_busbw_gbps").value is None
    own = h200.model_copy(update={"accept": h200.accept.model_copy(update={"floors": h200.accept.floors.model_copy(
        update={"memory_gbps": 4000.0})})})
    assert skus.floor(own, "NVIDIA H200", 8, "memory_gbps").value == 4000
    assert skus.floor(h200, "NVIDIA H200", 8, "memory_gbps").value is None  # no cited fraction: uncalibrated


# -- judges on real captures ----------------------------------------------------------------

def test_an_uncalibrated_measurement_warns_and_never_fails():
    h200 = _profile("H200", 1)
    check = accept.judge_measure(h200, "NVIDIA H200", 1, "gemm_bf16_tflops", {"GPU 0": 12.0})
    assert check.status == "skip" and accept.UNCALIBRATED in check.detail
    assert "1% of the datasheet's 989 TFLOPS" in check.detail


def test_a_shortfall_names_the_measurement_the_floor_and_the_shortfall():
    h200 = _profile("H200", 8)
    check = accept.judge_measure(h200, "NVIDIA H200", 8, "allreduce_busbw_gbps", {"node": 400.0})
    assert check.status == "fail" and check.name == "accept allreduce_busbw_gbps"
    assert "floor 431 GB/s" in check.detail and "short by 31 GB/s (7.2%)" in check.detail
    assert "azurehpc-health-checks" in check.detail


def test_nccl_capture_judged_against_a_cited_floor():
    run = nccl_tests.read((FIXTURES / "nccl-tests/all_reduce_perf__8x-a100-sxm4-40gb__superbench.log").read_text())
    a100_80 = _profile("A100-SXM4-80GB", 8, "nvswitch")
    (check,) = [c for c in verify.judge_nccl(a100_80, run) if c.name == "nccl bandwidth"]
    # 235.26 GB/s against Azure's 228 GB/s for 8x A100 80GB.
    assert check.status == "pass" and "floor 228" in check.detail and "nd96amsr_a100_v4" in check.detail


@pytest.mark.parametrize("capture, verdict", [("dcgmi-diag-r1__pass__deepops-readme.txt", "pass"),
                                              ("dcgmi-diag-r1__fail__deepops-readme.txt", "fail"),
                                              ("dcgmi-diag-r3__8x-h200__570.133.20__ramble.txt", "pass")])
def test_dcgm_diag_captures_judged(capture, verdict):
    (check,) = verify.judge_diag(dcgm.read_diag((FIXTURES / "dcgm" / capture).read_text()))
    assert check.status == verdict


def test_nvbandwidth_readme_captures_read():
    (d2d,) = nvbandwidth.read((ACCEPT / "nvbandwidth__d2d-write-ce__8-gpus__nvbandwidth-readme.txt").read_text())
    assert d2d.name == "device_to_device_memcpy_write_ce" and d2d.between_gpus
    cells = d2d.cells()
    assert len(cells) == 56 and min(cells.values()) == 274.89 and cells["GPU 6 -> GPU 0"] == 274.89
    (h2d,) = nvbandwidth.read((ACCEPT / "nvbandwidth__h2d-ce__8-gpus__nvbandwidth-readme.txt").read_text())
    assert not h2d.between_gpus and h2d.cells()["GPU 4"] == 26.19 and len(h2d.cells()) == 8


def test_nvbandwidth_judged_against_the_profile_floor_through_provision_judge(tmp_path):
    h100 = _profile("H100 80GB HBM3", 8)
    own = h100.model_copy(update={"accept": h100.accept.model_copy(update={"floors": h100.accept.floors.model_copy(
        update={"h2d_gbps": 26.0})})})
    text = (ACCEPT / "nvbandwidth__h2d-ce__8-gpus__nvbandwidth-readme.txt").read_text()
    judged = captures.judge_text(own, text)
    assert judged.form == "nvbandwidth" and judged.status == "fail"
    (check,) = judged.checks
    assert "floor 26 GB/s (profile accept.floors.h2d_gbps)" in check.detail and "GPU 1" in check.detail
    d2d = captures.judge_text(h100, (ACCEPT / "nvbandwidth__d2d-write-ce__8-gpus__nvbandwidth-readme.txt").read_text())
    assert d2d.status == "pass" and d2d.checks[0].status == "skip" and "61% of the datasheet's 450 GB/s" in d2d.checks[0].detail


def test_nvbandwidth_cut_short_is_one_clear_error():
    with pytest.raises(nvbandwidth.NvbandwidthError, match="no bandwidth matrix"):
        nvbandwidth.read("Running host_to_device_memcpy_ce.\n")  # hand-made: a paste cut after its first line


def test_accept_measurements_capture_gpu_and_cpu():
    # Hand-made captures in the shape scripts/gpu-machine-check writes (no GPU run has happened yet).
    h200 = _profile("H200", 1)
    gpu = json.dumps({"provision_accept": 1, "device": "gpu", "gpu": "NVIDIA H200", "gpus": 1,
                      "measurements": {"memory_gbps": {"GPU 0": 4100.0}}})
    (check,) = captures.judge_text(h200, gpu).checks
    assert check.status == "skip" and "85% of the datasheet's 4800 GB/s" in check.detail
    cpu = json.dumps({"provision_accept": 1, "device": "cpu", "gpu": "", "gpus": 0,
                      "measurements": {"gemm_fp32_tflops": {"cpu": 0.05}}})
    (check,) = captures.judge_text(h200, cpu).checks
    assert check.status == "skip" and accept.CPU_NOTE in check.detail
    bad = captures.judge_text(h200, '{"provision_accept": 1, "device": "gpu", "gpu": "x", "gpus": 1, '
                                    '"measurements": {"rm -rf": {"a": 1}}}')
    assert bad.unreadable and "not a measurement" in bad.unreadable


# -- cost -------------------------------------------------------------------------------------

def test_cost_matches_the_guidance_rows():
    a100 = cost.node("8x A100 cloud", 1200, 32)
    h100 = cost.node("4x H100 owned", 3800, 18.75)
    assert a100.samples_per_dollar_hour == 37.5
    assert round(h100.samples_per_dollar_hour, 1) == 202.7
    assert round(a100.dollars_per_million_samples, 3) == 7.407  # 32 / (1200 * 3600) * 1e6
    fleet = cost.fleet([a100, h100])
    assert (fleet.samples_per_s, fleet.per_hour) == (5000, 50.75)
    assert round(fleet.samples_per_dollar_hour, 2) == 98.52
    with pytest.raises(ValueError, match="positive"):
        cost.node("free", 100, 0)


# -- the slow node ----------------------------------------------------------------------------

FLOOR = 100.0


def _simulated(bad: set[str], rng: random.Random, noise: float = 0.08, slow_link: tuple[set, set] | None = None):
    """A fleet where any all-reduce that includes a bad host (or crosses a slow link) runs at 40%
    of the floor and a healthy one at 130%, each reading off by a gaussian `noise` (hand-made model).
    One call measures one round: its host sets side by side, which must not share a host."""
    def measure_round(sets):
        flat = [h for chosen in sets for h in chosen]
        assert sets and len(flat) == len(set(flat)), sets
        values = []
        for chosen in sets:
            crosses = slow_link and set(chosen) & slow_link[0] and set(chosen) & slow_link[1]
            base = 0.4 * FLOOR if bad & set(chosen) or crosses else 1.3 * FLOOR
            values.append(max(0.0, rng.gauss(base, noise * FLOOR)))
        return values
    return measure_round


@pytest.mark.parametrize("n", [4, 8, 13, 32])
def test_the_slow_host_is_found_within_the_bound_and_no_healthy_host_is_ever_named(n):
    hosts = [f"node{i:02d}" for i in range(n)]
    named = 0
    for seed in range(300):
        rng = random.Random(seed)
        bad = rng.choice(hosts)
        found = bisect.find_slow(hosts, FLOOR, _simulated({bad}, rng))
        assert found.culprit in (None, bad), (seed, found.as_dict())
        assert found.round_count <= bisect.bound(n) == math.ceil(math.log2(n)) + 2
        named += found.culprit == bad
    assert named >= 297  # at 8% noise a healthy reading falls under the floor about once in 10^4


@pytest.mark.parametrize("n", [8, 13, 32])
def test_heavy_noise_makes_it_inconclusive_never_wrong(n):
    # Noise of 25% of the floor: a healthy reading falls under the floor one time in nine and
    # the search often ends inconclusive, but over 1000 seeded runs it never names a healthy host.
    # (From about 30% the healthy and slow readings overlap so much that it can: docs/acceptance.md.)
    hosts = [f"node{i}" for i in range(n)]
    named_wrong, found = 0, 0
    for seed in range(1000):
        rng = random.Random(seed)
        bad = rng.choice(hosts)
        result = bisect.find_slow(hosts, FLOOR, _simulated({bad}, rng, noise=0.25))
        named_wrong += result.culprit not in (None, bad)
        found += result.culprit == bad
        assert result.round_count <= bisect.bound(n)
    assert named_wrong == 0 and found > 400


def test_a_healthy_fleet_names_nobody():
    hosts = [f"node{i}" for i in range(8)]
    for seed in range(200):
        result = bisect.find_slow(hosts, FLOOR, _simulated(set(), random.Random(seed)))
        assert result.verdict == "healthy" and result.round_count == 1


def test_topology_aware_search_names_the_rack_link():
    racks = {"rack1": ["a1", "a2", "a3", "a4"], "rack2": ["b1", "b2", "b3", "b4"]}
    hosts = racks["rack1"] + racks["rack2"]
    result = bisect.find_slow(hosts, FLOOR, _simulated(set(), random.Random(1), slow_link=(set(racks["rack1"]),
                                                                                           set(racks["rack2"]))),
                              groups=racks)
    assert result.verdict == "link" and result.culprit == "a1 a2 a3 a4 | b1 b2 b3 b4"
    grouped = bisect.find_slow(hosts, FLOOR, _simulated({"b3"}, random.Random(2)), groups=racks)
    assert grouped.culprit == "b3" and grouped.round_count <= bisect.bound(8)
    assert [len(m.hosts) for m in grouped.rounds[1]] == [4, 4]  # whole racks first
    assert all(len(m.hosts) > 1 for r in grouped.rounds for m in r)  # every all-reduce spans hosts


def _slow_switch(members: set[str], hosts: list[str], rng: random.Random, noise: float = 0.08):
    """A switch whose uplink is slow (hand-made model): an all-reduce that joins a host under it
    with a host outside it runs at 40% of the floor; one within either side at 130%."""
    return _simulated(set(), rng, noise, slow_link=(members, set(hosts) - members))


@pytest.mark.parametrize("shape", [(2, 4), (4, 2), (4, 4)])
def test_a_switch_whose_hosts_all_fall_short_is_named_as_the_group(shape):
    count, size = shape
    racks = {f"leaf{r}": [f"{'abcd'[r]}{i}" for i in range(1, size + 1)] for r in range(count)}
    hosts = [h for members in racks.values() for h in members]
    named = 0
    for seed in range(200):
        rng = random.Random(seed)
        bad = rng.choice(sorted(racks))
        found = bisect.find_slow(hosts, FLOOR, _simulated(set(racks[bad]), rng), groups=racks)
        assert (found.verdict, found.culprit) in (("group", bad), ("inconclusive", None)), (seed, found.as_dict())
        assert found.round_count <= bisect.bound(len(hosts))
        assert all(len(m.hosts) > 1 for r in found.rounds for m in r)
        named += found.verdict == "group"
        if count > 2:  # a slow uplink: hosts under the switch are fast among themselves, slow with others
            uplink = bisect.find_slow(hosts, FLOOR, _slow_switch(set(racks[bad]), hosts, rng), groups=racks)
            assert (uplink.verdict, uplink.culprit) in (("group", bad), ("inconclusive", None)), (seed, uplink.as_dict())
            assert uplink.round_count <= bisect.bound(len(hosts))
            named += uplink.verdict == "group"
    assert named >= (195 if count == 2 else 390)
    # One slow host under a switch is still the node, not its switch.
    one = bisect.find_slow(hosts, FLOOR, _simulated({hosts[-1]}, random.Random(7)), groups=racks)
    assert (one.verdict, one.culprit) == ("node", hosts[-1])


@pytest.mark.parametrize("sizes", [[1, 7], [2, 2, 2, 1, 1], [5, 3], [3]])
def test_a_lone_host_cleared_by_the_other_half_is_confirmed_not_a_crash(sizes):
    # A half of one host cannot be measured alone: the other half's reading decides, and the
    # confirmation then measures the suspect with cleared hosts (three hosts, or a one-host switch).
    racks = {f"r{i}": [f"h{i}_{j}" for j in range(n)] for i, n in enumerate(sizes)}
    hosts = [h for members in racks.values() for h in members]
    for seed in range(100):
        rng = random.Random(seed)
        bad = rng.choice(hosts)
        found = bisect.find_slow(hosts, FLOOR, _simulated({bad}, rng), groups=racks if len(racks) > 1 else None)
        assert found.culprit in (None, bad), (seed, found.as_dict())
    lone = bisect.find_slow(["n0", "n1", "n2"], FLOOR, _simulated({"n2"}, random.Random(0)))
    assert (lone.verdict, lone.culprit) == ("node", "n2")


def test_noise_never_names_a_healthy_switch():
    racks = {f"leaf{r}": [f"{'abcd'[r]}{i}" for i in range(1, 5)] for r in range(4)}
    hosts = [h for members in racks.values() for h in members]
    wrong = 0
    for seed in range(500):
        rng = random.Random(seed)
        bad = rng.choice(hosts)  # one slow host, heavy noise: never a switch, never a healthy host
        found = bisect.find_slow(hosts, FLOOR, _simulated({bad}, rng, noise=0.25), groups=racks)
        wrong += found.culprit not in (None, bad)
    assert wrong == 0


def test_network_switch_groups_the_fleet_from_the_inventory(tmp_path: Path):
    from provisioner.engine import network
    from provisioner.render.inventory import load

    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[rack1]\na1\na2\n[rack2]\nb1\nb2 network_switch=leaf-9\n"
                     "[rack1:vars]\nnetwork_switch=leaf-1\n[rack2:vars]\nnetwork_switch=leaf-2\n")
    inventory = load(hosts)
    assert network.switches(inventory, ["a1", "a2", "b1", "b2"]) == {"leaf-1": ["a1", "a2"], "leaf-2": ["b1"],
                                                                     "leaf-9": ["b2"]}
    hosts.write_text("[gpu]\na1\na2\n")
    assert network.switches(load(hosts), ["a1", "a2"]) is None
    hosts.write_text("[gpu]\na1 network_switch=leaf-1\na2\n")
    with pytest.raises(ProvisionError, match="not for a2") as half:
        network.switches(load(hosts), ["a1", "a2"])
    assert "every host of the fleet" in half.value.fix
    hosts.write_text("[gpu]\na1 network_switch='$(reboot)'\na2 network_switch=x\n")
    with pytest.raises(ProvisionError, match="not a switch or rack name") as bad:
        network.switches(load(hosts), ["a1", "a2"])
    assert bad.value.where.endswith("hosts.ini:2")


def test_each_round_is_measured_at_once_and_keeps_its_figures_as_evidence():
    simulated, calls = _simulated({"n5"}, random.Random(3)), []

    def measure_round(sets):
        calls.append([list(s) for s in sets])
        return simulated(sets)

    result = bisect.find_slow([f"n{i}" for i in range(8)], FLOOR, measure_round)
    assert [[list(m.hosts) for m in r] for r in result.rounds] == calls  # one call per round, its sets in order
    with pytest.raises(ValueError, match="gave 1 figure"):
        bisect.find_slow(["a", "b", "c", "d"], FLOOR, lambda sets: [40.0])
    rounds = result.as_dict()["rounds"]
    assert len(rounds) == 5 and rounds[0][0]["short"] and len(rounds[0][0]["hosts"]) == 8
    assert all(isinstance(m["busbw_gbps"], float) for r in rounds for m in r)


def test_drain_command_is_shell_quoted_and_refuses_what_is_not_a_host_name(tmp_path: Path):
    line = bisect.drain_command("node05", "all-reduce 40 GB/s < floor 100 GB/s; it's slow")
    assert shlex.split(line) == ["scontrol", "update", "nodename=node05", "state=drain",
                                 "reason=[node_problem] all-reduce 40 GB/s < floor 100 GB/s; it's slow"]
    assert bisect.drain_command("node05", "x", hook="echo drained {host}") == "echo drained node05"
    for bad in ("-node", "a;b", "$(reboot)"):
        with pytest.raises(ProvisionError, match="not a host name"):
            bisect.drain_command(bad, "x")
    ran = bisect.run_drain(f"echo {shlex.quote(str(tmp_path / 'x'))} {{host}} > {shlex.quote(str(tmp_path / 'out'))}",
                           "node05", tmp_path, timeout=10)
    assert ran.ok and (tmp_path / "out").read_text().split()[-1] == "node05"
