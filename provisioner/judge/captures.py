"""`provision judge`: captured tool outputs judged offline against a profile, with the same
readers and judges as verify. Each file's form is detected from its text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import yamlfile
from provisioner.judge import accept, containers, verify
from provisioner.verdicts.checks import Check, failed
from provisioner.profiles.models import Profile
from provisioner.parsers import containers as container_parsers
from provisioner.parsers import dcgm, kernel_log, nccl_tests, nvbandwidth, nvidia_smi

FORMS = ("nvidia-smi xml", "nvidia-smi csv", "nvidia-smi processes csv", "nvidia-smi table", "nvidia-smi -q",
         "nvidia-smi -L", "nvidia-smi --version", "nvidia-smi topo -m", "nvidia-smi nvlink -s", "nvidia-smi error",
         "nccl-tests log", "dcgmi diag", "dcgmi discovery", "dcgm-exporter scrape", "kernel log", "nvcc --version",
         "docker info", "containerd config", "podman info", "nvidia-container-cli info", "CDI spec",
         "nvidia-ctk cdi list", "container engine error", "nvbandwidth", "accept measurements")


@dataclass
class Judged:
    path: str
    form: str | None  # None: not a form we read
    checks: list[Check] = field(default_factory=list)
    unreadable: str | None = None  # why the file could not be read

    @property
    def status(self) -> str:
        if self.unreadable:
            return "unreadable"
        return "fail" if any(c.status == "fail" for c in self.checks) else "pass"

    def as_dict(self) -> dict:
        return {"path": self.path, "form": self.form, "status": self.status, "unreadable": self.unreadable,
                "checks": [c.as_dict() for c in self.checks]}


def detect(text: str) -> str | None:
    """The form of a captured output, from its text alone."""
    head = text.lstrip()[:4000]
    if head.startswith(("<?xml", "<nvidia_smi_log", "<!DOCTYPE nvidia_smi_log")):
        return "nvidia-smi xml"
    if re.search(r"NVRM: Xid", text):
        return "kernel log"
    if nvidia_smi.classify(head) and len(head.splitlines()) <= 6:
        return "nvidia-smi error"
    if re.search(r"^# nThread \d+|^#\s+out-of-place\s+in-place|Avg bus bandwidth", text, re.M):
        return "nccl-tests log"
    if re.search(r"^Running \w+\.\s*\n\s*memcpy .*bandwidth \(GB/s\)", text, re.M):
        return "nvbandwidth"
    if head.startswith("{") and '"provision_accept"' in head:
        return "accept measurements"
    if re.search(r"^DCGM_FI_\w+\{", text, re.M):
        return "dcgm-exporter scrape"
    if re.search(r"\|\s*Diagnostic\s*\|\s*Result", text):
        return "dcgmi diag"
    if re.search(r"^\d+ GPUs? found\.", text, re.M):
        return "dcgmi discovery"
    if "NVIDIA-SMI version" in head:
        return "nvidia-smi --version"
    if re.search(r"^GPU \d+: .*\n\s+Link \d+:", text, re.M):
        return "nvidia-smi nvlink -s"
    if re.search(r"^GPU \d+: .+\(UUID:", text, re.M):
        return "nvidia-smi -L"
    if "Attached GPUs" in head or nvidia_smi.Q_GPU_LINE.search(head):  # -q, whole or -d / cut to one GPU
        return "nvidia-smi -q"
    if re.search(r"^\|\s*NVIDIA-SMI \S+", text, re.M) or nvidia_smi.is_table(head):
        return "nvidia-smi table"
    if re.search(r"^[ \t]*(?:\x1b?\[\d+m)?GPU0[ \t]+(?:GPU1|NIC0|mlx\S*|CPU Affinity)", text, re.M) \
            and re.search(r"^GPU0[ \t]+X(?:[ \t]|$)", text, re.M):  # tabs, or the runs of spaces of a paste
        return "nvidia-smi topo -m"
    if re.search(r"Cuda compilation tools, release", text):
        return "nvcc --version"
    form = _container_form(text)
    if form:
        return form
    first = head.splitlines()[0] if head.splitlines() else ""
    if "," in first and re.search(r"\bpid\b", first):
        return "nvidia-smi processes csv"
    if "," in first and {c.split(" [")[0].strip() for c in first.split(",")} & nvidia_smi.CSV_COLUMNS:
        return "nvidia-smi csv"
    return None


def _container_form(text: str) -> str | None:
    """The container engines' and NVIDIA Container Toolkit's forms (issue 29)."""
    if re.search(r"^\s*Runtimes: ", text, re.M) and re.search(r"^\s*(Default Runtime|Server Version):", text, re.M):
        return "docker info"
    if re.search(r"^\s*\[plugins[.\]]", text, re.M) and "containerd" in text:
        return "containerd config"
    if re.search(r'^\s*"?buildahVersion"?\s*:', text, re.M) and re.search(r'^\s*"?ociRuntime"?\s*:', text, re.M):
        return "podman info"
    if re.search(r"^NVRM version:\s+\S+\s*$", text, re.M) and re.search(r"^CUDA version:", text, re.M):
        return "nvidia-container-cli info"
    if re.search(r"^cdiVersion:", text, re.M) and re.search(r"^kind:", text, re.M):
        return "CDI spec"
    names = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("INFO[", "WARN["))]
    if names and len(container_parsers.cdi_list(text)) == len(names):
        return "nvidia-ctk cdi list"
    if container_parsers.known_failures(text):
        return "container engine error"
    return None


def judge_text(profile: Profile, text: str, path: str = "-") -> Judged:
    if re.match(r"\s*(?:\$ )?(?:nvidia-smi|dcgmi|all_reduce_perf)\s+-", text) and len(text.strip().splitlines()) == 1:
        return Judged(path, None, unreadable=f"a command line, not its output: {nvidia_smi.snippet(text, 100)!r}")
    form = detect(text)
    if form is None:
        return Judged(path, None, unreadable=f"not a form provision judge reads ({', '.join(FORMS)}): "
                                             f"{nvidia_smi.snippet(text, 100)!r}")
    try:
        checks = _judge(profile, form, text)
    except nvidia_smi.Unreadable as exc:
        return Judged(path, form, unreadable=str(exc))
    except Exception as exc:  # noqa: BLE001 - a capture never crashes the command
        return Judged(path, form, [failed(form, f"judging raised {type(exc).__name__}: {exc}")])
    return Judged(path, form, checks)


def _judge(profile: Profile, form: str, text: str) -> list[Check]:
    if form == "nvidia-smi error":
        return verify.judge_nvidia_smi(profile, {"rc": 9, "stdout": text})
    if form.startswith("nvidia-smi") and form not in ("nvidia-smi topo -m", "nvidia-smi nvlink -s",
                                                      "nvidia-smi processes csv"):
        report = nvidia_smi.read(text)  # raises Unreadable: the file is unreadable, exit 1
        health = report.source in ("xml", "q", "csv", "table") and profile.expects_gpu and report.gpus
        return verify.judge_gpus(profile, report) + (verify.judge_health(profile, report) if health else [])
    if form == "nvidia-smi processes csv":
        report = nvidia_smi.GpuReport("csv", [], processes=nvidia_smi.read_processes_csv(text))
        checks = [c for c in verify.judge_gpus(profile, report) if c.name == "idle"]
        return checks or [verify.skipped("idle", f"{report.processes} compute process(es); the profile does not "
                                                 "require idle GPUs")]
    if form == "nvidia-smi topo -m":
        return verify.judge_topology(profile, nvidia_smi.read_topo(text))
    if form == "nvidia-smi nvlink -s":
        return verify.judge_nvlink(profile, nvidia_smi.read_nvlink_status(text))
    if form == "nccl-tests log":
        return verify.judge_nccl(profile, nccl_tests.read(text))
    if form == "dcgmi diag":
        return verify.judge_diag(dcgm.read_diag(text))
    if form == "dcgmi discovery":
        names = dcgm.read_discovery(text)
        return verify.judge_gpus(profile, nvidia_smi.GpuReport("discovery", [nvidia_smi.Gpu(n) for n in names]))
    if form == "dcgm-exporter scrape":
        return verify.judge_exporter(profile, dcgm.read_metrics(text))
    if form == "kernel log":
        return verify.judge_xid(profile, kernel_log.read_xids(text), None)
    if form == "nvbandwidth":
        try:
            return accept.judge_nvbandwidth(profile, nvbandwidth.read(text))
        except nvbandwidth.NvbandwidthError as exc:
            raise nvidia_smi.Unreadable("nvbandwidth reader", text[:200], str(exc)) from None
    if form == "accept measurements":
        return accept.judge_capture(profile, text)
    if form == "nvcc --version":
        return verify.judge_cuda_toolkit(profile, {"rc": 0, "stdout": text})
    return _judge_containers(profile, form, text)


def _judge_containers(profile: Profile, form: str, text: str) -> list[Check]:
    gpus = profile.hardware.gpu.count
    default = profile.containers.default_runtime
    if form == "docker info":
        return containers.docker_runtime(container_parsers.docker_info(text), default)
    if form == "containerd config":
        return containers.containerd_runtime(container_parsers.containerd_config(text), default)
    if form == "podman info":
        return containers.podman_cdi(container_parsers.podman_info(text))
    if form == "container engine error":
        return [failed("container engine error", "{}; fix: {} ({})".format(*containers.failure_text(f), f.line))
                for f in container_parsers.known_failures(text)]
    if form == "nvidia-container-cli info":
        return containers.container_cli(container_parsers.nvidia_container_cli_info(text), profile.driver.version, gpus)
    if form == "CDI spec":
        return containers.cdi_spec(container_parsers.cdi_spec(text), profile.driver.version, gpus)
    if form == "nvidia-ctk cdi list":
        return containers.cdi_names(container_parsers.cdi_list(text), gpus)
    raise AssertionError(form)


def judge_files(profile: Profile, paths: list[Path]) -> list[Judged]:
    out = []
    for path in paths:
        text = yamlfile.read_bounded(path, yamlfile.CAPTURE_CAP, "capture").decode("utf-8", errors="replace")
        out.append(judge_text(profile, text, str(path)))
    return out


def exit_code(results: list[Judged]) -> int:
    if any(r.unreadable for r in results):
        return 1
    return 2 if any(r.status == "fail" for r in results) else 0
