"""`provision judge` on real captures from hosts on every driver branch we hold one for (535,
550, 570, 580, 590, 595, 610), each against a profile file that describes that host: its driver
branch and version, its GPUs (issue 27).

`judge` judges what a host reports; it never resolves packages, so a profile pinning a driver the
package catalogue does not carry (590, 595, 610 ...) is judged, not refused. The verdict of each
is what a person reading the capture would say: the checks named here have those statuses, and
no other check fails.

Branch 570: the only 570 captures are a dcgmi diag (whose text names no driver) and an NVML
version-mismatch message; there is no GPU listing from a 570 host here.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from provisioner.cli.app import app

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = DATA / "fixtures"
CAPTURES = DATA / "captures"
NO_PERSISTENCE = {"require_persistence_mode": False}


def gpu(count: int, model: str, memory: int | None = None, **more) -> dict:
    return {"gpu": {"count": count, "model": model, **({"memory_gib": memory} if memory else {}), **more}}


def driver(version: str) -> dict:
    return {"branch": int(version.split(".")[0]), "version": version}


# id: (branch, capture, base profile, the profile's changes, exit code, {check: status or (status, text)})
TABLE = {
    "535-t4-table": (535, FIXTURES / "nvidia-smi/text/nvidia-smi__tesla-t4__535.86.10__cloud-native-docs.txt",
                     "t4-infer", {"driver": driver("535.86.10")}, 0,
                     {"driver version": ("pass", "535.86.10 loaded"), "gpu model": "pass", "ecc": "pass",
                      "ecc errors": "pass", "driver cuda": ("pass", "CUDA 12.2")}),
    "535-a100-mig-xml": (535, FIXTURES / "nvidia-smi/xml/a100-sxm4-80gb-mig__535.54.03__telegraf.xml", "a100-train",
                         {"hardware": gpu(1, "A100-SXM4-80GB", 80, mig=True), "driver": driver("535.54.03"),
                          "verify": NO_PERSISTENCE}, 0,
                         {"driver version": "pass", "mig": ("pass", "MIG mode on"), "ecc errors": "pass",
                          "memory repair": ("skip", "in MIG mode"), "clocks": "pass"}),
    "535-dcgmi-diag-r2": (535, FIXTURES / "dcgm/dcgmi-diag-r2__8x-a100-sxm4-80gb-p4de__535.104.12__awsome-distributed-training.txt",
                          "a100-train", {"hardware": gpu(8, "A100-SXM4-80GB", 80), "driver": driver("535.104.12")}, 0,
                          {"dcgm diag": ("pass", "11 passed")}),
    "550-8x-h100-table": (550, FIXTURES / "nvidia-smi/text/nvidia-smi__8x-h100-80gb-hbm3__550.90.07__modal-gpu-glossary.txt",
                          "h100-train", {"driver": driver("550.90.07")}, 0,
                          {"gpu count": "pass", "gpu model": "pass", "driver version": ("pass", "550.90.07 loaded"),
                           "driver cuda": ("pass", "CUDA 12.4"), "ecc errors": "pass"}),
    "550-nvml-mismatch": (550, FIXTURES / "nvidia-smi/errors/nvidia-smi__version-mismatch__nvml-550.144__intel-llvm-issue-17614.txt",
                          "h100-train", {"driver": driver("550.144.03")}, 2,
                          {"nvidia-smi": ("fail", "version mismatch"), "gpu details": "skip"}),
    "570-dcgmi-diag-r3": (570, FIXTURES / "dcgm/dcgmi-diag-r3__8x-h200__570.133.20__ramble.txt", "h200-train",
                          {"driver": driver("570.133.20"), "cuda": {"toolkits": ["12.8"]},
                           "python_env": {"torch": {"index": "cu126"}}}, 0,
                          {"dcgm diag": ("pass", "skipped: EUD Test")}),
    "570-nvml-mismatch": (570, FIXTURES / "nvidia-smi/errors/nvidia-smi__version-mismatch__nvml-570.124__tinygrad-open-gpu-kernel-modules-issue-47.txt",
                          "h100-train", {"driver": driver("570.124.06")}, 2, {"nvidia-smi": ("fail", "version mismatch")}),
    "580-8x-b200-table": (580, FIXTURES / "nvidia-smi/text/nvidia-smi__8x-b200__580.95.05__modal-gpu-glossary.txt",
                          "b200-train", {"driver": driver("580.95.05")}, 0,
                          {"gpu count": "pass", "gpu model": "pass", "driver version": ("pass", "580.95.05 loaded"),
                           "gpu memory": "pass", "ecc errors": "pass"}),
    "580-exporter-8x-h100": (580, FIXTURES / "dcgm/dcgm-exporter-metrics__8x-h100-80gb-hbm3__580.105.08__sampled__aicr.prom",
                             "h100-train", {"driver": driver("580.105.08"), "dcgm": {"exporter": {"collectors": [
                                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
                                 "DCGM_FI_DEV_POWER_USAGE"]}}}, 0,
                             {"exporter metrics": "pass", "exporter collectors": "pass"}),
    "590-h100-csv": (590, FIXTURES / "nvidia-smi/csv/query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.csv",
                     "h100-train", {"hardware": gpu(1, "H100 80GB HBM3", 80), "driver": driver("590.48.01")}, 0,
                     {"driver version": ("pass", "590.48.01 loaded"), "ecc": "pass", "persistence mode": "pass",
                      "ecc errors": "pass", "row remapping": "pass", "gpu fabric": "pass", "driver cuda": "skip"}),
    "590-h100-q": (590, FIXTURES / "nvidia-smi/text/nvidia-smi-q__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.txt",
                   "h100-train", {"hardware": gpu(1, "H100 80GB HBM3", 80), "driver": driver("590.48.01")}, 0,
                   {"driver version": "pass", "driver cuda": ("pass", "CUDA 13.1"), "ecc": "pass", "ecc errors": "pass",
                    "row remapping": ("pass", "no pending or failed row remap"), "gpu fabric": "pass"}),
    "590-h100-table-load": (590, FIXTURES / "nvidia-smi/text/nvidia-smi__h100-80gb-hbm3__590.48.01__load__nvidia-gpu-exporter.txt",
                            "h100-train", {"hardware": gpu(1, "H100 80GB HBM3", 80), "driver": driver("590.48.01"),
                                           "verify": {"require_idle_gpus": True}}, 2,
                            {"idle": ("fail", "3 compute process(es)"), "driver version": "pass", "gpu model": "pass"}),
    "590-h200-csv": (590, FIXTURES / "nvidia-smi/csv/query-gpu__h200__590.48.01__idle__nvidia-gpu-exporter.csv",
                     "h200-train", {"hardware": gpu(1, "H200", 141), "driver": driver("590.48.01")}, 0,
                     {"gpu model": "pass", "gpu memory": "pass", "driver version": "pass"}),
    "590-2x-a5000-xml": (590, FIXTURES / "nvidia-smi/xml/2x-rtx-a5000__590.44.01__telegraf.xml", "rtx4090-dev",
                         {"hardware": gpu(2, "RTX A5000", 24), "driver": driver("590.44.01")}, 0,
                         {"gpu count": "pass", "gpu model": "pass", "driver version": ("pass", "590.44.01 loaded"),
                          "driver cuda": ("pass", "CUDA 13.1")}),
    "590-8x-b300-topo": (590, FIXTURES / "nvidia-smi/text/topo-m__8x-b300-sxm6__590.44.01__sglang-issue-26039.txt",
                         "b200-train", {"hardware": gpu(8, "B300", 270), "driver": driver("590.44.01")}, 0,
                         {"nvlink topology": ("pass", "28 of 28")}),
    "595-l40s-csv": (595, FIXTURES / "nvidia-smi/csv/query-gpu__l40s__595.80__idle__nvidia-gpu-exporter.csv",
                     "l40s-infer", {"hardware": gpu(1, "L40S", 48), "driver": driver("595.80")}, 2,
                     {"persistence mode": ("fail", "off on 1 GPU"), "driver version": ("pass", "595.80 loaded"),
                      "gpu model": "pass", "gpu memory": "pass", "ecc": "pass", "ecc errors": "pass"}),
    "595-l40s-topo": (595, FIXTURES / "nvidia-smi/text/topo-m__l40s__595.80__nvidia-gpu-exporter.txt", "l40s-infer",
                      {"hardware": gpu(1, "L40S", 48), "driver": driver("595.80")}, 0,
                      {"nvlink topology": ("skip", "interconnect is pcie")}),
    "595-rtx-4080-super-csv": (595, FIXTURES / "nvidia-smi/csv/query-gpu__rtx-4080-super__595.71.05__load__nvidia-gpu-exporter.csv",
                               "rtx4090-dev", {"hardware": gpu(1, "RTX 4080 SUPER", 16), "driver": driver("595.71.05"),
                                               "verify": NO_PERSISTENCE}, 0,
                               {"gpu model": "pass", "driver version": "pass", "ecc errors": "skip"}),
    "595-rtx-pro-6000-table": (595, CAPTURES / "nvidia-smi-table__rtx-pro-6000__2-of-4-gpus__ecc-2__sirzzang-blog.txt",
                               "rtx5090-cv", {"hardware": gpu(2, "RTX PRO 6000", 96), "driver": driver("595.58.03"),
                                              "verify": {"require_ecc": True}}, 2,
                               {"ecc errors": ("fail", "GPU 1 (00000000:55:00.0): 2 uncorrectable"),
                                "gpu model": "pass", "gpu memory": "pass", "ecc": "pass",
                                "driver version": ("skip", "not in this capture")}),
    "595-rtx-pro-6000-row-remapper": (595, CAPTURES / "nvidia-smi-q-d-row-remapper__rtx-pro-6000__pending__sirzzang-blog.txt",
                                      "rtx5090-cv", {"hardware": gpu(1, "RTX PRO 6000", 96), "driver": driver("595.58.03")}, 2,
                                      {"row remapping": ("fail", "a row remap is pending"), "gpu model": "skip"}),
    "595-rtx-pro-6000-xid": (595, CAPTURES / "kernel-log__xid-48-63-154__rtx-pro-6000__sirzzang-blog.txt", "rtx5090-cv",
                             {"hardware": gpu(4, "RTX PRO 6000", 96), "driver": driver("595.58.03")}, 2,
                             {"xid events": ("fail", "drain the GPU's jobs, then reset it")}),
    "610-2x-b200-table": (610, CAPTURES / "nvidia-smi-table__2x-b200__610.43.02__sglang-issue-27487.txt", "b200-train",
                          {"hardware": gpu(2, "B200", 180), "driver": driver("610.43.02")}, 0,
                          {"driver version": ("pass", "610.43.02 loaded"), "driver cuda": ("pass", "CUDA 13.3"),
                           "gpu memory": "pass", "ecc errors": "pass"}),
    "610-rtx-3080-table": (610, CAPTURES / "nvidia-smi-table__rtx-3080__610.43.03__finpilot-issue-160.txt", "rtx4090-dev",
                           {"hardware": gpu(1, "RTX 3080", 16), "driver": driver("610.43.03"), "verify": NO_PERSISTENCE}, 0,
                           {"driver version": ("pass", "610.43.03 loaded"), "gpu model": "pass"}),
    "610-rtx-5070-table": (610, CAPTURES / "nvidia-smi-table__rtx-5070__610.43.02__mistral.rs-pr-2287.txt", "rtx5090-cv",
                           {"hardware": gpu(1, "RTX 5070", 12), "driver": driver("610.43.02"), "verify": NO_PERSISTENCE}, 0,
                           {"driver version": "pass", "gpu model": "pass", "gpu memory": "pass"}),
    "610-rtx-2080-super-q": (610, CAPTURES / "nvidia-smi-q__rtx-2080-super__610.57.04__idle__nvidia-gpu-exporter.txt",
                             "rtx4090-dev", {"hardware": gpu(1, "RTX 2080 SUPER", 8), "driver": driver("610.57.04"),
                                             "verify": NO_PERSISTENCE}, 0,
                             {"driver version": ("pass", "610.57.04 loaded"), "driver cuda": ("pass", "CUDA 13.3"),
                              "gpu model": "pass", "ecc errors": "skip"}),
    "610-rtx-2080-super-csv": (610, CAPTURES / "query-gpu__rtx-2080-super__610.57.04__idle__nvidia-gpu-exporter.csv",
                               "rtx4090-dev", {"hardware": gpu(1, "RTX 2080 SUPER", 8), "driver": driver("610.57.04"),
                                               "verify": NO_PERSISTENCE}, 0,
                               {"driver version": ("pass", "610.57.04 loaded"), "gpu model": "pass"}),
}


def judge(tmp_path: Path, name: str, base: str, changes: dict, capture: Path | str, text: str | None = None):
    profile = tmp_path / f"{name}.yml"
    profile.write_text(yaml.safe_dump({"name": name, "description": f"the host of capture {name}", "extends": base,
                                       **changes}, sort_keys=False))
    if text is not None:
        capture = tmp_path / Path(capture).name
        capture.write_text(text)
    result = CliRunner().invoke(app, ["judge", "-p", str(profile), str(capture), "--json"])
    return result


def test_every_branch_from_535_to_610_has_a_capture():
    assert {row[0] for row in TABLE.values()} == {535, 550, 570, 580, 590, 595, 610}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_judge_judges_the_capture_against_a_profile_of_its_host(tmp_path: Path, name: str):
    branch, capture, base, changes, code, expected = TABLE[name]
    result = judge(tmp_path, name, base, changes, capture)
    assert "error:" not in result.output, result.output  # the profile was not refused
    report = json.loads(result.stdout)
    (judged,) = report["files"]
    assert not judged["unreadable"], judged
    checks = {c["name"]: (c["status"], c["detail"]) for c in judged["checks"]}
    for check, want in expected.items():
        status, text = want if isinstance(want, tuple) else (want, "")
        assert check in checks, (check, checks)
        assert checks[check][0] == status and text in checks[check][1], (check, checks[check])
    failing = {c for c, (status, _) in checks.items() if status == "fail"}
    assert failing == {c for c, w in expected.items() if (w[0] if isinstance(w, tuple) else w) == "fail"}, checks
    assert (report["exit_code"], result.exit_code) == (code, code)


def test_a_csv_without_its_ecc_column_is_judged_through_the_command(tmp_path: Path):
    _, capture, base, changes, _, _ = TABLE["590-h100-csv"]
    rows = list(csv.reader(io.StringIO(capture.read_text()), skipinitialspace=True))
    keep = [i for i, column in enumerate(rows[0]) if not column.startswith("ecc.")]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([[row[i] for i in keep] for row in rows])
    result = judge(tmp_path, "590-h100-csv-no-ecc", base, changes, capture, out.getvalue())
    checks = {c["name"]: c for c in json.loads(result.stdout)["files"][0]["checks"]}
    assert checks["ecc"]["status"] == "skip" and checks["ecc"]["detail"].startswith("not in this capture")
    assert checks["ecc errors"]["status"] == "skip"
    assert result.exit_code == 0, result.output
