"""Judging a container engine's own view of the GPUs (issue 29): the nvidia runtime as the
engine lists it, a CDI spec against the driver and the GPUs nvidia-smi sees, and
nvidia-container-cli's view against the same. Pure: readings in (parsers/containers.py),
Checks out; what to expect comes from the caller (the profile, nvidia-smi's reading)."""

from __future__ import annotations

import re

from typing import Any

from provisioner.parsers import containers as read
from provisioner.parsers.containers import CdiSpec, CliInfo, ContainerdConfig, DockerInfo, PodmanInfo
from provisioner.verdicts.checks import Check, failed, not_in_capture, passed, skipped

RUNTIME = "nvidia"
_INDEX = re.compile(r"^\d+$")


def docker_runtime(info: DockerInfo, default: bool = False) -> list[Check]:
    """The nvidia runtime registered as dockerd reports it; the default runtime when asked."""
    if not info.runtimes:
        return [not_in_capture("docker nvidia runtime", "docker info's Runtimes line")]
    listed = " ".join(info.runtimes)
    checks = [passed("docker nvidia runtime", f"registered (Runtimes: {listed})") if RUNTIME in info.runtimes
              else failed("docker nvidia runtime", f"not registered: dockerd lists {listed}; daemon.json lost it "
                                                   "(a Docker package upgrade can replace the file): run provision up")]
    if default:
        checks.append(passed("docker default runtime", "nvidia") if info.default_runtime == RUNTIME
                      else failed("docker default runtime", f"{info.default_runtime or 'none reported'}, profile asks for nvidia"))
    return checks


def cdi_spec(spec: CdiSpec, driver: str | None, gpus: int | None) -> list[Check]:
    """The spec was generated for the loaded driver and names every GPU (by index) plus `all`."""
    if spec.kind is None:
        return [failed("CDI spec", "not a CDI spec (no kind): regenerate it with nvidia-ctk cdi generate")]
    checks = []
    if spec.driver_version is None:
        checks.append(not_in_capture("CDI spec driver", "a --host-driver-version hook or a libcuda.so.<version> mount"))
    elif driver is None:
        checks.append(not_in_capture("CDI spec driver", "the loaded driver's version"))
    else:
        checks.append(passed("CDI spec driver", f"{spec.driver_version}, as loaded") if spec.driver_version == driver
                      else failed("CDI spec driver", f"generated for {spec.driver_version}, driver {driver} is loaded: "
                                                     "regenerate it (provision up)"))
    indexed = sorted((d for d in spec.devices if _INDEX.match(d)), key=int)
    if gpus is not None:
        ok = len(indexed) == gpus and "all" in spec.devices
        detail = f"{len(indexed)} GPU device(s) ({', '.join(indexed) or 'none'}){' and all' if 'all' in spec.devices else ''}"
        checks.append(passed("CDI spec devices", f"{detail}, {gpus} GPU(s) seen") if ok
                      else failed("CDI spec devices", f"{detail}; {gpus} GPU(s) seen: regenerate it (provision up)"))
    return checks


def cdi_names(names: list[str], gpus: int | None) -> list[Check]:
    """`nvidia-ctk cdi list`: a device per GPU (by index) and `all`; no driver version to compare."""
    kinds = sorted({n.split("=", 1)[0] for n in names})
    devices = [n.split("=", 1)[1] for n in names]
    return [c for c in cdi_spec(CdiSpec(", ".join(kinds) or None, None, devices, None), None, gpus)
            if c.name != "CDI spec driver"]


def container_cli(info: CliInfo, driver: str | None, gpus: int | None) -> list[Check]:
    """nvidia-container-cli sees the driver and the GPUs nvidia-smi sees."""
    if info.driver is None and not info.devices:
        return [failed("nvidia-container-cli", "reported no driver and no device")]
    checks = []
    if driver is not None:
        checks.append(passed("nvidia-container-cli driver", info.driver) if info.driver == driver
                      else failed("nvidia-container-cli driver", f"{info.driver or 'none'}, nvidia-smi reports {driver}"))
    if gpus is not None:
        n = len(info.devices)
        checks.append(passed("nvidia-container-cli devices", f"{n}") if n == gpus
                      else failed("nvidia-container-cli devices", f"{n}, nvidia-smi sees {gpus}"))
    return checks


def containerd_runtime(config: ContainerdConfig, default: bool = False) -> list[Check]:
    """The nvidia runtime in containerd's own view (`containerd config dump`), the default when asked."""
    if not config.readable:
        return [failed("containerd nvidia runtime", "containerd config dump could not be read as TOML (the controller "
                                                    "needs Python 3.11, or tomli)")]
    listed = " ".join(config.runtimes) or "no runtime"
    checks = [passed("containerd nvidia runtime", f"registered ({config.plugin}: {listed})") if RUNTIME in config.runtimes
              else failed("containerd nvidia runtime", f"not registered: containerd lists {listed}; its config.toml lost "
                                                       "it: run provision up")]
    if default:
        checks.append(passed("containerd default runtime", "nvidia") if config.default_runtime == RUNTIME
                      else failed("containerd default runtime",
                                  f"{config.default_runtime or 'none set'}, profile asks for nvidia"))
    return checks


# Podman reads CDI specs itself from 4.1.0 (NVIDIA/nvidia-container-toolkit#63, docker/cli#3864); it has
# no nvidia runtime to register.
PODMAN_CDI_SINCE = (4, 1, 0)


def podman_cdi(info: PodmanInfo) -> list[Check]:
    if info.version is None:
        return [failed("podman cdi", "podman info named no version: run podman info on the host")]
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", info.version)
    if not found:
        return [failed("podman cdi", f"podman version {info.version!r} could not be read")]
    version = tuple(int(x or 0) for x in found.groups())
    if version >= PODMAN_CDI_SINCE:
        return [passed("podman cdi", f"podman {info.version} reads CDI specs (--device nvidia.com/gpu=all)")]
    return [failed("podman cdi", f"podman {info.version} predates CDI support (4.1.0): upgrade podman")]


# What each known failure line means and its fix (the lines: parsers/containers.py FAILURE_PATTERNS).
FAILURES = {
    "unknown-runtime": ("dockerd has no runtime named nvidia: its daemon.json lost the registration (a Docker package "
                        "upgrade can replace it: nvidia-container-toolkit#653)",
                        "provision up registers it again (or nvidia-ctk runtime configure --runtime=docker), then "
                        "systemctl restart docker"),
    "no-gpu-device-driver": ("dockerd has no GPU device driver for --gpus: the NVIDIA Container Toolkit is not installed "
                             "or not registered with it",
                             "set containers.runtime in the profile and run provision up, then systemctl restart docker"),
    "load-library-failed": ("nvidia-container-cli cannot load the driver's libraries (libnvidia-ml.so.1): the driver's "
                            "user-space libraries are missing or not in the ld cache",
                            "install the driver (provision up), or run ldconfig if it is installed; nvidia-smi must "
                            "work on the host first"),
    "nvml-permissions": ("nvidia-container-cli cannot open the GPU device files (NVML: insufficient permissions)",
                         "ls -l /dev/nvidia*: something changed their permissions (VirtualGL setups do)"),
    "ldcache-denied": ("nvidia-container-cli cannot read /etc/ld.so.cache",
                       "ls -l /etc/ld.so.cache: restore it readable (ldconfig writes it anew)"),
}


def failure_text(failure: read.KnownFailure) -> tuple[str, str]:
    """(cause, fix) of a known failure line."""
    return FAILURES[failure.key]


def _ran(cmd: dict[str, Any]) -> str | None:
    """Why a probe gave nothing to read (None when it ran): missing, timed out, failed."""
    if not cmd:
        return "not run"
    name = " ".join(cmd.get("argv") or ["?"])
    if cmd.get("missing") or int(cmd.get("rc", -1)) == 127:
        return f"{(cmd.get('argv') or ['?'])[0]} is not installed"
    if cmd.get("timed_out"):
        return f"{name}: did not answer within {cmd.get('timeout', '?')} s"
    if int(cmd.get("rc", -1)) != 0:
        text = f"{cmd.get('stdout', '')}\n{cmd.get('stderr', '')}"
        known = read.known_failures(text)
        if known:
            cause, fix = failure_text(known[-1])
            return f"{name}: {cause}; fix: {fix}"
        return f"{name}: exited {cmd.get('rc')}: {' '.join(text.split())[:200]}"
    return None


ENGINES = {"docker": "docker nvidia runtime", "containerd": "containerd nvidia runtime", "podman": "podman cdi"}


def engine(runtime: str, default: bool, cmd: dict[str, Any]) -> list[Check]:
    """The engine's own view, by the profile's runtime name."""
    name = ENGINES.get(runtime)
    if name is None:
        return [skipped(f"{runtime} runtime", f"no reader for the engine {runtime!r} in this controller")]
    why = _ran(cmd)
    if why:
        return [failed(name, why + ("" if "fix:" in why else ": run provision up"))]
    out = str(cmd.get("stdout", ""))
    if runtime == "docker":
        return docker_runtime(read.docker_info(out), default)
    if runtime == "containerd":
        return containerd_runtime(read.containerd_config(out), default)
    return podman_cdi(read.podman_info(out))


def cdi_specs(specs: dict[str, str], driver: str | None, gpus: int) -> list[Check]:
    """Every NVIDIA spec under /etc/cdi and /var/run/cdi: made for the loaded driver, every GPU named."""
    nvidia = {path: read.cdi_spec(text) for path, text in sorted(specs.items())}
    nvidia = {path: spec for path, spec in nvidia.items() if (spec.kind or "").startswith("nvidia.com/")}
    if not nvidia:
        others = ", ".join(sorted(specs)) or "none"
        return [failed("CDI spec", f"no nvidia.com spec under /etc/cdi or /var/run/cdi (found: {others}): provision up "
                                   "generates it (nvidia-ctk cdi generate)")]
    checks = []
    for path, spec in nvidia.items():
        checks += [Check(c.name, c.status, f"{path}: {c.detail}") for c in cdi_spec(spec, driver, gpus)]
    return checks


def judge_host(runtime: str, default: bool, probed: dict[str, Any] | None, driver: str | None,
               gpus: int | None) -> list[Check]:
    """What gpu_probe read of the engine and the toolkit (its `containers`), against the profile's
    runtime and what nvidia-smi saw (gpus None: no GPU could be read). Never a pass on nothing:
    what could not be checked is a skip that says why."""
    if not isinstance(probed, dict):
        return [skipped("container runtime", "not probed: the host's gpu_probe read no container engine "
                                             "(a collection older than this controller)")]
    checks = engine(runtime, default, probed.get("engine") or {})
    tools = {k: v for k, v in (probed.get("toolkit") or {}).items() if v}
    if not tools:
        return checks + [
            failed("container toolkit", "absent: the NVIDIA Container Toolkit is not installed (no nvidia-ctk, no "
                                        "nvidia-container-cli on the host): run provision up"),
            skipped("nvidia-container-cli", "not checked: the toolkit is not installed"),
            skipped("CDI spec", "not checked: the toolkit is not installed")]
    checks.append(passed("container toolkit", "installed (" + ", ".join(f"{k} {v}" for k, v in sorted(tools.items())) + ")"))
    if not gpus:
        why = "no GPU could be read here (nvidia-smi saw none)"
        return checks + [skipped("nvidia-container-cli", f"not checked: {why}, so there is nothing for it to agree with"),
                         skipped("CDI spec", f"not checked: {why}; the spec is generated on GPU hosts only")]
    cli = probed.get("container_cli") or {}
    why = _ran(cli)
    checks += ([failed("nvidia-container-cli", why)] if why
               else container_cli(read.nvidia_container_cli_info(str(cli.get("stdout", ""))), driver, gpus))
    return checks + cdi_specs(probed.get("cdi_specs") or {}, driver, gpus)
