"""`nvidia-smi topo -m` as nvidia-smi prints it (tabs) and as people paste it (runs of spaces,
the header's leading tab lost): issue 27."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.judge import captures
from provisioner.parsers import nvidia_smi
from tests.test_verify import B300_8

CAPTURES = Path(__file__).resolve().parent / "data" / "captures"
B300 = "nvidia-smi/text/topo-m__8x-b300-sxm6__590.44.01__sglang-issue-26039.txt"
SINGLE = "nvidia-smi/text/topo-m__h100-80gb-hbm3__590.48.01__nvidia-gpu-exporter.txt"
PASTE = "topo-m__8x-gpu-mlx4__space-separated__kubernetes-issue-53497.txt"

# The same real capture, the way its tabs come out of a terminal, an editor or a web page.
SPACED = {
    "tabs": lambda t: t,
    "tabs expanded to 8 columns": lambda t: t.expandtabs(),
    "each tab one space": lambda t: t.replace("\t", " "),
    "expanded, every line's leading space stripped": lambda t: "\n".join(line.strip() for line in t.expandtabs().splitlines()),
}


@pytest.mark.parametrize("how", sorted(SPACED))
def test_the_8_gpu_nvswitch_capture_reads_the_same_however_its_tabs_were_pasted(fixtures: Path, how: str):
    text = SPACED[how]((fixtures / B300).read_text())
    assert "\t" not in text or how == "tabs"
    assert captures.detect(text) == "nvidia-smi topo -m"
    topo = nvidia_smi.read_topo(text)
    assert topo == nvidia_smi.read_topo((fixtures / B300).read_text())
    assert topo.gpus == 8 and len(topo.links) == 28 and set(topo.links.values()) == {"NV18"}
    judged = captures.judge_text(B300_8, text)
    assert judged.form == "nvidia-smi topo -m" and not judged.unreadable
    assert [(c.name, c.status, c.detail) for c in judged.checks] == [
        ("nvlink topology", "pass", "28 of 28 GPU pairs connected by NVLink")]


@pytest.mark.parametrize("how", sorted(SPACED))
def test_a_single_gpu_capture_pasted_with_spaces_is_one_gpu(fixtures: Path, how: str):
    text = SPACED[how]((fixtures / SINGLE).read_text())
    assert captures.detect(text) == "nvidia-smi topo -m"
    assert nvidia_smi.read_topo(text) == nvidia_smi.Topology(1, {})


def test_a_space_separated_paste_from_an_issue_is_read_by_position():
    text = (CAPTURES / PASTE).read_text()
    assert "\t" not in text
    assert captures.detect(text) == "nvidia-smi topo -m"
    topo = nvidia_smi.read_topo(text)
    assert topo.gpus == 5  # the stored comment ends after GPU4's row
    assert (topo.links[(0, 1)], topo.links[(0, 2)], topo.links[(2, 3)], topo.links[(3, 4)]) == ("PIX", "PHB", "PIX", "SYS")
    assert (topo.links[(4, 5)], topo.links[(4, 7)]) == ("PIX", "PHB")
    assert "mlx4_0" not in str(topo.links) and topo.nvlinked_pairs() == 0


def test_a_matrix_row_is_never_taken_for_the_header():
    # With the leading tab lost, the header and GPU0's row both start with GPU0.
    text = "GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\nGPU1\tNV4\t X \t0-7\n"
    assert nvidia_smi.read_topo(text) == nvidia_smi.Topology(2, {(0, 1): "NV4"})
    assert nvidia_smi.read_topo(text.expandtabs()) == nvidia_smi.Topology(2, {(0, 1): "NV4"})
