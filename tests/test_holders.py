"""Holders of /dev/nvidia* read and classified by the host-side detection (module_utils/holders.py)
from captured `fuser -v` / `lsof` outputs (tests/data/holders, SOURCES.md there), read back by the
controller (judge/holders.py) as the probe reports them, and the reboot-free driver activation
decision (issue 35). The MIG change's use of the same holders is in tests/test_mig.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpu_provisioner.node.plugins.module_utils import holders as detect

from provisioner.judge import holders

from .conftest import DATA, REPO

HOLDERS = DATA / "holders"


def _host(**texts) -> list[holders.Holder]:
    """What the host classifies (module_utils/holders.read), as the controller reads it back."""
    return holders.from_probe({"holders": detect.read(**texts)})


def _read(name: str, **extra) -> list[holders.Holder]:
    return _host(fuser=(HOLDERS / name).read_text(), **extra)


def _kinds(found: list[holders.Holder]) -> dict[int, str]:
    return {h.pid: h.kind for h in found}


def test_dgx_station_dcgm_persistenced_and_display():
    found = _read("dgx-station-dcgm.fuser.txt")
    assert _kinds(found) == {2180: "dcgm", 2284: "process", 2890: "persistenced", 3392: "process", 3461: "process"}
    dcgm = found[0]
    assert dcgm.command == "nv-hostengine" and dcgm.user == "root"
    assert dcgm.devices == ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3",
                            "/dev/nvidiactl"]
    assert "/dev/nvidia-modeset" in found[2].devices  # persistenced, whose user name is long


def test_persistenced_only_with_no_compute_application():
    found = _read("persistenced-only.fuser.txt",
                  compute_apps=(HOLDERS / "persistenced-only.compute-apps.csv").read_text())
    assert [(h.pid, h.kind, h.devices) for h in found] == [
        (949665, "persistenced", ["/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia3"])]


def test_a_cuda_process_is_cuda_where_nvidia_smi_lists_it_and_a_process_otherwise():
    text = (HOLDERS / "cuda-python.fuser.txt").read_text()
    assert _kinds(_host(fuser=text)) == {45208: "process"}
    listed = _host(fuser=text, compute_apps="45208, python\n")
    assert _kinds(listed) == {45208: "cuda"} and len(listed[0].devices) == 8


def test_fabric_manager_on_nvswitch_devices_named_on_their_own_line():
    found = _read("h200-nvswitch-fabricmanager-vllm.fuser.txt")
    assert _kinds(found) == {4334: "fabric_manager", 1116621: "process", 1117159: "process"}
    fm = next(h for h in found if h.pid == 4334)
    assert fm.devices == ["/dev/nvidia-nvlink"] + [f"/dev/nvidia-nvswitch{i}" for i in range(4)]


def test_zombie_page_persistenced_and_python_with_a_short_access_field():
    found = _read("persistenced-and-python.fuser.txt")
    assert _kinds(found) == {1383: "persistenced", 2934164: "process", 3279314: "process"}


def test_lsof_output():
    found = _host(lsof=(HOLDERS / "xorg-compiz.lsof.txt").read_text())
    assert [(h.pid, h.command, h.user, h.devices) for h in found] == [
        (864, "Xorg", "root", ["/dev/nvidia0"]), (2193, "compiz", "m1", ["/dev/nvidia0"])]


def test_the_unit_of_a_holder_names_its_kind_whatever_its_process_name():
    found = _host(fuser="/dev/nvidia0:        root       77 F.... renamed\n",
                  cgroups={"77": "0::/system.slice/nvidia-dcgm.service\n"})
    assert (found[0].unit, found[0].kind, found[0].service_unit) == ("nvidia-dcgm.service", "dcgm", "nvidia-dcgm.service")
    packaged = _host(fuser="/dev/nvidia0:        root       78 F.... dcgm-exporter\n",
                     cgroups={"78": "0::/system.slice/nvidia-dcgm-exporter.service\n"})
    assert (packaged[0].kind, packaged[0].service_unit) == ("dcgm_exporter", "nvidia-dcgm-exporter.service")


def test_untrusted_text_is_data():
    """Noise, control characters, absurd fields and a lying unit: skipped or kept as inert text."""
    text = ("Cannot stat file /proc/1/fd/0: Permission denied\n"
            "/dev/nvidia0:        root       12 F.... \x1b[31mevil\n"
            "                     root       notapid F.... x\n"
            "                     root       13 $(reboot) y\n"
            "garbage line\n")
    found = _host(fuser=text, compute_apps="x, y\n99999999999, z\n",
                  cgroups={"12": "0::/system.slice/../../x y.service\n"})
    assert [(h.pid, h.command, h.unit) for h in found] == [(12, "?[31mevil", "")]
    assert holders.from_probe("not a dict") == [] and holders.from_probe({"holders": 5}) == []


def test_what_the_host_reports_is_checked_again_on_the_controller():
    """Hand-made reports: a holder that is not one is skipped; an unknown kind is a process that
    blocks; a service without a unit to stop is not stopped blindly."""
    reported = {"holders": [
        "x", {"pid": "12"}, {"pid": True}, {"pid": -1},
        {"pid": 5, "command": "\x1b[31mevil", "kind": "root", "unit": "$(reboot).service", "devices": ["/dev/nvidia0", 7]},
        {"pid": 6, "command": "nv-hostengine", "kind": "dcgm", "service_unit": "a b.service"}]}
    found = holders.from_probe(reported)
    assert [(h.pid, h.command, h.kind, h.unit, h.devices, h.service_unit) for h in found] == [
        (5, "?[31mevil", "process", "", ["/dev/nvidia0"], ""), (6, "nv-hostengine", "dcgm", "", [], "")]
    # A host that claims `load` for holders it cannot stop is not believed.
    decision = holders.activation(dict(reported, activation={"load": True, "why": "x", "stop_units": []}), found)
    assert not decision.load and "does not match the holders" in decision.why


def test_the_driver_role_stops_every_unit_the_detection_knows():
    """One list of GPU service units: the driver role's (stopped before its packages move) is the
    detection's table and its aliases."""
    defaults = yaml.safe_load((REPO / "ansible_collections/gpu_provisioner/node/roles/nvidia_driver/defaults/main.yml")
                              .read_text())
    known = {unit for _kind, unit, _names in detect.SERVICES} | set(detect.UNIT_ALIASES)
    assert set(defaults["nvidia_driver_gpu_holder_units"]) == known
    assert set(detect.KINDS) == set(holders.KINDS)


# ----------------------------------------------------------------- the activation decision
# Taken on the host (module_utils/holders.activation) on what the detection classified from the
# captures, and read back by the controller as `provision plan` reads it (judge/holders.activation).

def _decide(name: str = "", *, compute_apps: str = "", modules: dict | None = None) -> holders.Activation:
    found = detect.read(fuser=(HOLDERS / name).read_text() if name else "", compute_apps=compute_apps)
    reported = {"holders": found, "activation": detect.activation(found, modules or {})}
    return holders.activation(reported, holders.from_probe(reported))


def _lsmod(name: str) -> dict[str, str]:
    """A captured lsmod's reference counts ("Used by"), as /sys/module/NAME/refcnt gives them."""
    lines = [line.split() for line in (HOLDERS / name).read_text().splitlines()]
    return {parts[0]: parts[2] for parts in lines if len(parts) >= 3 and parts[0] in detect.MODULES}


def test_nothing_holds_the_gpus_load_without_a_reboot():
    decision = _decide("handmade-none.fuser.txt")
    assert decision.load and decision.stop_units == () and "nothing holds" in decision.why


def test_persistenced_only_is_stopped_for_the_swap():
    decision = _decide("persistenced-only.fuser.txt")
    assert decision.load and decision.stop_units == ("nvidia-persistenced.service",)


def test_a_cuda_process_keeps_the_reboot_and_is_named():
    decision = _decide("cuda-python.fuser.txt", compute_apps="45208, python\n")
    assert not decision.load
    assert "python (pid 45208) holds /dev/nvidia0" in decision.why and "drain the host" in decision.why


@pytest.mark.parametrize("name", ["handmade-fabricmanager-only.fuser.txt", "h200-nvswitch-fabricmanager-vllm.fuser.txt"])
def test_fabric_manager_on_nvswitch_keeps_the_reboot(name: str):
    decision = _decide(name)
    assert not decision.load
    assert "nv-fabricmanage (pid 4334) holds /dev/nvidia-nvlink" in decision.why and "NVSwitch" in decision.why


def test_dcgm_station_is_blocked_by_the_display_not_by_dcgm():
    decision = _decide("dgx-station-dcgm.fuser.txt")
    assert not decision.load and "Xorg (pid 3392)" in decision.why and "nv-hostengine" not in decision.why


def test_an_old_module_in_use_with_no_holder_keeps_the_reboot():
    """The captured lsmod of a node whose driver container could not unload the module
    (nvidia: 17 references, one from nvidia_modeset): nothing to stop, still in use."""
    modules = _lsmod("driver-in-use.lsmod.txt")
    assert modules == {"nvidia_drm": "0", "nvidia_modeset": "1", "nvidia": "17"}
    assert detect.in_use(modules) == "nvidia has 17 reference(s), 1 from the NVIDIA modules loaded on it"
    decision = _decide("handmade-none.fuser.txt", modules=modules)
    assert not decision.load and "in use (nvidia has 17" in decision.why and "reboot" in decision.why
    # The same modules with only their own references: unloadable.
    assert detect.in_use(dict(modules, nvidia="1")) == ""


def test_nouveau_on_the_gpus_keeps_the_reboot():
    """Hand-made: nouveau loaded (a first install, before the blacklist took effect at a boot)."""
    decision = _decide("handmade-none.fuser.txt", modules={"nouveau": "0"})
    assert not decision.load and "nouveau" in decision.why


def test_a_console_on_nvidia_drm_keeps_the_reboot():
    decision = _decide("handmade-none.fuser.txt", modules={"nvidia": "3", "nvidia_modeset": "1", "nvidia_drm": "2",
                                                           "nvidia_uvm": "0"})
    assert not decision.load and "nvidia_drm has 2" in decision.why


def test_a_host_without_a_decision_is_not_swapped():
    assert not holders.activation({"holders": []}, []).load
    assert not holders.activation({"activation": {"load": "yes", "why": "\x1b[2J", "stop_units": []}}, []).load


def test_the_host_side_reader_runs_on_this_machine():
    """module_utils/holders.collect on a machine without NVIDIA devices: no device, nothing run."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "from ansible_collections.gpu_provisioner.node.plugins.module_utils import holders; "
            "print(json.dumps(holders.collect(5)))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, check=True).stdout
    assert '"devices": []' in out and '"fuser": null' in out and '"holders": []' in out
