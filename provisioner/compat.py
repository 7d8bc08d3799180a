"""The compatibility matrix: rules that read provisioner/data/compat.yml.

The versions live in the data file, with their sources cited beside them; this module
only says how a profile is checked against them. Each refusal names its rule, the
field, and the nearest setting that would pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable, Iterator

import yaml

from provisioner import paths
from provisioner.models import Profile

DATA = paths.DATA_DIR / "compat.yml"


@dataclass(frozen=True)
class Problem:
    rule: str
    field: str
    message: str
    fix: str

    def render(self) -> str:
        return f"[{self.rule}] {self.field}: {self.message} -> {self.fix}"


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@cache
def matrix() -> dict:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


def architecture_of(profile: Profile) -> str | None:
    """The GPU architecture the profile declares, or the one its model names."""
    gpu = profile.hardware.gpu
    if gpu.architecture or not gpu.model:
        return gpu.architecture
    model = gpu.model.upper()
    # Longest marker first, so "RTX 6000 ADA" wins over "RTX 6000".
    markers = sorted(
        ((marker.upper(), arch) for arch, spec in matrix()["architectures"].items() for marker in spec["models"]),
        key=lambda pair: -len(pair[0]),
    )
    return next((arch for marker, arch in markers if marker in model), None)


def max_cuda_for_driver(driver: str) -> str | None:
    """The newest CUDA release whose own minimum driver this driver meets."""
    fits = [cuda for cuda, floor in matrix()["cuda"]["min_driver"].items() if version(driver) >= version(floor)]
    return max(fits, key=version) if fits else None


def driver_cuda_major(driver: str) -> int | None:
    """The CUDA major the driver itself provides (its libcuda): what DCGM's -cudaNN flavour
    must follow, whatever toolkit the profile installs (R535 -> 12, R580 -> 13)."""
    newest = max_cuda_for_driver(driver)
    return int(newest.split(".")[0]) if newest else None


def torch_series(torch_version: str) -> str:
    return ".".join(torch_version.split(".")[:2])


def torch_index(profile: Profile) -> str | None:
    """The wheel flavour the environment uses: the profile's, or the newest index
    published for that torch release whose CUDA is not newer than the default toolkit."""
    env = profile.python_env
    if not env.enabled or env.torch is None:
        return None
    if env.torch.index:
        return env.torch.index
    release = matrix()["torch"].get(torch_series(env.torch.version))
    if release is None:
        return None
    toolkit = version(profile.cuda.default)
    usable = [ix for ix in release["indexes"] if _index_cuda(ix) <= toolkit]
    return max(usable, key=_index_cuda) if usable else "cpu"


def _index_cuda(index: str) -> tuple[int, ...]:
    digits = index.removeprefix("cu")
    return (int(digits[:-1]), int(digits[-1])) if index != "cpu" else (0,)


def library_build(kind: str, lib_version: str, cuda: str) -> str | None:
    """The CUDA build ('12.2') of cudnn/nccl/tensorrt `lib_version` for CUDA `cuda`'s major."""
    builds = matrix()[kind].get(lib_version, {}).get("builds", {})
    return builds.get(cuda.split(".")[0])


# --- the rules -----------------------------------------------------------------------

Rule = Callable[[Profile], Iterator[Problem]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def check(profile: Profile) -> list[Problem]:
    return [problem for each in RULES for problem in each(profile)]


@rule
def cuda_min_driver(p: Profile) -> Iterator[Problem]:
    floors = matrix()["cuda"]["min_driver"]
    for cuda in p.cuda.toolkits:
        floor = floors.get(cuda)
        if floor is None:
            yield Problem("cuda-known", "cuda.toolkits", f"CUDA {cuda} is not in the matrix",
                          f"use one of {', '.join(floors)}")
        elif version(p.driver.version) < version(floor):
            newest = max_cuda_for_driver(p.driver.version)
            yield Problem("cuda-min-driver", "driver.version",
                          f"CUDA {cuda} needs driver >= {floor}, the profile pins {p.driver.version}",
                          f"raise driver.version to {floor} or newer"
                          + (f", or use CUDA {newest} which this driver supports" if newest else ""))


@rule
def distro_packages(p: Profile) -> Iterator[Problem]:
    distro = matrix()["distro"][p.os]
    if p.driver.source == "distro" and p.driver.branch not in distro["driver_branches"]:
        yield Problem("distro-driver", "driver.branch",
                      f"{p.os}'s own archive has no driver branch {p.driver.branch}",
                      f"use branch {' or '.join(map(str, distro['driver_branches']))}, or driver.source: cuda_repo")
    if p.cuda.source == "distro" and p.cuda.toolkits != [distro["cuda_toolkit"]]:
        yield Problem("distro-cuda", "cuda.toolkits",
                      f"{p.os}'s own archive ships CUDA {distro['cuda_toolkit']} only",
                      f"set cuda.toolkits: ['{distro['cuda_toolkit']}'], or cuda.source: cuda_repo")
    for lib in ("cudnn", "nccl", "tensorrt"):
        if p.cuda.source == "distro" and getattr(p, lib).enabled and lib not in distro["libraries"]:
            yield Problem("distro-library", f"{lib}.enabled", f"{p.os}'s own archive has no {lib} packages",
                          f"set {lib}.enabled: false (the PyTorch wheels carry their own), or cuda.source: cuda_repo")


@rule
def architecture(p: Profile) -> Iterator[Problem]:
    if not p.expects_gpu:
        return
    arch = architecture_of(p)
    archs = matrix()["architectures"]
    if arch is None:
        yield Problem("gpu-architecture", "hardware.gpu.model",
                      f"cannot tell the architecture of {p.hardware.gpu.model!r}",
                      f"set hardware.gpu.architecture to one of {', '.join(archs)}")
        return
    spec = archs[arch]
    if version(p.driver.version) < version(spec["min_driver"]):
        yield Problem("arch-min-driver", "driver.version",
                      f"{arch.title()} GPUs need driver >= {spec['min_driver']}, the profile pins {p.driver.version}",
                      f"raise driver.version to {spec['min_driver']} or newer")
    for cuda in p.cuda.toolkits:
        if version(cuda) < version(spec["min_cuda"]):
            yield Problem("arch-min-cuda", "cuda.toolkits",
                          f"{arch.title()} GPUs need CUDA >= {spec['min_cuda']}, the profile has {cuda}",
                          f"use CUDA {spec['min_cuda']} or newer")
        if spec.get("max_cuda") and version(cuda) > version(spec["max_cuda"]):
            yield Problem("arch-max-cuda", "cuda.toolkits",
                          f"CUDA {cuda} dropped {arch.title()} GPUs (last: {spec['max_cuda']})",
                          f"use CUDA {spec['max_cuda']} or older")
    modules = spec["open_modules"]
    if p.driver.kernel_modules == "open" and modules == "unsupported":
        yield Problem("open-modules", "driver.kernel_modules",
                      f"the open kernel modules need Turing or newer; {arch.title()} is older",
                      "set driver.kernel_modules: proprietary")
    if p.driver.kernel_modules == "proprietary" and modules == "required":
        yield Problem("open-modules", "driver.kernel_modules",
                      f"{arch.title()} GPUs work only with the open kernel modules",
                      "set driver.kernel_modules: open")


@rule
def fabric_manager(p: Profile) -> Iterator[Problem]:
    fm = p.fabric_manager
    if p.hardware.interconnect == "nvswitch" and not fm.enabled:
        yield Problem("fabric-manager-needed", "fabric_manager.enabled",
                      "NVSwitch systems cannot run CUDA jobs without fabric manager",
                      "set fabric_manager.enabled: auto (or true)")
    if fm.enabled and fm.version != p.driver.version:
        yield Problem("fabric-manager-version", "fabric_manager.version",
                      f"fabric manager {fm.version} does not match driver {p.driver.version}; "
                      "the service refuses to start on a mismatch",
                      f"set fabric_manager.version: {p.driver.version} (or leave it out)")
    if fm.enabled and p.driver.source == "distro" and "fabric_manager" not in matrix()["distro"][p.os]["libraries"]:
        yield Problem("distro-fabric-manager", "fabric_manager.enabled",
                      f"{p.os}'s own archive has no fabric manager", "use driver.source: cuda_repo")


@rule
def libraries(p: Profile) -> Iterator[Problem]:
    cuda = p.cuda.default
    for kind in ("cudnn", "nccl", "tensorrt"):
        lib = getattr(p, kind)
        if not lib.enabled or p.cuda.source == "distro":
            continue
        known = matrix()[kind]
        if lib.version not in known:
            yield Problem(f"{kind}-known", f"{kind}.version", f"{kind} {lib.version} is not in the matrix",
                          f"use one of {', '.join(known)}")
            continue
        if library_build(kind, lib.version, cuda) is None:
            fits = [v for v, spec in known.items() if cuda.split(".")[0] in spec["builds"]]
            yield Problem(f"{kind}-cuda", f"{kind}.version",
                          f"{kind} {lib.version} has no build for CUDA {cuda.split('.')[0]}.x",
                          f"use {kind} {fits[-1]}" if fits else f"use a CUDA major that {kind} {lib.version} supports")
    trt = p.tensorrt
    if trt.enabled and p.cudnn.enabled and trt.version in matrix()["tensorrt"]:
        wanted = matrix()["tensorrt"][trt.version]["cudnn"]
        if not p.cudnn.version.startswith(wanted + "."):
            yield Problem("tensorrt-cudnn", "cudnn.version",
                          f"TensorRT {trt.version} is built against cuDNN {wanted}, the profile has {p.cudnn.version}",
                          f"use cuDNN {wanted}.x")


@rule
def pytorch(p: Profile) -> Iterator[Problem]:
    env = p.python_env
    if not env.enabled or env.torch is None:
        return
    releases = matrix()["torch"]
    series = torch_series(env.torch.version)
    release = releases.get(series)
    if release is None:
        yield Problem("torch-known", "python_env.torch.version", f"PyTorch {series} is not in the matrix",
                      f"use one of {', '.join(releases)}")
        return
    low, high = release["python"]
    if not version(low) <= version(env.python) <= version(high):
        yield Problem("torch-python", "python_env.python",
                      f"PyTorch {series} has wheels for Python {low} to {high}, not {env.python}",
                      f"set python_env.python: '{high}'")
    index = torch_index(p)
    if index != "cpu" and index not in release["indexes"]:
        nearest = max((ix for ix in release["indexes"] if _index_cuda(ix) <= _index_cuda(index)),
                      key=_index_cuda, default=release["indexes"][0])
        yield Problem("torch-index", "python_env.torch.index",
                      f"PyTorch {series} publishes no {index} wheels (it has {', '.join(release['indexes'])})",
                      f"use {nearest}")
    elif index != "cpu":
        major = str(_index_cuda(index)[0])
        floor = matrix()["cuda"]["major_min_driver"][major]
        if version(p.driver.version) < version(floor):
            yield Problem("torch-index-driver", "python_env.torch.index",
                          f"{index} wheels need driver >= {floor} (CUDA {major}.x), the profile pins {p.driver.version}",
                          f"raise driver.version, or use an older index of {', '.join(release['indexes'])}")
