"""scripts/update_compat_tables.py: regenerates compat_generated.yml from local copies of
NVIDIA's releases.json and PyTorch's release matrix (the committed copies in
tests/data/vendor/, see SOURCES.md there). Offline: nothing is downloaded."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from .conftest import DATA, REPO

VENDOR = DATA / "vendor"
SCRIPT = REPO / "scripts" / "update_compat_tables.py"
spec = importlib.util.spec_from_file_location("update_compat_tables", SCRIPT)
tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tables)


def test_the_committed_output_is_what_the_script_makes_from_the_committed_copies(tmp_path: Path):
    out = tmp_path / "generated.yml"
    assert tables.main(["--nvidia-releases", str(VENDOR / "nvidia-releases.json"),
                        "--pytorch-matrix", str(VENDOR / "pytorch-release-matrix.md"), "--out", str(out)]) == 0
    assert out.read_text() == (REPO / "provisioner" / "data" / "compat_generated.yml").read_text()


def test_driver_branches_from_releases_json():
    branches = tables.driver_branches(json.loads((VENDOR / "nvidia-releases.json").read_text()))
    assert branches[580] == {"type": "lts", "first_release": "2025-08-04", "latest": "580.65.06",
                             "latest_date": "2025-08-04"}
    assert branches[570]["latest"] == "570.172.08" and branches[570]["first_release"] == "2025-01-27"
    assert branches[575]["type"] == "feature" and branches[535]["type"] == "lts"


def test_torch_releases_and_arches_from_the_release_matrix():
    text = (VENDOR / "pytorch-release-matrix.md").read_text()
    torch = tables.torch_releases(text)
    assert torch["2.14"] == {"indexes": ["cu126", "cu130", "cu132"], "python": ["3.10", "3.15"]}
    assert torch["2.11"]["indexes"] == ["cu126", "cu128", "cu130"]          # stable + experimental columns
    assert torch["2.5"] == {"indexes": ["cu118", "cu121", "cu124"], "python": ["3.9", "3.12"]}  # "None" column
    arches = tables.torch_arches(text)
    assert set(arches) == {"2.12", "2.13", "2.14"}
    assert arches["2.14"]["cu130"] == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    assert arches["2.14"]["cu126"][-1] == "9.0" and arches["2.14"]["ptx"] == {"cu130": "12.0", "cu132": "12.0"}


def test_the_matrix_reads_the_generated_tables():
    from provisioner.profiles import compat

    generated = yaml.safe_load((REPO / "provisioner" / "data" / "compat_generated.yml").read_text())
    assert compat.matrix()["torch"] == generated["torch"]
    assert compat.matrix()["driver_branches"][580]["type"] == "lts"


@pytest.mark.parametrize(("name", "text", "message"), [
    ("releases.json", "{not json", "releases.json"),
    ("releases.json", json.dumps({"580": {"type": "mystery branch", "driver_info": []}}), "branch 580"),
])
def test_a_malformed_releases_json_is_named_and_nothing_is_written(tmp_path, capsys, name, text, message):
    bad = tmp_path / name
    bad.write_text(text)
    out = tmp_path / "out.yml"
    assert tables.main(["--nvidia-releases", str(bad), "--pytorch-matrix", str(VENDOR / "pytorch-release-matrix.md"),
                        "--out", str(out)]) == 1
    assert message in capsys.readouterr().err and not out.exists()


def test_a_matrix_without_its_table_is_refused(tmp_path, capsys):
    bad = tmp_path / "RELEASE.md"
    bad.write_text("# Releasing PyTorch\n\nno tables here\n")
    assert tables.main(["--nvidia-releases", str(VENDOR / "nvidia-releases.json"), "--pytorch-matrix", str(bad),
                        "--out", str(tmp_path / "o.yml")]) == 1
    assert "Release Compatibility Matrix" in capsys.readouterr().err
