"""InfiniBand profiles: the GPUDirect RDMA decision as data (compat.yml gpudirect_rdma, its
sources cited there), what render hands the network role, and verify's port judge on real
captures of ibstat and /sys/class/infiniband (tests/data/diagnose/SOURCES.md), including a
host with no HCA: a skip that says so in a container, a failure on a machine, never a pass."""

from __future__ import annotations

import json

import pytest

from provisioner.profiles import compat
from provisioner import profiles
from provisioner.judge import preflight, verify
from provisioner.parsers import ibstat
from provisioner.render import PROFILE_FIELD, role_vars

from .conftest import REPO
from .test_preflight import HGX

CAPTURES = REPO / "tests" / "data" / "diagnose"
SYSFS = json.loads((CAPTURES / "sysfs-class-infiniband__h100-8x-ndr400-and-roce-bond__gpud.json").read_text())
IBSTAT = (CAPTURES / "ibstat__8x-ndr400__all-active__gpud.txt").read_text()
H100 = profiles.load("h100-train").profile   # ubuntu-22.04, proprietary modules, R580, IB
H200 = profiles.load("h200-train").profile   # ubuntu-22.04, open modules, R580, IB


def _changed(profile, **sections):
    data = profile.model_dump()
    for section, values in sections.items():
        data[section].update(values)
    return type(profile).model_validate(data)


# (requested, infiniband, os, kernel_modules, branch, architecture, kernel) -> (mode, modules, min_kernel)
DECISIONS = [
    # auto: DMA-BUF wherever it works (NVIDIA's recommendation), on every supported OS.
    (("auto", True, "ubuntu-22.04", "open", 580, "hopper", None), ("dma-buf", (), "5.12")),
    (("auto", True, "ubuntu-24.04", "open", 570, "ampere", None), ("dma-buf", (), "5.12")),
    (("auto", True, "debian-12", "open", 535, "ada", None), ("dma-buf", (), "5.12")),
    (("auto", True, "ubuntu-22.04", "open", 515, "turing", "5.12.0-1-generic"), ("dma-buf", (), "5.12")),
    # auto without DMA-BUF: nvidia-peermem only where the kernel has the peer-memory interface.
    (("auto", True, "ubuntu-22.04", "proprietary", 580, "hopper", None), ("nvidia-peermem", ("nvidia-peermem",), "")),
    (("auto", True, "ubuntu-22.04", "open", 510, "ampere", None), ("nvidia-peermem", ("nvidia-peermem",), "")),
    (("auto", True, "ubuntu-22.04", "open", 580, "hopper", "5.11.0-49-generic"),
     ("nvidia-peermem", ("nvidia-peermem",), "")),
    (("auto", True, "ubuntu-22.04", "proprietary", 535, "volta", None), ("nvidia-peermem", ("nvidia-peermem",), "")),
    (("auto", True, "ubuntu-24.04", "proprietary", 580, "hopper", None), ("off", (), "")),
    (("auto", True, "debian-12", "proprietary", 535, None, None), ("off", (), "")),
    # Asked for explicitly: honoured (gpudirect_problems says when it cannot work).
    (("nvidia-peermem", True, "debian-12", "proprietary", 535, None, None), ("nvidia-peermem", ("nvidia-peermem",), "")),
    (("dma-buf", True, "ubuntu-22.04", "open", 580, "hopper", None), ("dma-buf", (), "5.12")),
    (("off", True, "ubuntu-22.04", "open", 580, "hopper", None), ("off", (), "")),
    # No InfiniBand: nothing, whatever else.
    (("auto", False, "ubuntu-22.04", "open", 580, "hopper", None), ("off", (), "")),
]


@pytest.mark.parametrize(("inputs", "expected"), DECISIONS, ids=[str(i) for i, _ in DECISIONS])
def test_the_gpudirect_path_is_decided_from_modules_branch_kernel_and_os(inputs, expected):
    decided = compat.decide_gpudirect(*inputs)
    assert (decided.mode, decided.modules, decided.min_kernel) == expected
    assert decided.why  # every decision says why


def test_dma_buf_names_each_unmet_requirement_and_its_fix():
    unmet = compat.dma_buf_unmet("proprietary", 510, "5.10.0-28-amd64", "volta")
    assert unmet == ["the open kernel modules (driver.kernel_modules: open)",
                     "driver branch R515 or newer (CUDA 11.7), not R510", "Linux 5.12 or newer, not 5.10.0-28-amd64",
                     "a Turing or newer GPU, not Volta"]
    assert compat.dma_buf_unmet("open", 515, "6.1.0-28-amd64", None) == []


def test_render_hands_the_network_role_the_stack_and_the_path():
    for name, mode, min_kernel in (("h200-train", "dma-buf", "5.12"), ("h100-train", "nvidia-peermem", None)):
        out = role_vars(profiles.load(name))
        assert out["network_infiniband"] is True and out["gpu_verify_infiniband"] is True
        assert out["network_gpudirect_rdma"] == mode and out.get("network_gpudirect_min_kernel") == min_kernel
    lab = role_vars(profiles.load("debian12-lab"))
    assert lab["network_infiniband"] is False and lab["network_gpudirect_rdma"] == "off"
    assert "network_gpudirect_min_kernel" not in lab
    assert {"network_infiniband", "network_gpudirect_rdma", "network_gpudirect_min_kernel",
            "gpu_verify_infiniband"} <= set(PROFILE_FIELD)


def test_sysfs_ports_read_from_a_real_h100_node():
    ports = ibstat.read_sysfs(SYSFS)
    infiniband = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ports) == 9 and len(infiniband) == 8
    assert all(p.up and p.rate_gbps == 400 for p in infiniband)
    bond = next(p for p in ports if p.ca == "mlx5_bond_0")
    assert (bond.link_layer, bond.rate_gbps, bond.state, bond.physical_state) == ("Ethernet", 200, "Active", "LinkUp")
    with pytest.raises(ibstat.IbstatError, match="not /sys/class/infiniband port values"):
        ibstat.read_sysfs({"mlx5_0/1": {"state": "ACTIVE", "phys_state": "LinkUp"}})


def _probe(ib, container="", **more):
    return {"commands": {}, "module_version": "", "container": container, "infiniband": ib, **more}


def _ib_checks(profile, probe):
    return {c.name: c for c in verify.judge_probe(profile, probe) if c.name in ("infiniband", "gpudirect rdma")}


def test_verify_judges_the_ports_from_ibstat_and_else_from_sysfs_against_the_rate():
    ndr = _changed(H100, network={"infiniband_rate_gbps": 400})
    from_ibstat = _ib_checks(ndr, _probe({"present": True, "sysfs": SYSFS, "ibstat": {"rc": 0, "stdout": IBSTAT}}))
    assert from_ibstat["infiniband"].status == "pass" and "(read from ibstat)" in from_ibstat["infiniband"].detail
    no_ibstat = {"present": True, "sysfs": SYSFS, "ibstat": {"rc": 127, "missing": True, "stdout": ""}}
    from_sysfs = _ib_checks(ndr, _probe(no_ibstat))["infiniband"]
    assert from_sysfs.status == "pass" and "8 InfiniBand port(s), expected 400 Gb/s each" in from_sysfs.detail
    assert "ibstat is not installed" in from_sysfs.detail
    xdr = _ib_checks(_changed(H100, network={"infiniband_rate_gbps": 800}), _probe(no_ibstat))["infiniband"]
    assert xdr.status == "fail" and "mlx5_0 port 1 at 400" in xdr.detail
    # The kernel's own words for a port whose cable is out (Documentation/ABI/stable/sysfs-class-infiniband).
    down = {**SYSFS, "mlx5_4/1": {**SYSFS["mlx5_4/1"], "state": "1: DOWN", "phys_state": "3: Disabled"}}
    failed = _ib_checks(ndr, _probe({**no_ibstat, "sysfs": down}))["infiniband"]
    assert failed.status == "fail" and "mlx5_4 port 1 Down/Disabled" in failed.detail
    garbled = _ib_checks(ndr, _probe({**no_ibstat, "sysfs": {"mlx5_0/1": {"state": "?"}}}))["infiniband"]
    assert garbled.status == "fail" and "IbstatError" in garbled.detail


def test_no_hca_is_a_skip_in_a_container_a_failure_on_a_machine_and_never_a_pass():
    in_lab = _ib_checks(H100, _probe({"present": False}, container="podman"))
    assert in_lab["infiniband"].status == "skip"
    assert "no InfiniBand HCA in this podman container" in in_lab["infiniband"].detail
    assert in_lab["gpudirect rdma"].status == "skip" and "no NVIDIA module is loaded" in in_lab["gpudirect rdma"].detail
    machine = _ib_checks(H100, _probe({"present": False}))
    assert machine["infiniband"].status == "fail" and "has no HCA" in machine["infiniband"].detail
    # A profile without InfiniBand gets no InfiniBand checks at all.
    assert _ib_checks(profiles.load("debian12-lab").profile, _probe({"present": False})) == {}


def test_nvidia_peermem_must_be_loaded_next_to_the_driver():
    ib = {"present": True, "sysfs": SYSFS, "ibstat": {"rc": 0, "stdout": IBSTAT}}
    loaded = _ib_checks(H100, _probe(ib, module_version="580.95.05", peermem_loaded=True))["gpudirect rdma"]
    assert loaded.status == "pass"
    missing = _ib_checks(H100, _probe(ib, module_version="580.95.05", peermem_loaded=False))["gpudirect rdma"]
    assert missing.status == "fail" and "modprobe nvidia-peermem" in missing.detail
    dma_buf = _ib_checks(H200, _probe(ib, module_version="580.95.05"))["gpudirect rdma"]
    assert dma_buf.status == "skip" and dma_buf.detail.startswith("dma-buf: open kernel modules")


def test_preflight_skips_a_missing_hca_only_in_a_container():
    no_hca = {**HGX, "infiniband": []}
    machine = {c.name: c for c in preflight.judge(H100, no_hca)}
    assert machine["infiniband"].status == "fail"
    podman = {c.name: c for c in preflight.judge(H100, {**no_hca, "virtualization_type": "podman",
                                                         "virtualization_role": "guest"})}
    assert podman["infiniband"].status == "skip" and "podman container" in podman["infiniband"].detail
