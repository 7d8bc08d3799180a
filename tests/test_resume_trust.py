"""Nothing executes from a file the product did not check (issue 28, item 2): `up --resume DIR`
ran the hook commands stored in any report.json through /bin/sh, whoever owned the file and
whatever its mode, without showing them; tampered fields crashed it or widened it
(`failed: ["all"]` resumed with --limit all). Now (engine/resume.py) the run folder must be
the user's alone, every field is validated, hosts come only from the inventory, and a stored
hook runs only when given again on the command line or confirmed at a terminal.

Hosts are simulated by replacing the playbook runner; the hooks, the CLI and everything
else are the product's own code, so an attack that got through would run its hook here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import profiles
from provisioner.cli import app
from provisioner.engine import commands, rolling
from provisioner.engine.runner import HostRun, PlaybookRun
from provisioner.errors import ProvisionError

from .test_distro_archive import _offer

NODES = ["node1", "node2", "node3"]
FACTS = {"distribution": "Debian", "distribution_version": "12.12", "vcpus": 4, "memtotal_mb": 8192,
         "disk_free": ["/ 107374182400"], "lspci_rc": 0, "lspci": []}  # a Debian 12 host preflight passes


@pytest.fixture
def world(tmp_path: Path, monkeypatch):
    """A stopped rollout of debian12-lab on node1..node3 (node1 failed, the others untouched)
    whose drain hook would leave a mark, and hosts that would let a resumed rollout go on."""
    played = []

    def run(name, inventory_dir, run_dir, **kw):
        played.append((name, kw.get("limit")))
        hosts = kw["limit"].split(",") if kw.get("limit") else NODES
        answer = {"provisioner_preflight": FACTS, "provisioner_apt_offer": _offer()} if name == "preflight" else {}
        return PlaybookRun(name, "successful", 0, {h: HostRun(h, ok=1, reported=answer) for h in hosts}, run_dir)

    monkeypatch.setattr(commands, "run_playbook", run)
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\n" + "\n".join(NODES) + "\n")
    mark = tmp_path / "pwned"
    run_dir = tmp_path / "stopped"
    run_dir.mkdir(mode=0o700)
    report = {"command": "up", "profile": "debian12-lab", "profile_sha256": profiles.load("debian12-lab").digest,
              "inventory": str(hosts), "run_dir": str(run_dir), "started": "", "finished": "", "interrupted": False,
              "exit_code": 1, "verdict": "", "errors": [], "retry": None, "summary": {},
              "hosts": [{"name": h, "status": "ok", "outcome": "ok"} for h in NODES],
              "rollout": {"batch": "1", "batches": [[h] for h in NODES], "done": [], "failed": ["node1"],
                          "untouched": ["node2", "node3"], "stopped_at": 1, "max_fail": 0,
                          "hooks": {"drain": f"touch {mark}", "undrain": None, "gate": None},
                          "hook_timeout": 30.0, "resume_command": ""}}
    return tmp_path, hosts, run_dir, report, mark, played


def _write(run_dir: Path, report: dict, mode: int = 0o600) -> None:
    path = run_dir / "report.json"
    path.write_text(json.dumps(report))
    os.chmod(path, mode)


def _resume(tmp_path: Path, hosts: Path, run_dir: Path, *args: str):
    return CliRunner().invoke(app, ["up", "-p", "debian12-lab", str(hosts), "--resume", str(run_dir),
                                    "--runs-dir", str(tmp_path / "runs"), *args])


def test_a_run_folder_others_can_write_or_own_is_not_read(world):
    tmp_path, hosts, run_dir, report, mark, played = world
    _write(run_dir, report, 0o666)
    result = _resume(tmp_path, hosts, run_dir)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "the run folder's report.json is writable by its group and others (mode 0666): it is not read" \
        in " ".join(result.output.split())
    assert not mark.exists() and not played and not (tmp_path / "runs").exists()
    _write(run_dir, report)
    os.chmod(run_dir, 0o770)
    result = _resume(tmp_path, hosts, run_dir)
    assert result.exit_code == 1 and "the run folder is writable by its group (mode 0770)" in result.output
    if os.getuid() == 0:  # a file root did not write, in a folder root did not make
        os.chmod(run_dir, 0o700)
        os.chown(run_dir / "report.json", 65534, 65534)
        result = _resume(tmp_path, hosts, run_dir)
        assert result.exit_code == 1 and "report.json belongs to uid 65534, not to you (uid 0)" in result.output
    assert not mark.exists() and not played


def test_stored_hooks_run_only_when_given_again_or_confirmed(world):
    tmp_path, hosts, run_dir, report, mark, played = world
    _write(run_dir, report)
    result = _resume(tmp_path, hosts, run_dir)  # no terminal here: refused, the commands shown
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and f"hook commands not given again: --drain 'touch {mark}'" in message
    assert "as the printed `resume:` line does" in message and not mark.exists() and not played

    asked = []
    options = {"limit": None, "batch": None, "max_fail": None, "drain": None, "undrain": None, "gate": None,
               "hook_timeout": rolling.HOOK_TIMEOUT, "resume": run_dir, "rollback": False}
    with pytest.raises(ProvisionError, match="the stored hook commands were not confirmed"):
        rolling.up_request(**options, confirm=lambda q: asked.append(q) or False)
    assert f"--drain 'touch {mark}'" in asked[0] and asked[0].endswith("Run them?")
    request = rolling.up_request(**options, confirm=lambda q: True)
    assert request.hooks.drain == f"touch {mark}" and request.hooks.timeout == 30.0
    assert request.limit == "node1,node2,node3" and request.batch == "1"

    # Given again on the command line (the printed resume line carries them): the rollout goes on.
    result = _resume(tmp_path, hosts, run_dir, "--drain", f"touch {mark}")
    assert "Traceback" not in result.output and mark.exists(), result.output
    assert played[0] == ("preflight", "node1,node2,node3")


@pytest.mark.parametrize("field,value,expect", [
    ("hook_timeout", "abc", "report.json field rollout.hook_timeout: Input should be a valid number (found 'abc')"),
    ("hooks", ["touch /tmp/x"], "report.json field rollout.hooks: must be a mapping (found ['touch /tmp/x'])"),
    ("failed", ["all"], "the stopped rollout's record names host(s) the inventory does not have: all"),
    ("untouched", ["node2,node9"], "report.json field rollout.untouched.0: String should match pattern"),
    ("max_fail", 1000, "report.json field rollout.max_fail: Input should be less than or equal to 100"),
    ("batch", "0", "report.json field rollout.batch: String should match pattern"),
    ("stopped_at", "1", "report.json field rollout.stopped_at: Input should be a valid integer"),
    ("hooks", {"drain": "true\x1b]52;c;aWQ=\x07"}, "report.json field rollout.hooks.drain: holds a control character"),
    ("hooks", {"drain": "true", "after": "id"}, "report.json field rollout.hooks.after: unknown field"),
])
def test_a_tampered_record_is_one_clear_error_and_runs_nothing(world, field, value, expect):
    tmp_path, hosts, run_dir, report, mark, played = world
    report["rollout"][field] = value
    _write(run_dir, report)
    result = _resume(tmp_path, hosts, run_dir, "--drain", f"touch {mark}")
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert expect in message and "fix:" in message, message
    assert not mark.exists() and not played and not (tmp_path / "runs").exists()
