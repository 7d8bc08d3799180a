"""MIG (issue 32): layouts checked against NVIDIA's tables before any host is touched, and the
host-side plan (module_utils/mig_layout.py) on captured states (tests/data/mig/SOURCES.md)."""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpu_provisioner.node.plugins.module_utils import holders, mig_layout

from provisioner.profiles import mig

from .conftest import DATA

MIG = DATA / "mig"
HOLDERS = DATA / "holders"
XML = (MIG / "a100-sxm4-80gb-mig__535.54.03__telegraf.xml").read_text()
LGI = (MIG / "nvidia-smi-mig-lgi__a100-80gb__dcgm-issue-138.txt").read_text()
H200 = mig.model_for("NVIDIA H200")


def _placements(path):
    rows = re.findall(r"Profile ID\s+(\d+) Placements?\s*: \{([\d,]+)\}:(\d+)", path.read_text())
    return {int(pid): (tuple(int(s) for s in starts.split(",")), int(size)) for pid, starts, size in rows}


def test_the_placement_data_is_what_nvidia_smi_lists():
    # data/mig.yml's placements per chip equal the -lgipp captures they cite
    assert mig.model_for("NVIDIA A100-SXM4-40GB").placements == _placements(MIG / "nvidia-smi-mig-lgipp__a100-40gb__mig-user-guide.txt")
    assert H200.placements == _placements(MIG / "nvidia-smi-mig-lgipp__h100-nvl__colfax-research.txt")


def test_the_h200_profile_ids_and_counts_are_what_nvidia_smi_lists():
    rows = re.findall(r"MIG (\S+)\s+(\d+)\s+(\d+)/(\d+)", (MIG / "nvidia-smi-mig-lgip__h200__mig-parted-issue-120.txt").read_text())
    listed = {name: (int(pid), int(total)) for name, pid, _free, total in rows}
    assert len(listed) == 6 and all(H200.profiles[name] == v for name, v in listed.items())


def test_real_layouts_fit_and_their_real_placements_are_allowed():
    a100 = mig.model_for("NVIDIA A100-SXM4-80GB")
    for gpu, instances in mig_layout.read_lgi(LGI).items():
        names = [i["profile"] for i in instances]
        assert mig.layout_error(a100, names, f"gpu {gpu}") is None
        for i in instances:   # every instance sits where NVIDIA's placements allow it
            starts, size = a100.placements[i["profile_id"]]
            assert i["start"] in starts and i["size"] == size and a100.profiles[i["profile"]][0] == i["profile_id"]
    h100 = mig.model_for("NVIDIA H100 80GB HBM3")
    listed = re.findall(r"MIG (\S+)\s+Device", (MIG / "nvidia-smi-L__h100-80gb-hbm3-mig-mixed__driver-unstated__cloud-native-docs.txt").read_text())
    assert mig.layout_error(h100, listed, "x") is None and mig.creation_order(h100, listed)[0] == "3g.40gb"


@pytest.mark.parametrize("names, message", [
    (["3g.71gb", "3g.71gb", "1g.18gb"], "cannot be placed together"),
    (["4g.71gb", "3g.71gb", "1g.18gb"], "cannot be placed together"),
    (["7g.141gb", "1g.18gb"], "cannot be placed together"),
    (["1g.18gb+me", "1g.18gb+me"], "holds at most 1"),
    (["2g.35gb"] * 4, "holds at most 3"),
    (["3g.40gb"], "is not a MIG profile of the H200 141GB"),
])
def test_impossible_layouts_are_refused_naming_the_valid_profiles(names, message):
    error = mig.layout_error(H200, names, "mig.layout.all")
    assert message in error and "1g.18gb (up to 7)" in error and error.startswith("mig.layout.all")


@pytest.mark.parametrize("names", [["7g.141gb"], ["1g.18gb"] * 7, ["4g.71gb", "3g.71gb"], ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"],
                                   ["2g.35gb"] * 3 + ["1g.18gb"], ["1g.35gb"] * 4, ["1g.18gb+me", "1g.18gb", "3g.71gb", "2g.35gb"]])
def test_possible_layouts_are_accepted(names):
    assert mig.layout_error(H200, names, "x") is None


def test_a_model_without_a_table_has_none():
    assert mig.model_for("NVIDIA B200") is None and mig.model_for("NVIDIA L40S") is None


# --- the plan, on captured states ----------------------------------------------------------

def _captured() -> dict:
    # The telegraf XML (GPU 0: MIG on, GPU instances 3-6 with compute instance 0) with the -lgi
    # capture of GPU 0 (another A100 80GB host: instances 9, 10, 3, 2): the state reader joins them.
    return mig_layout.state(XML, LGI)


def test_the_state_is_read_from_the_captures():
    now = _captured()
    assert list(now) == [0]
    gpu = now[0]
    assert (gpu["name"], gpu["current"], gpu["pending"]) == ("NVIDIA A100-SXM4-80GB", True, True)
    assert mig_layout.layout_of(gpu) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    # instances 3 and 2 of the -lgi capture have compute instances in the XML (GPU instances 3-6)
    assert {i["gi"]: i["has_ci"] for i in gpu["instances"]} == {9: False, 10: False, 3: True, 2: False}


def _held(name: str, **extra) -> list[dict]:
    """A captured holder state (tests/data/holders), classified by the host-side detection."""
    return holders.read(fuser=(HOLDERS / name).read_text(), **extra)


def test_a_matching_layout_needs_only_the_missing_compute_instances():
    # creating compute instances disturbs nobody: the display and DCGM of the DGX Station stay
    p = mig_layout.plan({0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}, _captured(), _held("dgx-station-dcgm.fuser.txt"))
    assert [s["argv"] for s in p["steps"]] == [["nvidia-smi", "mig", "-i", "0", "-gi", "9,10,2", "-cci"]]
    assert p["blocked"] == []


def test_a_matching_layout_with_compute_instances_has_no_steps():
    now = _captured()
    for i in now[0]["instances"]:
        i["has_ci"] = True
    assert mig_layout.plan({0: ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}, now, []) == {"steps": [], "blocked": []}


def test_persistenced_stays_while_the_layout_changes():
    p = mig_layout.plan({0: ["7g.80gb"]}, _captured(), _held("persistenced-only.fuser.txt",
                        compute_apps=(HOLDERS / "persistenced-only.compute-apps.csv").read_text()))
    assert [(s["kind"], s["argv"][-3:]) for s in p["steps"]] == [
        ("destroy", ["-i", "0", "-dci"]), ("destroy", ["-i", "0", "-dgi"]), ("create", ["-cgi", "7g.80gb", "-C"])]
    assert p["blocked"] == []


def test_fabric_manager_stays_on_an_nvswitch_node():
    # hand-made from the H200 capture: fabric manager alone (tests/data/holders/SOURCES.md)
    p = mig_layout.plan({0: ["7g.80gb"]}, _captured(), _held("handmade-fabricmanager-only.fuser.txt"))
    assert [s["kind"] for s in p["steps"]] == ["destroy", "destroy", "create"] and p["blocked"] == []


def test_vllm_on_the_gpus_blocks_the_change_and_fabric_manager_is_not_the_reason():
    held = _held("h200-nvswitch-fabricmanager-vllm.fuser.txt")
    p = mig_layout.plan({0: ["7g.80gb"]}, _captured(), held)
    assert p["steps"] == [] and "pid 1116621, process" in p["blocked"][-1] and "pid 1117159" in p["blocked"][-1]
    assert "nv-fabricmanage" not in p["blocked"][-1] and "reconfigure_in_use" in p["blocked"][-1]
    # with the profile's say-so it goes ahead (a reset the processes keep from working reboots); nothing is stopped
    allowed = mig_layout.plan({0: ["7g.80gb"]}, _captured(), held, reconfigure_in_use=True)
    assert [s["kind"] for s in allowed["steps"]] == ["destroy", "destroy", "create"]


def test_a_cuda_process_blocks_every_disruptive_step():
    held = _held("cuda-python.fuser.txt", compute_apps="45208, python\n")
    p = mig_layout.plan({0: ["7g.80gb"]}, _captured(), held)
    assert p["steps"] == [] and "python (pid 45208, cuda)" in p["blocked"][-1]


def test_dcgm_is_stopped_and_started_around_the_change_persistenced_stays():
    held = _held("dgx-station-dcgm.fuser.txt")
    blocked = mig_layout.plan({0: ["7g.80gb"]}, _captured(), held)
    assert blocked["steps"] == [] and "Xorg (pid 3392, process)" in blocked["blocked"][-1]
    assert "nv-hostengine" not in blocked["blocked"][-1] and "nvidia-persiste" not in blocked["blocked"][-1]
    p = mig_layout.plan({0: ["7g.80gb"]}, _captured(), held, reconfigure_in_use=True)
    assert [(s["kind"], s["argv"][-3:]) for s in p["steps"]] == [
        ("stop", ["systemctl", "stop", "nvidia-dcgm.service"]),
        ("destroy", ["-i", "0", "-dci"]), ("destroy", ["-i", "0", "-dgi"]),
        ("create", ["-cgi", "7g.80gb", "-C"]),
        ("start", ["systemctl", "start", "nvidia-dcgm.service"])]


def test_the_exporter_is_stopped_under_the_unit_its_cgroup_names():
    # hand-made: one fuser line and cgroup (no public capture of the exporter on /dev/nvidia*)
    held = holders.read(fuser="/dev/nvidia0:        root       78 F.... dcgm-exporter\n",
                        cgroups={"78": "0::/system.slice/nvidia-dcgm-exporter.service\n"})
    p = mig_layout.plan({0: ["7g.80gb"]}, _captured(), held)
    assert [s["argv"] for s in p["steps"] if s["kind"] in ("stop", "start")] == [
        ["systemctl", "stop", "nvidia-dcgm-exporter.service"], ["systemctl", "start", "nvidia-dcgm-exporter.service"]]


def test_an_instance_in_use_is_never_destroyed_without_the_profiles_say_so():
    now = _captured()
    now[0]["instances"][2]["processes"] = 1   # hand-made: a process on GPU instance 3
    p = mig_layout.plan({0: ["7g.80gb"]}, now, [])
    assert p["steps"] == [] and "GPU instance(s) 3 (2g.20gb) are in use" in p["blocked"][0]
    assert "mig.reconfigure_in_use: true" in p["blocked"][0]
    allowed = mig_layout.plan({0: ["7g.80gb"]}, now, [], reconfigure_in_use=True)
    assert [s["kind"] for s in allowed["steps"]] == ["destroy", "destroy", "create"]


def _off(pending: bool) -> dict:
    # hand-made: no public -q -x capture of an A100/H100/H200 with MIG off was found
    return {0: {"name": "NVIDIA H200", "current": False, "pending": pending, "instances": [], "processes": 0}}


def test_mig_off_is_enabled_then_reset_then_created():
    want = {0: ["3g.71gb", "3g.71gb"]}
    assert [s["argv"] for s in mig_layout.plan(want, _off(False), [])["steps"]] == [["nvidia-smi", "-i", "0", "-mig", "1"]]
    assert [s["argv"] for s in mig_layout.plan(want, _off(True), [])["steps"]] == [["nvidia-smi", "-i", "0", "-r"]]


def test_a_gpu_without_mig_or_missing_is_reported_not_touched():
    now = _off(False)
    now[0]["current"] = None
    p = mig_layout.plan({0: ["7g.141gb"], 1: ["7g.141gb"]}, now, [])
    assert p["steps"] == [] and "does not support MIG" in p["blocked"][0] and "GPU 1: not found" in p["blocked"][1]


class _Host:
    """A fake nvidia-smi for apply(): it answers from a state it changes as the steps run.
    Hand-made; what it prints is the captured XML and -lgi shapes."""

    def __init__(self, reset_ok: bool = True):
        self.mode, self.pending, self.instances, self.reset_ok, self.ran = False, False, [], reset_ok, []

    def __call__(self, argv):
        self.ran.append(argv)
        if argv[1:] == ["-q", "-x"]:
            mode = {True: "Enabled", False: "Disabled"}
            devices = "".join(f"<mig_device><gpu_instance_id>{i + 1}</gpu_instance_id><compute_instance_id>0"
                              "</compute_instance_id></mig_device>" for i in range(len(self.instances)))
            return 0, (f"<nvidia_smi_log><gpu><product_name>NVIDIA H200</product_name><mig_mode><current_mig>"
                       f"{mode[self.mode]}</current_mig><pending_mig>{mode[self.pending]}</pending_mig></mig_mode>"
                       f"<mig_devices>{devices}</mig_devices></gpu></nvidia_smi_log>"), ""
        if argv[1:] == ["mig", "-lgi"]:
            return 0, "\n".join(f"|   0  MIG {n}         9        {i + 1}          {4 * i}:4     |"
                                for i, n in enumerate(self.instances)), ""
        if "-mig" in argv:
            self.pending = True
        elif "-r" in argv:
            if not self.reset_ok:
                return 1, "", "Unable to reset this GPU because it's being used by some other process"
            self.mode = self.pending
        elif "-cgi" in argv:
            self.instances = argv[argv.index("-cgi") + 1].split(",")
        return 0, "", ""


def test_apply_walks_a_fresh_gpu_to_the_layout_and_a_second_run_changes_nothing():
    host = _Host()
    first = mig_layout.apply({0: ["3g.71gb", "3g.71gb"]}, [], run=host)
    assert first["changed"] and not first["blocked"] and not first["reboot_required"]
    assert [s["kind"] for s in first["done"]] == ["enable", "reset", "create"]
    again = mig_layout.apply({0: ["3g.71gb", "3g.71gb"]}, [], run=host)
    assert not again["changed"] and again["done"] == []


def test_apply_says_a_reboot_is_needed_when_the_reset_fails():
    result = mig_layout.apply({0: ["7g.141gb"]}, [], run=_Host(reset_ok=False))
    assert result["reboot_required"] and "the reset failed" in result["why_reboot"]


def test_check_mode_plans_and_runs_nothing_that_changes():
    host = _Host()
    result = mig_layout.apply({0: ["7g.141gb"]}, [], check=True, run=host)
    assert result["changed"] and result["planned"][0]["kind"] == "enable"
    assert all(a[1:] in (["-q", "-x"], ["mig", "-lgi"]) for a in host.ran)


# --- verify and check: the layout a host reports against the profile -------------------------

def _profile(layout: dict, model: str = "A100-SXM4-80GB", count: int = 1):
    from provisioner.profiles.models import Profile
    from provisioner import profiles

    data = profiles.load("a100-train").profile.model_dump()
    data["hardware"]["gpu"].update(model=model, count=count, mig=True)
    data.update(name="mig-test", mig={"layout": layout})
    return Profile.model_validate(data)


def test_verify_passes_the_captured_layout_and_fails_another():
    from provisioner.judge import mig as judge

    now = {str(k): v for k, v in _captured().items()}          # JSON keys, as the probe sends them
    for i in now["0"]["instances"]:
        i["has_ci"] = True
    [ok] = judge.judge(_profile({"all": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}), now)
    assert ok.status == "pass"
    [bad] = judge.judge(_profile({"all": ["7g.80gb"]}), now)
    assert bad.status == "fail" and "instances 1g.10gb x2, 2g.20gb, 3g.40gb; the profile: 7g.80gb" in bad.detail


def test_check_finds_a_changed_layout_and_mig_off_after_a_reboot_as_drift():
    from provisioner.engine import drift

    profile = _profile({"all": ["7g.80gb"]})
    assert drift.mig_drift({"mig": {str(k): v for k, v in _captured().items()}}, profile) == [
        ("MIG layout GPU 0", "instances 1g.10gb x2, 2g.20gb, 3g.40gb; the profile: 7g.80gb")]
    off = {"0": dict(_off(False)[0], name="NVIDIA A100-SXM4-80GB")}   # hand-made, as _off
    assert drift.mig_drift({"mig": off}, profile) == [("MIG layout GPU 0", "MIG mode is off; the profile: 7g.80gb")]
    assert drift.mig_drift({"mig": "nvidia-smi -q -x failed (rc 9)"}, profile)[0][1].startswith("could not be read")
    assert drift.mig_drift({}, _profile({})) == []   # no layout declared: nothing to compare


def test_mig_lgi_failing_reads_as_no_instances_only_where_the_xml_has_no_mig_device():
    # the captured XML has 4 MIG devices: a failing -lgi cannot mean "no instances" there
    assert "failed (rc 6) although MIG devices exist" in mig_layout.read_state(XML, 6, "")
    # hand-made: the same GPU after a reboot, MIG on and no MIG device (the element emptied)
    bare = re.sub(r"<mig_devices>.*</mig_devices>", "<mig_devices></mig_devices>", XML, flags=re.S)
    now = mig_layout.read_state(bare, 6, "")
    assert now[0]["current"] is True and now[0]["instances"] == []
    assert mig_layout.read_state("<nvidia_smi_log", 0, "").startswith("nvidia-smi -q -x printed no readable XML")


@pytest.mark.parametrize("layout", [{"0": ["7g.80gb; reboot"]}, {"0": ["-r"]}, {"x": ["7g.80gb"]}, {"0": "7g.80gb"},
                                    {"0": [["7g.80gb"]]}])
def test_the_host_side_refuses_a_layout_that_is_not_profile_names(layout):
    # each name becomes an nvidia-smi argument: checked again on the host, whatever the inventory says
    with pytest.raises(ValueError, match="is not a GPU index with a list of MIG profile names"):
        mig_layout.layout_from(layout)
