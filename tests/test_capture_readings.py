"""A capture that lacks a reading makes that check "not in this capture" (a skip), never a
failure (issue 27): a CSV without the ECC column used to fail "ecc: on for 0 of N GPU(s)".

Each real capture below passes against the profile that describes its machine; with any one of
its readings taken away (a CSV column, an XML element, a -q section), nothing may fail."""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from provisioner.judge import captures
from provisioner.parsers import nvidia_smi
from tests.test_verify import A5000_2, A100_MIG, H100_1, RTX4090, gpus, profile

CSV = "nvidia-smi/csv/query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.csv"
CSV_4080 = "nvidia-smi/csv/query-gpu__rtx-4080-super__595.71.05__idle__nvidia-gpu-exporter.csv"
Q = "nvidia-smi/text/nvidia-smi-q__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.txt"
XMLS = {"nvidia-smi/xml/2x-rtx-a5000__590.44.01__telegraf.xml": A5000_2,
        "nvidia-smi/xml/a100-sxm4-80gb-mig__535.54.03__telegraf.xml": A100_MIG}


def checks(p, text: str) -> dict[str, tuple[str, str]]:
    judged = captures.judge_text(p, text)
    assert not judged.unreadable, judged.unreadable
    return {c.name: (c.status, c.detail) for c in judged.checks}


def failures(p, text: str) -> dict[str, str]:
    return {name: detail for name, (status, detail) in checks(p, text).items() if status == "fail"}


def without_column(text: str, column: str) -> str:
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    keep = [i for i, name in enumerate(rows[0]) if name.split(" [")[0] != column]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([[row[i] for i in keep] for row in rows])
    return out.getvalue().replace(",", ", ")


def test_a_csv_without_the_ecc_column_is_not_an_ecc_failure(fixtures: Path):
    text = without_column((fixtures / CSV).read_text(), "ecc.mode.current")
    assert H100_1.verify.require_ecc is True
    found = checks(H100_1, text)
    assert found["ecc"][0] == "skip" and found["ecc"][1].startswith("not in this capture")
    assert "ECC mode" in found["ecc"][1]
    assert not failures(H100_1, text)


def test_a_gpu_without_ecc_is_a_reading_not_a_missing_one(fixtures: Path):
    # GeForce: ecc.mode.current is [N/A]: the GPU has none, so a profile that requires it fails.
    wants_ecc = profile("rtx4090-dev", hardware=gpus(1, "RTX 4080", 16), driver={"branch": 595, "version": "595.71.05"},
                        verify={"require_ecc": True})
    found = checks(wants_ecc, (fixtures / CSV_4080).read_text())
    assert found["ecc"] == ("fail", "on for 0 of 1 GPU(s): nvidia-smi -e 1, then reboot")
    assert checks(RTX4090, (fixtures / CSV_4080).read_text())["ecc"][0] == "pass"  # not required there


def test_every_csv_column_taken_away_fails_nothing(fixtures: Path):
    text = (fixtures / CSV).read_text()
    assert not failures(H100_1, text)
    header = [name.split(" [")[0] for name in next(csv.reader(io.StringIO(text), skipinitialspace=True))]
    assert len(header) > 200
    for column in header:
        assert not failures(H100_1, without_column(text, column)), column
    skipped = checks(H100_1, without_column(without_column(text, "persistence_mode"), "mig.mode.current"))
    assert skipped["persistence mode"][0] == skipped["mig"][0] == "skip"
    assert skipped["driver version"][0] == "pass"
    assert checks(H100_1, without_column(text, "driver_version"))["driver version"][0] == "skip"
    assert checks(H100_1, without_column(text, "name"))["gpu model"][0] == "skip"
    assert checks(H100_1, without_column(text, "memory.total"))["gpu memory"][0] == "skip"


@pytest.mark.parametrize("name", sorted(XMLS))
def test_every_xml_element_taken_away_fails_nothing(fixtures: Path, name: str):
    p = XMLS[name]
    text = (fixtures / name).read_text()
    assert not failures(p, text)
    root = ET.fromstring(text)
    tags = sorted({child.tag for gpu in root.findall("gpu") for child in gpu}) + \
        sorted({child.tag for child in root if child.tag != "gpu"})
    assert len(tags) > 30
    for tag in tags:
        trimmed = ET.fromstring(text)
        for parent in [trimmed, *trimmed.findall("gpu")]:
            for child in parent.findall(tag):
                parent.remove(child)
        assert not failures(p, ET.tostring(trimmed, encoding="unicode")), tag


def test_an_xml_without_the_ecc_element_skips_ecc(fixtures: Path):
    name = "nvidia-smi/xml/a100-sxm4-80gb-mig__535.54.03__telegraf.xml"
    root = ET.fromstring((fixtures / name).read_text())
    for gpu in root.findall("gpu"):
        for tag in ("ecc_mode", "ecc_errors", "clocks_event_reasons", "clocks_throttle_reasons"):
            for child in gpu.findall(tag):
                gpu.remove(child)
    found = checks(A100_MIG, ET.tostring(root, encoding="unicode"))
    assert found["ecc"][0] == found["ecc errors"][0] == found["clocks"][0] == "skip"
    assert all(found[n][1].startswith("not in this capture") for n in ("ecc", "ecc errors", "clocks"))


def test_every_q_section_taken_away_fails_nothing(fixtures: Path):
    text = (fixtures / Q).read_text()
    assert not failures(H100_1, text)
    lines = text.splitlines()
    sections = [i for i, line in enumerate(lines) if line.startswith("    ") and not line.startswith("     ")]
    assert len(sections) > 40
    for start in sections:
        end = next((j for j in range(start + 1, len(lines)) if not lines[j].startswith("     ")), len(lines))
        trimmed = "\n".join(lines[:start] + lines[end:])
        assert not failures(H100_1, trimmed), lines[start]


def test_q_reads_health_remapped_rows_and_r610_headers(fixtures: Path):
    report = nvidia_smi.read((fixtures / Q).read_text())
    (gpu,) = report.gpus
    assert (report.source, report.driver, report.cuda) == ("q", "590.48.01", "13.1")
    assert (gpu.name, gpu.memory_mib, gpu.persistence, gpu.ecc, gpu.mig, gpu.bus_id) == \
        ("NVIDIA H100 80GB HBM3", 81559, True, True, False, "00000000:00:09.0")
    h = gpu.health
    assert (h.ecc_uncorrectable, h.ecc_correctable, h.remap_pending, h.remap_failure) == (0, 0, False, False)
    assert (h.pcie_width, h.pcie_width_max, h.pcie_gen, h.pcie_gen_max, h.utilization) == (16, 16, 5, 5, 0)
    assert (h.clock_reasons, h.fabric_state, h.fabric_status) == (("gpu_idle",), "Completed", "Success")
    assert (h.retired_sbe, h.retired_dbe, h.retired_pending) == (None, None, None)  # N/A on Hopper


def test_the_table_ecc_cell_on_off_na_and_counts(fixtures: Path):
    text = fixtures / "nvidia-smi/text"
    mig = nvidia_smi.read((text / "nvidia-smi__h100-80gb-hbm3-mig__590.48.01__idle__nvidia-gpu-exporter.txt").read_text())
    geforce = nvidia_smi.read((text / "nvidia-smi__rtx-4080-super__595.71.05__idle__nvidia-gpu-exporter.txt").read_text())
    h100 = nvidia_smi.read((text / "nvidia-smi__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.txt").read_text())
    assert mig.gpus[0].ecc is True and mig.gpus[0].health is None  # "On": counted per MIG device
    assert geforce.gpus[0].ecc is False and geforce.gpus[0].health is None  # "N/A"
    assert h100.gpus[0].ecc is True and h100.gpus[0].health.ecc_uncorrectable == 0
    table = (text / "nvidia-smi__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.txt").read_text()
    row = next(line for line in table.splitlines() if "00000000:00:09.0" in line)
    ecc_off = table.replace(row, row[:-5] + "Off |")  # as an RTX A4000 shows it: ECC supported, switched off
    assert nvidia_smi.read(ecc_off).gpus[0].ecc is False
