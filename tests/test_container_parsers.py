"""Readers and judges of container engines' and NVIDIA Container Toolkit's output (issue 29),
on the real public captures in tests/data/containers/ (SOURCES.md there: two of them come from
an emulated driver, one spec is NVIDIA's own test expectation; each says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.judge import containers as judge
from provisioner.parsers import containers as read

DATA = Path(__file__).parent / "data" / "containers"


def capture(name: str) -> str:
    return (DATA / name).read_text()


def statuses(checks) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def test_every_capture_is_listed_in_sources():
    listed = (DATA / "SOURCES.md").read_text()
    assert all(f"`{p.name}`" in listed for p in DATA.iterdir() if p.name != "SOURCES.md")


@pytest.mark.parametrize("name, runtimes, cdi", [
    ("docker-info__toolkit-1.17.8__docker-28.2.0__docker-archive.txt", ["nvidia", "runc", "io.containerd.runc.v2"],
     ["/etc/cdi", "/var/run/cdi"]),
    ("docker-info__toolkit-1.17.6__docker-28.0.0-rc.1__docker-archive.txt", ["io.containerd.runc.v2", "nvidia", "runc"], []),
])
def test_docker_info_with_the_nvidia_runtime(name, runtimes, cdi):
    info = read.docker_info(capture(name))
    assert info.runtimes == runtimes and info.default_runtime == "runc" and info.cdi_spec_dirs == cdi
    assert statuses(judge.docker_runtime(info)) == {"docker nvidia runtime": "pass"}
    assert statuses(judge.docker_runtime(info, default=True)) == {"docker nvidia runtime": "pass",
                                                                 "docker default runtime": "fail"}


def test_docker_info_after_an_upgrade_lost_the_runtime_issue_653():
    info = read.docker_info(capture("docker-info-grep-runtime__nvidia-lost__nvidia-container-toolkit-issue-653.txt"))
    assert info.runtimes == ["io.containerd.runc.v2", "runc"] and info.server_version is None
    (check,) = judge.docker_runtime(info)
    assert check.status == "fail" and "not registered: dockerd lists io.containerd.runc.v2 runc" in check.detail


def test_docker_info_without_a_runtimes_line_is_not_judged():
    assert statuses(judge.docker_runtime(read.docker_info("Client:\n Version: 28\n"))) == {"docker nvidia runtime": "skip"}


def test_nvidia_container_cli_info_emulated_four_gpus():
    info = read.nvidia_container_cli_info(capture("nvidia-container-cli-info__4x-t4-emulated__575.57.08__docker-archive.txt"))
    assert (info.driver, info.cuda) == ("575.57.08", "12.2")
    assert [(d.index, d.model, d.uuid, d.architecture) for d in info.devices] == [
        (i, "NVIDIA Tesla T4", f"GPU-{i}-FAKE-UUID", "7.5") for i in range(4)]
    assert statuses(judge.container_cli(info, "575.57.08", 4)) == {"nvidia-container-cli driver": "pass",
                                                                   "nvidia-container-cli devices": "pass"}
    assert statuses(judge.container_cli(info, "580.95.05", 8)) == {"nvidia-container-cli driver": "fail",
                                                                   "nvidia-container-cli devices": "fail"}


def test_nvidia_container_cli_debug_lines_are_skipped_real_geforce():
    info = read.nvidia_container_cli_info(
        capture("nvidia-container-cli-k-d-info__geforce-920m__384.130__nvidia-docker-issue-895.txt"))
    assert (info.driver, info.cuda) == ("384.130", "9.0")
    (dev,) = info.devices
    assert (dev.index, dev.model, dev.uuid, dev.bus, dev.architecture) == (
        0, "GeForce 920M", "GPU-4712226b-88e6-a01e-efb0-a5950a64f8d9", "00000000:08:00.0", "3.5")


def test_cdi_spec_from_nvidia_ctk_generate():
    spec = read.cdi_spec(capture("cdi-spec__nvidia-ctk-generate-test-default__999.88.77__nvidia-container-toolkit.yaml"))
    assert (spec.kind, spec.cdi_version, spec.devices, spec.driver_version) == (
        "example.com/device", "0.5.0", ["0", "all"], "999.88.77")
    assert statuses(judge.cdi_spec(spec, "999.88.77", 1)) == {"CDI spec driver": "pass", "CDI spec devices": "pass"}
    checks = judge.cdi_spec(spec, "580.95.05", 2)
    assert statuses(checks) == {"CDI spec driver": "fail", "CDI spec devices": "fail"}
    assert "generated for 999.88.77, driver 580.95.05 is loaded" in checks[0].detail


def test_cdi_spec_without_the_hook_reads_the_libcuda_mount():
    # Hand-made: the capture with its hooks taken out (toolkits before enable-cuda-compat wrote none).
    text = capture("cdi-spec__nvidia-ctk-generate-test-default__999.88.77__nvidia-container-toolkit.yaml")
    text = text.replace("--host-driver-version=999.88.77", "--something-else")
    assert read.cdi_spec(text).driver_version == "999.88.77"


@pytest.mark.parametrize("text", ["", "- a list\n", "kind: [unclosed\n", "kind: 5\ndevices: nope\n"])
def test_a_malformed_spec_reads_as_missing(text):
    spec = read.cdi_spec(text)
    assert spec.kind is None and spec.devices == [] and spec.driver_version is None
    assert statuses(judge.cdi_spec(spec, "580.95.05", 1)) == {"CDI spec": "fail"}


def test_nvidia_ctk_cdi_list():
    names = read.cdi_list(capture("nvidia-ctk-cdi-list__4x-t4-emulated__toolkit-1.17.8__docker-archive.txt"))
    assert names[:4] == [f"nvidia.com/gpu={i}" for i in range(4)] and names[-1] == "nvidia.com/gpu=all"
    assert len(names) == 9


# ------------------------------------------------------------------ provision judge, offline

@pytest.fixture(scope="module")
def profile():
    from provisioner import profiles

    loaded = profiles.load("h100-train").profile
    return loaded.model_copy(update={"driver": loaded.driver.model_copy(update={"version": "575.57.08"}),
                                     "hardware": loaded.hardware.model_copy(update={
                                         "gpu": loaded.hardware.gpu.model_copy(update={"count": 4})})})


@pytest.mark.parametrize("name, form, verdicts", [
    ("docker-info__toolkit-1.17.8__docker-28.2.0__docker-archive.txt", "docker info", {"docker nvidia runtime": "pass"}),
    ("docker-info-grep-runtime__nvidia-lost__nvidia-container-toolkit-issue-653.txt", "docker info",
     {"docker nvidia runtime": "fail"}),
    ("nvidia-container-cli-info__4x-t4-emulated__575.57.08__docker-archive.txt", "nvidia-container-cli info",
     {"nvidia-container-cli driver": "pass", "nvidia-container-cli devices": "pass"}),
    ("nvidia-container-cli-k-d-info__geforce-920m__384.130__nvidia-docker-issue-895.txt", "nvidia-container-cli info",
     {"nvidia-container-cli driver": "fail", "nvidia-container-cli devices": "fail"}),
    ("cdi-spec__nvidia-ctk-generate-test-default__999.88.77__nvidia-container-toolkit.yaml", "CDI spec",
     {"CDI spec driver": "fail", "CDI spec devices": "fail"}),
    ("nvidia-ctk-cdi-list__4x-t4-emulated__toolkit-1.17.8__docker-archive.txt", "nvidia-ctk cdi list",
     {"CDI spec devices": "pass"}),
])
def test_provision_judge_reads_each_form(profile, name, form, verdicts):
    from provisioner.judge import captures

    judged = captures.judge_text(profile, capture(name), name)
    assert judged.form == form and not judged.unreadable, judged
    assert statuses(judged.checks) == verdicts, judged.checks
