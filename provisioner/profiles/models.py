"""The profile's typed schema: YAML in, validated objects out, trusted downstream.

Every model forbids unknown keys, so a typo is an error that names the field instead
of a setting that silently does nothing.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PrivateAttr, field_validator, model_validator

from provisioner.profiles import mig
from provisioner.profiles.field_types import (COLLECTOR, ENV_NAME, USER_NAME, CondaChannel, CondaSpec, ControllerPath, OwnedDir,
                                     PipRequirement, RepoUrl, SingleLine, UrlOrControllerPath, UrlOrPath,
                                     WebUrl)
from provisioner.profiles.storage import Storage
from provisioner.profiles.strict import Strict

DRIVER_VERSION = r"^\d{3}\.\d{2,3}(\.\d{2,3})?$"
CUDA_VERSION = r"^\d{2}\.\d$"


def _check_ip(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (use 127.0.0.1, a host address, or 0.0.0.0)") from None
    return value


def check_fingerprint(value: str) -> str:
    # An OpenPGP v4 fingerprint is 40 hex digits; anything else can never match a key, and the
    # role would only find out on the host, after the source is written.
    if not re.fullmatch(r"[0-9A-F]{40}", value):
        raise ValueError(f"{value!r} is not a key fingerprint: 40 upper-case hex digits without spaces, as "
                         "`gpg --show-keys --with-colons KEYFILE` prints on its fpr: line")
    return value


IPAddress = Annotated[str, AfterValidator(_check_ip)]
KeyFingerprint = Annotated[str, AfterValidator(check_fingerprint), Field(examples=["EB693B3035CD5710E231E123A4B469963BF863CC"])]
DriverVersion = Annotated[str, Field(pattern=DRIVER_VERSION, examples=["535.129.03"])]
CudaVersion = Annotated[str, Field(pattern=CUDA_VERSION, examples=["12.2"])]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


# --- hardware expectations ---------------------------------------------------------

Architecture = Literal["maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"]


class GPU(Strict):
    count: int = Field(ge=0, le=16, description="GPUs per host; 0 for hosts without a GPU")
    model: SingleLine | None = Field(None, description="as nvidia-smi names it, e.g. 'H100 80GB HBM3'; matched as a substring")
    architecture: Architecture | None = Field(None, description="derived from the model when left out")
    memory_gib: int | None = Field(None, ge=1, le=1024, description="minimum memory per GPU")
    mig: bool = Field(False, description="expect MIG mode on (true) or off (false) on every GPU")

    @model_validator(mode="after")
    def _model_when_gpus(self) -> GPU:
        if self.count > 0 and not self.model:
            raise ValueError("a profile that expects GPUs names their model (hardware.gpu.model)")
        return self


class Hardware(Strict):
    gpu: GPU = Field(description="the GPUs every host must have")
    interconnect: Literal["none", "pcie", "nvlink", "nvswitch"] = Field(
        "pcie", description="how the GPUs connect: nvswitch turns fabric manager on (auto); nvlink and nvswitch make "
                            "verify check the NVLink topology and links")
    min_cpu_cores: int = Field(1, ge=1, le=4096, description="the fewest CPU cores (vCPUs) preflight accepts")
    min_ram_gib: int = Field(1, ge=1, le=65536, description="the least memory preflight accepts, GiB")
    min_free_disk_gib: int = Field(20, ge=0, le=1048576, description="free space on / needed to install the stack")
    nvme: bool = Field(False, description="preflight expects an NVMe device on every host")
    infiniband: bool = Field(False, description="the hosts have InfiniBand: preflight and verify check the ports, "
                                                "the network role installs the RDMA stack")


OS = Literal["ubuntu-22.04", "ubuntu-24.04", "debian-12"]
# The system Python of each OS: python_env.python's default (a venv uses it as is).
DEFAULT_PYTHON = {"ubuntu-22.04": "3.10", "ubuntu-24.04": "3.12", "debian-12": "3.11"}

# --- software stack ----------------------------------------------------------------

Source = Literal["cuda_repo", "distro"]


class Driver(Strict):
    branch: int = Field(ge=400, le=999, description="the driver branch (535, 580, ...); version must be in it")
    version: DriverVersion = Field(description="the exact driver version; resolved to the exact package revision "
                                               "the repository carries before any host is touched")
    source: Source = Field("cuda_repo", description="cuda_repo: NVIDIA's CUDA repository; distro: the "
                                                    "distribution's own archive")
    kernel_modules: Literal["proprietary", "open"] = Field(
        "proprietary", description="NVIDIA's proprietary or open kernel modules (open: Turing and newer; required on "
                                   "Blackwell)")
    persistence: bool = Field(True, description="keep persistence mode on (nvidia-persistenced)")
    hold_kernel: bool = Field(
        False, description="hold the installed kernel packages and fence them from unattended-upgrades, so no "
                           "kernel arrives before the module is built for it")
    # refuse by default: on a Secure Boot host nothing is installed that could not load, and
    # no key or pending enrollment is created unless the profile asks; hosts without Secure
    # Boot (most servers, every container) are not affected by it.
    secure_boot: Literal["refuse", "sign", "prebuilt"] = Field(
        "refuse", description="on a Secure Boot host: refuse it (preflight fails), sign the DKMS build with a "
                              "machine owner key the role generates (enroll it at the next boot), or prebuilt "
                              "(Ubuntu's signed precompiled modules; distro source only)")

    @model_validator(mode="after")
    def _version_in_branch(self) -> Driver:
        if self.version.split(".")[0] != str(self.branch):
            raise ValueError(
                f"driver.version {self.version} is not in branch {self.branch}; "
                f"set driver.branch: {self.version.split('.')[0]} or pick a {self.branch}.x version"
            )
        return self


class FabricManager(Strict):
    enabled: bool | Literal["auto"] = Field("auto", description="auto: on when interconnect is nvswitch")
    version: DriverVersion | None = Field(None, description="defaults to driver.version; must equal it")


class Cuda(Strict):
    enabled: bool = Field(True, description="false: driver-only hosts (containers bring their own CUDA)")
    source: Source | None = Field(None, description="defaults to driver.source")
    toolkits: list[CudaVersion] = Field(min_length=1, description="the CUDA toolkits to install; from the distro "
                                                                    "source only the one the archive carries")
    default: CudaVersion | None = Field(None, description="the one /usr/local/cuda points at; first toolkit if left out")
    forward_compat: bool = Field(
        False, description="run toolkits newer than the driver through NVIDIA's cuda-compat package "
                           "(data-center GPUs on LTSB/production branches only)")

    @model_validator(mode="after")
    def _default_is_installed(self) -> Cuda:
        if len(set(self.toolkits)) != len(self.toolkits):
            raise ValueError(f"cuda.toolkits lists a version twice: {self.toolkits}")
        if self.default is None:
            self.default = self.toolkits[0]
        elif self.default not in self.toolkits:
            raise ValueError(f"cuda.default {self.default} is not one of cuda.toolkits {self.toolkits}")
        return self


class Library(Strict):
    enabled: bool = Field(True, description="install it (a section left out of the profile is off)")
    version: str | None = Field(None, pattern=r"^\d+\.\d+\.\d+(\.\d+)?$",
                                description="the upstream version, resolved to the exact package revision; "
                                            "required when enabled")

    @model_validator(mode="after")
    def _version_when_enabled(self) -> Library:
        if self.enabled and not self.version:
            raise ValueError("an enabled library needs a version (or set enabled: false)")
        return self


class Nccl(Library):
    tests: bool = Field(False, description="build nccl-tests (all_reduce_perf) for verification")
    tests_source: UrlOrControllerPath | None = Field(
        None, description="URL of the nccl-tests source tarball, or its path in the files root on the controller")
    tests_sha256: Sha256 | None = Field(None, description="sha256 of tests_source (required with tests)")

    @model_validator(mode="after")
    def _tests_need_a_checked_source(self) -> Nccl:
        # The role downloads nothing without a checksum, so refuse here rather than on the host.
        if self.tests and not (self.tests_source and self.tests_sha256):
            raise ValueError("nccl.tests needs tests_source (the nccl-tests source tarball: URL or path) "
                             "and tests_sha256 (its sha256); or set tests: false")
        return self


class Torch(Strict):
    """python_env.torch, the form profiles used before `framework`: read as framework pytorch."""
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="the PyTorch release, pinned exactly")
    index: str | None = Field(None, pattern=r"^(cpu|cu\d{3})$", description="wheel flavour; chosen from CUDA when left out")
    packages: list[PipRequirement] = Field(default_factory=list, description="more wheels from the same index, e.g. torchvision==0.16.2")


# The variants each framework publishes (pytorch: its wheel index; tensorflow: the package or
# extra; jax: the extra). Which release has which GPU variant is the matrix's (compat.yml).
VARIANTS = {"pytorch": r"^(cpu|cu\d{3})$", "tensorflow": r"^(and-cuda|cpu)$", "jax": r"^(cuda12|cuda13|cpu)$"}
VARIANT_NAMES = {"pytorch": "cpu or cuXYZ (cu126, cu130, ...)", "tensorflow": "and-cuda or cpu",
                 "jax": "cuda12, cuda13 or cpu"}


class Framework(Strict):
    name: Literal["pytorch", "tensorflow", "jax"] = Field(description="the framework the environment is for")
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$", description="its release, pinned exactly (2.11.0, 2.21.0, 0.10.2)")
    variant: str | None = Field(
        None, description="which build: pytorch: cpu or cuXYZ, the wheel index (chosen from cuda.default when left "
                          "out); tensorflow: and-cuda (tensorflow[and-cuda]) or cpu (tensorflow-cpu); jax: cuda12 "
                          "(jax[cuda12]), cuda13 (jax[cuda13]) or cpu (jax). Required for tensorflow and jax")
    packages: list[PipRequirement] = Field(
        default_factory=list, description="more wheels installed with it from the same index, e.g. torchvision==0.26.0")

    @model_validator(mode="after")
    def _variant_of_this_framework(self) -> Framework:
        if self.variant is None:
            if self.name != "pytorch":
                raise ValueError(f"framework {self.name} needs a variant: {VARIANT_NAMES[self.name]}")
        elif not re.fullmatch(VARIANTS[self.name], self.variant):
            raise ValueError(f"{self.variant!r} is not a variant of {self.name}: use {VARIANT_NAMES[self.name]}")
        return self


class PythonEnv(Strict):
    enabled: bool = Field(True, description="build the environment; false leaves it out (removed from hosts that "
                                            "have it)")
    manager: Literal["conda", "venv"] = Field("conda", description="conda (Miniforge) or venv (the system Python)")
    python: str | None = Field(None, pattern=r"^3\.\d{1,2}$", description="defaults to the OS's system Python")
    name: str = Field("pytorch_env", pattern=ENV_NAME, description="the environment's folder name (no /, not . or ..); "
                                                                  "unique across python_envs")
    prefix: OwnedDir = Field("/opt/conda", description="conda install prefix, or the folder venvs live in: the "
                                                       "environment is <prefix>/<name> (venv) or <prefix>/envs/<name> "
                                                       "(conda)")
    owner: str = Field("root", pattern=USER_NAME, description="the user who owns the environment (its builds and "
                                                              "checks run as this user)")
    conda_installer: UrlOrControllerPath | None = Field(
        None, description="Miniforge installer URL, or its path in the files root on the controller")
    conda_installer_sha256: Sha256 | None = Field(None, description="sha256 of conda_installer (required for conda)")
    conda_packages: list[CondaSpec] = Field(default_factory=list, description="conda packages for the environment, "
                                                                              "from mirrors.conda_channels")
    packages: list[PipRequirement] = Field(default_factory=list, description="pip packages installed after the "
                                                                             "framework")
    framework: Framework | None = Field(None, description="the ML framework and its build (left out: none)")
    torch: Torch | None = Field(
        None, exclude=True, description="the older spelling of framework pytorch (the built-in profiles'): read as "
                                        "framework {name: pytorch, version, variant: index, packages}")
    # Where the profile gave it (python_env, or python_envs[N]): what errors and the matrix name.
    _where: str = PrivateAttr("python_env")

    @model_validator(mode="after")
    def _torch_is_framework_pytorch(self) -> PythonEnv:
        # One name downstream: `torch` is read into `framework` and gone after this.
        if self.torch is not None:
            if self.framework is not None:
                raise ValueError("give framework or torch (its older spelling), not both (extending a profile that "
                                 "gives torch, set torch: null)")
            self.framework = Framework(name="pytorch", version=self.torch.version, variant=self.torch.index,
                                       packages=self.torch.packages)
            self.torch = None
        return self

    @model_validator(mode="after")
    def _conda_needs_its_installer(self) -> PythonEnv:
        # Known before any host is touched: the role would only find out after the driver.
        if self.enabled and self.manager == "conda" and not (self.conda_installer and self.conda_installer_sha256):
            raise ValueError("a conda environment needs conda_installer (a Miniforge installer URL or "
                             "path, e.g. Miniforge3-26.3.2-3-Linux-x86_64.sh) and conda_installer_sha256 "
                             "(the sha256 its release publishes); or use manager: venv")
        return self

    @property
    def where(self) -> str:
        return self._where

    @property
    def env_dir(self) -> str:
        """Where the environment is on the host (the role's python_env_env_dir)."""
        return f"{self.prefix}/envs/{self.name}" if self.manager == "conda" else f"{self.prefix}/{self.name}"

    @property
    def pytorch(self) -> Framework | None:
        """The framework when it is PyTorch (what DDP and the torch probe need)."""
        return self.framework if self.framework and self.framework.name == "pytorch" else None


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_envs(envs: list[PythonEnv]) -> None:
    """Several environments on one host must not collide: names (the role's records and the
    state record key on them), folders, and a prefix's owner and manager (the role sets the
    prefix's owner, and a conda prefix is a Miniforge install)."""
    seen: dict[str, PythonEnv] = {}
    for env in envs:
        if env.name in seen:
            raise ValueError(f"{env.where}.name: {env.name!r} is also {seen[env.name].where}'s name; each "
                             "environment needs its own name")
        seen[env.name] = env
    for env in envs:
        for other in envs:
            if other is env:
                continue
            if _inside(other.prefix, env.env_dir) or _inside(other.env_dir, env.env_dir):
                raise ValueError(f"{other.where}.prefix: {other.prefix} puts {other.name} inside {env.name} "
                                 f"({env.env_dir}); give it a prefix of its own")
            if other.prefix == env.prefix and (other.owner, other.manager) != (env.owner, env.manager):
                raise ValueError(f"{other.where}.prefix: {other.prefix} is also {env.where}'s prefix, with another "
                                 f"owner or manager ({other.owner}/{other.manager} and {env.owner}/{env.manager}); "
                                 "environments share a prefix only with the same owner and manager")


class Exporter(Strict):
    enabled: bool = Field(True, description="run dcgm-exporter; it needs dcgm.enabled (left out, it is off with "
                                            "DCGM; true with DCGM off is refused)")
    listen_address: IPAddress = Field("127.0.0.1", description="0.0.0.0 only when you mean every interface")
    port: int = Field(9400, ge=1, le=65535, description="the port dcgm-exporter listens on")
    collectors: list[Annotated[str, Field(pattern=COLLECTOR)]] = Field(
        default_factory=lambda: [
            "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        ],
        min_length=1,
        description="the DCGM fields the exporter serves",
    )
    run_as: Literal["systemd"] = Field(
        "systemd", description="systemd: our hardened unit, the one way this product runs dcgm-exporter (container "
                               "is refused: no image by digest, engine run or drift check for it is built)")
    version: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+(-\d+)?$")] | None = Field(
        None, description="the packaged exporter's version (datacenter-gpu-manager-exporter); defaults to the "
                          "newest in the catalogue")
    binary: UrlOrControllerPath | None = Field(
        None, description="a dcgm-exporter binary (URL, or path in the files root on the controller) instead of "
                          "NVIDIA's package (the fallback where the repository has none)")
    binary_sha256: Sha256 | None = Field(None, description="sha256 of binary (required with binary)")


    @field_validator("run_as", mode="before")
    @classmethod
    def _not_in_a_container(cls, value):
        if value == "container":
            raise ValueError("container is not supported: this product runs dcgm-exporter only as its own hardened "
                             "systemd unit (running it in a container, from an image named by digest, is not built); "
                             "set dcgm.exporter.run_as: systemd, or leave it out")
        return value


def _exporter_binary_checked(ex: Exporter) -> Exporter:
    if ex.binary and not ex.binary_sha256:
        raise ValueError("dcgm.exporter.binary needs dcgm.exporter.binary_sha256: nothing is installed unchecked")
    return ex


class Dcgm(Strict):
    enabled: bool = Field(True, description="install DCGM (nv-hostengine); only NVIDIA's CUDA repository has it")
    version: Annotated[str, Field(pattern=r"^[34]\.\d+\.\d+$")] | None = Field(
        None, description="DCGM release (4.5.2; 3.x is datacenter-gpu-manager); defaults to the newest the "
                          "repository flavour's catalogue has. Pinned exactly and held either way")
    exporter: Annotated[Exporter, AfterValidator(_exporter_binary_checked)] = Field(
        default_factory=Exporter, description="dcgm-exporter, serving DCGM's metrics to Prometheus")

    @model_validator(mode="after")
    def _exporter_needs_dcgm(self) -> Dcgm:
        # dcgm-exporter reads DCGM's host engine: asked for without it, it used to be rendered off
        # silently. Left at its default it follows dcgm.enabled.
        if not self.enabled and self.exporter.enabled:
            if "enabled" in self.exporter.model_fields_set:
                raise ValueError("dcgm.exporter.enabled is true but dcgm.enabled is false: dcgm-exporter serves what "
                                 "DCGM's host engine measures and cannot run without it; set dcgm.enabled: true, or "
                                 "dcgm.exporter.enabled: false")
            self.exporter.enabled = False  # resolved once, so `profiles show` says what runs
        return self


class Mirrors(Strict):
    """Where packages come from; every field has a public default so only air-gapped sites set these."""

    cuda_repo_url: RepoUrl | None = Field(
        None, description="mirror of NVIDIA's CUDA repositories root (the folder holding ubuntu2204/, debian12/); "
                          "the distribution and architecture folders are appended")
    cuda_repo_flavour: Literal["ubuntu2204", "ubuntu2404"] | None = Field(
        None, description="which of NVIDIA's repository folders (and package catalogue) to use; defaults to the "
                          "profile's os (ubuntu-22.04 -> ubuntu2204)")
    cuda_repo_key_url: RepoUrl | None = Field(
        None, description="the repository's signing key (default: NVIDIA's 3bf863cc.pub beside the repository)")
    cuda_repo_key_fingerprint: KeyFingerprint | None = Field(
        None, description="the key's fingerprint, 40 upper-case hex digits; the key is refused unless it matches "
                          "(default: NVIDIA's EB693B3035CD5710E231E123A4B469963BF863CC)")
    container_toolkit_url: RepoUrl | None = Field(
        None, description="mirror of NVIDIA's libnvidia-container repository root (the folder holding stable/); "
                          "stable/deb/<arch>/ is appended")
    container_toolkit_key_fingerprint: KeyFingerprint | None = Field(
        None, description="the toolkit repository's signing key fingerprint, 40 upper-case hex digits (default: "
                          "NVIDIA's C95B321B61E88C1809C4F759DDCAE044F796ECB0); the key is its gpgkey file beside stable/")
    apt_proxy: WebUrl | None = Field(None, description="http proxy for apt, e.g. an apt-cacher-ng shared by the fleet")
    pip_index_url: WebUrl | None = Field(None, description="pip index for the environment's packages (torch comes "
                                                         "from torch_index_url)")
    pip_find_links: UrlOrPath | None = Field(None, description="wheelhouse folder on the host, or URL; used before any "
                                                               "index")
    wheelhouse_source: ControllerPath | None = Field(
        None, description="folder of wheels in the files root on the controller, copied to each host's find-links "
                          "folder; torch is then taken from it (it must hold the torch wheel), not from the PyTorch "
                          "index")
    torch_index_url: WebUrl | None = Field(None, description="PyTorch wheel index base; the flavour (cu121) is appended")
    conda_channels: list[CondaChannel] = Field(default_factory=lambda: ["conda-forge"],
                                               description="conda channels, in order: names, or https URLs "
                                                           "(conda checks no signatures, so never http)")
    download_base_url: WebUrl | None = Field(None, description="where single-file downloads are mirrored")
    ca_certificates: list[ControllerPath] = Field(
        default_factory=list, description="extra CA certificate files to trust: PEM certificates only, in the files "
                                          "root on the controller")


class Containers(Strict):
    """A container engine with NVIDIA's Container Toolkit (docs/containers.md)."""

    runtime: Literal["none", "docker", "containerd", "podman"] = Field(
        "none", description="the engine, from the distribution's archive: docker (docker.io, the nvidia runtime "
                            "registered in /etc/docker/daemon.json), containerd (registered in "
                            "/etc/containerd/config.toml, config version 2 or 3; not on ubuntu-22.04), podman "
                            "(no registration: it reads the CDI spec); none: no engine is set up, and what an "
                            "earlier converge registered and installed is taken out again")
    default_runtime: bool = Field(False, description="make nvidia Docker's default runtime (default-runtime); "
                                                     "docker only (containerd selects it by RuntimeClass)")
    toolkit_version: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+-\d+$")] | None = Field(
        None, description="the NVIDIA Container Toolkit's exact package version (1.17.8-1), needed with a runtime; "
                          "resolved in the toolkit repository's signed index before any host is touched")

    @model_validator(mode="after")
    def _version_with_runtime(self) -> Containers:
        if self.runtime != "none" and self.toolkit_version is None:
            raise ValueError(f"containers.runtime {self.runtime} needs containers.toolkit_version: the NVIDIA Container "
                             "Toolkit's exact package version, e.g. 1.17.8-1")
        if self.default_runtime and self.runtime != "docker":
            raise ValueError(f"containers.default_runtime is for docker only, not {self.runtime}: containerd selects "
                             "the nvidia runtime per pod by a RuntimeClass (handler nvidia), podman by CDI device "
                             "(--device nvidia.com/gpu=all); leave default_runtime out")
        return self


class AcceptFloors(Strict):
    """Floors the profile sets for acceptance measurements; each wins over the cited floors in
    data/gpu_skus.yml. Left out: the cited floor, or none (the figure is reported as uncalibrated,
    never failed). The one-node all-reduce floor is verify.nccl_min_busbw_gbps."""
    gemm_fp32_tflops: float | None = Field(None, gt=0, le=100000, description="GEMM fp32 floor per GPU, TFLOPS")
    gemm_tf32_tflops: float | None = Field(None, gt=0, le=100000, description="GEMM tf32 floor per GPU, TFLOPS")
    gemm_fp16_tflops: float | None = Field(None, gt=0, le=100000, description="GEMM fp16 floor per GPU, TFLOPS")
    gemm_bf16_tflops: float | None = Field(None, gt=0, le=100000, description="GEMM bf16 floor per GPU, TFLOPS")
    gemm_fp8_tflops: float | None = Field(None, gt=0, le=100000, description="GEMM fp8 floor per GPU, TFLOPS")
    memory_gbps: float | None = Field(None, gt=0, le=100000, description="device memory bandwidth floor per GPU, GB/s")
    h2d_gbps: float | None = Field(None, gt=0, le=100000, description="host-to-device copy floor per GPU, GB/s")
    d2h_gbps: float | None = Field(None, gt=0, le=100000, description="device-to-host copy floor per GPU, GB/s")
    d2d_gbps: float | None = Field(None, gt=0, le=100000, description="GPU-to-GPU copy floor per pair, GB/s")
    fleet_allreduce_busbw_gbps: float | None = Field(
        None, gt=0, le=100000, description="all-reduce bus bandwidth floor across the hosts (provision accept --fleet), "
                                           "GB/s; below it the slow node is searched for")


# Seconds a burn-in's load may run: the profile's field and --duration alike (engine/accept).
BURN_IN_S = (10, 86400)


class BurnIn(Strict):
    """`provision accept --level burn-in`: how long the sustained load runs. No default: no
    NVIDIA or provider source we found gives one duration, so the profile (or --duration) says."""
    duration_s: int | None = Field(
        None, ge=BURN_IN_S[0], le=BURN_IN_S[1], description="seconds of sustained GEMM load per node at --level burn-in, with GPU "
                                           "clocks, temperatures, throttle reasons and ECC sampled throughout and Xid "
                                           "events counted before and after (--duration wins); unset: burn-in is "
                                           "refused until one is given")


class Accept(Strict):
    """Acceptance: measured throughput judged against floors (docs/acceptance.md)."""
    floors: AcceptFloors = Field(default_factory=AcceptFloors, description="the profile's own floors per measurement")
    burn_in: BurnIn = Field(default_factory=BurnIn, description="the burn-in level's sustained load (its duration)")


class Cost(Strict):
    """What a node costs, for `provision accept`'s cost table (--price-per-hour wins)."""
    per_hour: float | None = Field(None, gt=0, lt=1000000, description="what one node costs per hour, $; set: accept "
                                                                       "runs the reference workload and prices it")


class Verify(Strict):
    nccl_min_busbw_gbps: float | None = Field(
        None, ge=0, le=10000, description="all_reduce_perf bus bandwidth floor at the largest message size, GB/s")
    require_idle_gpus: bool = Field(False, description="fail when compute processes hold the GPUs")
    require_persistence_mode: bool = Field(True, description="fail a GPU whose persistence mode is off")
    require_ecc: bool | None = Field(None, description="None: report ECC without judging it")
    ecc_uncorrectable_max: int | None = Field(
        None, ge=0, le=1_000_000_000, description="volatile uncorrectable ECC errors tolerated (None: the SKU's, data/gpu_skus.yml)")
    ecc_correctable_max: int | None = Field(
        None, ge=0, le=1_000_000_000, description="volatile correctable ECC errors tolerated (None: the SKU's, often not judged)")
    dcgm_diag_level: Literal[0, 1, 2, 3] = Field(1, description="0 skips dcgmi diag")


class Ddp(Strict):
    """`provision verify --ddp`: a few DDP steps across the hosts with torchrun."""
    port: int = Field(29500, ge=1024, le=65535, description="the rendezvous port on the first host's test address")
    steps: int = Field(5, ge=1, le=100, description="DDP steps of the small model (each: a gradient all-reduce)")
    tensor_mib: int = Field(16, ge=1, le=4096, description="size of the all-reduce timed for bus bandwidth")
    timeout_s: int = Field(120, ge=10, le=3600, description="every wait: the rendezvous, init_process_group, "
                                                              "the collectives, the whole job")


class Network(Strict):
    """What the network between the hosts should give (`provision verify --network`)."""
    iperf3: bool = Field(False, description="install iperf3 on the hosts (the network role) for verify --network")
    port: int = Field(5201, ge=1024, le=65535, description="the iperf3 server's port on the address under test")
    duration_s: int = Field(5, ge=1, le=60, description="seconds each iperf3 test runs")
    pairing: Literal["ring", "sample"] = Field("ring", description="ring: each host to the next (N pairs); "
                                                                 "sample: a random ring cut to sample_pairs")
    sample_pairs: int = Field(16, ge=1, le=4096, description="how many pairs pairing: sample tests")
    ethernet_gbps: float | None = Field(None, gt=0, le=1600, description="the hosts' declared ethernet speed, Gb/s")
    min_gbps: float | None = Field(None, gt=0, le=1600, description="floor for each pair's iperf3 bandwidth, Gb/s "
                                                             "(default: 0.7 x ethernet_gbps)")
    infiniband_rate_gbps: Literal[100, 200, 400, 800] | None = Field(
        None, description="IB rate every InfiniBand port must run at: EDR 100, HDR 200, NDR 400, XDR 800")
    gpudirect_rdma: Literal["auto", "dma-buf", "nvidia-peermem", "off"] = Field(
        "auto", description="how InfiniBand HCAs reach GPU memory (hardware.infiniband): auto = DMA-BUF where "
                            "it works (open modules, R515+, Linux 5.12+), else nvidia-peermem where the kernel "
                            "has the peer-memory interface, else off; see compat.yml gpudirect_rdma")
    ddp: Ddp = Field(default_factory=Ddp, description="the job verify --ddp runs")

    @property
    def floor_gbps(self) -> float | None:
        return self.min_gbps if self.min_gbps is not None else (
            round(0.7 * self.ethernet_gbps, 3) if self.ethernet_gbps else None)


MigProfileName = Annotated[str, Field(pattern=r"^[1-8]g\.[0-9]{1,3}gb(\+me)?$", examples=["1g.18gb", "3g.71gb"])]


class Mig(Strict):
    """MIG instances the mig role creates and keeps across reboots (left empty: MIG is not managed)."""
    layout: dict[Literal["all"] | Annotated[int, Field(ge=0, le=15)],
                 Annotated[list[MigProfileName], Field(min_length=1, max_length=7)]] = Field(
        default_factory=dict,
        description="GPU instances per GPU in NVIDIA's profile names for the model (1g.18gb, 3g.71gb, ...): "
                    "`all: [...]` for every GPU, or per GPU index (`0: [...]`); each gets one compute instance. "
                    "Checked against the model's placements (data/mig.yml); needs hardware.gpu.mig: true")
    reconfigure_in_use: bool = Field(
        False, description="may a MIG change go ahead while processes hold the GPUs, and destroy GPU instances "
                           "that differ from the layout while processes use them (processes are never killed; "
                           "false: such a GPU is left as it is and reported)")


class Reboot(Strict):
    allowed: bool = Field(False, description="may the play reboot hosts that need it")
    timeout_s: int = Field(900, ge=60, le=7200, description="seconds a reboot may take before the host fails")


class StateTimer(Strict):
    enabled: bool = Field(False, description="provision up installs provision-state.timer (the bundle always does)")
    interval_s: int = Field(300, ge=60, le=86400, description="seconds between two runs of the node's own check")


class NodeExporter(Strict):
    manage: Literal["install", "present"] = Field(
        "present", description="install: Debian's/Ubuntu's prometheus-node-exporter; present: the site runs one")
    listen_address: IPAddress = Field("127.0.0.1", description="where the installed node_exporter listens; "
                                                               "0.0.0.0 only when you mean every interface")
    port: int = Field(9100, ge=1, le=65535, description="the port node_exporter listens on")


class Monitoring(Strict):
    state_timer: StateTimer = Field(default_factory=StateTimer, description="the node's own drift and health check "
                                                                            "(provision-state.timer)")
    node_exporter: NodeExporter = Field(default_factory=NodeExporter, description="node_exporter, which serves the "
                                                                                  "timer's textfile to Prometheus")


class Profile(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="the profile's name (run folders and state "
                                                                    "records carry it); never inherited")
    description: SingleLine = Field(description="one line saying what the profile is for; inherited through "
                                                "extends unless the profile gives its own")
    extends: SingleLine | None = Field(None, description="a built-in name or a path relative to this file")
    os: OS = Field("ubuntu-22.04", description="the hosts' system: ubuntu-22.04 or ubuntu-24.04 (the targets), "
                                               "debian-12 (Debian's own archive, and the lab)")
    hardware: Hardware = Field(description="what every host must have: preflight and verify check it")
    driver: Driver = Field(description="the NVIDIA driver")
    fabric_manager: FabricManager = Field(default_factory=FabricManager, description="NVIDIA Fabric Manager "
                                                                                     "(NVSwitch systems)")
    cuda: Cuda = Field(description="the CUDA toolkits")
    cudnn: Library = Field(default_factory=lambda: Library(enabled=False), description="cuDNN (off when left out)")
    nccl: Nccl = Field(default_factory=lambda: Nccl(enabled=False), description="NCCL and nccl-tests (off when "
                                                                               "left out)")
    tensorrt: Library = Field(default_factory=lambda: Library(enabled=False), description="TensorRT (off when "
                                                                                          "left out)")
    python_env: PythonEnv | None = Field(
        None, exclude=True, description="one environment: the one-item form of python_envs (give one or the other)")
    python_envs: list[PythonEnv] = Field(
        default_factory=list, max_length=16,
        description="the Python environments, each with its own name, prefix, owner, framework and packages "
                    "(python_env is the one-item form); an environment the list drops is removed from the hosts")
    dcgm: Dcgm = Field(default_factory=Dcgm, description="DCGM and dcgm-exporter")
    containers: Containers = Field(default_factory=Containers, description="a container engine with NVIDIA's "
                                                                           "Container Toolkit (off when left out)")
    mirrors: Mirrors = Field(default_factory=Mirrors, description="where packages come from: only mirrored and "
                                                                  "air-gapped sites set these")
    verify: Verify = Field(default_factory=Verify, description="what verify demands beyond the hardware section")
    accept: Accept = Field(default_factory=Accept, description="acceptance floors: what a measurement must reach")
    cost: Cost = Field(default_factory=Cost, description="what a node costs (provision accept's cost table)")
    reboot: Reboot = Field(default_factory=Reboot, description="whether the plays may reboot hosts")
    mig: Mig = Field(default_factory=Mig, description="MIG layout: GPU instances created, persisted across reboots "
                                                       "and verified (off when left out)")
    network: Network = Field(default_factory=Network, description="what verify --network and --ddp measure")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="the node's own timer and "
                                                                           "node_exporter")
    storage: Storage = Field(default_factory=Storage, description="local disks the node is shaped with: NVMe "
                                                                  "scratch")
    inventory_overrides: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]] = Field(
        default_factory=list,
        description="role variables this profile renders that a site may still set per host or group in its "
                    "inventory (e.g. nvidia_driver_persistence); every other one the profile owns")

    @model_validator(mode="after")
    def _resolve_defaults(self) -> Profile:
        # Derived values are filled in once here so every consumer sees the same answer.
        if self.cuda.source is None:
            self.cuda.source = self.driver.source
        self._one_list_of_envs()
        if self.fabric_manager.enabled == "auto":
            self.fabric_manager.enabled = self.hardware.interconnect == "nvswitch"
        if self.fabric_manager.enabled and self.fabric_manager.version is None:
            self.fabric_manager.version = self.driver.version
        return self

    def _one_list_of_envs(self) -> None:
        """python_env is python_envs' one-item form: after this, python_envs is the one list
        every consumer reads, holding only the environments that are on."""
        single = self.python_env
        if single is not None and single.enabled and self.python_envs:
            raise ValueError("the profile gives both python_env and python_envs: put the environment into "
                             "python_envs (or set python_env.enabled: false)")
        one = single is not None and single.enabled
        envs = [single] if one else self.python_envs
        for i, env in enumerate(envs):
            env._where = "python_env" if one else f"python_envs[{i}]"
            if env.python is None:
                env.python = DEFAULT_PYTHON[self.os]
        self.python_env = None
        self.python_envs = [env for env in envs if env.enabled]
        check_envs(self.python_envs)

    @model_validator(mode="after")
    def _prebuilt_modules_exist(self) -> Profile:
        # Signed precompiled NVIDIA modules are Ubuntu's (linux-modules-nvidia-<branch>-server-<flavour>);
        # Debian and NVIDIA's repository ship DKMS sources only.
        if self.driver.secure_boot == "prebuilt" and (not self.os.startswith("ubuntu") or self.driver.source != "distro"):
            raise ValueError(
                f"driver.secure_boot: prebuilt needs Ubuntu's signed precompiled modules, which {self.os} with "
                f"driver.source {self.driver.source} does not have (they come with os ubuntu-22.04/24.04 and "
                "driver.source: distro); set driver.secure_boot: sign (DKMS signs the module with a machine owner "
                "key) or refuse")
        return self

    @model_validator(mode="after")
    def _one_port_per_service(self) -> Profile:
        # Two services of one host on one port: the second never starts, and what is scraped
        # or measured there is the first one's.
        ports = {"monitoring.node_exporter.port": self.monitoring.node_exporter.port,
                 "network.port": self.network.port, "network.ddp.port": self.network.ddp.port}
        if self.dcgm.enabled and self.dcgm.exporter.enabled:
            ports = {"dcgm.exporter.port": self.dcgm.exporter.port, **ports}
        seen: dict[int, str] = {}
        for name, port in ports.items():
            if port in seen:
                raise ValueError(f"{seen[port]} and {name} are both {port}: two services of one host cannot listen "
                                 "on one port; give each its own")
            seen[port] = name
        return self

    @model_validator(mode="after")
    def _mig_layout_fits(self) -> Profile:
        # Refused here, before any host: a layout the GPU cannot hold, or one for a model whose
        # table nobody published (no guessing).
        layout, gpu = self.mig.layout, self.hardware.gpu
        if not layout:
            return self
        if "all" in layout and len(layout) > 1:
            raise ValueError("mig.layout: give `all` or GPU indices, not both")
        if not gpu.mig:
            raise ValueError("mig.layout needs MIG mode: set hardware.gpu.mig: true (verify then expects it on)")
        if gpu.count < 1:
            raise ValueError("mig.layout needs GPUs: hardware.gpu.count is 0")
        for key in layout:
            if key != "all" and key >= gpu.count:
                raise ValueError(f"mig.layout.{key}: GPU index {key} does not exist on a host with "
                                 f"hardware.gpu.count {gpu.count} (indices 0-{gpu.count - 1})")
        model = mig.model_for(gpu.model or "")
        if model is None:
            raise ValueError(f"mig.layout: no MIG table for GPU model {gpu.model!r} (known: "
                             f"{', '.join(mig.known_models())}, provisioner/data/mig.yml); a layout is only "
                             "accepted where NVIDIA's profiles and placements for the model are known")
        for key, names in layout.items():
            problem = mig.layout_error(model, names, f"mig.layout.{key}")
            if problem:
                raise ValueError(problem)
        return self

    @property
    def expects_gpu(self) -> bool:
        return self.hardware.gpu.count > 0
