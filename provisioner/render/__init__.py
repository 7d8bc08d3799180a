"""Rendering the folder Ansible runs from: inventory, group_vars from the profile, ansible.cfg.

The roles never read the profile itself: each role's public API is its own prefixed
variables (roles/*/defaults/main.yml), and `role_vars` is the one place that maps a
profile onto them. Mirror settings left empty in the profile are left out here, so the
role's own default (the public upstream) applies.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from provisioner.profiles import compat, distro, mig, packages, skus
from provisioner import outputs, paths, profiles
from provisioner.errors import ProvisionError
from provisioner.render.ansible_data import dump_unsafe
from provisioner.render import wheel_lock
from provisioner.render.inventory import Inventory, to_yaml_inventory
from provisioner.profiles.models import Profile, PythonEnv
from provisioner.profiles import Loaded

HEADER = "# Rendered by `provision render` from profile {name} (sha256 {digest}).\n# Do not edit: re-render instead.\n"


# Every variable role_vars can write, and the profile field that sets it. These are
# profile-owned: an inventory may not set them (role_specs refuses it, naming the field),
# unless the profile lists the variable in `inventory_overrides`.
PROFILE_FIELD: dict[str, str] = {
    "provisioner_profile": "name", "provisioner_profile_sha256": "(the profile itself)", "provisioner_os": "os",
    "provisioner_profile_yaml": "(the profile itself)", "provisioner_package_index": "(the repository index the pins came from)",
    "provisioner_expects_gpu": "hardware.gpu.count", "provisioner_reboot_allowed": "reboot.allowed",
    "provisioner_reboot_timeout": "reboot.timeout_s", "common_extra_ca_certificates": "mirrors.ca_certificates",
    "provisioner_distro_packages": "driver.version / cuda.toolkits (driver.source / cuda.source: distro)",
    "provisioner_distro_archive": "os (driver.source / cuda.source: distro)",
    "common_apt_proxy": "mirrors.apt_proxy",
    "nvidia_driver_branch": "driver.branch", "nvidia_driver_version": "driver.version",
    "nvidia_driver_source": "driver.source", "nvidia_driver_kernel_modules": "driver.kernel_modules",
    "nvidia_driver_persistence": "driver.persistence", "cuda_repo_base_url": "mirrors.cuda_repo_url",
    "nvidia_driver_hold_kernel": "driver.hold_kernel", "nvidia_driver_secure_boot": "driver.secure_boot",
    "cuda_repo_enabled": "driver.source / cuda.source / dcgm.enabled",
    "cuda_repo_flavour": "mirrors.cuda_repo_flavour (or os)", "cuda_repo_key_url": "mirrors.cuda_repo_key_url",
    "cuda_repo_key_fingerprint": "mirrors.cuda_repo_key_fingerprint",
    "nvidia_driver_repo_pins": "driver.version", "fabric_manager_pins": "fabric_manager.version",
    "fabric_manager_enabled": "fabric_manager.enabled",
    "fabric_manager_nvlink5": "hardware.gpu (Blackwell) + hardware.interconnect (nvswitch)", "fabric_manager_version": "fabric_manager.version",
    "cuda_toolkit_enabled": "cuda.enabled", "cuda_toolkit_source": "cuda.source",
    "cuda_toolkit_versions": "cuda.toolkits", "cuda_toolkit_default": "cuda.default",
    "cuda_toolkit_pins": "cuda.toolkits",
    **{f"{kind}_{suffix}": f"{kind}.version" for kind in ("cudnn", "nccl", "tensorrt") for suffix in ("pins", "version")},
    "cudnn_enabled": "cudnn.enabled", "nccl_enabled": "nccl.enabled",
    "tensorrt_enabled": "tensorrt.enabled", "nccl_tests_enabled": "nccl.tests",
    "nccl_tests_source": "nccl.tests_source", "nccl_tests_sha256": "nccl.tests_sha256",
    "python_env_enabled": "python_envs (or python_env)", "python_env_envs": "python_envs (or python_env)",
    "python_env_conda_channels": "mirrors.conda_channels",
    "python_env_pip_index_url": "mirrors.pip_index_url", "python_env_pip_find_links": "mirrors.pip_find_links",
    "python_env_wheelhouse_source": "mirrors.wheelhouse_source", "python_env_torch_index_url": "mirrors.torch_index_url",
    "dcgm_exporter_install_dcgm": "dcgm.enabled", "dcgm_exporter_enabled": "dcgm.exporter.enabled",
    "dcgm_exporter_listen_address": "dcgm.exporter.listen_address", "dcgm_exporter_port": "dcgm.exporter.port",
    "dcgm_exporter_collectors": "dcgm.exporter.collectors", "dcgm_exporter_run_as": "dcgm.exporter.run_as",
    "dcgm_exporter_binary": "dcgm.exporter.binary",
    "dcgm_exporter_binary_sha256": "dcgm.exporter.binary_sha256",
    "dcgm_exporter_dcgm_pins": "dcgm.version", "dcgm_exporter_package_pins": "dcgm.exporter.version",
    "gpu_verify_fabric_manager": "fabric_manager.enabled", "gpu_verify_dcgm_diag_level": "verify.dcgm_diag_level",
    "gpu_verify_infiniband": "hardware.infiniband", "gpu_verify_framework_envs": "python_envs",
    "gpu_verify_packages": "(every package the profile's versions pin: driver, cuda, libraries, dcgm)",
    "provisioner_download_base_url": "mirrors.download_base_url",
    "network_iperf3": "network.iperf3", "network_infiniband": "hardware.infiniband",
    "network_gpudirect_rdma": "network.gpudirect_rdma", "network_gpudirect_min_kernel": "network.gpudirect_rdma",
    **{f"scratch_{name}": f"storage.scratch.{name}" for name in (
        "enabled", "devices", "all_unused_nvme", "layout", "filesystem", "mount_point", "mount_options",
        "device_timeout_s", "owner", "mode", "wipe")},
    "containers_runtime": "containers.runtime", "gpu_verify_containers_runtime": "containers.runtime",
    "containers_default_runtime": "containers.default_runtime",
    "containers_toolkit_version": "containers.toolkit_version", "containers_toolkit_pins": "containers.toolkit_version",
    "containers_toolkit_base_url": "mirrors.container_toolkit_url",
    "containers_toolkit_key_fingerprint": "mirrors.container_toolkit_key_fingerprint",
    "state_timer_enabled": "monitoring.state_timer.enabled", "state_timer_interval": "monitoring.state_timer.interval_s",
    "mig_layout": "mig.layout", "mig_reconfigure_in_use": "mig.reconfigure_in_use",
    "state_timer_node_exporter": "monitoring.node_exporter.manage",
    "state_timer_node_exporter_listen_address": "monitoring.node_exporter.listen_address",
    "state_timer_node_exporter_port": "monitoring.node_exporter.port",
    "state_timer_gpu_count": "hardware.gpu.count", "state_timer_driver_version": "driver.version",
    "state_timer_require_persistence": "verify.require_persistence_mode",
    "state_timer_ecc_uncorrectable_max": "verify.ecc_uncorrectable_max",
}


def _library(kind: str, p: Profile, pins: dict[str, dict[str, str]]) -> dict[str, Any]:
    lib = getattr(p, kind)
    enabled = lib.enabled and p.cuda.source == "cuda_repo"
    return {f"{kind}_enabled": enabled, **({f"{kind}_version": lib.version, f"{kind}_pins": pins[kind]} if enabled else {})}


def _state_timer(p: Profile) -> dict[str, Any]:
    """The node's own check (role state_timer): its timer, node_exporter, what nvidia-smi must show."""
    mon = p.monitoring
    return {
        "state_timer_enabled": mon.state_timer.enabled,
        "state_timer_interval": mon.state_timer.interval_s,
        "state_timer_node_exporter": mon.node_exporter.manage,
        "state_timer_node_exporter_listen_address": mon.node_exporter.listen_address,
        "state_timer_node_exporter_port": mon.node_exporter.port,
        "state_timer_gpu_count": p.hardware.gpu.count,
        "state_timer_driver_version": p.driver.version,
        "state_timer_require_persistence": p.verify.require_persistence_mode,
        # The same threshold verify judges by: the profile's, else the SKU's (data/gpu_skus.yml).
        "state_timer_ecc_uncorrectable_max": skus.thresholds(p, "").ecc_uncorrectable_max,
    }


def _infiniband(p: Profile) -> dict[str, Any]:
    """The InfiniBand stack (role network) and the GPUDirect RDMA path compat.gpudirect chose."""
    direct = compat.gpudirect(p)
    return {"network_infiniband": p.hardware.infiniband, "network_gpudirect_rdma": direct.mode,
            **({"network_gpudirect_min_kernel": direct.min_kernel} if direct.min_kernel else {})}


# What the import check imports for each framework.
FRAMEWORK_MODULE = {"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax"}


def framework(p: Profile, env: PythonEnv) -> dict[str, Any] | None:
    """The environment's framework as the role installs it: the exact pip requirement
    (torch==2.11.0+cu126 from the PyTorch index for its variant; tensorflow[and-cuda]==2.21.0,
    jax[cuda13]==0.10.2 or jax==0.10.2 from the pip index) and the module its check imports."""
    fw = env.framework
    if fw is None:
        return None
    if fw.name == "pytorch":
        variant = compat.torch_index(p, env)
        requirement = f"torch=={fw.version}+{variant}"
    else:
        variant = fw.variant
        requirement = compat.framework_requirement(fw.name, fw.version, str(variant))
    return {"name": fw.name, "version": fw.version, "variant": variant, "requirement": requirement,
            "module": FRAMEWORK_MODULE[fw.name], "packages": fw.packages}


def pip_requirements(p: Profile, env: PythonEnv) -> list[str]:
    """What pip installs into the environment: its framework's requirement and packages, then its own."""
    fw = framework(p, env)
    return ([fw["requirement"], *fw["packages"]] if fw else []) + list(env.packages)


def env_lock(p: Profile, env: PythonEnv, wheelhouse: str | None) -> list[dict[str, str]] | None:
    """The environment's lock when the profile's wheelhouse is one `provision wheelhouse` made
    (it has locks/): every wheel by name, version and sha256, for the role's --require-hashes
    install. Refused unless it was collected for what the environment asks now."""
    if not wheelhouse or not wheel_lock.is_locked(wheelhouse):
        return None
    lock = wheel_lock.read(wheelhouse, env.name)
    wanted = pip_requirements(p, env)
    if (lock.requirements, lock.python) != (wanted, env.python):
        raise ProvisionError(
            f"the wheelhouse's lock for {env.name} was collected for {' '.join(lock.requirements)} on Python "
            f"{lock.python}; {env.where} asks for {' '.join(wanted)} on Python {env.python}",
            where=str(wheel_lock.path(wheelhouse, env.name)),
            fix="collect it again: provision wheelhouse --profile P -o <the wheelhouse> --platform <the hosts' tag>")
    return [{"name": w.name, "version": w.version, "sha256": w.sha256} for w in lock.wheels]


def python_env(p: Profile, env: PythonEnv, local: Any) -> dict[str, Any]:
    """One environment as the python_env role's python_env_envs item."""
    out = {"name": env.name, "manager": env.manager, "python": env.python, "prefix": env.prefix,
           "owner": env.owner, "packages": env.packages, "conda_packages": env.conda_packages}
    if env.manager == "conda":
        out.update(conda_installer=local(env.conda_installer), conda_installer_sha256=env.conda_installer_sha256)
    fw = framework(p, env)
    if fw is not None:
        out["framework"] = fw
    lock = env_lock(p, env, local(p.mirrors.wheelhouse_source))
    if lock is not None:
        out["lock"] = lock
    return out


def plan_for(loaded: Loaded, mode: packages.Mode = "live") -> packages.Plan:
    """NVIDIA's package names and exact versions for the profile (packages.resolve): a
    version the repository's index lacks stops the run here, before any host."""
    try:
        return packages.resolve(loaded.profile, mode)
    except ProvisionError as exc:
        raise ProvisionError(exc.message, where=f"{loaded.files[0]}: {exc.where}", fix=exc.fix) from None


def role_vars(loaded: Loaded, plan: packages.Plan | None = None) -> dict[str, Any]:
    """The profile as role variables, with `plan`'s exact package versions (resolved live
    when not given)."""
    p = loaded.profile
    plan = plan_for(loaded) if plan is None else plan
    pins = plan.pins
    from_repo = packages.uses_cuda_repo(p)
    m = p.mirrors
    exporter = p.dcgm.exporter

    def local(value: str | None) -> str | None:
        """A controller file as the roles read it: the checked path in the files root."""
        return loaded.local_files.get(value, value) if value is not None else None

    out: dict[str, Any] = {
        "provisioner_profile": p.name,
        "provisioner_profile_sha256": loaded.digest,
        # The resolved profile, kept in the host's state record for whoever reads the node; `up
        # --rollback` never loads it (the host's word), only the controller's own copy by digest.
        "provisioner_profile_yaml": profiles.to_yaml(p),
        "provisioner_os": p.os,
        # Which index the pins came from (URL, Release Date, Packages sha256): the state record keeps it.
        "provisioner_package_index": plan.index or {},
        "provisioner_expects_gpu": p.expects_gpu,
        # What comes from the distribution's own archive ({package: upstream version}) and which
        # archive that is: preflight and up's survey ask each host's archive (apt_offer) first.
        "provisioner_distro_packages": distro.packages(p),
        "provisioner_distro_archive": distro.archive(p),
        "provisioner_reboot_allowed": p.reboot.allowed,
        "provisioner_reboot_timeout": p.reboot.timeout_s,
        "common_extra_ca_certificates": [local(c) for c in m.ca_certificates],
        # One role sets up NVIDIA's repository for every component that comes from it.
        # (DCGM has no other source.)
        "cuda_repo_enabled": from_repo,
        **({"cuda_repo_flavour": packages.flavour(p)} if from_repo else {}),
        "nvidia_driver_repo_pins": pins.get("driver", {}),
        "fabric_manager_pins": pins.get("fabric_manager", {}),
        "cuda_toolkit_pins": pins.get("cuda_toolkit", {}),
        "nvidia_driver_branch": p.driver.branch,
        "nvidia_driver_version": p.driver.version,
        "nvidia_driver_source": p.driver.source,
        "nvidia_driver_kernel_modules": p.driver.kernel_modules,
        "nvidia_driver_persistence": p.driver.persistence,
        "nvidia_driver_hold_kernel": p.driver.hold_kernel,
        "nvidia_driver_secure_boot": p.driver.secure_boot,
        "fabric_manager_enabled": bool(p.fabric_manager.enabled),
        "fabric_manager_version": p.fabric_manager.version or p.driver.version,
        # per GPU index, largest instance first (the order the placement check fitted them in)
        "mig_layout": {str(i): names for i, names in
                       mig.per_gpu(p.mig.layout, p.hardware.gpu.count, p.hardware.gpu.model or "").items()},
        "mig_reconfigure_in_use": p.mig.reconfigure_in_use,
        "fabric_manager_nvlink5": compat.nvlink5(p),
        "cuda_toolkit_enabled": p.cuda.enabled,
        "cuda_toolkit_source": p.cuda.source,
        "cuda_toolkit_versions": p.cuda.toolkits,
        "cuda_toolkit_default": p.cuda.default,
        **_library("cudnn", p, pins),
        **_library("nccl", p, pins),
        **_library("tensorrt", p, pins),
        "nccl_tests_enabled": p.nccl.enabled and p.nccl.tests,
        "python_env_enabled": bool(p.python_envs),
        "python_env_envs": [python_env(p, env, local) for env in p.python_envs],
        "dcgm_exporter_install_dcgm": p.dcgm.enabled,
        "dcgm_exporter_enabled": p.dcgm.enabled and exporter.enabled,
        "dcgm_exporter_listen_address": exporter.listen_address,
        "dcgm_exporter_port": exporter.port,
        "dcgm_exporter_collectors": exporter.collectors,
        "dcgm_exporter_run_as": exporter.run_as,
        "dcgm_exporter_dcgm_pins": pins.get("dcgm", {}),
        "dcgm_exporter_package_pins": pins.get("dcgm_exporter", {}),
        # What up's survey reads back of each package (installed version, hold): `provision plan`.
        "gpu_verify_packages": sorted({n for component in pins.values() for n in component} | set(distro.packages(p))),
        "gpu_verify_fabric_manager": bool(p.fabric_manager.enabled),
        "gpu_verify_dcgm_diag_level": p.verify.dcgm_diag_level if p.dcgm.enabled else 0,
        "gpu_verify_infiniband": p.hardware.infiniband,
        # TensorFlow and JAX are probed inside each of their environments, as its owner (only when
        # the profile has one: the role's default is none, and other profiles render as before).
        **({"gpu_verify_framework_envs": framework_probes} if (framework_probes := [
            {"name": env.name, "python": f"{env.env_dir}/bin/python", "owner": env.owner, "framework": env.framework.name}
            for env in p.python_envs if env.framework and env.framework.name in ("tensorflow", "jax")]) else {}),
        "network_iperf3": p.network.iperf3,
        **_infiniband(p),
        **_state_timer(p),
        # Only when on: the role's own defaults keep it off, and a profile without it renders as before.
        **({f"scratch_{name}": value for name, value in p.storage.scratch.model_dump().items()}
           if p.storage.scratch.enabled else {}),
        # Only when on, as scratch: the role's defaults keep it off, and a profile without it renders as before.
        **({"containers_runtime": p.containers.runtime, "gpu_verify_containers_runtime": p.containers.runtime,
            "containers_default_runtime": p.containers.default_runtime,
            "containers_toolkit_version": p.containers.toolkit_version or "",
            "containers_toolkit_pins": pins.get("container_toolkit", {})}
           if p.containers.runtime != "none" else {}),
    }
    if p.python_envs:
        out["python_env_conda_channels"] = m.conda_channels
    optional = {
        "common_apt_proxy": m.apt_proxy,
        "cuda_repo_base_url": m.cuda_repo_url,
        "cuda_repo_key_url": m.cuda_repo_key_url,
        "cuda_repo_key_fingerprint": m.cuda_repo_key_fingerprint,
        "python_env_pip_index_url": m.pip_index_url,
        "python_env_pip_find_links": m.pip_find_links,
        "python_env_wheelhouse_source": local(m.wheelhouse_source),
        "python_env_torch_index_url": m.torch_index_url,
        "nccl_tests_source": local(p.nccl.tests_source),
        "nccl_tests_sha256": p.nccl.tests_sha256,
        "dcgm_exporter_binary": local(exporter.binary),
        "dcgm_exporter_binary_sha256": exporter.binary_sha256,
        "provisioner_download_base_url": m.download_base_url,
        "containers_toolkit_base_url": m.container_toolkit_url,
        "containers_toolkit_key_fingerprint": m.container_toolkit_key_fingerprint,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    return out


def host_overrides(loaded: Loaded, inventory: Inventory, host: str) -> dict[str, Any]:
    """The profile-owned variables the inventory sets for `host`, as the profile's
    inventory_overrides allow (role_specs refuses every other one)."""
    allowed = set(loaded.profile.inventory_overrides)
    return {k: v for k, v in sorted(inventory.effective_vars(host).items()) if k in allowed}


def host_digest(loaded: Loaded, overrides: dict[str, Any]) -> str:
    """The digest a host records: the profile's, or, with overrides, one over both, so
    `check` sees an override change just as it sees a profile change."""
    if not overrides:
        return loaded.digest
    return hashlib.sha256(host_digest_source(loaded.digest, overrides).encode()).hexdigest()


def host_digest_source(profile_sha256: str, overrides: dict[str, Any]) -> str:
    """What a host digest hashes (the controller keeps it beside the profile: engine/profile_store.py)."""
    return json.dumps({"profile_sha256": profile_sha256, "inventory_overrides": overrides}, sort_keys=True,
                      separators=(",", ":"), default=str)


def _with_host_digests(loaded: Loaded, inventory: Inventory) -> Inventory:
    hosts = {}
    for name, variables in inventory.hosts.items():
        overrides = host_overrides(loaded, inventory, name)
        hosts[name] = {**variables, "provisioner_profile_sha256": host_digest(loaded, overrides)} if overrides \
            else variables
    return dataclasses.replace(inventory, hosts=hosts)


def ansible_cfg(out_dir: Path, forks: int) -> str:
    return f"""\
# Rendered by `provision render`. Use it with: ANSIBLE_CONFIG={out_dir}/ansible.cfg
[defaults]
inventory = {out_dir}/hosts.yml
collections_path = {paths.collections_path()}:~/.ansible/collections:/usr/share/ansible/collections
forks = {forks}
gathering = smart
fact_caching = jsonfile
fact_caching_connection = {out_dir}/.fact-cache
fact_caching_timeout = 3600
interpreter_python = auto_silent
retry_files_enabled = False
host_key_checking = True
timeout = 20

[ssh_connection]
pipelining = True
ssh_args = -o ControlMaster=auto -o ControlPersist=120s -o ServerAliveInterval=15
"""


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)


def group_vars_text(loaded: Loaded, variables: dict[str, Any] | None = None) -> str:
    """group_vars/all/provisioner.yml: the profile as role variables, every string !unsafe
    (data, never template source: see provisioner/render/ansible_data.py)."""
    header = HEADER.format(name=loaded.profile.name, digest=loaded.digest)
    return header + dump_unsafe(role_vars(loaded) if variables is None else variables)


def render(loaded: Loaded, inventory: Inventory, out_dir: Path, forks: int = 20, *, force: bool = False,
           variables: dict[str, Any] | None = None) -> list[Path]:
    """Write the inventory folder; returns the files written. Same input, same bytes.

    Only inventory files go in it: Ansible reads every other file in an inventory
    folder as an inventory source too. The folder must be new, empty or rendered by us
    before (outputs.check_folder); --force writes into any other."""
    header = HEADER.format(name=loaded.profile.name, digest=loaded.digest)
    names = {
        "hosts.yml": header + _dump(to_yaml_inventory(_with_host_digests(loaded, inventory))),
        "group_vars/all/provisioner.yml": group_vars_text(loaded, variables),
    }
    out_dir = outputs.check_folder(out_dir, [*names, "ansible.cfg"], force=force)
    names["ansible.cfg"] = ansible_cfg(out_dir, forks)
    # Owner-only: an inventory says where a fleet is and how to reach it.
    return sorted(outputs.write_file(out_dir / name, text, force=force, mode=0o600, what=f"rendered {name}",
                                     replace=True)
                  for name, text in names.items())
