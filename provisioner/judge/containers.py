"""Judging a container engine's own view of the GPUs (issue 29): the nvidia runtime as the
engine lists it, a CDI spec against the driver and the GPUs nvidia-smi sees, and
nvidia-container-cli's view against the same. Pure: readings in (parsers/containers.py),
Checks out; what to expect comes from the caller (the profile, nvidia-smi's reading)."""

from __future__ import annotations

import re

from provisioner.parsers.containers import CdiSpec, CliInfo, DockerInfo
from provisioner.verdicts.checks import Check, failed, not_in_capture, passed

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
