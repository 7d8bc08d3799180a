"""Day two (issue 22): what the state record keeps for turning a component off and for a
rollback, and the controller's side of both. The record and the file removal run for real
through the provisioner_state module on this machine (a record in tmp_path); the package
purge, holds and units run on lab hosts (tests/integration/test_rolling_driver_lab.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner import profiles
from provisioner.engine import commands, drift, rollback
from provisioner.errors import ProvisionError
from provisioner.render import role_vars

from ansible_collections.gpu_provisioner.node.plugins.filter.apt import moving_together, pins_moving, units_active
from ansible_collections.gpu_provisioner.node.plugins.module_utils import state

from .conftest import PLAYBOOKS, REPO
from .test_state import module

DRIVER_ONLY = REPO / "tests" / "data" / "profiles" / "lab-driver-only.yml"


def _record(profile: str, sha: str, held: dict[str, str], components: dict, ours: list[str]) -> dict:
    return {"profile": profile, "profile_sha256": sha, "profile_yaml": f"name: {profile}\n", "ours": ours,
            "components": components,
            "state": {"held_packages": {n: {"version": v, "hold": True} for n, v in held.items()},
                      "packages": {}, "files": {}, "units": {}, "python_envs": {}}}


def test_ours_is_what_was_not_there_before_the_converge_and_stays_ours():
    managed = {"held_packages": ["nvidia-driver-580", "datacenter-gpu-manager-4-core"], "packages": ["curl"]}
    first = state.ours(None, managed, installed_before=["curl", "dpkg"])
    assert first == ["datacenter-gpu-manager-4-core", "nvidia-driver-580"]  # curl was there before us
    # The next converge finds them installed already: still ours, and curl still not.
    again = state.ours({"ours": first}, managed, installed_before=["curl", "dpkg", *first])
    assert again == first
    assert state.ours({"ours": first}, managed, installed_before=None) == first  # no snapshot: only the record's
    assert state.ours(None, managed, installed_before=None) == []  # never a guess


def test_the_previous_record_is_kept_until_the_profile_changes_again():
    a = _record("a", "sha-a", {"nvidia-driver-580": "580.65.06-1"}, {}, [])
    assert state.previous(None, "sha-a") is None
    assert state.previous(a, "sha-a") is None  # the same profile again: nothing to go back to yet
    b_prev = state.previous(a, "sha-b")
    assert b_prev == {"profile": "a", "profile_sha256": "sha-a", "profile_yaml": "name: a\n",
                      "held_packages": {"nvidia-driver-580": "580.65.06-1"}}
    b = dict(_record("b", "sha-b", {}, {}, []), previous=b_prev)
    assert state.previous(b, "sha-b") == b_prev  # re-converging b keeps a as the way back
    assert state.previous(b, "sha-a")["profile"] == "b"  # a rollback to a: b becomes the way back


def test_leftovers_purge_only_our_packages_of_a_component_no_role_manages_now():
    components = {"dcgm_exporter": {"held_packages": ["datacenter-gpu-manager-4-core", "dcgm-exporter"],
                                    "packages": ["curl"], "files": ["/etc/apt/preferences.d/provisioner-dcgm"],
                                    "units": ["nvidia-dcgm.service"]},
                  "nvidia_driver": {"held_packages": ["nvidia-driver-580"], "files": ["/etc/x"], "units": []}}
    old = _record("a", "sha-a", {"datacenter-gpu-manager-4-core": "1:4.5.2-1", "dcgm-exporter": "4.5.2-1",
                                 "nvidia-driver-580": "580.65.06-1"}, components,
                  ours=["datacenter-gpu-manager-4-core", "dcgm-exporter", "nvidia-driver-580"])
    old["state"].update(packages={"curl": True}, files={"/etc/apt/preferences.d/provisioner-dcgm": "x", "/etc/x": "y"},
                        units={"nvidia-dcgm.service": {"enabled": "enabled", "active": "inactive"}})
    now = state.merge({"nvidia_driver": components["nvidia_driver"], "dcgm_exporter": {}})
    gone = state.leftovers(old, now)
    assert gone == {"units": ["nvidia-dcgm.service"], "unhold": ["datacenter-gpu-manager-4-core", "dcgm-exporter"],
                    "purge": ["datacenter-gpu-manager-4-core", "dcgm-exporter"],
                    "files": ["/etc/apt/preferences.d/provisioner-dcgm"], "kept": ["curl"],
                    "runtimes": [], "components": ["dcgm_exporter"]}
    assert not any(state.leftovers(old, state.merge(components))[k] for k in ("units", "unhold", "purge", "files"))
    assert state.leftovers(None, now)["purge"] == []


@pytest.mark.ansible
def test_the_module_records_components_ours_and_previous_and_retire_removes_our_files(tmp_path: Path):
    ours_file, theirs = tmp_path / "ours.conf", tmp_path / "kept.conf"
    ours_file.write_text("a\n")
    theirs.write_text("b\n")
    record = tmp_path / "provisioner.fact"
    both = [{"files": [str(ours_file)], "packages": ["coreutils"]}, {"files": [str(theirs)]}]
    args = {"action": "record", "path": str(record), "profile": "p", "profile_sha256": "sha-p",
            "managed": both, "managed_names": ["exporter_managed", "common_managed"],
            "profile_yaml": "name: p\n", "installed_before": ["coreutils"]}
    assert module(args)["changed"] is True
    saved = json.loads(record.read_text())
    assert set(saved["components"]) == {"exporter", "common"} and saved["ours"] == []  # coreutils was there before
    assert saved["previous"] is None and saved["profile_yaml"] == "name: p\n"
    assert module(args)["changed"] is False

    # The exporter turned off: retire says what it would remove in check mode, then removes our file only.
    off = dict(args, action="retire", managed=[{}, {"files": [str(theirs)]}])
    would = module(off, check=True)
    assert would["changed"] is True and would["retired"]["files"] == [str(ours_file)] and ours_file.exists()
    assert would["retired"]["purge"] == [] and would["retired"]["kept"] == ["coreutils"]  # not ours: left
    done = module(off)
    assert done["changed"] is True and not ours_file.exists() and theirs.exists()
    second = module(dict(off, action="record", profile="q", profile_sha256="sha-q", profile_yaml="name: q\n"))
    assert second["changed"] is True
    saved = json.loads(record.read_text())
    assert saved["previous"]["profile"] == "p" and saved["previous"]["profile_yaml"] == "name: p\n"
    assert module(off)["changed"] is False  # retired once
    compared = module({"action": "compare", "path": str(record)})["provisioner_state"]
    assert compared["rollback_to"]["profile_sha256"] == "sha-p" and set(compared["components"]) == {"common"}

    # A converge with profile r begins (snapshot) and fails before its record: the host is
    # between q and r, and a rollback returns it to q, the profile on its record.
    assert module({"action": "snapshot", "path": str(record), "profile": "r", "profile_sha256": "sha-r"})["installed"]
    halfway = module({"action": "compare", "path": str(record)})["provisioner_state"]
    assert halfway["pending"] == {"profile": "r", "profile_sha256": "sha-r"}
    assert halfway["rollback_to"]["profile"] == "q" and halfway["rollback_to"]["profile_yaml"] == "name: q\n"
    # Converged with q again: the record is written (pending cleared), q's previous kept.
    redo = dict(off, action="record", profile="q", profile_sha256="sha-q", profile_yaml="name: q\n")
    assert module(redo)["changed"] is True and module(redo)["changed"] is False
    settled = module({"action": "compare", "path": str(record)})["provisioner_state"]
    assert settled["pending"] is None and settled["rollback_to"]["profile"] == "p"


def test_check_names_a_component_the_profile_turned_off():
    loaded = profiles.load("h100-train")
    off = profiles.load(str(DRIVER_ONLY))
    recorded = {"components": {"dcgm_exporter": {"held_packages": ["datacenter-gpu-manager-4-core"],
                                                 "units": ["nvidia-dcgm.service"]},
                               "nvidia_driver": {"held_packages": ["nvidia-driver-580"]}}}
    assert drift.components_off(recorded, role_vars(loaded)) == []  # h100-train has DCGM
    found = drift.components_off(recorded, role_vars(off))
    assert found == [("component dcgm_exporter is off in the profile",
                      "still on this host (held packages: datacenter-gpu-manager-4-core; units: nvidia-dcgm.service); "
                      "provision up removes it")]


def test_the_network_role_is_on_while_either_iperf3_or_infiniband_is():
    """An InfiniBand profile without iperf3 still runs the network role (its RDMA stack): a
    plain check named it "off" on every InfiniBand host (the InfiniBand lab test found it)."""
    recorded = {"components": {"network": {"packages": ["rdma-core", "perftest"]}}}
    infiniband = profiles.load(str(REPO / "tests" / "data" / "profiles" / "lab-infiniband.yml"))
    assert role_vars(infiniband)["network_iperf3"] is False and role_vars(infiniband)["network_infiniband"] is True
    assert drift.components_off(recorded, role_vars(infiniband)) == []
    neither = role_vars(profiles.load(str(DRIVER_ONLY)))
    assert not neither["network_iperf3"] and not neither["network_infiniband"]
    assert [item for item, _ in drift.components_off(recorded, neither)] == ["component network is off in the profile"]


def test_rollback_refuses_hosts_without_a_previous_profile_by_name(tmp_path: Path):
    from provisioner.render.inventory import load as load_inventory

    inv = tmp_path / "hosts.ini"
    inv.write_text("gpu-1\ngpu-2\ngpu-3\ngpu-4\n")
    target = commands.Target(profiles.load("debian12-lab"), load_inventory(inv))
    with pytest.raises(ProvisionError) as err:
        rollback.choose({"gpu-1": {"recorded": True, "rollback_to": None}, "gpu-2": {"recorded": False},
                         "gpu-3": {"recorded": True, "rollback_to": {"profile_sha256": target.loaded.digest}},
                         "gpu-4": {"recorded": True, "rollback_to": {"profile_sha256": "../../etc/x"}}}, target, "run")
    assert "gpu-1" in str(err.value) and "gpu-2" in str(err.value) and "gpu-3" not in str(err.value)
    assert "gpu-4" in str(err.value)  # a digest that is not one is no previous profile
    assert "nothing was touched" in str(err.value)
    # (Hosts whose previous profiles differ, and where the profile comes from:
    # tests/test_rollback_trust.py.)


def test_the_rendered_profile_yaml_loads_back_to_the_same_profile(tmp_path: Path):
    """What a host records is what the controller keeps for a rollback: the same profile, the same digest."""
    for name in profiles.builtin_names():
        loaded = profiles.load(name)
        path = tmp_path / f"{name}.yml"
        path.write_text(role_vars(loaded)["provisioner_profile_yaml"])
        assert profiles.load(str(path)).digest == loaded.digest, name


def test_site_retires_before_it_records_and_snapshots_first():
    play = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())[0]
    actions = [(t.get("gpu_provisioner.node.provisioner_state") or {}).get("action") for t in play["post_tasks"]]
    assert actions.index("retire") < actions.index("record")
    assert play["pre_tasks"][0]["gpu_provisioner.node.provisioner_state"]["action"] == "snapshot"


def test_a_driver_change_moves_only_installed_packages_and_stops_only_running_holders():
    pins = {"nvidia-driver-580": "580.95.05-1", "nvidia-fabricmanager-580": "580.95.05-1", "libnvidia-new": "1"}
    installed = {"nvidia-driver-580": "580.65.06-1", "nvidia-fabricmanager-580": "580.95.05-1"}
    assert pins_moving(pins, installed) == ["nvidia-driver-580"]
    # What the lab's first roll met: the driver's dependencies held at its old revision.
    held = ["nvidia-driver-580", "libnvidia-compute-580", "nvidia-fabricmanager", "curl"]
    old = {"nvidia-driver-580": "580.65.06-0ubuntu1", "libnvidia-compute-580": "580.65.06-0ubuntu1",
           "nvidia-fabricmanager": "580.65.06-1", "curl": "7.88.1-10"}
    assert moving_together(held, old, ["nvidia-driver-580"]) == ["libnvidia-compute-580", "nvidia-driver-580"]
    # `systemctl show -p Id -p ActiveState -- ...` as systemd 252 prints it, a missing unit included.
    shown = ("Id=nvidia-persistenced.service\nActiveState=active\n\nId=nvidia-fabricmanager.service\n"
             "ActiveState=inactive\n\nId=nv-hostengine.service\nActiveState=inactive\n\n"
             "Id=dcgm-exporter.service\nActiveState=activating\n").splitlines()
    assert units_active(shown) == ["nvidia-persistenced.service", "dcgm-exporter.service"]


def test_check_folds_a_turned_off_component_into_drift(tmp_path: Path):
    from provisioner.engine.runner import HostRun, PlaybookRun
    from provisioner.render.inventory import load as load_inventory
    from provisioner.reports.report import Report

    inv = tmp_path / "hosts.ini"
    inv.write_text("gpu-1\n")
    target = commands.Target(profiles.load(str(DRIVER_ONLY)), load_inventory(inv))
    host = HostRun("gpu-1", reported={"provisioner_state": {
        "recorded": True, "profile": "lab-driver-only", "profile_sha256": target.loaded.digest, "differences": [],
        "components": {"dcgm_exporter": {"units": ["nvidia-dcgm.service"]}}}})
    report = Report("check", "lab-driver-only", target.loaded.digest, str(inv), tmp_path, started="now")
    commands._fold(report, "check", PlaybookRun("check", "successful", 0, {"gpu-1": host}, tmp_path), target)
    (h,) = report.hosts
    assert h.status == "drift" and h.changed_tasks == ["component dcgm_exporter is off in the profile"]
    assert report.exit_code == 2


def test_a_purge_never_takes_a_package_that_a_staying_package_depends_on():
    """The lab's roll met it: after 580.65.06 -> 580.95.05 the old driver's companions left
    the driver's managed set while the new driver still depends on them."""
    installed = {
        "nvidia-driver-580": (["nvidia-persistenced", "libnvidia-compute-580", "nvidia-modprobe"], []),
        "nvidia-persistenced": (["libc6"], []), "nvidia-modprobe": (["libc6"], []),
        "datacenter-gpu-manager-exporter": (["datacenter-gpu-manager-4-core"], []),
        "datacenter-gpu-manager-4-core": (["libc6"], ["datacenter-gpu-manager"]),
        "tool": (["datacenter-gpu-manager"], []),  # depends on what the core provides
        "libc6": ([], []), "libnvidia-compute-580": ([], []),
    }
    assert state.purgeable(["nvidia-modprobe", "nvidia-persistenced"], installed) == (
        [], ["nvidia-modprobe", "nvidia-persistenced"])
    both = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-exporter"]
    assert state.purgeable(both, installed) == (["datacenter-gpu-manager-exporter"], ["datacenter-gpu-manager-4-core"])
    del installed["tool"]
    assert state.purgeable(both + ["not-installed"], installed) == (both, ["not-installed"])
    assert state._names("a (>= 1), b | c:any, ") == ["a", "b", "c"]
