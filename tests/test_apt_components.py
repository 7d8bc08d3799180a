"""gpu_provisioner.node.apt_components: the archive components a release needs added to the
distribution's own apt sources in one module call. The text edits are tested on real source
files (tests/data/apt_sources/SOURCES.md: the Debian 12 and Ubuntu 16.04 Docker images', the
lab image's); the module runs for real (ansible-runner, local connection) on copies of them in
a temporary folder: it writes both formats in one call, a second run and check mode change
nothing, a missing file is left alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ansible_collections.gpu_provisioner.node.plugins.module_utils.apt_components import deb822, one_line

from .ansibleplay import LOCAL, play

DATA = Path(__file__).parent / "data" / "apt_sources"
DEBIAN = (["bookworm", "bookworm-updates", "bookworm-security"], ["main", "contrib", "non-free", "non-free-firmware"])


def test_deb822_adds_the_missing_components_to_every_stanza_of_the_suites_and_nothing_else():
    text = (DATA / "debian12-docker.sources").read_text()
    after = deb822(text, *DEBIAN)
    assert after.count("Components: main contrib non-free non-free-firmware\n") == 2
    assert after.replace(" contrib non-free non-free-firmware", "") == text  # comments, keys, blank lines kept
    assert deb822(after, *DEBIAN) == after
    # A stanza for another suite (a backports source, say) is not the distribution's: left alone.
    assert deb822(text, ["trixie"], DEBIAN[1]) == text


def test_one_line_adds_the_missing_components_per_line_and_keeps_the_rest():
    text = (DATA / "ubuntu1604-docker.list").read_text()
    wanted = ["main", "restricted", "universe", "multiverse"]
    after = one_line(text, ["xenial", "xenial-updates"], wanted)
    assert [ln for ln in after.splitlines() if ln] == [
        "deb http://archive.ubuntu.com/ubuntu/ xenial main restricted universe multiverse",
        "deb http://archive.ubuntu.com/ubuntu/ xenial-updates main restricted universe multiverse",
        "deb http://archive.ubuntu.com/ubuntu/ xenial universe main restricted multiverse",
        "deb http://archive.ubuntu.com/ubuntu/ xenial-updates universe main restricted multiverse"]
    assert after.count("\n") == text.count("\n")
    assert one_line(after, ["xenial", "xenial-updates"], wanted) == after
    assert one_line(text, ["bionic"], wanted) == text


def test_one_line_leaves_a_complete_file_and_commented_entries_alone():
    lab = (DATA / "debian12-lab.list").read_text()
    assert one_line(lab, *DEBIAN) == lab
    # Hand-made (labelled): a commented entry stays a comment; options and a trailing comment stay.
    text = ("# deb http://deb.debian.org/debian bookworm main\n"
            "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
            "http://deb.debian.org/debian bookworm main  # the archive\n")
    assert one_line(text, *DEBIAN) == (
        "# deb http://deb.debian.org/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware  # the archive\n")


def _components(folder: Path) -> list:
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "components", "gpu_provisioner.node.apt_components": {
            "suites": DEBIAN[0], "components": DEBIAN[1],
            "sources_list": str(folder / "sources.list"), "deb822_file": str(folder / "debian.sources")}}]}]


@pytest.mark.ansible
def test_the_module_edits_both_files_in_one_call_and_nothing_the_second_time_or_in_check_mode(tmp_path: Path):
    folder = tmp_path / "apt"
    folder.mkdir()
    shutil.copy(DATA / "debian12-docker.sources", folder / "debian.sources")
    (folder / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (folder / "debian.sources").chmod(0o640)
    check = play(tmp_path, "check", _components(folder), LOCAL, check=True)
    assert check.rc == 0, check.stdout[-2000:]
    assert check.results("components")[0]["event_data"]["res"]["changed"] is True
    assert (folder / "debian.sources").read_text() == (DATA / "debian12-docker.sources").read_text()
    run = play(tmp_path, "real", _components(folder), LOCAL)
    assert run.rc == 0, run.stdout[-2000:]
    res = run.results("components")[0]["event_data"]["res"]
    assert sorted(res["changed_files"]) == sorted([str(folder / "sources.list"), str(folder / "debian.sources")])
    assert (folder / "sources.list").read_text() == "deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware\n"
    assert (folder / "debian.sources").stat().st_mode & 0o777 == 0o640
    again = play(tmp_path, "again", _components(folder), LOCAL)
    assert again.results("components")[0]["event_data"]["res"]["changed"] is False
    (folder / "sources.list").unlink()
    missing = play(tmp_path, "missing", _components(folder), LOCAL)
    assert missing.rc == 0 and missing.results("components")[0]["event_data"]["res"]["changed"] is False
