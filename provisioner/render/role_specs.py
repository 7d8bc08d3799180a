"""Checking role variables against the roles' own meta/argument_specs.yml, on the controller.

Ansible validates a role's variables only when the role starts, so a typo'd or wrongly
typed variable in hosts.ini would stop the run after the roles before it had already
changed the host, and argument_specs never refuses a name it does not know (the typo
would be silently ignored). Here every inventory variable named after a role
(`nvidia_driver_*`, `common_*`, ...) is validated with Ansible's own
ArgumentSpecValidator against that role's options before any host is touched: an
unknown name or a wrong type is refused, naming the variable and the inventory line.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any

from provisioner.yamlfile import load_data

from provisioner import paths
from provisioner.errors import ProvisionError
from provisioner.render import overrides
from provisioner.render.inventory import Inventory
from provisioner.profiles.models import Profile


@functools.cache
def role_options() -> dict[str, dict[str, Any]]:
    """Each role's argument_specs options (main entry point), by role name."""
    out = {}
    for spec_file in sorted(paths.roles_dir().glob("*/meta/argument_specs.yml")):
        specs = load_data(spec_file.read_text(encoding="utf-8"))["argument_specs"]
        out[spec_file.parents[1].name] = specs["main"].get("options") or {}
    return out


def _role_of(name: str, roles: list[str]) -> str | None:
    """The role a variable belongs to by its prefix (the longest role name wins)."""
    owners = [role for role in roles if name.startswith(role + "_")]
    return max(owners, key=len) if owners else None


def _not_required(options: dict[str, Any]) -> dict[str, Any]:
    # Only the variables given are judged: the profile and the role defaults supply the rest.
    return {name: {k: v for k, v in spec.items() if k != "required"} for name, spec in options.items()}


def problems(variables: dict[str, Any]) -> list[tuple[str, str]]:
    """(variable, what is wrong with it) for every role variable that is unknown or mistyped."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible.module_utils.errors import UnsupportedError

    options = role_options()
    by_role: dict[str, dict[str, Any]] = {}
    for name, value in variables.items():
        role = _role_of(name, list(options))
        if role:
            by_role.setdefault(role, {})[name] = value
    found = []
    for role, given in sorted(by_role.items()):
        known = options[role]
        for name in sorted(set(given) - set(known)):
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"did you mean {close[0]}?" if close else f"the role {role} has no such variable"
            found.append((name, f"unknown variable of the role {role}: {hint}"))
        result = ArgumentSpecValidator(_not_required(known)).validate({k: v for k, v in given.items() if k in known})
        for error in result.errors:
            if isinstance(error, UnsupportedError):
                continue  # reported above, with a suggestion
            message = str(error.args[0] if error.args else error)
            name = next((n for n in sorted(given, key=len, reverse=True) if n in message), role)
            found.append((name, message))
    return found


def _owners(inventory: Inventory) -> list[tuple[str, dict[str, Any]]]:
    owners = [(f"host {h}", v) for h, v in inventory.hosts.items()]
    return owners + [(f"group {g.name}", g.vars) for g in inventory.groups.values()]


def check_overrides(profile: Profile) -> None:
    """Every name in the profile's inventory_overrides is a variable the profile renders, and
    one a host may differ in (overrides.OVERRIDABLE)."""
    from provisioner.render import PROFILE_FIELD

    for name in profile.inventory_overrides:
        if name not in PROFILE_FIELD:
            close = difflib.get_close_matches(name, list(PROFILE_FIELD), n=1)
            raise ProvisionError(f"inventory_overrides names {name!r}, which no profile field renders "
                                 "(an inventory may set it anyway)" + (f"; did you mean {close[0]}?" if close else ""),
                                 fix="list only role variables the profile sets (provision render shows them in "
                                     "group_vars/all/provisioner.yml)")
        why = overrides.refusal(name)
        if why:
            raise ProvisionError(f"inventory_overrides names {name!r} (profile field {PROFILE_FIELD[name]}), which "
                                 f"cannot be overridden per host: {why}",
                                 fix=f"remove it from inventory_overrides; give hosts that differ in it a profile of "
                                     f"their own (extends: this one). Overridable: {', '.join(sorted(overrides.OVERRIDABLE))}")


def profile_owned(inventory: Inventory, profile: Profile) -> None:
    """Refuse an inventory that sets a variable the profile owns (render.PROFILE_FIELD),
    unless the profile allows it in inventory_overrides: a host must not quietly differ
    from the validated, recorded profile (`check` would never see it)."""
    from provisioner.render import PROFILE_FIELD

    allowed = set(profile.inventory_overrides)
    for owner, variables in _owners(inventory):
        for name in sorted(variables):
            if name in PROFILE_FIELD and name not in allowed:
                raise ProvisionError(
                    f"{owner} sets {name}, which the profile owns (profile field {PROFILE_FIELD[name]})",
                    where=inventory.where(owner, name),
                    fix=f"set {PROFILE_FIELD[name]} in the profile instead, or, for a per-host difference, list "
                        f"{name} under the profile's inventory_overrides:")


def check_inventory(inventory: Inventory, profile: Profile | None = None) -> None:
    """Refuse the inventory when a host or group sets a role variable wrongly, or (given the
    profile) one the profile owns."""
    for owner, variables in _owners(inventory):
        found = problems(variables)
        if found:
            name, message = found[0]
            more = f" (and {len(found) - 1} more: {', '.join(n for n, _ in found[1:])})" if len(found) > 1 else ""
            raise ProvisionError(f"{owner} sets {name}: {message}{more}", where=inventory.where(owner, name),
                                 fix="correct or remove the variable; each role's variables and types are in "
                                     "roles/<role>/meta/argument_specs.yml")
    if profile is not None:
        check_overrides(profile)
        profile_owned(inventory, profile)
        overrides.check(inventory, profile)
