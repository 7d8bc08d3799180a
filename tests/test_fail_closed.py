"""The preflight gate fails closed (issue 28, item 6): when the gate step (preflight, or up's
survey) yields no host results at all (seen with a 300,000-character host name, whose fact
cache path was too long), nothing after it runs. The playbook runner is replaced, so all
that follows it is the product's own code."""

from __future__ import annotations

from pathlib import Path

from provisioner import profiles
from provisioner.engine import commands
from provisioner.engine.runner import PlaybookRun
from provisioner.render.inventory import load as load_inventory


def _target(tmp_path: Path) -> commands.Target:
    inv = tmp_path / "hosts.ini"
    inv.write_text("node1\nnode2\n")
    return commands.Target(profiles.load("debian12-lab"), load_inventory(inv))


def _silent_gate(played: list[tuple[str, str | None]]):
    def run(name, inventory_dir, run_dir, **kw):
        played.append((name, kw.get("limit")))
        return PlaybookRun(name, "successful", 0, {}, run_dir)  # the gate ran, and answered for no host
    return run


def test_a_gate_with_no_host_results_stops_the_run_before_the_converge(tmp_path: Path, monkeypatch):
    played: list[tuple[str, str | None]] = []
    monkeypatch.setattr(commands, "run_playbook", _silent_gate(played))
    report = commands.execute("up", _target(tmp_path), runs_dir=tmp_path / "runs")
    assert [name for name, _ in played] == ["survey"], played   # no site, no verify
    assert report.exit_code == 1 and not report.interrupted
    assert report.errors and report.errors[0].startswith("survey returned no result for any host (limit all)")
    assert report.verdict.startswith("error:")


def test_the_same_holds_for_up_full_whose_gate_is_preflight(tmp_path: Path, monkeypatch):
    played: list[tuple[str, str | None]] = []
    monkeypatch.setattr(commands, "run_playbook", _silent_gate(played))
    report = commands.execute("up", _target(tmp_path), runs_dir=tmp_path / "runs", full=True)
    assert [name for name, _ in played] == ["preflight"], played
    assert report.exit_code == 1 and report.errors[0].startswith("preflight returned no result for any host")


def test_a_step_after_the_gate_never_gets_no_limit():
    from provisioner.reports.report import Report

    empty = Report("up", "p", "", "hosts.ini", Path("/tmp/r"), started="")
    assert commands._healthy(empty, None) == "" and commands._healthy(empty, "node1") == ""
