# -*- coding: utf-8 -*-
"""The host's kernels, their DKMS-built NVIDIA modules and the Secure Boot state: read on
the host in the calls that already run there (provisioner_state compare for preflight and
check, gpu_probe for verify), parsed here, judged on the controller
(provisioner/judge/kernels.py). Standard library only: module_utils runs on the node.

`dkms status` prints one line per module/version[/kernel/arch]:
  dkms 2.x: ``nvidia, 535.161.07, 6.1.0-18-amd64, x86_64: installed``
  dkms 3.x: ``nvidia-current/535.309.01, 6.1.0-41-amd64, x86_64: installed``
  added only (no kernel): ``nvidia-current/535.309.01: added``
  and a note in brackets after the state, e.g. ``installed (WARNING! Diff between built and
  installed module!)`` or ``installed (original_module exists)``.
(dkms's own format strings: dvdhrm/dkms dkms.in, do_status / module_status_built_extra.)
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

# The Secure Boot EFI variable (UEFI spec, EFI_GLOBAL_VARIABLE GUID): efivarfs gives 4
# attribute bytes, then the value (1 byte: 1 = on).
SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

_LINE = re.compile(r"^(?P<module>[^,/:\s]+)(?:/|,\s*)(?P<version>[^,:\s]+)"
                   r"(?:,\s*(?P<kernel>[^,:\s]+)(?:,\s*(?P<arch>[^,:\s]+))?)?:\s*(?P<state>[\w-]+)(?:\s*\((?P<note>.*)\))?\s*$")


def parse_dkms_status(text: str) -> list[dict]:
    """Each line of `dkms status` as {module, version, kernel, arch, state, note}; lines that are
    not status lines (warnings, errors on stdout) are kept as {state: "unparsed", note: line}."""
    entries = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        m = _LINE.match(line)
        if m is None:
            entries.append({"module": "", "version": "", "kernel": "", "arch": "", "state": "unparsed", "note": line})
            continue
        entries.append({k: m.group(k) or "" for k in ("module", "version", "kernel", "arch", "state", "note")})
    return entries


def kernel_images(boot_files: list[str], modules_dirs: list[str]) -> dict[str, list[str]]:
    """Which kernels are installed: those with an image (/boot/vmlinuz-<ver>, or
    /lib/modules/<ver>/vmlinuz where distributions keep it there). /lib/modules folders
    without an image (left by headers alone, or by a removed kernel) are listed apart."""
    images = {os.path.basename(p)[len("vmlinuz-"):] for p in boot_files if os.path.basename(p).startswith("vmlinuz-")}
    images |= {os.path.basename(d) for d in modules_dirs if os.path.exists(os.path.join(d, "vmlinuz"))}
    images.discard("")
    others = sorted({os.path.basename(d) for d in modules_dirs} - images)
    return {"images": sorted(images), "without_image": others}


def nvidia_modules(entries: list[dict], prefix: str = "nvidia") -> dict:
    """NVIDIA's DKMS modules (name starting with `prefix`: nvidia, nvidia-current, ...) as
    {version: {"module": name, "kernels": {kernel: state}}}: per kernel "installed" wins
    over "built"; a version only "added" has no kernels."""
    out: dict = {}
    for e in entries:
        if not e["module"].startswith(prefix) or not e["version"]:
            continue
        mod = out.setdefault(e["version"], {"module": e["module"], "kernels": {}})
        if e["kernel"] and mod["kernels"].get(e["kernel"]) != "installed":
            mod["kernels"][e["kernel"]] = e["state"]
    return out


def dkms_tree(root: str = "/var/lib/dkms", prefix: str = "nvidia") -> dict:
    """What `dkms status` reports, read from DKMS's own tree without running it (the bash
    script takes ~1 s on a busy host; preflight and check run on every host): a version
    folder is "added"; <version>/<kernel>/<arch>/ is "built"; the symlink
    <module>/kernel-<kernel>-<arch> -> <version>/<kernel>/<arch> is how DKMS marks it
    "installed" (dkms 2.x and 3.x alike). Same shape as nvidia_modules()."""
    out: dict = {}
    for mdir in sorted(glob.glob(os.path.join(root, prefix + "*"))):
        module = os.path.basename(mdir)
        for vdir in sorted(glob.glob(os.path.join(mdir, "*"))):
            version = os.path.basename(vdir)
            if version.startswith("kernel-") or not os.path.isdir(vdir) or os.path.islink(vdir):
                continue
            kernels = {os.path.basename(k): "built" for k in glob.glob(os.path.join(vdir, "*"))
                       if os.path.isdir(k) and os.path.basename(k) not in ("source", "build")
                       and glob.glob(os.path.join(k, "*", "module"))}
            out.setdefault(version, {"module": module, "kernels": {}})["kernels"].update(kernels)
        for link in glob.glob(os.path.join(mdir, "kernel-*")):
            target = os.readlink(link) if os.path.islink(link) else ""
            parts = os.path.normpath(target).split(os.sep)[-3:]
            if len(parts) == 3 and parts[0] in out:
                out[parts[0]]["kernels"][parts[1]] = "installed"
    return out


def module_states(modules: dict, version: str, kernels: list[str]) -> dict[str, str]:
    """kernel -> the state of the module at `version` for it: installed, built, added (DKMS has
    its source but built it for no kernel) or absent (DKMS does not know that version)."""
    mod = modules.get(version)
    if mod is None:
        return dict.fromkeys(kernels, "absent")
    return {k: mod["kernels"].get(k, "added") for k in kernels}


def parse_mokutil_sb_state(text: str) -> str:
    """`mokutil --sb-state`: "SecureBoot enabled" / "SecureBoot disabled" / "This system
    doesn't support Secure Boot" / "EFI variables are not supported on this system"."""
    low = (text or "").lower()
    if "secureboot enabled" in low:
        return "enabled"
    if "secureboot disabled" in low:
        return "disabled"
    if "not supported" in low or "doesn't support" in low or "does not support" in low:
        return "no-efi"
    return "unknown"


def parse_secure_boot_efivar(data: bytes | None) -> str:
    """The SecureBoot EFI variable as efivarfs gives it: 4 attribute bytes, 1 value byte."""
    if data is None:
        return "unknown"
    if len(data) < 5:
        return "unknown"
    return "enabled" if data[4] == 1 else "disabled"


def in_container() -> bool:
    """podman and docker leave a marker file; systemd's own container detection writes the rest."""
    return any(os.path.exists(p) for p in ("/run/.containerenv", "/.dockerenv", "/run/systemd/container"))


def _run(argv: list[str]) -> tuple[int, str, str]:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False, timeout=60,
                           env=dict(os.environ, LC_ALL="C"))
        return r.returncode, r.stdout, r.stderr
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 126, "", str(exc)


def secure_boot() -> dict:
    """{state: enabled|disabled|no-efi|unknown, source, detail}: mokutil when installed,
    else the EFI variable; no /sys/firmware/efi means the host did not boot with EFI."""
    rc, out, err = _run(["mokutil", "--sb-state"])
    if rc != 127:
        state = parse_mokutil_sb_state(out + "\n" + err)
        if state != "unknown":
            return {"state": state, "source": "mokutil --sb-state", "detail": " ".join((out + " " + err).split())[:200]}
    try:
        with open(SECURE_BOOT_EFIVAR, "rb") as f:
            return {"state": parse_secure_boot_efivar(f.read()), "source": SECURE_BOOT_EFIVAR, "detail": ""}
    except OSError:
        pass
    if not os.path.isdir("/sys/firmware/efi"):
        return {"state": "no-efi", "source": "/sys/firmware/efi", "detail": "the host did not boot with EFI"}
    return {"state": "unknown", "source": "", "detail": "mokutil is not installed and the EFI variable is unreadable"}


def read(with_secure_boot: bool = True) -> dict:
    """Everything the controller judges about kernels and Secure Boot, read-only.
    with_secure_boot False (the node's timer: check does not judge it): mokutil is not run."""
    found = kernel_images(glob.glob("/boot/vmlinuz-*"), [d for d in glob.glob("/lib/modules/*") if os.path.isdir(d)])
    return {
        "running": os.uname().release,
        "images": found["images"],
        "without_image": found["without_image"],
        "dkms": dkms_tree(),
        # No DKMS on the host: nothing could have built a module.
        "dkms_rc": 0 if shutil.which("dkms", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") else 127,
        "dkms_error": "",
        "secure_boot": secure_boot() if with_secure_boot else {},
        "in_container": in_container(),
    }
