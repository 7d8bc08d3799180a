"""Filters that read apt's and dpkg's output and make the pin decisions, for the roles.

The roles used to do this in Jinja inside their tasks (the same loops in five roles); here
it is plain Python, unit-tested on captured output (tests/test_apt_filters.py):

  madison_versions(lines)          `apt-cache madison A B ...` -> {package: [versions, newest first]}
  dpkg_installed(lines)            `dpkg-query -W -f='${db:Status-Abbrev}|${Package}|${Version}\n'`
                                   -> {package: version} for installed packages
  versions_matching(avail, names, version)
                                   -> {package: the newest offered version of `version` ("" if none)}
  kept_versions(names, recorded, installed, avail)
                                   -> {package: the version a separately versioned package keeps}
  off_pin(held, installed, version, own_versions)
                                   -> {package: version or glob to put it back at} for moved packages
  as_pins(versions)                -> ["name=version", ...] for apt (unresolved ones left out)
  as_installed(names, installed)   -> ["name=version", ...] for messages
  kernel_compiler(proc_version)    `/proc/version` -> the compiler package the kernel was built
                                   with ("gcc-12"), or "" when it does not say
"""

from __future__ import annotations

import re

DOCUMENTATION = ""  # filters document themselves in the docstrings above


def madison_versions(lines: list[str]) -> dict[str, list[str]]:
    """Each package's versions as `apt-cache madison` lists them (newest first); the same
    version from two sources is listed once."""
    out: dict[str, list[str]] = {}
    for line in lines:
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < 3 or not cells[0] or not cells[1]:
            continue  # "N: Unable to locate package ..." and blank lines
        versions = out.setdefault(cells[0], [])
        if cells[1] not in versions:
            versions.append(cells[1])
    return out


def dpkg_installed(lines: list[str]) -> dict[str, str]:
    """Installed packages (status abbreviation `?i`: ii, hi) and their versions; removed
    packages whose config files remain (rc) are not installed."""
    out: dict[str, str] = {}
    for line in lines:
        cells = line.split("|")
        if len(cells) >= 3 and cells[0][1:2] == "i":
            out[cells[1]] = cells[2].strip()
    return out


def _of_version(candidate: str, version: str) -> bool:
    """Is `candidate` a Debian revision of upstream `version` (535.309.01 -> 535.309.01-0+deb12u1)?"""
    return candidate.startswith(version + "-")


def versions_matching(avail: dict[str, list[str]], names: list[str], version: str) -> dict[str, str]:
    """For each package, the newest version apt offers of upstream `version`, or ""."""
    return {name: next((v for v in avail.get(name, []) if _of_version(v, version)), "") for name in names}


def kept_versions(names: list[str], recorded: dict[str, str], installed: dict[str, str],
                  avail: dict[str, list[str]]) -> dict[str, str]:
    """Versions for separately versioned packages (they do not carry the driver's version):
    the one recorded at the last converge (so an out-of-band up- or downgrade is put back),
    else the installed one, else apt's newest, else ""."""
    return {name: recorded.get(name) or installed.get(name) or (avail.get(name) or [""])[0] for name in names}


def off_pin(held: list[str], installed: dict[str, str], version: str, own_versions: dict[str, str]) -> dict[str, str]:
    """Held packages that moved off their pin: {package: exact version (own_versions, for
    separately versioned packages) or `version-*` glob} to reinstall them at."""
    out = {}
    for name in held:
        want, have = own_versions.get(name), installed.get(name, "")
        if (want and have != want) or (not want and not _of_version(have, version)):
            out[name] = want or f"{version}-*"
    return out


def as_pins(versions: dict[str, str]) -> list[str]:
    """{package: version} -> ["package=version", ...] for apt, leaving out unresolved ones."""
    return [f"{name}={version}" for name, version in versions.items() if version]


def as_installed(names: list[str], installed: dict[str, str]) -> list[str]:
    """`name=version` of each package as dpkg has it (`name=not installed`), for messages."""
    return [f"{name}={installed.get(name, 'not installed')}" for name in names]


def kernel_compiler(proc_version: str) -> str:
    """The compiler package of the running kernel, read from /proc/version.

    Ubuntu's HWE and cloud kernels on 22.04 are built with gcc-12 while the release's gcc
    is 11, and a DKMS build with another compiler fails; so the role installs this one."""
    match = re.search(r"\((?:[\w.]+-linux-gnu-)?(gcc|clang)(?:-(\d+))?\s+(?:version\s+)?(?:\([^)]*\)\s+)?(\d+)",
                      proc_version)
    if not match:
        return ""
    tool, suffix, number = match.groups()
    return f"{'gcc' if tool == 'gcc' else 'clang'}-{suffix or number}"


class FilterModule:
    def filters(self):
        return {
            "madison_versions": madison_versions,
            "dpkg_installed": dpkg_installed,
            "versions_matching": versions_matching,
            "kept_versions": kept_versions,
            "off_pin": off_pin,
            "as_pins": as_pins,
            "as_installed": as_installed,
            "kernel_compiler": kernel_compiler,
        }
