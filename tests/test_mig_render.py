"""The mig role as a profile renders it (issue 32): its variables, provision-mig.service's
ordering, and the boot path (provision-mig run as the unit runs it)."""

from __future__ import annotations

import configparser
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provisioner import profiles, render

from .conftest import COLLECTION, ROLES
from .ansibleplay import LOCAL, play
from .rolerender import RoleRender


def _loaded(tmp_path: Path, mig: dict, gpu: dict | None = None) -> profiles.Loaded:
    path = tmp_path / "p.yml"
    path.write_text(yaml.safe_dump({
        "extends": "h200-train", "name": "mig", "description": "t", "mig": mig,
        "hardware": {"gpu": {"count": 2, "model": "H200", "memory_gib": 140, "mig": True, **(gpu or {})}}}))
    return profiles.load(str(path))


def test_no_layout_renders_none_and_the_role_removes_its_unit():
    v = render.role_vars(profiles.load("h200-train"))
    assert v["mig_layout"] == {} and v["mig_reconfigure_in_use"] is False
    tasks = yaml.safe_load((ROLES / "mig" / "tasks" / "main.yml").read_text())
    assert tasks[0]["when"] == "mig_layout | length == 0" and tasks[0]["ansible.builtin.include_tasks"] == "remove.yml"


def test_all_is_spread_over_every_gpu_largest_first(tmp_path: Path):
    v = render.role_vars(_loaded(tmp_path, {"layout": {"all": ["1g.18gb", "3g.71gb", "2g.35gb"]}}))
    assert v["mig_layout"] == {"0": ["3g.71gb", "2g.35gb", "1g.18gb"], "1": ["3g.71gb", "2g.35gb", "1g.18gb"]}


def test_per_gpu_layouts_and_the_say_so_to_reconfigure(tmp_path: Path):
    v = render.role_vars(_loaded(tmp_path, {"layout": {1: ["7g.141gb"]}, "reconfigure_in_use": True}))
    assert v["mig_layout"] == {"1": ["7g.141gb"]} and v["mig_reconfigure_in_use"] is True


def _unit(tmp_path: Path) -> configparser.ConfigParser:
    r = RoleRender("mig", render.role_vars(_loaded(tmp_path, {"layout": {"all": ["7g.141gb"]}})))
    parser = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#",))
    parser.optionxform = str
    parser.read_string(r.template("provision-mig.service.j2"))
    return parser


def test_the_unit_runs_before_every_service_that_uses_the_gpus(tmp_path: Path):
    unit = _unit(tmp_path)
    before = unit["Unit"]["Before"].split()
    assert {"nvidia-dcgm.service", "dcgm-exporter.service", "docker.service", "containerd.service"} <= set(before)
    assert "nvidia-persistenced.service" in unit["Unit"]["After"].split()
    assert "nvidia-fabricmanager.service" in unit["Unit"]["After"].split()
    assert unit["Service"]["Type"] == "oneshot" and unit["Service"]["RemainAfterExit"] == "yes"
    assert unit["Service"]["ExecStart"] == ("/usr/bin/python3 -I -S /usr/local/lib/gpu-provisioner/provision-mig "
                                            "/etc/gpu-provisioner/mig.json")
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert unit["Unit"]["ConditionVirtualization"] == "!container"   # the lab: no GPU in a container


# A stand-in nvidia-smi (hand-made): MIG mode on, no instances yet (what a host shows after a
# reboot, when the GPU instances are gone); it appends each argv to a log.
# After -cgi it lists the two instances (rows shaped as the -lgi capture in tests/data/mig).
FAKE_SMI = """#!/bin/sh
echo "$*" >> "$LOG"
case "$*" in
  "-q -x") [ -e "$LOG.made" ] && devices='<mig_device><gpu_instance_id>1</gpu_instance_id><compute_instance_id>0</compute_instance_id></mig_device><mig_device><gpu_instance_id>2</gpu_instance_id><compute_instance_id>0</compute_instance_id></mig_device>'
           echo "<nvidia_smi_log><gpu><product_name>NVIDIA H200</product_name><mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode><mig_devices>$devices</mig_devices></gpu></nvidia_smi_log>" ;;
  "mig -lgi") [ -e "$LOG.made" ] || { echo "No GPU instances found: Not Found"; exit 6; }
              echo "|   0  MIG 3g.71gb          9        1          0:4     |"
              echo "|   0  MIG 3g.71gb          9        2          4:4     |" ;;
  *-cgi*) touch "$LOG.made" ;;
esac
"""


def test_the_boot_path_creates_the_lost_instances(tmp_path: Path):
    """provision-mig as installed (the script beside the collection's module_utils), run as the
    unit runs it, against a stand-in nvidia-smi."""
    install = tmp_path / "lib"
    code = install / "ansible_collections" / "gpu_provisioner" / "node" / "plugins" / "module_utils"
    code.mkdir(parents=True)
    shutil.copy(COLLECTION / "plugins" / "module_utils" / "mig_layout.py", code / "mig_layout.py")
    shutil.copy(ROLES / "mig" / "files" / "provision-mig", install / "provision-mig")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    config = tmp_path / "mig.json"
    config.write_text(json.dumps({"layout": {"0": ["3g.71gb", "3g.71gb"]}, "reconfigure_in_use": False}))
    log = tmp_path / "calls"
    done = subprocess.run([sys.executable, "-I", "-S", str(install / "provision-mig"), str(config)],
                          env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log)},
                          capture_output=True, text=True, timeout=60, check=False)
    calls = log.read_text().splitlines()
    assert [c for c in calls if "-cgi" in c] == ["mig -i 0 -cgi 3g.71gb,3g.71gb -C"] and "-i 0 -mig 1" not in calls
    assert done.returncode == 0, done.stdout + done.stderr
    assert [s["kind"] for s in json.loads(done.stdout)["done"]] == ["create"]


@pytest.mark.ansible
def test_the_role_on_a_host_without_a_gpu_says_so_and_applies_nothing(tmp_path: Path):
    """This machine has no GPU (and no nvidia-smi), as the lab's hosts: the role runs for real."""
    vars_ = {"mig_layout": {"0": ["7g.141gb"]}, "mig_install_dir": str(tmp_path / "lib"),
             "mig_config_dir": str(tmp_path / "etc")}
    run = play(tmp_path, "mig", [{"hosts": "all", "gather_facts": False, "vars": vars_,
                                  "roles": [{"role": "gpu_provisioner.node.mig"}]}], LOCAL)
    assert run.rc == 0, run.stdout
    [said] = run.results("Say that there is no GPU here, so no MIG layout is applied.")
    assert "no GPU present" in said["event_data"]["res"]["msg"]
    assert not run.started("Bring the GPUs to the MIG layout.")
    assert run.changed() == 0 and not (tmp_path / "etc").exists()


def test_a_failed_reset_is_reported_as_the_driver_role_reports_a_reboot():
    """The role's report task carries what the controller's reboot check reads (engine/commands.py)."""
    from provisioner.engine import commands

    tasks = yaml.safe_load((ROLES / "mig" / "tasks" / "apply.yml").read_text())
    [report] = [t for t in tasks if t.get("ansible.builtin.debug", {}).get("var") == "provisioner_reboot"]
    assert set(report["vars"]["provisioner_reboot"]) == {"required", "reason", "rebooting", "why_not"}
    assert report["when"] == "mig_applied.mig.reboot_required"
    [check] = commands._reboot_check({
        "required": True, "rebooting": "False", "why_not": "the profile does not allow reboots (reboot.allowed: false)",
        "reason": "GPU 0: MIG mode is pending; a GPU reset makes it current, but the reset failed: in use"})
    assert check.status == "fail" and "GPU 0: MIG mode is pending" in check.detail and "reboot.allowed: true" in check.detail
