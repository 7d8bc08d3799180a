"""The container engine's own view in `provision verify` (issue 29): gpu_probe's `containers`
reading judged through judge() (judge/containers.py judge_host), on the real public captures of
tests/data/containers/ (SOURCES.md there) arranged in the probe's output shape; the readers of
containerd's config, podman info and the known failure lines; and, marked ansible, the probe
run for real on this machine, which has no GPU and no NVIDIA Container Toolkit."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.judge import containers as judge
from provisioner.judge import verify
from provisioner.parsers import containers as read
from tests.conftest import REPO
from tests.test_verify import gpus, profile
from tests.test_verify_contract import cmd, probe_here, probe_shape

DATA = REPO / "tests" / "data" / "containers"
XML = REPO / "tests" / "data" / "fixtures" / "nvidia-smi" / "xml"
SPEC = "cdi-spec__nvidia-ctk-generate-test-default__999.88.77__nvidia-container-toolkit.yaml"
CLI_4_T4 = "nvidia-container-cli-info__4x-t4-emulated__575.57.08__docker-archive.txt"
DOCKER_OK = "docker-info__toolkit-1.17.8__docker-28.2.0__docker-archive.txt"
DOCKER_LOST = "docker-info-grep-runtime__nvidia-lost__nvidia-container-toolkit-issue-653.txt"
TOOLS = {"nvidia-ctk": "/usr/bin/nvidia-ctk", "nvidia-container-cli": "/usr/bin/nvidia-container-cli"}


def capture(name: str) -> str:
    return (DATA / name).read_text()


def nvidia_spec(driver: str = "999.88.77") -> str:
    """Hand-edited from the real spec: its kind made nvidia.com/gpu (what the role generates),
    and its driver version set where a test needs another one."""
    return capture(SPEC).replace("kind: example.com/device", "kind: nvidia.com/gpu").replace("999.88.77", driver)


def probed(engine: dict, cli: dict | None = None, specs: dict | None = None, tools: dict | None = None) -> dict:
    return {"runtime": "docker", "engine": engine, "container_cli": cli or cmd(["nvidia-container-cli", "info"], rc=127),
            "cdi_specs": specs or {}, "cdi_left_out": [], "toolkit": TOOLS if tools is None else tools}


def statuses(checks) -> dict[str, str]:
    return {c.name: c.status for c in checks}


DOCKER = profile("rtx4090-dev", hardware=gpus(2, "RTX A5000", 24), driver={"branch": 590, "version": "590.44.01"},
                 containers={"runtime": "docker", "toolkit_version": "1.17.8-1"})


def test_through_judge_a_real_a5000_host_whose_toolkit_sees_other_gpus():
    """The real 2x A5000 XML with the real (emulated 4x T4) nvidia-container-cli info and docker
    info: the runtime passes, the CLI disagrees with nvidia-smi on driver and count, the spec
    (hand-edited kind) was made for another driver and names one GPU."""
    shape = probe_shape((XML / "2x-rtx-a5000__590.44.01__telegraf.xml").read_text(), module="590.44.01")
    shape["probe"]["containers"] = probed(cmd(["docker", "info"], capture(DOCKER_OK)),
                                          cmd(["nvidia-container-cli", "info"], capture(CLI_4_T4)),
                                          {"/etc/cdi/nvidia.yaml": nvidia_spec()})
    checks = {c.name: c for c in verify.judge(DOCKER, shape)}
    assert {n: checks[n].status for n in ("docker nvidia runtime", "container toolkit", "nvidia-container-cli driver",
                                          "nvidia-container-cli devices", "CDI spec driver", "CDI spec devices")} == {
        "docker nvidia runtime": "pass", "container toolkit": "pass", "nvidia-container-cli driver": "fail",
        "nvidia-container-cli devices": "fail", "CDI spec driver": "fail", "CDI spec devices": "fail"}
    assert checks["nvidia-container-cli driver"].detail == "575.57.08, nvidia-smi reports 590.44.01"
    assert checks["CDI spec driver"].detail.startswith("/etc/cdi/nvidia.yaml: generated for 999.88.77, driver 590.44.01")


def test_the_pass_path_on_the_real_captures():
    checks = judge.judge_host("docker", False, probed(cmd(["docker", "info"], capture(DOCKER_OK)),
                                                      cmd(["nvidia-container-cli", "info"], capture(CLI_4_T4)),
                                                      {"/var/run/cdi/nvidia.yaml": nvidia_spec("575.57.08")}),
                              "575.57.08", 1)
    assert statuses(checks)["nvidia-container-cli driver"] == "pass"
    checks = judge.judge_host("docker", False, probed(cmd(["docker", "info"], capture(DOCKER_OK)),
                                                      cmd(["nvidia-container-cli", "info"], capture(CLI_4_T4)),
                                                      {"/var/run/cdi/nvidia.yaml": nvidia_spec("575.57.08")}),
                              "575.57.08", 4)
    assert statuses(checks) == {"docker nvidia runtime": "pass", "container toolkit": "pass",
                                "nvidia-container-cli driver": "pass", "nvidia-container-cli devices": "pass",
                                "CDI spec driver": "pass", "CDI spec devices": "fail"}  # the spec names one GPU


def test_a_runtime_lost_by_an_upgrade_and_the_default_asked_for():
    checks = judge.judge_host("docker", True, probed(cmd(["docker", "info"], capture(DOCKER_LOST))), None, None)
    assert statuses(checks)["docker nvidia runtime"] == "fail"
    assert statuses(checks)["docker default runtime"] == "fail"


def test_the_toolkit_absent_is_said_plainly_and_nothing_else_passes():
    """A host without the toolkit (the GPU machine lent to these sessions has none): the
    toolkit's check says absent, not installed; what needs it is a skip saying so."""
    checks = judge.judge_host("docker", False, probed(cmd(["docker", "info"], rc=127), tools={
        "nvidia-ctk": "", "nvidia-container-cli": ""}), "590.44.01", 2)
    by = {c.name: c for c in checks}
    assert statuses(checks) == {"docker nvidia runtime": "fail", "container toolkit": "fail",
                                "nvidia-container-cli": "skip", "CDI spec": "skip"}
    assert by["container toolkit"].detail.startswith("absent: the NVIDIA Container Toolkit is not installed")
    assert by["docker nvidia runtime"].detail == "docker is not installed: run provision up"


def test_no_gpu_skips_the_cli_and_the_spec_with_the_reason():
    checks = judge.judge_host("docker", False, probed(cmd(["docker", "info"], capture(DOCKER_OK))), None, None)
    by = {c.name: c for c in checks}
    assert by["nvidia-container-cli"].status == "skip" and "no GPU could be read here" in by["nvidia-container-cli"].detail
    assert by["CDI spec"].status == "skip" and not any(c.status == "pass" and "CDI" in c.name for c in checks)


def test_a_gpu_host_without_a_spec_or_with_a_failing_cli():
    checks = judge.judge_host("docker", False, probed(
        cmd(["docker", "info"], capture(DOCKER_OK)),
        cmd(["nvidia-container-cli", "info"], "", 1, capture(
            "nvidia-container-cli__load-library-failed__libnvidia-container-issue-231.txt")),
        {"/etc/cdi/other.yaml": capture(SPEC)}), "590.44.01", 2)
    by = {c.name: c for c in checks}
    assert by["nvidia-container-cli"].status == "fail" and "libnvidia-ml.so.1" in by["nvidia-container-cli"].detail
    assert "fix: install the driver" in by["nvidia-container-cli"].detail
    assert by["CDI spec"].status == "fail" and "found: /etc/cdi/other.yaml" in by["CDI spec"].detail


def test_not_probed_and_an_unknown_engine_are_skips():
    assert statuses(judge.judge_host("docker", False, None, None, None)) == {"container runtime": "skip"}
    checks = judge.judge_host("cri-o", False, probed({}), None, None)
    assert statuses(checks)["cri-o runtime"] == "skip"


@pytest.mark.parametrize("name, runtimes, default, verdicts", [
    ("containerd-config__nvidia-ctk-runtime-configure-dry-run__toolkit-pr-497.toml", ["nvidia"], None,
     {"containerd nvidia runtime": "pass", "containerd default runtime": "fail"}),
    ("containerd-config__set-as-default__nvidia-docker-issue-1788.toml", ["nvidia"], "nvidia",
     {"containerd nvidia runtime": "pass", "containerd default runtime": "pass"}),
    ("containerd-config-dump__default-nvidia-without-its-runtime__toolkit-test-GetRuntimeConfig.toml", ["runc"], "nvidia",
     {"containerd nvidia runtime": "fail", "containerd default runtime": "pass"}),
])
def test_containerd_config(name, runtimes, default, verdicts):
    config = read.containerd_config(capture(name))
    assert (config.readable, config.version, config.plugin, config.runtimes, config.default_runtime) == (
        True, 2, "io.containerd.grpc.v1.cri", runtimes, default)
    assert statuses(judge.containerd_runtime(config, default=True)) == verdicts
    checks = judge.engine("containerd", True, cmd(["containerd", "config", "dump"], capture(name)))
    assert statuses(checks) == verdicts


def test_containerd_config_version_3_and_garbage():
    # Hand-made: containerd 2.x's plugin name (config version 3) with the nvidia runtime.
    v3 = ("version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'nvidia'\n"
          "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\n  runtime_type = 'io.containerd.runc.v2'\n")
    config = read.containerd_config(v3)
    assert (config.version, config.plugin, config.runtimes, config.default_runtime) == (
        3, "io.containerd.cri.v1.runtime", ["nvidia"], "nvidia")
    for text in ("", "[unclosed", "plugins = 5"):
        assert statuses(judge.containerd_runtime(read.containerd_config(text))) == {"containerd nvidia runtime": "fail"}


def test_podman_info_json_from_podmans_docs_predates_cdi():
    info = read.podman_info(capture("podman-info-json__podman-3.0.0-dev__podman-docs.json"))
    assert (info.version, info.oci_runtime) == ("3.0.0-dev", "crun")
    (check,) = judge.podman_cdi(info)
    assert check.status == "fail" and "predates CDI support (4.1.0)" in check.detail
    # Hand-made: the same reading at 4.1.0, where podman reads CDI specs.
    assert judge.podman_cdi(read.PodmanInfo("4.1.0", "crun"))[0].status == "pass"
    assert judge.podman_cdi(read.podman_info("not: [json"))[0].status == "fail"


@pytest.mark.parametrize("name, key", [
    ("docker-run__unknown-runtime__nvidia-container-toolkit-issue-150.txt", "unknown-runtime"),
    ("docker-run__could-not-select-device-driver__llamafactory-issue-5268.txt", "no-gpu-device-driver"),
    ("nvidia-container-cli__load-library-failed__libnvidia-container-issue-231.txt", "load-library-failed"),
    ("docker-run__nvml-insufficient-permissions__nvidia-docker-issue-1718.txt", "nvml-permissions"),
    ("nvidia-container-cli-info__ldcache-permission-denied__nvidia-docker-issue-1756.txt", "ldcache-denied"),
])
def test_known_failure_lines(name, key):
    (found,) = read.known_failures(capture(name))
    assert found.key == key and found.line in capture(name)
    cause, fix = judge.failure_text(found)
    assert cause and fix


def test_no_known_failure_in_healthy_output():
    assert read.known_failures(capture(DOCKER_OK) + capture(CLI_4_T4)) == []


@pytest.mark.ansible
def test_the_probe_for_real_without_a_toolkit(tmp_path: Path):
    """gpu_probe with containers_runtime docker, through ansible-runner on this machine (no GPU,
    no NVIDIA Container Toolkit): verify names the toolkit absent, and passes nothing it could not see."""
    result = probe_here(tmp_path, "containers_runtime=docker timeout=20")
    found = result["provisioner_verify"]["probe"]["containers"]
    assert found["runtime"] == "docker" and found["engine"]["argv"] == ["docker", "info"]
    assert found["toolkit"] == {"nvidia-ctk": "", "nvidia-container-cli": ""}
    checks = {c.name: c for c in verify.judge(DOCKER, {"probe": result["provisioner_verify"]["probe"]})}
    assert checks["container toolkit"].status == "fail" and "absent" in checks["container toolkit"].detail
    assert checks["docker nvidia runtime"].status == "fail"
    assert checks["nvidia-container-cli"].status == "skip" and checks["CDI spec"].status == "skip"


# --- provision diagnose ----------------------------------------------------------------------

def collected_as(commands: dict[str, tuple[str, int, str]]) -> dict:
    """Captures in the shape diagnose_collect returns, each kept to its planned lines (the
    module's own filter, load_module("diagnose_collect")._cut)."""
    from provisioner.engine import diagnose as engine
    from tests.conftest import load_module

    cut = load_module("diagnose_collect")._cut
    plan = {c.name: c for c in engine.plan(DOCKER)} | {c.name: c for c in engine.plan(CONTAINERD)}
    out = {}
    for name, (stdout, rc, stderr) in commands.items():
        spec = plan[name]
        text, _, total = cut(stdout, spec.max_bytes, spec.tail_lines, spec.keep)
        out[name] = {"argv": list(spec.argv), "rc": rc, "stdout": text, "stderr": stderr, "timed_out": False,
                     "missing": False, "skipped": "", "cut": False, "lines": total}
    return {"commands": out, "files": {"/sys/module/nvidia/version": "590.44.01\n"}}


# containerd enters the profile's schema on the ctr branch (issue 29); judged by name here (model_copy does
# not validate).
CONTAINERD = DOCKER.model_copy(update={"containers": DOCKER.containers.model_copy(update={"runtime": "containerd"})})


def test_the_diagnose_plan_for_a_runtime_and_without_one():
    from provisioner.engine import diagnose as engine

    lab = {c.name: c for c in engine.plan(profiles.load("debian12-lab").profile)}
    docker = {c.name: c for c in engine.plan(DOCKER)}
    assert "container_engine" not in lab and lab["nvidia_container_cli"].only_if_path == engine.TOOLKIT_CLI
    assert docker["container_engine"].argv == ("docker", "info") and docker["nvidia_container_cli"].only_if_path == ""
    assert docker["nvidia_container_cli"].argv == ("nvidia-container-cli", "-d", "/dev/stdout", "info")
    assert docker["journal_containers"].argv[-4:] == ("-u", "docker.service", "-u", "containerd.service")
    assert docker["journal_containers"].tail_lines == engine.JOURNAL_LINES
    assert {c.name: c for c in engine.plan(CONTAINERD)}["container_engine"].argv == ("containerd", "config", "dump")


def findings(profile_, commands) -> tuple[dict[str, tuple[str, tuple, str]], list[str]]:
    from provisioner.judge import diagnose

    host = diagnose.diagnose(profile_, "gpu1", "ok", {"recorded": True}, collected_as(commands))
    ours = ("docker", "containerd", "nvidia-container-cli")  # the rest: the GPU findings, not this test's
    return ({f.title: (f.severity, f.evidence, f.fix) for f in host.findings if f.title.startswith(ours)},
            host.not_collected)


def test_diagnose_names_a_lost_runtime_and_a_failing_toolkit_with_the_fix():
    found, not_collected = findings(DOCKER, {
        "container_engine": (capture(DOCKER_LOST), 0, ""),
        "nvidia_container_cli": ("", 1, capture("nvidia-container-cli__load-library-failed__libnvidia-container-issue-231.txt")),
        "journal_containers": (capture("docker-run__could-not-select-device-driver__llamafactory-issue-5268.txt"), 0, "")})
    lost = found["docker nvidia runtime: not registered"]
    assert lost[0] == "fault" and lost[1] == (" Runtimes: io.containerd.runc.v2 runc", " Default Runtime: runc") and "provision up" in lost[2]
    library = next(v for k, v in found.items() if k.startswith("nvidia-container-cli cannot load the driver's libraries"))
    assert library[0] == "fault" and "libnvidia-ml.so.1" in library[1][0] and library[2].startswith("install the driver")
    driver = next(v for k, v in found.items() if k.endswith("(in the journal since boot)"))
    assert driver[0] == "warning" and "could not select device driver" in driver[1][0]
    assert not any("nvidia-container-cli" in line for line in not_collected)  # the failure is the finding


def test_diagnose_reads_the_documented_debug_output_real_geforce():
    found, _ = findings(DOCKER, {
        "container_engine": (capture(DOCKER_OK), 0, ""),
        "nvidia_container_cli": (capture("nvidia-container-cli-k-d-info__geforce-920m__384.130__nvidia-docker-issue-895.txt"),
                                 0, "")})
    (title, (severity, evidence, _)), = [(k, v) for k, v in found.items() if k.startswith("nvidia-container-cli sees")]
    assert title == "nvidia-container-cli sees driver 384.130 and 1 GPU(s)" and severity == "info"
    assert evidence == ("GPU 0: GeForce 920M GPU-4712226b-88e6-a01e-efb0-a5950a64f8d9 00000000:08:00.0",)
    assert not any(k.startswith("docker") for k in found)  # registered: nothing to say


def test_diagnose_unknown_runtime_in_the_journal_and_containerd_without_nvidia():
    found, _ = findings(DOCKER, {
        "journal_containers": (capture("docker-run__unknown-runtime__nvidia-container-toolkit-issue-150.txt"), 0, "")})
    (title, (severity, _, fix)), = found.items()
    assert title.startswith("dockerd has no runtime named nvidia") and severity == "warning" and "provision up" in fix
    found, _ = findings(CONTAINERD, {"container_engine": (capture(
        "containerd-config-dump__default-nvidia-without-its-runtime__toolkit-test-GetRuntimeConfig.toml"), 0, "")})
    assert found["containerd's configuration registers no nvidia runtime"][:2] == ("fault", ("runtimes: runc",))
    found, _ = findings(CONTAINERD, {"container_engine": (capture(
        "containerd-config__set-as-default__nvidia-docker-issue-1788.toml"), 0, "")})
    assert found == {}


# --- provision judge, offline ------------------------------------------------------------------

@pytest.mark.parametrize("name, form, verdicts", [
    ("containerd-config__nvidia-ctk-runtime-configure-dry-run__toolkit-pr-497.toml", "containerd config",
     {"containerd nvidia runtime": "pass"}),
    ("containerd-config-dump__default-nvidia-without-its-runtime__toolkit-test-GetRuntimeConfig.toml",
     "containerd config", {"containerd nvidia runtime": "fail"}),
    ("podman-info-json__podman-3.0.0-dev__podman-docs.json", "podman info", {"podman cdi": "fail"}),
    ("docker-run__unknown-runtime__nvidia-container-toolkit-issue-150.txt", "container engine error",
     {"container engine error": "fail"}),
    ("nvidia-container-cli-info__ldcache-permission-denied__nvidia-docker-issue-1756.txt", "container engine error",
     {"container engine error": "fail"}),
])
def test_provision_judge_reads_the_engines_and_the_failure_lines(name, form, verdicts):
    from provisioner.judge import captures

    judged = captures.judge_text(profiles.load("h100-train").profile, capture(name), name)
    assert judged.form == form and not judged.unreadable, judged
    assert statuses(judged.checks) == verdicts, judged.checks
    if form == "container engine error":
        assert "fix: " in judged.checks[0].detail and judged.checks[0].detail.endswith(f"({capture(name).splitlines()[-1].strip()})")
