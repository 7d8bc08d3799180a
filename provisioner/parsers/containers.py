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
- `containerd config dump` (TOML): the runtimes the CRI plugin registered and its default, for
  config version 1 (plugin `cri`), 2 (`io.containerd.grpc.v1.cri`) and 3 (containerd 2.x,
  `io.containerd.cri.v1.runtime`), and whether CDI is on.
- `podman info` (JSON with `--format json`, YAML without): Podman's version and OCI runtime.
  Podman registers no nvidia runtime: it reads CDI specs itself (from 4.1.0).
- known failure lines of the engines and the toolkit (`known_failures`), for diagnose.

Pure functions of text; what a host sends is untrusted, so a malformed input reads as
missing fields (None / []), never as an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

try:
    import tomllib
except ImportError:  # Python 3.10: tomli where installed, else containerd's dump reads as unreadable
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

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


@dataclass(frozen=True)
class ContainerdConfig:
    readable: bool                  # False: not TOML (or no TOML reader on this Python)
    version: int | None
    plugin: str | None              # the CRI plugin's table the runtimes were read from
    runtimes: list[str]
    default_runtime: str | None
    cdi_enabled: bool | None


# The CRI plugin's table per config version (containerd's docs/cri/config.md; 3: containerd 2.x).
CRI_PLUGINS = ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri", "cri")


def containerd_config(text: str) -> ContainerdConfig:
    try:
        config = tomllib.loads(text) if tomllib is not None else None
    except (tomllib.TOMLDecodeError, UnicodeError):
        config = None
    if not isinstance(config, dict):
        return ContainerdConfig(False, None, None, [], None, None)
    version = config.get("version") if isinstance(config.get("version"), int) else None
    plugins = config.get("plugins") if isinstance(config.get("plugins"), dict) else {}
    for name in CRI_PLUGINS:
        cri = plugins.get(name)
        if not isinstance(cri, dict):
            continue
        engine = cri.get("containerd") if isinstance(cri.get("containerd"), dict) else {}
        runtimes = engine.get("runtimes") if isinstance(engine.get("runtimes"), dict) else {}
        if not runtimes and name == "io.containerd.cri.v1.runtime":
            continue
        default = engine.get("default_runtime_name")
        cdi = cri.get("enable_cdi")
        return ContainerdConfig(True, version, name, [str(r) for r in runtimes],
                                default if isinstance(default, str) and default else None,
                                cdi if isinstance(cdi, bool) else None)
    return ContainerdConfig(True, version, None, [], None, None)


_RUNTIME_TABLE = re.compile(r"""^\s*\[plugins\.\S*\.containerd\.runtimes\.(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_-]+))\]\s*$""")


def containerd_runtime_tables(text: str) -> list[str]:
    """The runtime tables' names in containerd's config, line by line: what diagnose reads from a
    dump kept to its runtime lines (no longer whole TOML)."""
    found = (_RUNTIME_TABLE.match(line) for line in text.splitlines())
    return list(dict.fromkeys(next(g for g in m.groups() if g) for m in found if m))


@dataclass(frozen=True)
class PodmanInfo:
    version: str | None
    oci_runtime: str | None


def podman_info(text: str) -> PodmanInfo:
    try:
        info = yaml.safe_load(text)   # JSON (--format json) is YAML too
    except yaml.YAMLError:
        info = None
    if not isinstance(info, dict):
        return PodmanInfo(None, None)
    version = (info.get("version") or {}).get("Version") if isinstance(info.get("version"), dict) else None
    host = info.get("host") if isinstance(info.get("host"), dict) else {}
    oci = (host.get("ociRuntime") or {}).get("name") if isinstance(host.get("ociRuntime"), dict) else None
    return PodmanInfo(str(version) if isinstance(version, (str, int, float)) else None,
                      oci if isinstance(oci, str) else None)


@dataclass(frozen=True)
class KnownFailure:
    key: str
    line: str                       # the line it was found on, as the host printed it


# Failures the engines and the toolkit print, each from a public report (tests/data/containers/SOURCES.md):
# key -> a pattern of the line. The causes and fixes are the judge's (judge/containers.py FAILURES).
FAILURE_PATTERNS = {
    # NVIDIA/nvidia-container-toolkit#653, #150: dockerd has no nvidia runtime (daemon.json lost it)
    "unknown-runtime": re.compile(r"unknown or invalid runtime name: nvidia|Unknown runtime specified nvidia"),
    # hiyouga/LlamaFactory#5268, NVIDIA/nvidia-docker#1034: --gpus with no NVIDIA device driver in dockerd
    "no-gpu-device-driver": re.compile(r'could not select device driver "[^"]*" with capabilities: \[\[gpu\]\]'),
    # NVIDIA/libnvidia-container#231, NVIDIA/nvidia-container-toolkit#154: the driver's libraries are missing
    "load-library-failed": re.compile(r"nvidia-container-cli: initialization error: load library failed"),
    # NVIDIA/nvidia-docker#1718
    "nvml-permissions": re.compile(r"nvidia-container-cli: initialization error: nvml error: insufficient permissions"),
    # NVIDIA/nvidia-docker#1756
    "ldcache-denied": re.compile(r"nvidia-container-cli: detection error: path error: \S*ld\.so\.cache: permission denied"),
}


def known_failures(text: str) -> list[KnownFailure]:
    """Each known failure once, on the last line that shows it."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        for key, pattern in FAILURE_PATTERNS.items():
            if pattern.search(line):
                found[key] = line.strip()
    return [KnownFailure(k, v) for k, v in found.items()]
