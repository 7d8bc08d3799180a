"""NVIDIA's Xid catalog as provisioner/data/xid.yml transcribes it, and the actions judge_xid
takes from it (issue 27: Xid 63 is informational, Xid 48 with 63/64 is drain and reset)."""

from __future__ import annotations

from pathlib import Path

from provisioner import profiles
from provisioner.judge import verify
from provisioner.parsers import kernel_log
from provisioner.profiles import skus

CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
CAPTURES = Path(__file__).resolve().parent / "data" / "captures"
H100 = profiles.load("h100-train").profile


def event(xid: int, pci: str = "0000:10:1c") -> kernel_log.XidEvent:
    return kernel_log.XidEvent(xid, pci, "", "")


def xid_check(*events: kernel_log.XidEvent):
    (check,) = verify.judge_xid(H100, list(events), None)
    assert check.name == "xid events"
    return check


def test_the_memory_xids_are_the_catalogs_rows():
    xids = skus.xid_catalog()["xids"]
    assert xids[48]["mnemonic"] == "ROBUST_CHANNEL_GPU_ECC_DBE" and xids[48]["immediate"] == "WORKFLOW_XID_48"
    assert xids[63]["mnemonic"] == "INFOROM_DRAM_RETIREMENT_EVENT" and xids[63]["immediate"] == "IGNORE"
    assert xids[64]["mnemonic"] == "INFOROM_DRAM_RETIREMENT_FAILURE" and xids[64]["immediate"] == "RESET_GPU"
    assert {xids[x]["source"] for x in (48, 63, 64)} == {CATALOG}


def test_every_bucket_the_catalog_names_has_an_action():
    catalog = skus.xid_catalog()
    named = {e["immediate"] for e in catalog["xids"].values()}
    named |= {b for e in catalog["xids"].values() for b in (e.get("with") or {}).values()}
    assert named <= set(catalog["buckets"])
    assert set(catalog["buckets"].values()) <= set(catalog["actions"])


def test_xid_63_alone_is_informational_and_points_at_the_remapped_rows():
    text = (CAPTURES / "kernel-log__xid-63-row-remap__ml-engineering-debug-md.txt").read_text()
    check = xid_check(*kernel_log.read_xids(text))
    assert check.status == "pass"
    assert "Xid 63 (GPU memory remapping event)" in check.detail and "informational" in check.detail
    assert "Remapped Rows" in check.detail
    assert "reset the GPU" not in check.detail


def test_xid_48_alone_resets_the_gpu():
    check = xid_check(event(48))
    assert check.status == "fail" and "Double Bit ECC Error" in check.detail
    assert "reset the GPU" in check.detail and "drain the GPU's jobs" not in check.detail


def test_xid_48_with_63_or_64_on_the_same_gpu_drains_then_resets():
    for companion in (63, 64):
        check = xid_check(event(48), event(companion))
        assert check.status == "fail"
        assert "Xid 48 (Double Bit ECC Error) on GPU at PCI 0000:10:1c: drain the GPU's jobs, then reset it" \
            in check.detail, check.detail
    elsewhere = xid_check(event(48), event(63, "0000:9b:00"))  # the 63 is another GPU's
    assert "drain the GPU's jobs" not in elsewhere.detail and "reset the GPU" in elsewhere.detail


def test_xid_154_drain_and_reset_is_its_own_action():
    line = ("Jan  1 00:00:00 host kernel: NVRM: Xid (PCI:0000:c1:00): 154, GPU recovery action changed from "
            "0x0 (None) to 0x4 (Drain and Reset)")
    check = xid_check(*kernel_log.read_xids(line))
    assert check.status == "fail" and "drain the GPU's jobs, then reset it" in check.detail
