"""The corpus of bad and hostile inputs under tests/data/bad: each ends in its own clear
error, through the real CLI, with no traceback, exit code 1 and no file written.

- profiles/*.yml and inventories/*: each file says what it expects in its header:
  `# expect: <text in the message>` and, where the error can point at a line,
  `# expect-where: <file>:<line>`. An inventory folder holding an EXPECT file is itself
  the input (a folder given as the inventory); any other folder holds the inventory
  (hosts.ini / hosts.yml) beside its group_vars/ and host_vars/.
- cli-cases.yml: command lines, output paths, report files and inventory paths.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from provisioner.render import inventory, role_specs
from provisioner import profiles
from provisioner.cli import app
from provisioner.errors import ProvisionError

from .conftest import DATA, REPO

BAD = DATA / "bad"
GOOD_INI = REPO / "inventories" / "example" / "hosts.ini"
GOOD_YML = "all:\n  children:\n    gpu:\n      hosts:\n        node1: {ansible_host: 10.0.0.5}\n"
PROFILES = sorted((BAD / "profiles").glob("*.yml"))


def _inventory_input(entry: Path) -> tuple[Path, Path]:
    """(what is passed as the inventory, the file holding the expectations)."""
    if entry.is_dir():
        if (entry / "EXPECT").is_file():
            return entry, entry / "EXPECT"
        inside = next(p for p in sorted(entry.iterdir()) if p.name.startswith("hosts."))
        return inside, inside
    return entry, entry


INVENTORIES = [_inventory_input(p) for p in sorted((BAD / "inventories").iterdir())]
CASES = yaml.safe_load((BAD / "cli-cases.yml").read_text())


def expectations(path: Path) -> tuple[str, str | None]:
    lines = [line.lstrip("\ufeff") for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    header = [line for line in lines if line.startswith("# expect")]
    expect = next(line.split(":", 1)[1].strip() for line in header if line.startswith("# expect:"))
    where = next((line.split(":", 1)[1].strip() for line in header if line.startswith("# expect-where:")), None)
    return expect, where


def _flat(text: str) -> str:
    """Output with rich's panel borders and line wrapping taken out."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def run_cli(args: list[str], workdir: Path, expect: str, exit_code: int = 1) -> str:
    """Run `provision ARGS` in `workdir`; fail on a traceback, an unexpected exit code, a
    missing message, or any file written anywhere (the workdir or the corpus)."""
    before, corpus_before = _tree(workdir), _tree(BAD)
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        result = CliRunner().invoke(app, args, env={"COLUMNS": "250", "PROVISION_RUNS_DIR": str(workdir / "runs")})
    finally:
        os.chdir(cwd)
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == exit_code, f"exit {result.exit_code}, expected {exit_code}:\n{output}"
    assert _flat(expect) in _flat(output), f"expected {expect!r} in:\n{output}"
    assert _tree(workdir) == before, f"files written: {sorted(_tree(workdir) - before)}"
    assert _tree(BAD) == corpus_before
    return output


def test_the_corpus_is_big_enough():
    assert len(PROFILES) + len(INVENTORIES) + len(CASES) >= 100


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_bad_profile(path: Path):
    expect, where = expectations(path)
    with pytest.raises(ProvisionError) as err:
        profiles.load(str(path))
    assert expect in str(err.value)
    if where:
        assert where in str(err.value)


@pytest.mark.parametrize("source,header", INVENTORIES, ids=lambda p: str(p.relative_to(BAD)))
def test_bad_inventory(source: Path, header: Path):
    expect, where = expectations(header)
    with pytest.raises(ProvisionError) as err:
        role_specs.check_inventory(inventory.load(source), profiles.load("debian12-lab").profile)
    assert expect in str(err.value)
    if where:
        assert where in str(err.value)
    assert err.value.fix


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_bad_profile_through_the_cli(path: Path, tmp_path: Path):
    expect, where = expectations(path)
    output = run_cli(["render", "--profile", str(path), str(GOOD_INI), "-o", str(tmp_path / "out")], tmp_path, expect)
    assert "error:" in output and "fix:" in output
    if where:
        assert where in _flat(output)


@pytest.mark.parametrize("source,header", INVENTORIES, ids=lambda p: str(p.relative_to(BAD)))
def test_bad_inventory_through_the_cli(source: Path, header: Path, tmp_path: Path):
    expect, where = expectations(header)
    output = run_cli(["up", "--profile", "debian12-lab", str(source)], tmp_path, expect)
    assert "error:" in output and "fix:" in output
    if where:
        assert where in _flat(output)


def _setup(tmp: Path, steps: list[dict]) -> None:
    for step in steps or []:
        (kind, value), = step.items()
        if kind == "file":
            (tmp / value[0]).parent.mkdir(parents=True, exist_ok=True)
            (tmp / value[0]).write_text(value[1])
        elif kind == "dir":
            (tmp / value).mkdir(parents=True)
        elif kind == "symlink":
            (tmp / value[0]).parent.mkdir(parents=True, exist_ok=True)
            (tmp / value[0]).symlink_to(value[1])
        elif kind == "chmod":
            (tmp / value[0]).chmod(int(str(value[1]), 8))
        elif kind == "report":
            (tmp / "run").mkdir(mode=0o700)
            (tmp / "run" / "report.json").write_text(value)
        elif kind == "chmod":
            os.chmod(tmp / value[0], int(value[1], 8))
        else:
            raise AssertionError(f"unknown setup step {kind}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_bad_command_line(case: dict, tmp_path: Path):
    (tmp_path / "hosts.yml").write_text(GOOD_YML)
    _setup(tmp_path, case.get("setup"))
    values = {"tmp": str(tmp_path), "ini": str(GOOD_INI), "yml": str(tmp_path / "hosts.yml"), "bad": str(BAD)}
    args = [re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], str(a)) for a in case["args"]]
    run_cli(args, tmp_path, case["expect"], case.get("exit", 1))


def test_corpus_ids_are_unique():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
