"""The compatibility matrix: rules that read provisioner/data/compat.yml.

The versions live in the data file, with their sources cited beside them; this module
only says how a profile is checked against them. Each refusal names its rule, the
field, and the nearest setting that would pass.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass
from functools import cache
from typing import Callable, Iterator

from provisioner.yamlfile import load_data

from provisioner import paths
from provisioner.profiles.models import Profile, PythonEnv

DATA = paths.DATA_DIR / "compat.yml"
# Written by scripts/update_compat_tables.py from NVIDIA's releases.json and PyTorch's
# release matrix; merged under compat.yml (driver_branches, torch, more torch_arches).
GENERATED = paths.DATA_DIR / "compat_generated.yml"
FLAVOUR_OF_OS = {"ubuntu-22.04": "ubuntu2204", "ubuntu-24.04": "ubuntu2404", "debian-12": "debian12"}


@dataclass(frozen=True)
class Problem:
    rule: str
    field: str
    message: str
    fix: str
    severity: str = "error"   # "warning": the profile validates, and `--strict` refuses it

    def render(self) -> str:
        return f"[{self.rule}] {self.field}: {self.message} -> {self.fix}"


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@cache
def matrix() -> dict:
    data = load_data(DATA.read_text(encoding="utf-8"))
    generated = load_data(GENERATED.read_text(encoding="utf-8"))
    data["driver_branches"] = generated["driver_branches"]
    data["torch"] = generated["torch"]
    data["torch_arches"] = {**data["torch_arches"], **generated["torch_arches"]}
    return data


def today() -> dt.date:
    return dt.date.today()


def model_spec(profile: Profile) -> dict:
    """The matrix's entry for the GPU model the profile names ({} when it names none or an unknown one)."""
    model = (profile.hardware.gpu.model or "").upper()
    found = sorted(((marker, spec) for arch in matrix()["architectures"].values()
                    for marker, spec in arch["models"].items() if marker.upper() in model),
                   key=lambda pair: -len(pair[0]))
    return found[0][1] if found else {}


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
    fits = [cuda for cuda, floor in matrix()["cuda"]["min_driver"].items()
            if floor is not None and version(driver) >= version(floor)]
    return max(fits, key=version) if fits else None


def driver_cuda_major(driver: str) -> int | None:
    """The CUDA major the driver itself provides (its libcuda): what DCGM's -cudaNN flavour
    must follow, whatever toolkit the profile installs (R535 -> 12, R580 -> 13)."""
    newest = max_cuda_for_driver(driver)
    return int(newest.split(".")[0]) if newest else None


def torch_series(torch_version: str) -> str:
    return ".".join(torch_version.split(".")[:2])


def torch_index(profile: Profile, env: PythonEnv | None = None) -> str | None:
    """The wheel flavour a PyTorch environment uses (`env`, else the profile's first): the
    profile's, or the newest index published for that torch release whose CUDA is not newer
    than the default toolkit."""
    env = env if env is not None else next((e for e in profile.python_envs if e.pytorch), None)
    if env is None or env.pytorch is None:
        return None
    if env.pytorch.variant:
        return env.pytorch.variant
    release = matrix()["torch"].get(torch_series(env.pytorch.version))
    if release is None:
        return None
    toolkit = version(profile.cuda.default)
    usable = [ix for ix in release["indexes"] if _index_cuda(ix) <= toolkit]
    if usable:
        return max(usable, key=_index_cuda)
    # Never a silent CPU build on a GPU host: the torch-index-default rule refuses this.
    return None if profile.expects_gpu else "cpu"


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
        if cuda not in floors:
            yield Problem("cuda-known", "cuda.toolkits", f"CUDA {cuda} is not in the matrix",
                          f"use one of {', '.join(floors)}")
        elif floor is None:
            # A release the matrix knows exists, whose minimum driver no source read gave.
            yield Problem("cuda-min-driver-unknown", "cuda.toolkits",
                          f"CUDA {cuda}'s minimum driver is not recorded in the matrix, so driver "
                          f"{p.driver.version} cannot be judged against it",
                          f"check CUDA {cuda}'s release notes (Table 3) before using it, or use CUDA "
                          f"{max_cuda_for_driver(p.driver.version) or 'an older release'}", severity="warning")
        elif version(p.driver.version) < version(floor) and p.cuda.forward_compat:
            yield from _forward_compat(p, cuda)
        elif version(p.driver.version) < version(floor):
            newest = max_cuda_for_driver(p.driver.version)
            yield Problem("cuda-min-driver", "driver.version",
                          f"CUDA {cuda} needs driver >= {floor}, the profile pins {p.driver.version}",
                          f"raise driver.version to {floor} or newer"
                          + (f", or use CUDA {newest} which this driver supports" if newest else "")
                          + ", or on data-center GPUs set cuda.forward_compat: true (cuda-compat)")


def compat_package(cuda: str) -> str:
    major, minor = cuda.split(".")
    return matrix()["cuda_compat"]["package"].format(major=major, minor=minor)


def _forward_compat(p: Profile, cuda: str) -> Iterator[Problem]:
    """A toolkit newer than the driver, through cuda-compat: data-center GPUs on LTSB or
    production branches only (NVIDIA CUDA Compatibility guide, Forward Compatibility)."""
    if model_spec(p).get("geforce"):
        yield Problem("cuda-compat-datacenter", "cuda.forward_compat",
                      f"{compat_package(cuda)} (CUDA forward compatibility) works only on data-center GPUs, "
                      f"not on {p.hardware.gpu.model}",
                      f"raise driver.version to {matrix()['cuda']['min_driver'][cuda]} or newer")
        return
    life = lifecycle(p.driver.branch)
    if life is None or life["type"] not in matrix()["cuda_compat"]["branch_types"]:
        kind = life["type"] if life else "unknown"
        yield Problem("cuda-compat-branch", "cuda.forward_compat",
                      f"{compat_package(cuda)} is supported only on LTSB and production driver branches; "
                      f"R{p.driver.branch} is {kind}",
                      f"use an LTSB or production branch (R{supported_branch()}), or a driver >= "
                      f"{matrix()['cuda']['min_driver'][cuda]}")


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
    sku = model_spec(p)
    if sku.get("min_driver") and version(p.driver.version) < version(sku["min_driver"]):
        yield Problem("sku-min-driver", "driver.version",
                      f"{p.hardware.gpu.model} needs driver >= {sku['min_driver']}, the profile pins {p.driver.version}",
                      f"raise driver.version to {sku['min_driver']} or newer")
    modules = sku.get("open_modules", spec["open_modules"])
    if p.driver.kernel_modules == "open" and modules == "unsupported":
        yield Problem("open-modules", "driver.kernel_modules",
                      f"the open kernel modules need Turing or newer; {arch.title()} is older",
                      "set driver.kernel_modules: proprietary")
    if p.driver.kernel_modules == "proprietary" and modules == "required":
        what = p.hardware.gpu.model if "open_modules" in sku else f"{arch.title()} GPUs"
        yield Problem("open-modules", "driver.kernel_modules",
                      f"{what} work only with the open kernel modules",
                      "set driver.kernel_modules: open")


@rule
def fabric_manager(p: Profile) -> Iterator[Problem]:
    fm = p.fabric_manager
    if p.hardware.interconnect == "nvswitch" and not fm.enabled:
        yield Problem("fabric-manager-needed", "fabric_manager.enabled",
                      "NVSwitch systems cannot run CUDA jobs without fabric manager",
                      "set fabric_manager.enabled: auto (or true)")
    if fm.enabled and p.hardware.interconnect != "nvswitch":
        yield Problem("fabric-manager-no-nvswitch", "fabric_manager.enabled",
                      f"fabric manager runs only on NVSwitch systems; on {p.hardware.interconnect} GPUs the service "
                      "fails to start (NV_WARN_NOTHING_TO_DO)",
                      "set fabric_manager.enabled: auto (off unless hardware.interconnect is nvswitch)")
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
    for env in p.python_envs:
        if env.pytorch is not None:
            yield from _pytorch(p, env)


def _pytorch(p: Profile, env: PythonEnv) -> Iterator[Problem]:
    at = env.where
    releases = matrix()["torch"]
    series = torch_series(env.pytorch.version)
    release = releases.get(series)
    if release is None:
        yield Problem("torch-known", f"{at}.framework.version", f"PyTorch {series} is not in the matrix",
                      f"use one of {', '.join(releases)}")
        return
    low, high = release["python"]
    if not version(low) <= version(env.python) <= version(high):
        yield Problem("torch-python", f"{at}.python",
                      f"PyTorch {series} has wheels for Python {low} to {high}, not {env.python}",
                      f"set {at}.python: '{high}'")
    index = torch_index(p, env)
    if index is None:
        yield Problem("torch-index-default", f"{at}.framework.variant",
                      f"PyTorch {series} publishes no CUDA index at or below the default toolkit "
                      f"{p.cuda.default} ({', '.join(release['indexes'])}), and a GPU host must not get CPU wheels",
                      f"set {at}.framework.variant to one of {', '.join(release['indexes'])} "
                      "(the wheels bundle their own CUDA runtime: the driver decides which run)")
        return
    if index != "cpu" and index not in release["indexes"]:
        nearest = max((ix for ix in release["indexes"] if _index_cuda(ix) <= _index_cuda(index)),
                      key=_index_cuda, default=release["indexes"][0])
        yield Problem("torch-index", f"{at}.framework.variant",
                      f"PyTorch {series} publishes no {index} wheels (it has {', '.join(release['indexes'])})",
                      f"use {nearest}")
    elif index != "cpu":
        major = str(_index_cuda(index)[0])
        floor = matrix()["cuda"]["major_min_driver"][major]
        if version(p.driver.version) < version(floor):
            # Only indexes whose CUDA major this driver runs: never the one refused, nor another of its major.
            runs = [ix for ix in release["indexes"]
                    if version(p.driver.version) >= version(matrix()["cuda"]["major_min_driver"][str(_index_cuda(ix)[0])])]
            yield Problem("torch-index-driver", f"{at}.framework.variant",
                          f"{index} wheels need driver >= {floor} (CUDA {major}.x), the profile pins {p.driver.version}",
                          f"raise driver.version to {floor} or newer"
                          + (f", or use index {' or '.join(runs)} (its CUDA runs on {p.driver.version})" if runs else
                             f" (PyTorch {series} publishes no index this driver runs: {', '.join(release['indexes'])})"))


# --- GPU architectures in the wheels -------------------------------------------------

def compute_capability(profile: Profile) -> str | None:
    return model_spec(profile).get("cc")


def wheel_arches(series: str, index: str) -> tuple[list[str], str | None] | None:
    """The compute capabilities PyTorch `series`'s `index` wheels carry, and their PTX arch."""
    entry = matrix()["torch_arches"].get(series, {})
    if index not in entry:
        return None
    return entry[index], entry.get("ptx", {}).get(index)


def runs_on(cc: str, arches: list[str], ptx: str | None) -> bool:
    """A cubin runs on its own major at an equal or higher minor; PTX JIT-compiles upwards."""
    major, minor = version(cc)
    cubin = any(version(a)[0] == major and version(a)[1] <= minor for a in arches)
    return cubin or (ptx is not None and version(ptx) <= version(cc))


@rule
def torch_arch(p: Profile) -> Iterator[Problem]:
    for env in p.python_envs:
        if p.expects_gpu and env.pytorch:
            yield from _torch_arch(p, env)


def _torch_arch(p: Profile, env: PythonEnv) -> Iterator[Problem]:
    cc, index = compute_capability(p), torch_index(p, env)
    series = torch_series(env.pytorch.version)
    if cc is None or index in (None, "cpu"):
        return
    built = wheel_arches(series, index)
    if built is None or runs_on(cc, *built):
        return
    sm = "sm_" + cc.replace(".", "")
    others = [ix for ix in matrix()["torch"].get(series, {}).get("indexes", [])
              if (w := wheel_arches(series, ix)) and runs_on(cc, *w)]
    yield Problem("torch-arch", f"{env.where}.framework.variant",
                  f"PyTorch {series} {index} wheels are built for {', '.join('sm_' + a.replace('.', '') for a in built[0])}; "
                  f"{p.hardware.gpu.model} is {sm}, so CUDA would fail with 'no kernel image is available'",
                  f"use index {' or '.join(others)}" if others else "use a PyTorch release whose wheels carry " + sm)


# --- TensorFlow and JAX ---------------------------------------------------------------

def framework_gpu_cuda(name: str, release: str, variant: str) -> str | None:
    """The CUDA major a TensorFlow or JAX GPU variant's wheels need ('12', '13'), None for cpu."""
    if variant == "cpu":
        return None
    if name == "jax":
        return matrix()["jax"]["variants"][variant]["cuda"]
    cuda = matrix()["tensorflow"]["releases"].get(release, {}).get("cuda")
    return cuda.split(".")[0] if cuda else None


def framework_requirement(name: str, release_version: str, variant: str) -> str:
    """What pip installs for TensorFlow or JAX: tensorflow[and-cuda]==2.21.0, jax[cuda13]==0.10.2, jax==0.10.2."""
    return f"{matrix()[name]['variants'][variant]['requirement']}=={release_version}"


def _release_key(name: str, release_version: str) -> str:
    # TensorFlow's table is per series (2.21); JAX's per release (0.10.2).
    return torch_series(release_version) if name == "tensorflow" else release_version


@rule
def tensorflow_jax(p: Profile) -> Iterator[Problem]:
    """A TensorFlow or JAX release on a Python it has no wheels for, a GPU variant the release
    does not publish, a driver older than its CUDA major needs, or a GPU older than its
    wheels support (compat.yml tensorflow / jax)."""
    for env in p.python_envs:
        fw = env.framework
        if fw is None or fw.name == "pytorch":
            continue
        at, label = env.where, {"tensorflow": "TensorFlow", "jax": "JAX"}[fw.name]
        releases = matrix()[fw.name]["releases"]
        key = _release_key(fw.name, fw.version)
        release = releases.get(key)
        if release is None:
            yield Problem(f"{fw.name}-known", f"{at}.framework.version", f"{label} {key} is not in the matrix",
                          f"use one of {', '.join(releases)}")
            continue
        low, high = release["python"]
        if not version(low) <= version(env.python) <= version(high):
            yield Problem(f"{fw.name}-python", f"{at}.python",
                          f"{label} {key} has wheels for Python {low} to {high}, not {env.python}",
                          f"set {at}.python: '{high}' (a conda environment brings its own Python), or pick a "
                          f"{label} release with wheels for {env.python}")
        if fw.variant == "cpu":
            continue
        if fw.name == "jax" and fw.variant not in release["gpu"]:
            yield Problem("jax-variant", f"{at}.framework.variant",
                          f"JAX {key} publishes no {fw.variant} build (it has {', '.join(release['gpu'])})",
                          f"use variant {' or '.join(release['gpu'])}, or a newer JAX")
            continue
        major = framework_gpu_cuda(fw.name, key, str(fw.variant))
        floor = matrix()["cuda"]["major_min_driver"].get(major or "")
        if floor and version(p.driver.version) < version(floor):
            yield Problem(f"{fw.name}-driver", f"{at}.framework.variant",
                          f"{label} {key} {fw.variant} wheels are built with CUDA {major}, which needs driver >= "
                          f"{floor}; the profile pins {p.driver.version}",
                          f"raise driver.version to {floor} or newer"
                          + (", or use variant cuda12" if fw.name == "jax" and major != "12" else ""))
        cc = compute_capability(p)
        least = matrix()[fw.name]["variants"][fw.variant].get("min_cc")
        if p.expects_gpu and cc and least and version(cc) < version(least):
            yield Problem(f"{fw.name}-arch", f"{at}.framework.variant",
                          f"{label}'s {fw.variant} wheels support GPUs of compute capability {least} and newer; "
                          f"{p.hardware.gpu.model} is {cc}",
                          "use variant cuda12 (compute capability 5.2 and newer)" if fw.name == "jax"
                          and fw.variant == "cuda13" else f"use another framework build for a {cc} GPU")


# --- driver lifecycle ----------------------------------------------------------------

def lifecycle(branch: int) -> dict | None:
    """{type, eol ('YYYY-MM' or None), basis} for a driver branch, or None if NVIDIA lists it nowhere we read."""
    life = matrix()["driver_lifecycle"]
    published = life["published"].get(branch)
    known = matrix()["driver_branches"].get(branch)
    if published:
        return {**published, "basis": "NVIDIA's data-center lifecycle table"}
    if known:
        first = dt.date.fromisoformat(known["first_release"])
        years = life["policy_years"][known["type"]]
        return {"type": known["type"], "eol": f"{first.year + years}-{first.month:02d}",
                "basis": f"NVIDIA's lifecycle policy ({years} year{'s' * (years > 1)} from {known['first_release']})"}
    return None


def _ended(eol: str | None, on: dt.date) -> bool:
    return eol is not None and (on.year, on.month) > tuple(int(x) for x in eol.split("-"))


def supported_branch(on: dt.date | None = None) -> int:
    """The long-term branch to move to: the newest LTSB not at end of life with a known release."""
    on = on or today()
    branches = set(matrix()["driver_branches"]) | set(matrix()["driver_lifecycle"]["published"])
    lts = [b for b in branches if (life := lifecycle(b)) and life["type"] == "lts" and not _ended(life["eol"], on)
           and b in matrix()["driver_branches"]]
    return max(lts)


@rule
def driver_eol(p: Profile) -> Iterator[Problem]:
    # Distribution packages (driver.source: distro) carry NVIDIA's branches too: judged alike.
    on, branch = today(), p.driver.branch
    life = lifecycle(branch)
    known = set(matrix()["driver_branches"]) | set(matrix()["driver_lifecycle"]["published"])
    geforce = " (NVIDIA's data-center table; GeForce cards run the same driver packages and have no other)" \
        if model_spec(p).get("geforce") else ""
    target = supported_branch(on)
    fix = f"move to R{target} (long-term support, end of life {lifecycle(target)['eol']}); see compat.yml driver_lifecycle"
    if life is None and branch < max(known):
        yield Problem("driver-eol", "driver.branch",
                      f"R{branch} is not in NVIDIA's lifecycle table, which lists every branch it does not name as "
                      f"end of life{geforce}", fix, severity="warning")
    elif life is not None and _ended(life["eol"], on):
        yield Problem("driver-eol", "driver.branch",
                      f"R{branch} ({life['type']} branch) reached end of life in {life['eol']} "
                      f"({life['basis']}){geforce}", fix, severity="warning")


# --- DCGM and its exporter -----------------------------------------------------------

@rule
def dcgm_exporter_pair(p: Profile) -> Iterator[Problem]:
    """The packaged exporter is built against one DCGM release (NVIDIA's <dcgm>-<exporter>
    tags, compat.yml dcgm_exporter_builds); a profile naming both should name a pair."""
    dcgm, ex = p.dcgm, p.dcgm.exporter
    if not (dcgm.enabled and ex.enabled and not ex.binary and dcgm.version and ex.version):
        return
    exporter = ex.version.split("-")[0]
    builds = matrix()["dcgm_exporter_builds"]
    built = builds.get(exporter)
    if built is not None and built != dcgm.version:
        paired = [e for e, d in builds.items() if d == dcgm.version]
        yield Problem("dcgm-exporter-pair", "dcgm.exporter.version",
                      f"dcgm-exporter {exporter} is built against DCGM {built} (NVIDIA's tag {built}-{exporter}); "
                      f"the profile installs DCGM {dcgm.version}",
                      f"use dcgm.exporter.version {' or '.join(paired)}" if paired else f"use dcgm.version {built}",
                      severity="warning")


# --- what each flavour of NVIDIA's repository carries --------------------------------

@rule
def flavour_carries(p: Profile) -> Iterator[Problem]:
    flavour = FLAVOUR_OF_OS.get(p.os)
    carries = matrix()["flavours"].get(flavour)
    if carries is None or p.cuda.source != "cuda_repo":
        return
    other = "ubuntu-22.04" if p.os != "ubuntu-22.04" else "ubuntu-24.04"
    # Which CUDA toolkits a flavour carries is the index's to say, not the matrix's: render
    # resolves cuda-toolkit-X-Y in the live index and refuses what it lacks (packages.py);
    # `profiles validate` says offline when the snapshot lacks one (an advisory).
    for kind, key in (("cudnn", "cudnn_majors"), ("tensorrt", "tensorrt_majors")):
        lib = getattr(p, kind)
        if lib.enabled and lib.version.split(".")[0] not in carries[key]:
            yield Problem(f"flavour-{kind}", f"{kind}.version",
                          f"NVIDIA's {flavour} repository has no {kind} {lib.version.split('.')[0]}.x packages",
                          f"use {kind} {' or '.join(m + '.x' for m in carries[key])}, or os: {other}")


# --- GPUDirect RDMA (InfiniBand profiles) ---------------------------------------------

@dataclass(frozen=True)
class GpuDirect:
    """How an InfiniBand host's HCA reaches GPU memory: `dma-buf` (no module: the open kernel
    modules and the kernel do it), `nvidia-peermem` (the driver's module, loaded at boot) or
    `off` (no InfiniBand, or no path that can work: NCCL then stages through host memory)."""
    mode: str
    why: str
    modules: tuple[str, ...] = ()   # loaded at boot (the network role's modules-load.d file)
    min_kernel: str = ""            # dma-buf: the running kernel must be at least this


def _kernel(text: str) -> tuple[int, ...]:
    """'6.1.0-28-amd64' -> (6, 1, 0): the numeric release, the flavour dropped."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("-")[0])[:3])


def dma_buf_unmet(kernel_modules: str, branch: int, kernel: str, architecture: str | None) -> list[str]:
    """What keeps DMA-BUF from working (empty: it works), each with the setting that fixes it.
    An unknown architecture (a profile without GPUs) is not held against it."""
    need = matrix()["gpudirect_rdma"]["dma_buf"]
    order = matrix()["gpudirect_rdma"]["architecture_order"]
    unmet = []
    if kernel_modules != need["kernel_modules"]:
        unmet.append("the open kernel modules (driver.kernel_modules: open)")
    if branch < need["min_driver_branch"]:
        unmet.append(f"driver branch R{need['min_driver_branch']} or newer (CUDA 11.7), not R{branch}")
    if _kernel(kernel) < _kernel(need["min_kernel"]):
        unmet.append(f"Linux {need['min_kernel']} or newer, not {kernel}")
    if architecture and order.index(architecture) < order.index(need["min_architecture"]):
        unmet.append(f"a {need['min_architecture'].title()} or newer GPU, not {architecture.title()}")
    return unmet


def decide_gpudirect(requested: str, infiniband: bool, os: str, kernel_modules: str, branch: int,
                     architecture: str | None, kernel: str | None = None) -> GpuDirect:
    """The GPUDirect RDMA path for these inputs (data in compat.yml gpudirect_rdma, sources
    cited there). `auto` takes DMA-BUF where it works (NVIDIA's recommendation), else
    nvidia-peermem where the OS's kernel has the peer-memory interface, else off. An explicit
    request is honoured as asked; gpudirect_problems says when it cannot work."""
    data = matrix()["gpudirect_rdma"]
    kernel = kernel or data["release_kernel"][os]
    peermem = GpuDirect("nvidia-peermem", "", ("nvidia-peermem",))
    dma_buf = GpuDirect("dma-buf", "", (), data["dma_buf"]["min_kernel"])
    if not infiniband or requested == "off":
        return GpuDirect("off", "the profile declares no InfiniBand" if not infiniband
                         else "network.gpudirect_rdma: off")
    if requested == "dma-buf":
        return dataclasses.replace(dma_buf, why="network.gpudirect_rdma: dma-buf")
    if requested == "nvidia-peermem":
        return dataclasses.replace(peermem, why="network.gpudirect_rdma: nvidia-peermem")
    unmet = dma_buf_unmet(kernel_modules, branch, kernel, architecture)
    if not unmet:
        return dataclasses.replace(dma_buf, why=f"open kernel modules, R{branch}, Linux {kernel}: DMA-BUF "
                                                      "(NVIDIA's recommendation; no module to load)")
    if data["peer_memory_in_kernel"][os]:
        return dataclasses.replace(peermem, why=f"DMA-BUF needs {'; '.join(unmet)}; {os}'s kernel has "
                                                      "the peer-memory interface nvidia-peermem needs")
    return GpuDirect("off", f"DMA-BUF needs {'; '.join(unmet)}, and {os}'s kernel lacks the peer-memory interface "
                            "nvidia-peermem needs (it would fail to load at every boot)")


def nvlink5(p: Profile) -> bool:
    """An NVLink 5 system: Blackwell GPUs on NVSwitches (HGX B200/B300), whose fourth-generation
    NVSwitches fabric manager reaches through the NVLink management NICs (NVIDIA Fabric Manager
    user guide, 1.3.2 and 1.6.4 "NVIDIA HGX B200/B100 GPU Baseboard")."""
    return p.hardware.interconnect == "nvswitch" and p.hardware.gpu.architecture == "blackwell"


def gpudirect(p: Profile) -> GpuDirect:
    return decide_gpudirect(p.network.gpudirect_rdma, p.hardware.infiniband, p.os, p.driver.kernel_modules,
                            p.driver.branch, architecture_of(p))


@rule
def gpudirect_problems(p: Profile) -> Iterator[Problem]:
    requested, data = p.network.gpudirect_rdma, matrix()["gpudirect_rdma"]
    if requested not in ("auto", "off") and not p.hardware.infiniband:
        yield Problem("gpudirect-no-infiniband", "network.gpudirect_rdma",
                      f"{requested} is GPUDirect RDMA over InfiniBand, and the profile declares none",
                      "set hardware.infiniband: true, or network.gpudirect_rdma: auto")
        return
    if not p.hardware.infiniband:
        return
    unmet = dma_buf_unmet(p.driver.kernel_modules, p.driver.branch, data["release_kernel"][p.os], architecture_of(p))
    if requested == "dma-buf" and unmet:
        yield Problem("gpudirect-dma-buf", "network.gpudirect_rdma",
                      f"DMA-BUF needs {'; '.join(unmet)}",
                      "meet those, or set network.gpudirect_rdma: auto (nvidia-peermem where the kernel allows it)")
    elif requested == "nvidia-peermem" and not data["peer_memory_in_kernel"][p.os]:
        yield Problem("gpudirect-peermem-kernel", "network.gpudirect_rdma",
                      f"{p.os}'s kernel lacks the RDMA peer-memory interface: nvidia-peermem loads only once "
                      "MLNX_OFED or DOCA-OFED provides it (the role does not install them)",
                      "install MLNX_OFED/DOCA-OFED before provision up, or use DMA-BUF (driver.kernel_modules: open, "
                      "network.gpudirect_rdma: auto)", severity="warning")
    elif requested == "auto" and gpudirect(p).mode == "off":
        yield Problem("gpudirect-none", "network.gpudirect_rdma", f"no GPUDirect RDMA path: {gpudirect(p).why}; "
                      "NCCL will stage InfiniBand traffic through host memory",
                      "set driver.kernel_modules: open (DMA-BUF), or install MLNX_OFED/DOCA-OFED and set "
                      "network.gpudirect_rdma: nvidia-peermem", severity="warning")
