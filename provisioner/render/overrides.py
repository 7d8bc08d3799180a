"""Per-host overrides pass the validators of the profile field they override.

A profile may let an inventory set a few of the role variables it renders, per host or
group (`inventory_overrides`). The inventory is the operator's, but the value lands where
the profile's field would have: `python_env_prefix=/` would build (and rebuild) the
environment in `/`, `dcgm_exporter_listen_address=not-an-ip` would reach the unit. So each
overridable variable maps back to the one profile field it renders as it is, and a host's
overrides are validated as that profile would be: the field set to the host's value, the
whole profile through its pydantic model and the compatibility matrix. Each distinct set of
overrides is judged once. A template in an override is refused: Ansible would render it on
the host into a value nothing here has checked.

What cannot be checked this way is not overridable: a field that also feeds other variables
or the package plan resolved from the repository's index (driver.version: the pins, fabric
manager, the node's own check), one the controller itself reads back (ports and collectors
monitoring scrapes, the timer's interval its alerts use), and the controller files
(mirrors.ca_certificates, ...), which come only through the profile, from the files root.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from provisioner import profiles
from provisioner.errors import ProvisionError
from provisioner.profiles import compat
from provisioner.profiles.models import Profile
from provisioner.render.inventory import Inventory

# Variable -> the profile field it renders as it is, and alone (render.PROFILE_FIELD names
# the same field for it and for no other variable: tests/test_overrides.py holds it to that).
OVERRIDABLE: dict[str, tuple[str, ...]] = {name: tuple(field.split(".")) for name, field in {
    "nvidia_driver_persistence": "driver.persistence",
    "nvidia_driver_hold_kernel": "driver.hold_kernel",
    "provisioner_reboot_allowed": "reboot.allowed",
    "provisioner_reboot_timeout": "reboot.timeout_s",
    "common_apt_proxy": "mirrors.apt_proxy",
    "provisioner_download_base_url": "mirrors.download_base_url",
    "python_env_conda_channels": "mirrors.conda_channels",
    "python_env_pip_index_url": "mirrors.pip_index_url",
    "python_env_pip_find_links": "mirrors.pip_find_links",
    "python_env_torch_index_url": "mirrors.torch_index_url",
    "dcgm_exporter_listen_address": "dcgm.exporter.listen_address",
    "network_iperf3": "network.iperf3",
    "state_timer_enabled": "monitoring.state_timer.enabled",
    "state_timer_node_exporter": "monitoring.node_exporter.manage",
    "state_timer_node_exporter_listen_address": "monitoring.node_exporter.listen_address",
}.items()}
# The controller files a profile names: read only from the files root (profiles/controller_files.py).
CONTROLLER_FILES = ("common_extra_ca_certificates", "python_env_wheelhouse_source", "python_env_conda_installer",
                    "nccl_tests_source", "dcgm_exporter_binary")
_TEMPLATE = ("{{", "{%", "{#")


def refusal(name: str) -> str | None:
    """Why the variable `name` (one a profile renders) cannot be overridden per host, or None."""
    if name in OVERRIDABLE:
        return None
    if name in CONTROLLER_FILES:
        return "it names a controller file, and those come only through the profile, read from the files root"
    return ("its profile field also decides other variables, the package plan or what the controller reads back, "
            "so one host cannot differ in it alone")


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return any(marker in value for marker in _TEMPLATE)
    if isinstance(value, dict):
        return any(_templated(v) for v in value.values())
    if isinstance(value, list):
        return any(_templated(v) for v in value)
    return False


def _problem(base: dict, overrides: dict[str, Any]) -> tuple[list[str], str] | None:
    """(the variables at fault, why) when the profile with `overrides` is not one it accepts."""
    for name, value in overrides.items():
        if _templated(value):
            return [name], "an override is a value, not a template (Ansible would render it on the host unchecked)"
    data = json.loads(json.dumps(base))  # a deep copy
    for name, value in overrides.items():
        *parents, leaf = OVERRIDABLE[name]
        section = data
        for depth, key in enumerate(parents, 1):
            section = section.get(key)
            if not isinstance(section, dict):
                return [name], f"the profile has no {'.'.join(parents[:depth])}, so there is nothing to override"
        section[leaf] = value
    try:
        candidate = Profile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        names = [n for n in overrides if loc[:len(OVERRIDABLE[n])] == OVERRIDABLE[n]] or list(overrides)
        return names, err["msg"].removeprefix("Value error, ")
    errors = [p.render() for p in compat.check(candidate) if p.severity == "error"]
    return (list(overrides), "; ".join(errors)) if errors else None


def check(inventory: Inventory, profile: Profile) -> None:
    """Refuse the first host whose overrides (the profile's inventory_overrides it sets) the
    profile's own validators refuse: one error naming the inventory file and line, the host
    and the variable."""
    allowed = [n for n in profile.inventory_overrides if n in OVERRIDABLE]
    if not allowed:
        return
    base = profiles.as_dict(profile)
    judged: set[str] = set()
    for host in inventory.hostnames():
        given = inventory.effective_vars(host)
        overrides = {n: given[n] for n in allowed if n in given}
        key = json.dumps(overrides, sort_keys=True, default=str)
        if not overrides or key in judged:
            continue
        judged.add(key)
        found = _problem(base, overrides)
        if found:
            names, why = found
            name = names[0]
            field = ".".join(OVERRIDABLE[name])
            owner = inventory.owner_of(host, name)
            shown = ", ".join(f"{n}={overrides[n]!r}" for n in names)
            raise ProvisionError(
                f"{owner} sets {shown}" + (f" for host {host}" if owner != f"host {host}" else "")
                + f", which the profile's {field} would refuse: {why}",
                where=inventory.where(owner, name),
                fix=f"give a value {field} accepts (the profile's own is {base_value(base, name)!r}), or remove the "
                    "override")


def base_value(base: dict, name: str) -> Any:
    value: Any = base
    for key in OVERRIDABLE[name]:
        value = value.get(key) if isinstance(value, dict) else None
    return value
