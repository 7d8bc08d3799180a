"""Writes through links and over files provision did not write (issue 28, item 12):
`render -o <link to a system folder> --force` wrote into the link's target, past the
system-folder guard, which judged the link's own path; `bundle -o`, `--html` and `--junit`
replaced any existing file without --force, against --force's help."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import outputs
from provisioner.cli import app
from provisioner.errors import ProvisionError


def test_a_link_to_a_system_folder_is_that_folder_even_with_force(tmp_path: Path):
    link = tmp_path / "out"
    link.symlink_to("/etc")
    for force in (False, True):
        with pytest.raises(ProvisionError, match="refusing to write into .*out: .*system"):
            outputs.check_folder(link, ["hosts.yml"], force=force)
    deeper = tmp_path / "lib"
    deeper.symlink_to("/usr")
    with pytest.raises(ProvisionError, match="refusing to write into"):
        outputs.check_folder(deeper / "lib", ["hosts.yml"], force=True)  # /usr/lib through the link


def test_render_through_such_a_link_writes_nothing(tmp_path: Path):
    link = tmp_path / "out"
    link.symlink_to("/etc")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("node1 ansible_host=192.0.2.10\n")
    result = CliRunner().invoke(app, ["render", "-p", "debian12-lab", str(inventory), "-o", str(link), "--force"])
    assert result.exit_code == 1 and "refusing to write into" in result.output, result.output
    assert not Path("/etc/hosts.yml").exists() and not Path("/etc/group_vars").exists()


@pytest.mark.parametrize("what", ["bundle", "--html", "--junit"])
def test_an_existing_file_is_replaced_only_with_force(tmp_path: Path, what: str):
    mine = tmp_path / "mine.out"
    mine.write_text("the operator's own file\n")
    with pytest.raises(ProvisionError, match="holds a file already; it is replaced only with --force"):
        outputs.check_file(mine, what=what)
    outputs.write_file(mine, "replaced\n", force=True, what=what)
    assert mine.read_text() == "replaced\n"


def test_bundle_over_an_existing_file_needs_force(tmp_path: Path):
    mine = tmp_path / "bundle.tar.gz"
    mine.write_text("not ours\n")
    refused = CliRunner().invoke(app, ["bundle", "-p", "debian12-lab", "-o", str(mine)])
    assert refused.exit_code == 1 and "replaced only with --force" in refused.output
    assert mine.read_text() == "not ours\n"
