"""Reading what container engines and NVIDIA's Container Toolkit print (issue 29).

- `docker info` (text): the runtimes dockerd registered, its default runtime, the CDI spec
  directories (Docker 25+ prints them when CDI is on).
- `nvidia-container-cli info` (also inside `-k -d /dev/tty info`, whose debug log lines
  `I1228 13:13:39.098291 6357 nvc_info.c:489] ...` are skipped): the driver (NVRM) version, the
  CUDA version the driver supports and one block per device.
- a CDI spec (YAML, as `nvidia-ctk cdi generate` writes it): kind, device names, and the
  driver version it was generated for (the `--host-driver-version=` hook argument, else the
  version suffix of the libcuda.so it mounts).
- `nvidia-ctk cdi list`: the fully qualified device names.

Pure functions of text; what a host sends is untrusted, so a malformed input reads as
missing fields (None / []), never as an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ \S+:\d+\] ")
_VERSION = re.compile(r"^\d+(\.\d+)+$")
_LIBCUDA = re.compile(r"/libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
_CDI_NAME = re.compile(r"^[A-Za-z0-9.-]+/[A-Za-z0-9.-]+=[A-Za-z0-9_.:-]+$")


@dataclass(frozen=True)
class DockerInfo:
    runtimes: list[str]             # [] when the capture has no Runtimes line
    default_runtime: str | None
    cdi_spec_dirs: list[str]
    server_version: str | None


def docker_info(text: str) -> DockerInfo:
    runtimes: list[str] = []
    default = version = None
    cdi_dirs: list[str] = []
    in_cdi = False
    for line in text.splitlines():
        stripped = line.strip()
        if in_cdi:
            if line.startswith("  ") and not line.startswith("   ") and stripped.startswith("/"):
                cdi_dirs.append(stripped)
                continue
            in_cdi = False
        key, sep, value = stripped.partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "Runtimes":
            runtimes = value.split()
        elif key == "Default Runtime":
            default = value or None
        elif key == "Server Version":
            version = value or None
        elif key == "CDI spec directories":
            in_cdi = True
    return DockerInfo(runtimes, default, cdi_dirs, version)


@dataclass(frozen=True)
class CliDevice:
    index: int | None
    model: str | None
    uuid: str | None
    bus: str | None
    architecture: str | None


@dataclass(frozen=True)
class CliInfo:
    driver: str | None             # "NVRM version"
    cuda: str | None
    devices: list[CliDevice] = field(default_factory=list)


def nvidia_container_cli_info(text: str) -> CliInfo:
    head: dict[str, str] = {}
    blocks: list[dict[str, str]] = []
    for line in text.splitlines():
        if _LOG_LINE.match(line):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Device Index":
            blocks.append({})
        (blocks[-1] if blocks else head)[key] = value

    def version(value: str | None) -> str | None:
        return value if value and _VERSION.match(value) else None   # "(null)" on Jetson

    def known(value: str | None) -> str | None:
        return None if value in (None, "", "(null)") else value

    devices = [CliDevice(int(b["Device Index"]) if b.get("Device Index", "").isdigit() else None,
                         known(b.get("Model")), known(b.get("GPU UUID")), known(b.get("Bus Location")),
                         version(b.get("Architecture"))) for b in blocks]
    return CliInfo(version(head.get("NVRM version")), version(head.get("CUDA version")), devices)


@dataclass(frozen=True)
class CdiSpec:
    kind: str | None
    cdi_version: str | None
    devices: list[str]              # the names under `devices:` ("0", "all", a UUID ...)
    driver_version: str | None


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _edits(spec: dict) -> list[dict]:
    edits = [spec.get("containerEdits")]
    edits += [d.get("containerEdits") for d in spec.get("devices") or [] if isinstance(d, dict)]
    return [e for e in edits if isinstance(e, dict)]


def cdi_spec(text: str) -> CdiSpec:
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError:
        spec = None
    if not isinstance(spec, dict):
        return CdiSpec(None, None, [], None)
    kind = spec.get("kind") if isinstance(spec.get("kind"), str) else None
    cdi_version = str(spec["cdiVersion"]) if isinstance(spec.get("cdiVersion"), (str, int, float)) else None
    devices = [d["name"] for d in spec.get("devices") or [] if isinstance(d, dict) and isinstance(d.get("name"), str)]
    driver = None
    for edit in _edits(spec):
        for hook in edit.get("hooks") or []:
            for arg in _strings(hook.get("args") if isinstance(hook, dict) else None):
                if arg.startswith("--host-driver-version="):
                    driver = driver or arg.split("=", 1)[1]
    if driver is None:
        for edit in _edits(spec):
            for mount in edit.get("mounts") or []:
                found = _LIBCUDA.search(mount.get("hostPath", "") if isinstance(mount, dict) else "")
                if found:
                    driver = found.group(1)
                    break
    return CdiSpec(kind, cdi_version, devices, driver if driver and _VERSION.match(driver) else None)


def cdi_list(text: str) -> list[str]:
    """The device names `nvidia-ctk cdi list` prints (its INFO line left out)."""
    return [line.strip() for line in text.splitlines() if _CDI_NAME.match(line.strip())]
