"""The package's layers are visible in its folders and hold (docs/architecture.md, Layers):
the import contracts in pyproject.toml ([tool.importlinter]) pass, the package root keeps
only the ground floor, and only the cli talks to Typer."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow

PACKAGE = REPO / "provisioner"
MAX_ROOT_MODULES = 6  # __init__ and the ground floor: errors, paths, yamlfile, outputs, safe_paths


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    if not lint.exists() and shutil.which("lint-imports") is None:
        pytest.fail("import-linter is not installed: pip install -e '.[dev]'")
    # This checkout's package, whatever an editable install elsewhere points at.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([str(lint if lint.exists() else "lint-imports"), "--no-cache"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "0 broken" in result.stdout, result.stdout[-4000:]


def test_the_package_root_holds_only_the_ground_floor():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at provisioner/'s root (at most {MAX_ROOT_MODULES}): {root}"


def _imports(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_only_the_cli_imports_typer():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "cli"):
            continue
        names = _imports(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if any(name == "typer" or name.startswith("typer.") for name in names):
            offenders.append(str(path.relative_to(REPO)))
    assert not offenders, f"typer imported outside provisioner/cli: {offenders}"
