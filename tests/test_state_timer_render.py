"""The profile's `monitoring` section as the state_timer role's variables, and the bundle,
which always installs provision-state.timer."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.render import bundle
from provisioner import profiles, render
from provisioner.render.ansible_data import load_unsafe
from provisioner.errors import ProvisionError

from .conftest import ROLES


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
