"""gpu_provisioner.node.paths_absent: many paths removed in one module call, run for real on
this machine (ansible-runner, local connection) in a temporary folder: files, folders with
content, links (removed, never followed) and paths that are not there; check mode removes
nothing; a second run changes nothing; a relative path or the root in any spelling is refused
before anything goes (tested in check mode only: see the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .ansibleplay import LOCAL, play

pytestmark = pytest.mark.ansible


def _remove(*paths: str) -> list:
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "remove", "gpu_provisioner.node.paths_absent": {"path": list(paths)}}]}]


def _res(run) -> dict:
    return run.results("remove")[0]["event_data"]["res"]


def test_removes_files_folders_and_links_in_one_call_and_nothing_the_second_time(tmp_path: Path):
    area = tmp_path / "area"
    (area / "unit.service").parent.mkdir()
    (area / "unit.service").write_text("[Unit]\n")
    (area / "install" / "bin").mkdir(parents=True)
    (area / "install" / "bin" / "check").write_text("#!/bin/sh\n")
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "data").write_text("stays\n")
    (area / "link-to-folder").symlink_to(kept)
    (area / "dangling").symlink_to(tmp_path / "nowhere")
    paths = [str(area / n) for n in ("unit.service", "install", "link-to-folder", "dangling", "missing")]
    there = paths[:4]

    check = play(tmp_path, "check", _remove(*paths), LOCAL, check=True)
    assert check.rc == 0, check.stdout[-2000:]
    assert _res(check)["changed"] and _res(check)["removed"] == there
    assert all(Path(p).is_symlink() or Path(p).exists() for p in there), "check mode removed nothing"

    run = play(tmp_path, "real", _remove(*paths), LOCAL)
    assert run.rc == 0, run.stdout[-2000:]
    assert _res(run)["removed"] == there
    assert not any(Path(p).is_symlink() or Path(p).exists() for p in paths)
    assert (kept / "data").read_text() == "stays\n", "a link is removed, never followed"

    again = play(tmp_path, "again", _remove(*paths), LOCAL)
    assert again.rc == 0 and _res(again)["changed"] is False and _res(again)["removed"] == []


@pytest.mark.parametrize("bad", ["relative/path", "/", "//", "/..//.", "/etc", "//etc/", "/etc/systemd/system/", "/usr/../boot"])
def test_refuses_a_relative_path_or_the_root_and_removes_nothing(tmp_path: Path, bad: str):
    # In check mode only, always: this runs as root on the controller, and a refusal that
    # regressed must never be able to remove anything for real. An earlier version of
    # this test ran "//" for real before the module knew that spelling of the root, and
    # shutil.rmtree emptied most of the controller's /etc before it stopped at /proc.
    victim = tmp_path / "victim"
    victim.write_text("x\n")
    run = play(tmp_path, "bad", _remove(str(victim), bad), LOCAL, check=True)
    assert run.rc != 0 and run.status("remove") == ["failed"]
    assert "not an absolute path below a top-level folder" in _res(run)["msg"]
    assert victim.exists()
