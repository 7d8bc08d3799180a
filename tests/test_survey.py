"""One module call per host for preflight and for the no-op `provision up`: what the
probes return, read for real on this machine (connection local) beside Ansible's own
facts, the values the old fact-gathering preflight play reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from provisioner import profiles
from provisioner.judge import preflight
from tests.conftest import COLLECTION, PLAYBOOKS

pytestmark = pytest.mark.ansible

KEYS = {"distribution", "distribution_version", "kernel", "architecture", "virtualization_type",
        "virtualization_role", "vcpus", "memtotal_mb", "disk_free", "lspci_rc", "lspci", "infiniband", "nvme"}


def play(tmp_path: Path, tasks: list[dict]) -> dict[str, dict]:
    """Run `tasks` on localhost; each task's registered result by its name."""
    import ansible_runner

    results: dict[str, dict] = {}

    def keep(event):
        if event.get("event") == "runner_on_ok":
            results[event["event_data"]["task"]] = event["event_data"]["res"]
        return True
    (tmp_path / "run").mkdir()
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    (tmp_path / "hosts").write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    run = ansible_runner.run(private_data_dir=str(tmp_path / "run"), playbook=str(playbook),
                             inventory=str(tmp_path / "hosts"), quiet=True, event_handler=keep,
                             envvars={"ANSIBLE_COLLECTIONS_PATH": str(COLLECTION.parents[2]),
                                      "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin:/usr/sbin:/sbin"})
    assert run.status == "successful", [p.read_text()[-3000:] for p in (tmp_path / "run/artifacts").glob("*/stdout")]
    return results


def test_the_one_call_reports_what_fact_gathering_did(tmp_path: Path):
    record = tmp_path / "provisioner.fact"
    results = play(tmp_path, [
        {"name": "facts", "ansible.builtin.setup": {"gather_subset": ["min", "hardware", "virtual"]}},
        {"name": "preflight", "gpu_provisioner.node.preflight_probe": {"path": str(record)}},
        {"name": "survey", "gpu_provisioner.node.gpu_probe": {"preflight": True, "state_path": str(record)}},
        {"name": "plain", "gpu_provisioner.node.gpu_probe": {}},
    ])
    facts = results["facts"]["ansible_facts"]
    for name in ("preflight", "survey"):
        got = results[name]["provisioner_preflight"]
        assert set(got) == KEYS
        assert [got[k] for k in ("distribution", "distribution_version", "kernel", "architecture",
                                 "virtualization_type", "virtualization_role", "vcpus", "memtotal_mb")] == \
            [facts["ansible_" + k] for k in ("distribution", "distribution_version", "kernel", "architecture",
                                             "virtualization_type", "virtualization_role")] + \
            [facts["ansible_processor_vcpus"], facts["ansible_memtotal_mb"]]
        assert got["disk_free"][0].split() == ["Mounted", "on", "Avail"] and len(got["disk_free"]) == 5
        # Never converged: no record, and the survey says the long runs wait.
        assert results[name]["provisioner_state"]["recorded"] is False
    assert results["survey"]["provisioner_verify"]["probe"]["in_recorded_state"] is False
    # Without preflight the probe is what verify always had: nothing more.
    assert "provisioner_preflight" not in results["plain"] and "in_recorded_state" not in results["plain"]["provisioner_verify"]["probe"]
    # Judged alike: the checks preflight makes from the one call are those it made from facts.
    lab = profiles.load("debian12-lab").profile
    got = results["preflight"]["provisioner_preflight"]
    old = dict(got, distribution=facts["ansible_distribution"], vcpus=facts["ansible_processor_vcpus"],
               memtotal_mb=facts["ansible_memtotal_mb"])
    assert preflight.judge(lab, got) == preflight.judge(lab, old)


def test_the_survey_runs_the_long_probes_only_on_a_host_in_its_recorded_state(tmp_path: Path):
    record = tmp_path / "provisioner.fact"
    results = play(tmp_path, [
        {"name": "record", "gpu_provisioner.node.provisioner_state": {
            "action": "record", "path": str(record), "profile": "lab", "profile_sha256": "a" * 64, "managed": []}},
        {"name": "same", "gpu_provisioner.node.gpu_probe": {
            "preflight": True, "state_path": str(record), "expect_profile": "lab", "expect_sha256": "a" * 64}},
        {"name": "changed", "gpu_provisioner.node.gpu_probe": {
            "preflight": True, "state_path": str(record), "expect_profile": "lab", "expect_sha256": "b" * 64}},
    ])
    assert json.loads(record.read_text())["profile"] == "lab"
    assert results["same"]["provisioner_state"]["recorded"] is True
    assert results["same"]["provisioner_verify"]["probe"]["in_recorded_state"] is True
    assert results["changed"]["provisioner_verify"]["probe"]["in_recorded_state"] is False


def test_up_starts_with_the_survey_and_preflight_is_one_task_plus_the_archive_for_distro_profiles():
    from provisioner.engine import commands

    assert commands.STEPS["up"][0] == "survey"
    for name, module in (("preflight", "gpu_provisioner.node.preflight_probe"), ("survey", None)):
        (only,) = yaml.safe_load((PLAYBOOKS / f"{name}.yml").read_text())
        assert only["gather_facts"] is False
        tasks = [next(k for k in t if "." in k) for t in only["tasks"]]
        if module:
            assert tasks == [module, "gpu_provisioner.node.apt_offer"]
        else:
            assert [r["role"] for r in only["roles"]] == ["gpu_provisioner.node.gpu_verify"]
            assert tasks == ["gpu_provisioner.node.apt_offer"]
        # The one more call (the host's archive asked, tests/test_apt_offer.py) only for a profile
        # that takes packages from the distribution's archive: NVIDIA's repository is read by render.
        when = only["tasks"][-1]["when"]
        assert when.startswith("provisioner_distro_packages | default({}) | length > 0")
        if not module:   # up's survey: not on a host in its recorded state (it is not converged)
            assert when.endswith("and not gpu_verify_probe.provisioner_verify.probe.in_recorded_state | default(false) | bool")
