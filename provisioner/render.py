"""Rendering the folder Ansible runs from: inventory, group_vars from the profile, ansible.cfg.

The roles never read the profile itself: each role's public API is its own prefixed
variables (roles/*/defaults/main.yml), and `role_vars` is the one place that maps a
profile onto them. Mirror settings left empty in the profile are left out here, so the
role's own default (the public upstream) applies.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from provisioner import compat, paths
from provisioner.errors import ProvisionError
from provisioner.inventory import Inventory, to_yaml_inventory
from provisioner.models import Profile
from provisioner.profiles import Loaded

HEADER = "# Rendered by `provision render` from profile {name} (sha256 {digest}).\n# Do not edit: re-render instead.\n"


def _library_package(kind: str, p: Profile) -> dict[str, Any]:
    lib = getattr(p, kind)
    enabled = lib.enabled and p.cuda.source == "cuda_repo"
    out: dict[str, Any] = {f"{kind}_enabled": enabled}
    if enabled:
        build = compat.library_build(kind, lib.version, p.cuda.default)
        major = p.cuda.default.split(".")[0]
        if kind == "cudnn" and lib.version.startswith("9."):
            out["cudnn_package"], out["cudnn_package_version"] = f"libcudnn9-cuda-{major}", f"{lib.version}-1"
        else:
            out[f"{kind}_package_version"] = f"{lib.version}-1+cuda{build}"
        out[f"{kind}_version"] = lib.version
    return out


def role_vars(loaded: Loaded) -> dict[str, Any]:
    p = loaded.profile
    m = p.mirrors
    env = p.python_env
    exporter = p.dcgm.exporter
    out: dict[str, Any] = {
        "provisioner_profile": p.name,
        "provisioner_profile_sha256": loaded.digest,
        "provisioner_os": p.os,
        "provisioner_expects_gpu": p.expects_gpu,
        "provisioner_reboot_allowed": p.reboot.allowed,
        "provisioner_reboot_timeout": p.reboot.timeout_s,
        "common_extra_ca_certificates": m.ca_certificates,
        # One role sets up NVIDIA's repository for every component that comes from it.
        # (DCGM has no other source.)
        "cuda_repo_enabled": p.driver.source == "cuda_repo" or p.dcgm.enabled or (p.cuda.source == "cuda_repo" and (
            p.cuda.enabled or p.cudnn.enabled or p.nccl.enabled or p.tensorrt.enabled)),
        "nvidia_driver_branch": p.driver.branch,
        "nvidia_driver_version": p.driver.version,
        "nvidia_driver_source": p.driver.source,
        "nvidia_driver_kernel_modules": p.driver.kernel_modules,
        "nvidia_driver_persistence": p.driver.persistence,
        "fabric_manager_enabled": bool(p.fabric_manager.enabled),
        "fabric_manager_version": p.fabric_manager.version or p.driver.version,
        "cuda_toolkit_enabled": p.cuda.enabled,
        "cuda_toolkit_source": p.cuda.source,
        "cuda_toolkit_versions": p.cuda.toolkits,
        "cuda_toolkit_default": p.cuda.default,
        **_library_package("cudnn", p),
        **_library_package("nccl", p),
        **_library_package("tensorrt", p),
        "nccl_tests_enabled": p.nccl.enabled and p.nccl.tests,
        "python_env_enabled": env.enabled,
        "dcgm_exporter_install_dcgm": p.dcgm.enabled,
        "dcgm_exporter_enabled": p.dcgm.enabled and exporter.enabled,
        "dcgm_exporter_listen_address": exporter.listen_address,
        "dcgm_exporter_port": exporter.port,
        "dcgm_exporter_collectors": exporter.collectors,
        "dcgm_exporter_run_as": exporter.run_as,
        # DCGM's -cudaNN package follows the driver's CUDA, not the toolkit's (l40s: CUDA 11.8 on R535 -> 12).
        "dcgm_exporter_cuda_major": compat.driver_cuda_major(p.driver.version) or int(p.cuda.default.split(".")[0]),
        "gpu_verify_fabric_manager": bool(p.fabric_manager.enabled),
        "gpu_verify_dcgm_diag_level": p.verify.dcgm_diag_level if p.dcgm.enabled else 0,
    }
    if env.enabled:
        out.update({
            "python_env_manager": env.manager,
            "python_env_python": env.python,
            "python_env_name": env.name,
            "python_env_prefix": env.prefix,
            "python_env_owner": env.owner,
            "python_env_conda_packages": env.conda_packages,
            "python_env_conda_channels": m.conda_channels,
            "python_env_pip_packages": env.packages,
        })
        if env.torch:
            out.update({
                "python_env_torch_version": env.torch.version,
                "python_env_torch_index": compat.torch_index(p),
                "python_env_torch_packages": env.torch.packages,
            })
    optional = {
        "common_apt_proxy": m.apt_proxy,
        "cuda_repo_base_url": m.cuda_repo_url,
        "python_env_pip_index_url": m.pip_index_url,
        "python_env_pip_find_links": m.pip_find_links,
        "python_env_wheelhouse_source": m.wheelhouse_source,
        "python_env_torch_index_url": m.torch_index_url,
        "python_env_conda_installer": env.conda_installer,
        "python_env_conda_installer_sha256": env.conda_installer_sha256,
        "nccl_tests_source": p.nccl.tests_source,
        "nccl_tests_sha256": p.nccl.tests_sha256,
        "dcgm_exporter_binary": exporter.binary,
        "dcgm_exporter_binary_sha256": exporter.binary_sha256,
        "provisioner_download_base_url": m.download_base_url,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    return out


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


def render(loaded: Loaded, inventory: Inventory, out_dir: Path, forks: int = 20) -> list[Path]:
    """Write the inventory folder; returns the files written. Same input, same bytes.

    Only inventory files go in it: Ansible reads every other file in an inventory
    folder as an inventory source too."""
    out_dir = out_dir.expanduser().resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise ProvisionError("the output path exists and is not a folder", where=str(out_dir),
                             fix="pass a new or existing folder with -o")
    header = HEADER.format(name=loaded.profile.name, digest=loaded.digest)
    files = {
        out_dir / "hosts.yml": header + _dump(to_yaml_inventory(inventory)),
        out_dir / "group_vars" / "all" / "provisioner.yml": header + _dump(role_vars(loaded)),
        out_dir / "ansible.cfg": ansible_cfg(out_dir, forks),
    }
    # Owner-only: an inventory says where a fleet is and how to reach it.
    old_umask = os.umask(0o077)
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            path.chmod(0o600)
    finally:
        os.umask(old_umask)
    return sorted(files)
