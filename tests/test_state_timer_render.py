"""The profile's `monitoring` section as the state_timer role's variables, and the bundle,
which always installs provision-state.timer."""

from __future__ import annotations

import configparser
import json
import os
from pathlib import Path

import pytest
import yaml
from .rolerender import trust_as_template

from ansible_collections.gpu_provisioner.node.plugins.module_utils import state_metrics

from provisioner.render import bundle
from provisioner import profiles, render
from provisioner.render.ansible_data import load_unsafe
from provisioner.errors import ProvisionError

from .conftest import ROLES
from .rolerender import RoleRender


def _profile(tmp_path: Path, monitoring: dict) -> profiles.Loaded:
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump({"extends": "h100-train", "name": "timer", "description": "t",
                                    "monitoring": monitoring}))
    return profiles.load(str(path))


def test_defaults_install_no_timer_and_keep_node_exporter_on_loopback():
    v = render.role_vars(profiles.load("h100-train"))
    assert v["state_timer_enabled"] is False
    assert v["state_timer_node_exporter"] == "present"
    assert v["state_timer_node_exporter_listen_address"] == "127.0.0.1"
    # what the node's nvidia-smi checks expect comes from the same fields verify judges by
    p = profiles.load("h100-train").profile
    assert (v["state_timer_gpu_count"], v["state_timer_driver_version"]) == (p.hardware.gpu.count, p.driver.version)
    for name in (k for k in v if k.startswith("state_timer_")):
        assert name in render.PROFILE_FIELD, name
    defaults = yaml.safe_load((ROLES / "state_timer" / "defaults" / "main.yml").read_text())
    assert {k for k in v if k.startswith("state_timer_")} <= set(defaults)


def test_the_profile_sets_interval_and_node_exporter(tmp_path: Path):
    v = render.role_vars(_profile(tmp_path, {"state_timer": {"enabled": True, "interval_s": 120},
                                             "node_exporter": {"manage": "install", "listen_address": "10.1.2.3",
                                                               "port": 9101}}))
    assert (v["state_timer_enabled"], v["state_timer_interval"]) == (True, 120)
    assert (v["state_timer_node_exporter"], v["state_timer_node_exporter_listen_address"],
            v["state_timer_node_exporter_port"]) == ("install", "10.1.2.3", 9101)


@pytest.mark.parametrize("bad, field", [
    ({"state_timer": {"interval_s": 10}}, "interval_s"),
    ({"node_exporter": {"listen_address": "0.0.0.0:9100"}}, "listen_address"),
    ({"node_exporter": {"manage": "yes"}}, "manage"),
])
def test_bad_monitoring_settings_are_refused_naming_the_field(tmp_path: Path, bad: dict, field: str):
    with pytest.raises(ProvisionError) as err:
        _profile(tmp_path, bad)
    assert field in str(err.value)


def test_the_bundle_always_installs_the_timer():
    loaded = profiles.load("h100-train")
    assert render.role_vars(loaded)["state_timer_enabled"] is False
    group_vars = bundle.members(loaded, wheels=[])["inventory/group_vars/all/provisioner.yml"]
    assert load_unsafe(group_vars.decode())["state_timer_enabled"] is True


# --- the unit's sandbox (issue 28, item 15) -------------------------------------------------

def _service(overrides: dict | None = None) -> tuple[RoleRender, configparser.SectionProxy]:
    r = RoleRender("state_timer", {**render.role_vars(profiles.load("h100-train")), "state_timer_enabled": True,
                                   **(overrides or {})})
    parser = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#",))
    parser.optionxform = str
    parser.read_string(r.template("provision-state.service.j2"))
    return r, parser["Service"]


def test_the_checker_runs_as_root_without_capabilities_and_sees_no_other_process():
    """Was: no ProtectProc=, no word on why it is root."""
    _, service = _service()
    assert service["ProtectProc"] == "invisible"
    assert "User" not in service and "DynamicUser" not in service  # root: why is said in the unit
    assert service["CapabilityBoundingSet"] == "" and service["AmbientCapabilities"] == ""
    for key in ("NoNewPrivileges", "PrivateTmp", "PrivateNetwork", "ProtectKernelTunables", "ProtectKernelModules",
                "ProtectKernelLogs", "ProtectControlGroups", "RestrictSUIDSGID", "LockPersonality",
                "MemoryDenyWriteExecute", "RestrictNamespaces"):
        assert service[key] == "yes", key
    assert (service["ProtectSystem"], service["ProtectHome"]) == ("strict", "read-only")
    # what would stop it in a container, or stop nvidia-smi, is left out (the template says why)
    for key in ("PrivateDevices", "ProcSubset", "SystemCallFilter", "TemporaryFileSystem", "BindPaths",
                "BindReadOnlyPaths"):
        assert key not in service, key


@pytest.mark.parametrize("overrides", [{}, {"state_timer_textfile_dir": "/srv/textfiles",
                                            "state_timer_status_dir": "/srv/gpu-status"}])
def test_it_may_write_only_the_two_folders_the_checker_writes(tmp_path: Path, overrides: dict):
    r, service = _service(overrides)
    allowed = set(service["ReadWritePaths"].split())
    # the config the role writes names the same two files
    timer = yaml.safe_load((ROLES / "state_timer" / "tasks" / "timer.yml").read_text())
    (settings,) = [t["vars"]["state_timer_settings"] for t in timer if "state_timer_settings" in t.get("vars", {})]
    written = {r.templar.template(trust_as_template(settings[key])) for key in ("textfile", "status")}
    assert allowed == {os.path.dirname(path) for path in written} and len(allowed) == 2

    # and the checker itself writes nothing else: run it with those two files moved here
    textfile, status = tmp_path / "textfile" / "gpu_provisioner.prom", tmp_path / "status" / "provision-state.json"
    textfile.parent.mkdir()
    status.parent.mkdir()
    before = set(tmp_path.rglob("*"))
    state_metrics.run({"record": str(tmp_path / "no-record.fact"), "textfile": str(textfile), "status": str(status),
                       "nvidia_smi": False})
    assert set(tmp_path.rglob("*")) - before == {textfile, status}
    assert json.loads(status.read_text())["error"] == ""
