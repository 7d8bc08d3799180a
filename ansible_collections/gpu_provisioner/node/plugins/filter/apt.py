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
  pins_unoffered(pins, avail)      -> ["name=version", ...] that apt's sources do not offer
  pins_offer_report(pins, avail)   -> ["name=version (apt offers: v1, v2)", ...] for each of those, for messages
  kept_or_newest(patterns, installed, avail)
                                   -> {package: installed version if it matches its regex, else the newest offered}
  installed_matching(installed, name_re, version_re)
                                   -> {package: version} of installed packages matching both
  as_install(names, versions)      -> ["name=version" or "name", ...] for apt
  pins_if_offered(pins, avail)     -> {name: version if apt offers it else ""}
  pins_unmet(pins, installed)      -> ["name=version (installed: v)", ...] not installed exactly
  apt_preferences(pins, origin, label, what)
                                   -> the text of an apt preferences file pinning exactly these
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


def pins_unoffered(pins: dict[str, str], avail: dict[str, list[str]]) -> list[str]:
    """The exact pins no configured apt source offers (madison lists every source's versions)."""
    return [f"{name}={version}" for name, version in sorted(pins.items()) if version not in avail.get(name, [])]


def pins_offer_report(pins: dict[str, str], avail: dict[str, list[str]]) -> list[str]:
    """Each pin no apt source offers, with the versions apt does offer of that package
    (newest first), so a refusal names what the host could install instead."""
    return [f"{name}={version} (apt offers: {', '.join(avail[name]) if avail.get(name) else 'no version of ' + name})"
            for name, version in sorted(pins.items()) if version not in avail.get(name, [])]


def kept_or_newest(patterns: dict[str, str], installed: dict[str, str], avail: dict[str, list[str]]) -> dict[str, str]:
    """Per package, its installed version if that matches its version regex, else the newest
    offered one that does, else "" (not offered yet)."""
    out = {}
    for name, pattern in patterns.items():
        have = installed.get(name, "")
        out[name] = have if have and re.match(pattern, have) else next(
            (v for v in avail.get(name, []) if re.match(pattern, v)), "")
    return out


def installed_matching(installed: dict[str, str], name_re: str, version_re: str) -> dict[str, str]:
    """The installed packages whose name matches `name_re` and version `version_re` (search)."""
    return {name: v for name, v in installed.items() if re.match(name_re, name) and re.search(version_re, v)}


def as_install(names: list[str], versions: dict[str, str]) -> list[str]:
    """apt's install list: `name=version` where a version is known, the bare name otherwise."""
    return [f"{name}={versions[name]}" if versions.get(name) else name for name in names]


def install_pending(names: list[str], versions: dict[str, str], installed: dict[str, str]) -> list[str]:
    """as_install's list less what dpkg has already: a package at its version, or at any
    version where none is given. Empty means an apt call would change nothing; the roles then
    skip it, since even a no-op apt call opens apt's whole cache (seconds, per host, per run)."""
    return [entry for entry, name in zip(as_install(names, versions), names)
            if name not in installed or (versions.get(name) and installed[name] != versions[name])]


def pins_if_offered(pins: dict[str, str], avail: dict[str, list[str]]) -> dict[str, str]:
    """Each pin's version where apt offers it, "" where it does not (yet)."""
    return {name: version if version in avail.get(name, []) else "" for name, version in pins.items()}


def pins_unmet(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    """The pins not installed at exactly their version, each with what is installed."""
    return [f"{name}={version} (installed: {installed.get(name, 'none')})"
            for name, version in sorted(pins.items()) if installed.get(name) != version]


def pins_moving(pins: dict[str, str], installed: dict[str, str]) -> list[str]:
    """The pinned packages installed now at another version: the packages an install moves
    (a driver change on a converged host), not the ones it adds."""
    return sorted(name for name, version in pins.items() if installed.get(name) not in (None, version))


def moving_together(held: list[str], installed: dict[str, str], moving: list[str]) -> list[str]:
    """The held packages installed at the version of a package that moves (the old driver's
    revision): the driver's own dependencies, which must be released to move with it (apt
    keeps a held package where it is and then refuses the move). A package of another role
    at another revision (fabric manager's 580.65.06-1) stays held."""
    versions = {installed[name] for name in moving if name in installed}
    return sorted(name for name in held if installed.get(name) in versions)


def units_active(lines: list[str]) -> list[str]:
    """The units `systemctl show -p Id -p ActiveState -- UNIT...` says are running (or
    starting); a unit that does not exist reads `inactive` and is left out."""
    found, unit = [], None
    for line in lines + [""]:
        key, _, value = line.strip().partition("=")
        if key == "Id":
            unit = value
        elif key == "ActiveState" and unit and value in ("active", "activating", "reloading"):
            found.append(unit)
    return found


def apt_preferences(pins: dict[str, str], origin: str, label: str, what: str, host: str = "") -> str:
    """apt preferences for packages pinned to exact versions from one repository.

    apt uses the first record that matches a package version (checked with apt on this
    machine: tests/test_cudarepo.py), so per package, in this order:
      1. its exact version: 1001, so apt installs it and goes back to it, even downward;
      2. any other version from the repository (Pin: release o=<Origin>,l=<Label>): 100,
         still listed by apt-cache but never chosen over the pin or an installed version;
      3. anything else, from any other source (the Ubuntu archive's own build of the same
         upstream version, a PPA): -1, never installed.
    Names and versions come from the package catalogue (render), not from free text; an
    origin or label with a comma or a newline is refused, as it would end the Pin field.
    With `host`, record 2 names the repository by the host apt fetched it from (Pin: origin
    <host>) instead: for a repository whose Release fields no public source confirms (NVIDIA's
    libnvidia-container stable/deb, data/container_toolkit.yml's not_confirmed)."""
    if host:
        if not re.fullmatch(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]", host):
            raise ValueError(f"apt_preferences: not a host name: {host!r}")
        release, source = f"origin {host}", host
    else:
        release, source = None, f"{origin} {label}"
    for field in (origin, label):
        if any(c in field for c in ",\n\r"):
            raise ValueError(f"apt_preferences: a release field may not hold ',' or a newline: {field!r}")
    blocks = [f"# gpu-provisioner: {what} at exactly these versions, from {source} only."]
    for name, version in sorted(pins.items()):
        if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", name) or not re.fullmatch(r"[0-9][A-Za-z0-9.+~:-]*", version):
            raise ValueError(f"apt_preferences: not a package pin: {name}={version}")
        blocks.append(f"Package: {name}\nPin: version {version}\nPin-Priority: 1001")
        blocks.append(f"Package: {name}\nPin: {release or f'release o={origin},l={label}'}\nPin-Priority: 100")
        blocks.append(f"Package: {name}\nPin: version *\nPin-Priority: -1")
    return "\n\n".join(blocks) + "\n"


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
            "pins_unoffered": pins_unoffered,
            "pins_offer_report": pins_offer_report,
            "kept_or_newest": kept_or_newest,
            "installed_matching": installed_matching,
            "as_install": as_install,
            "install_pending": install_pending,
            "pins_if_offered": pins_if_offered,
            "pins_unmet": pins_unmet,
            "pins_moving": pins_moving,
            "units_active": units_active,
            "moving_together": moving_together,
            "apt_preferences": apt_preferences,
        }
