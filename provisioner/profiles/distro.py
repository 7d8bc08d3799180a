"""What a profile installs from the distribution's own archive (driver.source / cuda.source:
distro), and which archive that is: worked out here, once, for render and for the judge.

The package names are the roles' own: read from the same vars files the roles load on the
host (roles/nvidia_driver/vars/<OS>.yml `nvidia_driver_os_packages`, roles/cuda_toolkit/
vars/<OS>.yml `cuda_toolkit_os_distro_pinned`), never a second list. So are the archive's
suites and the components the role common enables (roles/common/vars/<OS>.yml). Each package
carries the version the roles match it with:

  upstream  the driver's packages: a Debian revision of driver.version (535.309.01 ->
            535.309.01-0+deb12u1), as the role nvidia_driver's `versions_matching` filter;
  release   the toolkit: a version of the release (11.8 -> 11.8.89~11.8.0-5~deb12u1), as the
            role cuda_toolkit's `^<release>\\.` pattern;
  any       a separately versioned package (nvidia-persistenced): the archive's newest, as the
            role's `kept_versions` takes it on a first install.

render hands the names and versions to the plays (`provisioner_distro_packages`); the module
apt_offer asks each host's archive for them before anything changes; judge/distro.py judges
the answer with `matches` and `newest`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, cmp_to_key
from typing import Any, Literal

from provisioner import paths
from provisioner.profiles.catalogue import compare_versions
from provisioner.profiles.models import Profile
from provisioner.yamlfile import load_data

# The vars file each role loads for a profile's OS (`<distribution>-<major version>.yml`).
OS_VARS = {"debian-12": "Debian-12", "ubuntu-22.04": "Ubuntu-22", "ubuntu-24.04": "Ubuntu-24"}
_BRANCH = re.compile(r"\{\{\s*nvidia_driver_branch\s*\}\}")

Rule = Literal["upstream", "release", "any"]


@dataclass(frozen=True)
class Want:
    version: str        # the upstream version or release the profile names ("" for any)
    rule: Rule
    field: str          # the profile field that sets it

    def describe(self) -> str:
        return {"upstream": self.version, "release": f"{self.version}.*", "any": "any version"}[self.rule]


@cache
def role_os_vars(role: str, os_name: str) -> dict[str, Any]:
    """A role's vars file for the profile's OS, as the role itself loads it ({} if it has none)."""
    path = paths.roles_dir() / role / "vars" / f"{OS_VARS[os_name]}.yml"
    return load_data(path.read_text()) if path.is_file() else {}


def _names(items: list[str], branch: int) -> list[str]:
    """The vars file's package names with the one template they use (the branch) filled in."""
    names = [_BRANCH.sub(str(branch), item) for item in items]
    left = [n for n in names if "{" in n]
    if left:
        raise ValueError(f"a distro package name uses a template other than nvidia_driver_branch: {left}")
    return names


def wanted(p: Profile) -> dict[str, Want]:
    """{package: Want} for what the profile takes from the distribution's archive ({} if nothing)."""
    out: dict[str, Want] = {}
    if p.driver.source == "distro":
        drv = role_os_vars("nvidia_driver", p.os)
        sets = drv.get("nvidia_driver_os_packages") or {}
        # As the role picks its set: driver.secure_boot prebuilt takes the release's no-DKMS one.
        chosen = "prebuilt" if p.driver.secure_boot == "prebuilt" and "prebuilt" in sets else "distro"
        for name in _names((sets.get(chosen) or {}).get(p.driver.kernel_modules, []), p.driver.branch):
            out[name] = Want(p.driver.version, "upstream", "driver.version")
        if p.driver.persistence:
            for name in _names((drv.get("nvidia_driver_os_persistence_packages") or {}).get("distro", []),
                               p.driver.branch):
                out.setdefault(name, Want("", "any", "driver.persistence"))
    if p.cuda.enabled and p.cuda.source == "distro":
        tk = role_os_vars("cuda_toolkit", p.os)
        release = str(tk.get("cuda_toolkit_os_distro_release", p.cuda.default))
        for name in tk.get("cuda_toolkit_os_distro_pinned", []):
            out[name] = Want(release, "release", "cuda.toolkits")
    return out


def packages(p: Profile) -> dict[str, str]:
    """render's `provisioner_distro_packages`: {package: upstream version or release}."""
    return {name: want.version for name, want in sorted(wanted(p).items())}


def archive(p: Profile) -> dict[str, Any]:
    """render's `provisioner_distro_archive`: the distribution's own suites, the components
    the role common enables and the files it enables them in ({} if nothing comes from it)."""
    if not wanted(p):
        return {}
    common = role_os_vars("common", p.os)
    return {"suites": list(common["common_os_apt_suites"]), "components": list(common["common_os_apt_components"]),
            "component_files": [common["common_os_apt_sources_list"], common["common_os_apt_deb822_file"]]}


def matches(want: Want, version: str) -> bool:
    """Whether the archive's `version` is one the role would install for `want`."""
    if want.rule == "upstream":
        return version.startswith(want.version + "-")
    if want.rule == "release":
        return re.match("^" + re.escape(want.version) + r"\.", version) is not None
    return True


def newest(versions: list[str]) -> str:
    return max(versions, key=cmp_to_key(compare_versions))


def nearest(versions: list[str], version: str, n: int = 3) -> list[str]:
    """Up to `n` of `versions` on each side of `version` in dpkg order: what a refusal offers."""
    ordered = sorted(set(versions), key=cmp_to_key(compare_versions))
    if not version:
        return ordered[-n:]
    below = [v for v in ordered if compare_versions(v.split(":", 1)[-1], version) < 0]
    return below[-n:] + ordered[len(below):len(below) + n]
