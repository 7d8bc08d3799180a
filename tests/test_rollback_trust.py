"""Rollback from the controller's own records (issue 28, item 1): `up --rollback` used to take
the profile YAML of the first host in sort order for the whole group, never hashing it, so
one root user on one node chose what every node got. Now every profile `up` applies is kept
on the controller by digest (engine/profile_store.py), a host's report names only a digest,
and the YAML a host sends is never loaded.

Hosts are simulated by replacing the playbook runner (in engine/commands.py and
engine/rollback.py); everything after it, the CLI included, is the product's own code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from provisioner import paths, profiles
from provisioner.cli import app
from provisioner.engine import commands, profile_store, rollback
from provisioner.engine.runner import HostRun, PlaybookRun

from .test_distro_archive import _offer

NODES = ["node1", "node2", "node3"]
FACTS = {"distribution": "Debian", "distribution_version": "12.12", "vcpus": 4, "memtotal_mb": 8192,
         "disk_free": ["/ 107374182400"], "lspci_rc": 0, "lspci": []}
ATTACKER = "attacker.example"


class Fleet:
    """Hosts as the product sees them through the playbook runner: each step's answer per
    host, and what every play was handed (its limit and the profile in its group_vars)."""

    def __init__(self, states: dict[str, dict] | None = None):
        self.states = states or {}
        self.played: list[tuple[str, str, str]] = []

    def run(self, name, inventory_dir, run_dir, **kw):
        hosts = kw["limit"].split(",") if kw.get("limit") else NODES
        applied = (Path(inventory_dir) / "group_vars" / "all" / "provisioner.yml").read_text()
        self.played.append((name, ",".join(hosts), applied))
        answers = {"check": lambda h: {"provisioner_state": self.states[h]},
                   "survey": lambda h: {"provisioner_preflight": FACTS, "provisioner_apt_offer": _offer()}}
        answer = answers.get(name, lambda h: {})
        return PlaybookRun(name, "successful", 0, {h: HostRun(h, ok=1, reported=answer(h)) for h in hosts}, run_dir)

    def converged(self) -> list[tuple[str, str]]:
        """(hosts, profile sha256) of every converge (site) play."""
        return [(hosts, yaml.safe_load(applied.replace("!unsafe", ""))["provisioner_profile_sha256"])
                for name, hosts, applied in self.played if name == "site"]


def _profile(tmp_path: Path, name: str, extra: str = "") -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(f"extends: debian12-lab\nname: {name}\ndescription: {name}\n{extra}")
    return path


@pytest.fixture
def setup(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # this test's own controller
    fleet = Fleet()
    monkeypatch.setattr(commands, "run_playbook", fleet.run)
    monkeypatch.setattr(rollback, "run_playbook", fleet.run)
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\n" + "\n".join(NODES) + "\n")
    old = _profile(tmp_path, "lab-old", "reboot:\n  allowed: false\n")
    new = _profile(tmp_path, "lab-new", "reboot:\n  allowed: false\nverify:\n  dcgm_diag_level: 0\n"
                                        "  require_persistence_mode: false\n  require_idle_gpus: true\n")
    return tmp_path, fleet, hosts, profiles.load(str(old)), profiles.load(str(new))


def _state(now: profiles.Loaded, back_sha: str, back_yaml: str, back_name: str = "lab-old") -> dict:
    return {"recorded": True, "profile": now.profile.name, "profile_sha256": now.digest, "pending": None,
            "differences": [], "rollback_to": {"profile": back_name, "profile_sha256": back_sha,
                                               "profile_yaml": back_yaml, "held_packages": {}}}


def _up(tmp_path: Path, hosts: Path, *args: str):
    return CliRunner().invoke(app, ["up", *args, str(hosts), "--runs-dir", str(tmp_path / "runs")])


def _evil_yaml(old: profiles.Loaded) -> str:
    """node1's answer: the honest digest, and its own YAML (the attacker's apt repository and
    key, pip index, a CA that is the controller's SSH key, the exporter open, reboots on)."""
    data = profiles.as_dict(old.profile)
    data["mirrors"].update(cuda_repo_url=f"https://{ATTACKER}/repo/", pip_index_url=f"https://{ATTACKER}/simple",
                           ca_certificates=[str(Path.home() / ".ssh" / "id_ed25519")])
    data["reboot"] = {"allowed": True}
    return yaml.safe_dump(data)


def test_a_dishonest_hosts_yaml_under_an_honest_digest_changes_nothing_on_any_host(setup):
    tmp_path, fleet, hosts, old, new = setup
    for loaded in (old, new):  # the controller applies lab-old, then lab-new: each is kept by digest
        assert _up(tmp_path, hosts, "--profile", str(loaded.files[0])).exit_code in (0, 2)
    assert fleet.converged() == [(",".join(NODES), old.digest), (",".join(NODES), new.digest)]
    fleet.played.clear()
    fleet.states = {h: _state(new, old.digest, profiles.to_yaml(old.profile)) for h in NODES}
    fleet.states["node1"] = _state(new, old.digest, _evil_yaml(old), back_name="[bold red]lab-old")  # first in order

    result = _up(tmp_path, hosts, "--rollback", "--profile", str(new.files[0]))
    out = result.output
    assert "Traceback" not in out and result.exit_code in (0, 2), out
    # Every host, node1 included, gets the controller's own copy of lab-old; node1's YAML is nowhere.
    assert fleet.converged() == [(",".join(NODES), old.digest)]
    for name, _, applied in fleet.played:
        assert ATTACKER not in applied and "id_ed25519" not in applied, name
    assert "provisioner_reboot_allowed: false" in fleet.played[-2][2]
    # Shown before it starts: the digest, where the profile comes from, and the diff now -> back.
    kept = profile_store.folder() / f"{old.digest}.yml"
    assert f"rollback: 3 host(s) back to profile 'lab-old' (sha256 {old.digest}): node1, node2, node3" in out
    assert f"rollback: from the controller's copy, kept when up applied it: {kept}" in out
    assert "-  require_idle_gpus: true" in out and "+  require_idle_gpus: false" in out
    assert out.index("require_idle_gpus") < out.index("host(s)", out.index("require_idle_gpus"))
    assert "[bold red]" not in out and ATTACKER not in out
    assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_file() and ATTACKER in p.read_text(errors="replace")]


def test_a_digest_the_controller_never_applied_is_one_error_naming_the_hosts_and_the_fix(setup):
    tmp_path, fleet, hosts, old, new = setup
    other = "ab" * 32
    fleet.states = {"node1": _state(new, other, "name: x\n"), "node2": _state(new, old.digest, "name: y\n"),
                    "node3": _state(new, old.digest, profiles.to_yaml(old.profile))}
    result = _up(tmp_path, hosts, "--rollback", "--profile", str(new.files[0]))
    assert result.exit_code == 1 and "Traceback" not in result.output
    message = " ".join(result.output.split())
    assert f"sha256 {other} (node1); sha256 {old.digest} (node2, node3)" in message
    assert "the copy in their state records is never used" in message
    assert "pass the profile they ran before with --profile FILE" in message
    assert [name for name, _, _ in fleet.played] == ["check"]  # read only, nothing converged


def test_the_profile_file_given_is_the_way_back_when_its_digest_is_what_the_hosts_report(setup):
    tmp_path, fleet, hosts, old, new = setup  # nothing kept on this controller
    fleet.states = {h: _state(new, old.digest, _evil_yaml(old)) for h in NODES}
    result = _up(tmp_path, hosts, "--rollback", "--profile", str(old.files[0]))
    assert result.exit_code in (0, 2) and fleet.converged() == [(",".join(NODES), old.digest)], result.output
    assert f"rollback: from the --profile file: {old.files[0]}" in result.output
    assert "no diff: this controller has no copy of the profile the hosts run now" in result.output

    # A file that is neither what they run now nor what they go back to is said plainly.
    fleet.played.clear()
    stranger = profiles.load(str(_profile(tmp_path, "lab-stranger")))
    commands.execute("up", commands.prepare(str(old.files[0]), hosts), runs_dir=tmp_path / "runs")  # kept now
    fleet.played.clear()
    result = _up(tmp_path, hosts, "--rollback", "--profile", str(stranger.files[0]))
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and f"--profile 'lab-stranger' (sha256 {stranger.digest[:12]}) is neither the " \
                                      "profile node1, node2, node3 run now nor the one they go back to" in message
    assert [name for name, _, _ in fleet.played] == ["check"]


def test_groups_are_each_looked_up_and_named_by_the_controllers_copy(setup):
    tmp_path, fleet, hosts, old, new = setup
    third = profiles.load(str(_profile(tmp_path, "lab-third", "reboot:\n  allowed: false\n"
                                                              "verify:\n  require_ecc: true\n")))
    for loaded in (old, third):
        commands.execute("up", commands.prepare(str(loaded.files[0]), hosts), runs_dir=tmp_path / "runs")
    fleet.played.clear()
    fleet.states = {"node1": _state(new, old.digest, "", back_name="[blink]liar"),
                    "node2": _state(new, third.digest, ""), "node3": _state(new, old.digest, "")}
    result = _up(tmp_path, hosts, "--rollback", "--profile", str(new.files[0]))
    message = " ".join(result.output.split())
    assert result.exit_code == 1 and "--limit node1,node3 (back to 'lab-old'); --limit node2 (back to 'lab-third')" \
        in message and "liar" not in message
    assert [name for name, _, _ in fleet.played] == ["check"]


def test_a_kept_copy_that_does_not_hash_to_its_name_or_that_others_can_write_is_refused(setup):
    tmp_path, fleet, hosts, old, new = setup
    commands.execute("up", commands.prepare(str(old.files[0]), hosts), runs_dir=tmp_path / "runs")
    kept = profile_store.folder() / f"{old.digest}.yml"
    assert kept.stat().st_mode & 0o777 == 0o600 and profile_store.folder().stat().st_mode & 0o777 == 0o700
    assert profile_store.folder().is_relative_to(paths.state_dir())
    assert profile_store.find(old.digest).digest == old.digest
    kept.write_text(kept.read_text().replace("allowed: false", "allowed: true"))
    with pytest.raises(Exception, match="the kept profile does not hash to its name"):
        profile_store.find(old.digest)
    os.chmod(profile_store.folder(), 0o777)
    with pytest.raises(Exception, match=r"profile store is writable by its group and others \(mode 0777\)"):
        profile_store.find(old.digest)
    with pytest.raises(Exception, match="is not a sha256 digest"):
        profile_store.find("../../../etc/passwd")


def test_a_host_with_overrides_is_found_by_its_own_digest(setup, tmp_path: Path):
    _, fleet, _, _, _ = setup
    profile = _profile(tmp_path, "lab-over", "inventory_overrides: [nvidia_driver_persistence]\n")
    hosts = tmp_path / "over.ini"
    hosts.write_text("[gpu]\nnode1\nnode2 nvidia_driver_persistence=false\n")
    target = commands.prepare(str(profile), hosts)
    assert profile_store.find(target.digest_for("node2")) is None
    profile_store.keep(target.loaded, target.inventory)
    assert target.digest_for("node2") != target.loaded.digest
    assert profile_store.find(target.digest_for("node2")).digest == target.loaded.digest
    assert profile_store.find(target.digest_for("node1")).digest == target.loaded.digest
