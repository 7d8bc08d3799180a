"""Filters over the host's kernels and DKMS (the parsing is module_utils/kernels.py, shared
with the read-only probes that preflight, check and verify run):

  kernel_versions(find_files)        /boot/vmlinuz-* find results -> ["6.1.0-41-amd64", ...]
  dkms_states(status, version, kernels)
                                     `dkms status` stdout -> {kernel: installed|built|added|absent}
  dkms_module_name(status, version, default)
                                     the DKMS name NVIDIA's module has at `version` ("nvidia-current")
  secure_boot_state(slurped)         slurp of the SecureBoot EFI variable -> enabled|disabled|unknown
  same_key_id(a, b)                  a certificate serial (openssl x509 -serial) and modinfo's sig_key
                                     name the same key (hex, any case, colons and leading zeros aside)
  not_signed_by(results, serial)     modinfo -F sig_key loop results -> kernels not signed by that key
"""

from __future__ import annotations

import base64
import os

from ansible_collections.gpu_provisioner.node.plugins.module_utils.kernels import (
    module_states,
    nvidia_modules,
    parse_dkms_status,
    parse_secure_boot_efivar,
)

DOCUMENTATION = ""  # filters document themselves in the docstring above


def kernel_versions(files: list[dict]) -> list[str]:
    names = [os.path.basename(str(f.get("path", ""))) for f in files or []]
    return sorted({n[len("vmlinuz-"):] for n in names if n.startswith("vmlinuz-") and len(n) > len("vmlinuz-")})


def dkms_states(status: str, version: str, kernels: list[str]) -> dict[str, str]:
    return module_states(nvidia_modules(parse_dkms_status(status)), str(version), list(kernels))


def dkms_module_name(status: str, version: str, default: str) -> str:
    return nvidia_modules(parse_dkms_status(status)).get(str(version), {}).get("module") or default


def secure_boot_state(slurped: dict) -> str:
    content = (slurped or {}).get("content")
    return parse_secure_boot_efivar(base64.b64decode(content)) if content else "unknown"


def same_key_id(a: str, b: str) -> bool:
    def norm(x: str) -> str:
        x = str(x or "").strip().lower()
        x = x.split("=", 1)[1] if "=" in x else x
        return x.replace(":", "").replace(" ", "").lstrip("0")
    return bool(norm(a)) and norm(a) == norm(b)


def not_signed_by(results: list[dict], serial: str) -> list[str]:
    """The kernels (loop items of a `modinfo -F sig_key` loop) whose module is not signed by
    the certificate with this serial: unsigned, or signed by another key."""
    return [r["item"] for r in results or [] if not r.get("skipped") and not same_key_id(r.get("stdout", ""), serial)]


class FilterModule:
    def filters(self):
        return {
            "kernel_versions": kernel_versions,
            "dkms_states": dkms_states,
            "dkms_module_name": dkms_module_name,
            "secure_boot_state": secure_boot_state,
            "same_key_id": same_key_id,
            "not_signed_by": not_signed_by,
        }
