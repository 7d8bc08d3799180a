from __future__ import annotations

from provisioner import profiles
from provisioner.judge import preflight

# The shape playbooks/preflight.yml reports, as read off a real 8x H100 HGX node's facts.
HGX = {
    "distribution": "Ubuntu", "distribution_version": "22.04", "vcpus": 224, "memtotal_mb": 2063731,
    "disk_free": ["Mounted on Avail", f"/ {3 * 2**40}"], "lspci_rc": 0,
    "lspci": [f"{bus}:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)"
              for bus in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
             + [f"0{n}:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)" for n in range(4)],
    "infiniband": ["/sys/class/infiniband/mlx5_0"], "nvme": ["/sys/class/nvme/nvme0"],
    "virtualization_type": "", "virtualization_role": "",
}


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_real_hgx_node_passes_h100_train():
    checks = preflight.judge(profiles.load("h100-train").profile, HGX)
    assert {c.name: c.status for c in checks} == {
        "os": "pass", "cpu cores": "pass", "memory": "pass", "free disk": "pass", "gpus": "pass",
        "nvswitch": "pass", "infiniband": "pass", "nvme": "pass"}


def test_memory_allows_the_kernels_share():
    facts = dict(HGX, memtotal_mb=1007 * 1024)  # a 1 TiB box as the kernel reports it
    assert by_name(preflight.judge(profiles.load("h100-train").profile, facts))["memory"].status == "pass"
    facts = dict(HGX, memtotal_mb=512 * 1024)
    assert by_name(preflight.judge(profiles.load("h100-train").profile, facts))["memory"].status == "fail"


def test_missing_gpus_and_wrong_os_fail_with_the_numbers():
    facts = dict(HGX, distribution="Ubuntu", distribution_version="20.04", lspci=HGX["lspci"][:6])
    checks = by_name(preflight.judge(profiles.load("h100-train").profile, facts))
    assert checks["os"].status == "fail" and "Ubuntu 20.04" in checks["os"].detail
    assert checks["gpus"].status == "fail" and "6 NVIDIA GPU(s) on the PCI bus, profile expects 8" in checks["gpus"].detail


def test_no_gpu_present_is_said_plainly():
    facts = dict(HGX, lspci=[])
    checks = by_name(preflight.judge(profiles.load("h100-train").profile, facts))
    assert checks["gpus"].status == "fail" and checks["gpus"].detail.startswith("no GPU present")


def test_container_lab_host():
    facts = dict(HGX, distribution="Debian", distribution_version="12.8", vcpus=2, memtotal_mb=24000, lspci=[],
                 lspci_rc=2, infiniband=[], nvme=[], virtualization_type="podman", virtualization_role="guest")
    checks = by_name(preflight.judge(profiles.load("debian12-lab").profile, facts))
    assert checks["os"].status == "pass"
    assert checks["gpus"].status == "skip" and "lspci" in checks["gpus"].detail
    assert checks["kernel modules"].status == "skip" and "podman container" in checks["kernel modules"].detail


def test_a_small_separate_filesystem_is_refused_with_the_space_needed():
    # df over / /usr /var /opt where /opt is its own, nearly full, filesystem
    facts = dict(HGX, disk_free=["Mounted on        Avail", f"/ {500 * 2**30}", f"/ {500 * 2**30}",
                                 f"/ {500 * 2**30}", f"/opt {3 * 2**30}"])
    check = by_name(preflight.judge(profiles.load("h100-train").profile, facts))["free disk"]
    assert check.status == "fail"
    assert check.detail.startswith("/opt has 3 GiB free, the stack needs >= 100 GiB (97.0 GiB more)")


def test_unreadable_free_space_is_a_skip_not_a_pass():
    check = by_name(preflight.judge(profiles.load("h100-train").profile, dict(HGX, disk_free=[])))["free disk"]
    assert check.status == "skip" and "could not read" in check.detail


def test_an_nvswitch_profile_without_gpus_needs_no_nvswitch():
    # The lab takes h100-train's software on GPU-less hosts: the GPU count is relaxed to 0,
    # the interconnect stays nvswitch (fabric manager is installed), and no NVSwitch is needed.
    from provisioner.profiles.models import Profile

    data = profiles.as_dict(profiles.load("h100-train").profile)
    data["hardware"]["gpu"]["count"] = 0
    lab = Profile.model_validate(data)
    facts = dict(HGX, lspci=[])
    nvswitch = by_name(preflight.judge(lab, facts))["nvswitch"]
    assert nvswitch.status == "skip" and "expects no GPU" in nvswitch.detail
    assert by_name(preflight.judge(profiles.load("h100-train").profile, facts))["nvswitch"].status == "fail"
