"""The corpus of broken inputs under tests/data/bad: each gives its own clear error.

Every file says what it expects in its header: `# expect: <text in the message>` and,
where the error can point at a line, `# expect-where: <file>:<line>`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import inventory, profiles, role_specs
from provisioner.cli import app
from provisioner.errors import ProvisionError

from .conftest import DATA

BAD = DATA / "bad"
PROFILES = sorted((BAD / "profiles").glob("*.yml"))
INVENTORIES = sorted((BAD / "inventories").glob("*"))


def expectations(path: Path) -> tuple[str, str | None]:
    header = [line for line in path.read_text().splitlines() if line.startswith("# expect")]
    expect = next(line.split(":", 1)[1].strip() for line in header if line.startswith("# expect:"))
    where = next((line.split(":", 1)[1].strip() for line in header if line.startswith("# expect-where:")), None)
    return expect, where


def test_the_corpus_is_big_enough():
    assert len(PROFILES) + len(INVENTORIES) >= 15


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_bad_profile(path: Path):
    expect, where = expectations(path)
    with pytest.raises(ProvisionError) as err:
        profiles.load(str(path))
    assert expect in str(err.value)
    if where:
        assert where in str(err.value)


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.name)
def test_bad_inventory(path: Path):
    expect, where = expectations(path)
    with pytest.raises(ProvisionError) as err:
        role_specs.check_inventory(inventory.load(path))
    assert expect in str(err.value)
    if where:
        assert where in str(err.value)
    assert err.value.fix


@pytest.mark.parametrize("path", PROFILES[:4] + INVENTORIES[:2], ids=lambda p: p.name)
def test_cli_prints_one_message_no_traceback_and_touches_nothing(path: Path, tmp_path: Path):
    is_profile = path.parent.name == "profiles"
    good_inventory = Path(__file__).resolve().parents[1] / "inventories" / "example" / "hosts.ini"
    args = ["up", "--profile", str(path) if is_profile else "h100-train", str(good_inventory if is_profile else path),
            "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "error:" in result.output and "fix:" in result.output
    assert not (tmp_path / "runs").exists()  # no run was started, no host contacted
