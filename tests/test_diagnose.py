"""provision diagnose off the hosts: the readers on real captures (tests/data/diagnose/,
SOURCES.md there), the findings the judge draws from them, redaction, the collection
module's bounds (run for real here), the command plan and --dry-run."""

from __future__ import annotations

import shlex
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import profiles
from provisioner.cli import app
from provisioner.engine import diagnose as engine
from provisioner.judge import diagnose as judge
from provisioner.parsers import dmon, ibstat, kernel_log
from provisioner.reports import diagnose as report

from .conftest import REPO, load_module

CAPTURES = REPO / "tests" / "data" / "diagnose"
LAB = profiles.load("debian12-lab").profile
H100 = profiles.load("h100-train").profile  # declares InfiniBand and 8 GPUs


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def cmd(stdout: str = "", rc: int = 0, argv=("x",), **extra) -> dict:
    """One command's result in the shape diagnose_collect returns."""
    return {"argv": list(argv), "rc": rc, "stdout": stdout, "stderr": "", "timed_out": False, "missing": False,
            "skipped": "", "cut": False, "lines": len(stdout.splitlines()), **extra}


# --- readers on real captures ---------------------------------------------------------------

def test_ibstat_reads_eight_ndr_ports_and_a_roce_bond_all_active():
    ports = ibstat.read_ibstat(capture("ibstat__8x-ndr400__all-active__gpud.txt"))
    assert len(ports) == 9 and all(p.up for p in ports)
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8 and {p.rate_gbps for p in ib} == {400.0} and {p.ca_type for p in ib} == {"MT4129"}
    bond = ports[-1]
    assert (bond.ca, bond.port, bond.link_layer, bond.rate_gbps) == ("mlx5_bond_0", 1, "Ethernet", 200.0)


def test_ibstat_reads_tab_indented_output_with_ports_down():
    ports = ibstat.read_ibstat(capture("ibstat__ndr400-and-eth__some-down__gpud.txt"))
    assert len(ports) == 12
    down = [p.name for p in ports if not p.up]
    assert down == ["mlx5_2 port 1", "mlx5_7 port 1", "mlx5_8 port 1"]
    assert {(p.state, p.physical_state, p.link_layer) for p in ports if not p.up} == {("Down", "Disabled", "Ethernet")}
    assert [p.firmware for p in ports][:2] == ["28.39.1002", "22.38.1002"]


def test_ibstat_refuses_text_that_is_not_ibstat():
    with pytest.raises(ibstat.IbstatError, match="not ibstat output"):
        ibstat.read_ibstat(capture("dmon__1gpu__load-ramp__morpheus-abp-nvsmi.txt"))
    assert ibstat.read_ibstat("") == []


def test_dmon_reads_columns_by_its_header_and_dashes_as_missing():
    d = dmon.read_dmon(capture("dmon__1gpu__load-ramp__morpheus-abp-nvsmi.txt"))
    assert d.columns == ["gpu", "pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "mclk", "pclk"]
    assert d.units[:3] == ["Idx", "W", "C"] and d.gpus == [0] and len(d.samples) == 9
    assert d.peak("pwr") == 281 and d.peak("sm") == 99 and d.peak("gtemp") == 57 and d.peak("mtemp") is None
    assert d.samples[0].values["pclk"] == 1350


def test_dmon_refuses_rows_that_do_not_fit_the_header():
    with pytest.raises(dmon.DmonError, match="a dmon row before its header"):
        dmon.read_dmon(capture("ibstat__8x-ndr400__all-active__gpud.txt"))
    with pytest.raises(dmon.DmonError, match="4 values for 10 columns"):
        dmon.read_dmon(capture("dmon__1gpu__load-ramp__morpheus-abp-nvsmi.txt") + "\n    0 1 2 3\n")


def test_kernel_log_reads_dmesg_T_timestamps_of_a_gsp_timeout():
    events = kernel_log.read_xids(capture("dmesg-T__xid-119-gsp-timeout__gpud.txt"))
    assert [e.xid for e in events] == [119] * 5 and {e.pci for e in events} == {"0000:9b:00"}
    assert events[0].when == "[Sun Feb 23 16:24:18 2025]" and "GSP" in events[0].message


# --- findings from what a host returned -----------------------------------------------------

def test_xids_in_the_kernel_log_are_a_fault_with_their_lines_and_the_catalog_action():
    text = capture("dmesg-T__xid-119-gsp-timeout__gpud.txt")
    host = judge.diagnose(H100, "gpu1", "ok", {"recorded": True}, {"commands": {"kernel_log": cmd(text)}})
    xid = [f for f in host.findings if "Xid" in f.title]
    assert len(xid) == 1 and xid[0].severity == "fault"
    assert all("NVRM: Xid (PCI:0000:9b:00): 119" in line for line in xid[0].evidence) and len(xid[0].evidence) == 5
    assert "reset the GPU" in xid[0].fix and "GSP RPC Timeout" in xid[0].fix


def test_infiniband_ports_are_judged_only_on_the_infiniband_link_layer():
    down = capture("ibstat__ndr400-and-eth__some-down__gpud.txt")
    host = judge.diagnose(H100, "gpu1", "ok", {"recorded": True}, {"commands": {"ibstat": cmd(down)}})
    assert not [f for f in host.findings if "InfiniBand" in f.title]  # the 3 ports down are Ethernet (RoCE)
    one_down = down.replace("State: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tBase lid: 75",
                            "State: Down\n\t\tPhysical state: Polling\n\t\tRate: 400\n\t\tBase lid: 75", 1)
    host = judge.diagnose(H100, "gpu1", "ok", {"recorded": True}, {"commands": {"ibstat": cmd(one_down)}})
    ib = [f for f in host.findings if "InfiniBand" in f.title]
    assert [f.title for f in ib] == ["InfiniBand mlx5_0 port 1 is Down/Polling"] and ib[0].severity == "fault"


def test_a_declared_infiniband_without_ibstat_is_a_fault_and_an_undeclared_one_is_not_run():
    missing = cmd(rc=127, argv=("ibstat",), missing=True)
    host = judge.diagnose(H100, "gpu1", "ok", {"recorded": True}, {"commands": {"ibstat": missing}})
    assert any(f.severity == "fault" and "declares InfiniBand" in f.title for f in host.findings)
    assert "ibstat: not installed on this host" in host.not_collected
    skipped = cmd(rc=-1, argv=("ibstat",), skipped="/sys/class/infiniband does not exist")
    lab = judge.diagnose(LAB, "lab1", "ok", {"recorded": True}, {"commands": {"ibstat": skipped}})
    assert not lab.faults and "ibstat: not run (/sys/class/infiniband does not exist)" in lab.not_collected


def test_a_removed_hold_and_a_disabled_unit_from_the_record_lead_with_evidence_and_fix():
    state = {"recorded": True, "differences": [
        {"item": "hold removed: nvidia-kernel-dkms", "recorded": "held", "now": "not held"},
        {"item": "unit nvidia-persistenced.service enabled", "recorded": "enabled", "now": "disabled"}]}
    collected = {"commands": {
        "packages": cmd("ii nvidia-kernel-dkms 535.309.01-0+deb12u1\nun libcudnn8 <none>\n", rc=1),
        "holds": cmd("nvidia-smi\n"),
        "unit_states": cmd("Id=nvidia-persistenced.service\nLoadState=loaded\nActiveState=inactive\n"
                           "UnitFileState=disabled\n"),
        "nvidia_smi_dmon": cmd(capture("dmon__1gpu__load-ramp__morpheus-abp-nvsmi.txt"))}}
    host = judge.diagnose(LAB, "lab1", "ok", state, collected)
    assert [f.severity for f in host.findings][:2] == ["fault", "fault"]
    hold, unit = host.findings[:2]
    assert "nvidia-kernel-dkms is no longer held" in hold.title and hold.fix.startswith("apt-mark hold nvidia-kernel-dkms")
    assert "dpkg: ii nvidia-kernel-dkms 535.309.01-0+deb12u1" in hold.evidence
    assert "apt-mark showhold: nvidia-kernel-dkms is not listed" in hold.evidence
    assert unit.title == "unit nvidia-persistenced.service was disabled since the last converge"
    assert "systemctl enable --now nvidia-persistenced.service" in unit.fix
    assert any(f.title.startswith("dmon: 9 samples") and "GPU 0: pwr max 281" in f.evidence[0] for f in host.findings)
    assert not any("dpkg-query" in why for why in host.not_collected)  # exit 1 = a pattern matched nothing


def test_a_gpu_profile_on_a_host_whose_nvidia_smi_fails_is_a_fault_a_lab_profile_says_why_not_collected():
    no_driver = cmd("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                    "the latest NVIDIA driver is installed and running.\n", rc=9, argv=("nvidia-smi", "-q"))
    collected = {"commands": {"nvidia_smi_q": no_driver, "virtualization": cmd("podman\n")}}
    gpu = judge.diagnose(H100, "gpu1", "ok", {"recorded": True}, collected)
    assert any(f.severity == "fault" and f.title.startswith("nvidia-smi fails: no GPU present") for f in gpu.findings)
    lab = judge.diagnose(LAB, "lab1", "ok", {"recorded": True}, collected)
    assert not lab.faults
    assert ("nvidia-smi -q: no GPU to read: nvidia-smi cannot talk to a loaded driver (a container: it has no GPU "
            "device and shares its host's kernel)") in lab.not_collected


def test_an_unreachable_host_is_a_fault_naming_why():
    host = judge.diagnose(LAB, "lab1", "unreachable", {}, {}, ["unreachable: ssh: connect to host port 22: refused"])
    assert host.faults and "refused" in host.faults[0].evidence[0]


# --- redaction, the tarball, the plan ------------------------------------------------------

def test_redact_hides_secret_assignments_and_private_keys_and_keeps_apt_pins():
    text = ("dcgm-exporter[12]: started with token=abc123 api_key: 'k-1' password=\"p w\"\n"
            "Package: nvidia-*\nPin: version 535.309.01-*\nPin-Priority: 1001\n"
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\nafter\n")
    out = report.redact(text)
    for secret in ("abc123", "k-1", "p w", "b3BlbnNzaC1rZXk"):
        assert secret not in out
    assert "token=[redacted by provision]" in out and "Pin: version 535.309.01-*" in out and "Pin-Priority: 1001" in out
    assert out.endswith("after\n")



def test_redact_finds_secrets_in_values_under_ordinary_names():
    # issue 28, item 15: a URL's password, a token and a webhook URL, none under a secret's name
    text = ("apt: fetching https://mirror:hunter2@apt.example/ubuntu\n"
            "repo origin ghp_0123456789abcdefghij0123456789abcdef\n"
            "notify=https://hooks.slack.com/services/T0/B0/wXyZ123\n")
    out = report.redact(text)
    for secret in ("hunter2", "ghp_0123456789", "wXyZ123"):
        assert secret not in out
    assert "https://[redacted by provision]@apt.example/ubuntu" in out


def test_tarball_holds_the_summary_and_one_file_per_command_redacted(tmp_path: Path):
    collected = {"commands": {"journal_units": cmd("unit said secret=hunter2\n", argv=("journalctl", "-b"))},
                 "files": {"/etc/apt/preferences.d/x": "Pin: version 1\n"}}
    host = judge.diagnose(LAB, "lab1", "ok", {"recorded": True}, collected)
    summary = report.summary_markdown([host], profile="debian12-lab", run_dir=tmp_path)
    path = report.tarball(tmp_path / "d.tar.gz", [host], {"lab1": collected}, {"lab1": {}}, summary,
                          commands=["journal_units"], files=engine.FILES)
    with tarfile.open(path) as tar:
        names = tar.getnames()
        journal = tar.extractfile("diagnose/lab1/journal_units.txt").read().decode()
    assert {"diagnose/summary.md", "diagnose/lab1/findings.json", "diagnose/lab1/journal_units.txt",
            "diagnose/lab1/files/etc__apt__preferences.d__x"} <= set(names)
    assert journal.startswith("$ journalctl -b\n# rc 0\n") and "hunter2" not in journal
    assert path.stat().st_mode & 0o777 == 0o600
    from provisioner.errors import ProvisionError

    with pytest.raises(ProvisionError, match="not a regular file"):  # outputs.py's rules: never a device
        report.tarball(Path("/dev/null"), [host], {}, {}, summary, commands=[], files=[])
    (tmp_path / "link.tar.gz").symlink_to(path)
    with pytest.raises(ProvisionError, match="--force"):  # nor through a symbolic link without --force
        report.tarball(tmp_path / "link.tar.gz", [host], {}, {}, summary, commands=[], files=[])


def test_the_plan_has_no_shell_and_no_profile_string_and_ib_only_where_present_unless_declared():
    for profile in (LAB, H100):
        for c in engine.plan(profile):
            assert c.argv[0] not in ("sh", "bash") and c.timeout <= 60 and c.max_bytes <= 524_288
    lab = {c.name: c for c in engine.plan(LAB)}
    h100 = {c.name: c for c in engine.plan(H100)}
    assert lab["ibstat"].only_if_path == "/sys/class/infiniband" and h100["ibstat"].only_if_path == ""
    assert lab["nvidia_smi_dmon"].argv == ("nvidia-smi", "dmon", "-s", "pcu", "-c", "5", "-d", "1")
    assert engine.plan(LAB) == engine.plan(profiles.load(str(REPO / "tests/data/profiles/lab-driver-only.yml")).profile)


def test_dry_run_lists_every_command_and_contacts_no_host(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nnever ansible_host=192.0.2.1\n")
    result = CliRunner().invoke(app, ["diagnose", "-p", "debian12-lab", str(hosts), "--dry-run",
                                      "--runs-dir", str(tmp_path / "runs")], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    for c in engine.plan(LAB):
        assert shlex.join(c.argv) in result.output
    assert "provisioner_state compare" in result.output and not (tmp_path / "runs").exists()


# --- the module's bounds, for real ------------------------------------------------------------

def test_collect_bounds_time_and_size_and_says_what_is_missing():
    mod = load_module("diagnose_collect")
    env = {"PATH": mod.PATH, "LC_ALL": "C"}
    big = mod.run({"argv": ["seq", "1", "200000"], "max_bytes": 1000}, env, 10_000)
    assert big["rc"] == 0 and big["cut"] and len(big["stdout"].encode()) <= 1000 and big["stdout"].endswith("200000")
    tail = mod.run({"argv": ["seq", "1", "50"], "tail_lines": 3, "keep": ["4"]}, env, 10_000)
    assert tail["stdout"].split() == ["47", "48", "49"] and tail["lines"] == 50  # lines with a 4, the last 3
    slow = mod.run({"argv": ["sleep", "5"], "timeout": 1}, env, 10_000)
    assert slow["timed_out"] and slow["rc"] == 124 and slow["seconds"] < 4
    gone = mod.run({"argv": ["no-such-tool-here"]}, env, 10_000)
    assert gone["missing"] and gone["rc"] == 127
    skipped = mod.run({"argv": ["seq", "1"], "only_if_path": "/nonexistent/infiniband"}, env, 10_000)
    assert skipped["skipped"] == "/nonexistent/infiniband does not exist" and skipped["rc"] == -1
    budget = mod.run({"argv": ["seq", "1", "200000"]}, env, 100)
    assert len(budget["stdout"]) <= 100
