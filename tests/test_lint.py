"""The playbooks and roles are clean under ansible-lint's production profile."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

# ansible-lint runs Ansible (its syntax check): marked so; the slow stage runs this file by name.
pytestmark = [pytest.mark.slow, pytest.mark.ansible]


def test_ansible_lint_production_profile():
    lint = Path(sys.executable).parent / "ansible-lint"
    if not lint.exists() and shutil.which("ansible-lint") is None:
        pytest.fail("ansible-lint is not installed: pip install -e '.[dev]'")
    result = subprocess.run([str(lint if lint.exists() else "ansible-lint"), "--offline", "--nocolor",
                             "ansible_collections", "molecule"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "production" in result.stderr + result.stdout
