"""The manual: README stays a front page (two commands on its first screen, at most 250 lines),
the MkDocs site under docs/ builds strictly (every link and anchor checked), the generated
reference pages match the code, and every profile field and CLI option has a description."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.cli import reference as commands_reference
from provisioner.profiles import reference as profile_reference
from provisioner.profiles.models import Profile

from .conftest import REPO

README = (REPO / "README.md").read_text()
MKDOCS = Path(sys.executable).parent / "mkdocs"
FIRST_SCREEN = 40  # lines a terminal or a repository page shows before scrolling


def test_the_readme_is_a_front_page_with_the_two_commands_on_its_first_screen():
    lines = README.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the manual is docs/"
    first = "\n".join(lines[:FIRST_SCREEN])
    assert "make demo" in first and "make test" in first
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_readmes_links_name_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" not in target:
            assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"


def _mkdocs(config: Path) -> subprocess.CompletedProcess:
    if not MKDOCS.exists() and shutil.which("mkdocs") is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]'")
    # Not --quiet: it drops the warnings --strict counts, and a broken link then passes.
    return subprocess.run([str(MKDOCS if MKDOCS.exists() else "mkdocs"), "build", "--strict",
                           "--config-file", str(config)], cwd=config.parent, capture_output=True, text=True,
                          timeout=120)


def test_the_manual_builds_strictly(tmp_path):
    config = tmp_path / "mkdocs.yml"  # the project's config, its site written here
    text = (REPO / "mkdocs.yml").read_text()
    config.write_text(text.replace("docs_dir: docs", f"docs_dir: {REPO / 'docs'}")
                      .replace("site_dir: build/site", f"site_dir: {tmp_path / 'site'}"))
    built = _mkdocs(config)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "profile" / "index.html").is_file()


@pytest.mark.parametrize("broken", ["[gone](nowhere.md)", "[gone](index.md#no-such-heading)"])
def test_the_strict_build_fails_on_a_broken_link_or_anchor(tmp_path, broken):
    """The validation settings of mkdocs.yml make what they should an error."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n## A heading\n")
    (docs / "other.md").write_text(f"# Other\n\n{broken}\n")
    text = (REPO / "mkdocs.yml").read_text()
    config = tmp_path / "mkdocs.yml"
    config.write_text(text.split("\nnav:")[0] + "\nnav:\n  - index.md\n  - other.md\n")
    built = _mkdocs(config)
    assert built.returncode != 0 and ("nowhere.md" in built.stderr or "no-such-heading" in built.stderr), built.stderr


def test_the_generated_reference_pages_are_current():
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr + "\n(the fix: scripts/gen_docs.py, then commit docs/reference/)"


def test_every_profile_field_has_a_description_and_a_row_in_the_reference():
    assert profile_reference.undocumented() == []
    page = (REPO / "docs" / "reference" / "profile.md").read_text()
    for name in Profile.model_fields:
        assert f"| `{name}` |" in page
    assert "## `python_envs.framework`" in page and "## `dcgm.exporter`" in page  # nested sections too


def test_every_command_argument_and_option_has_help():
    assert commands_reference.undocumented() == []


def test_a_field_without_a_description_is_caught():
    from pydantic import BaseModel

    class Section(BaseModel):
        said: int = profile_reference.__dict__["FieldInfo"](default=1, description="said")  # noqa: B008
        unsaid: int = 2

    class Top(BaseModel):
        section: Section

    assert profile_reference.undocumented(Top) == ["section", "section.unsaid"]
