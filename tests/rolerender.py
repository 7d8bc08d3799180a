"""Render a role's derived variables and templates the way Ansible would, without a host.

The roles keep the exact commands they run as data (vars/main.yml), so tests can check
what a profile makes them run. Precedence as in a play: role defaults < the profile's
rendered group_vars (provisioner.render.role_vars) < role vars/main.yml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from .conftest import ROLES

try:  # ansible-core 2.19 renders only strings marked trusted; before it every string was a template
    from ansible.template import trust_as_template
except ImportError:  # the floor of the range (2.17)
    def trust_as_template(value: str) -> str:
        return value


def _trust(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trust(v) for v in value]
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    return value


class RoleRender:
    def __init__(self, role: str, overrides: dict[str, Any], facts: dict[str, Any] | None = None):
        self.dir = ROLES / role
        defaults, derived, os_vars = (self._load(self.dir / part) for part in
                                      ("defaults/main.yml", "vars/main.yml", "vars/Ubuntu-22.yml"))
        variables = {**defaults, **overrides, **os_vars, **derived,
                     "ansible_managed": "Ansible managed", **(facts or {})}
        self.templar = Templar(loader=DataLoader(), variables=_trust(variables))

    @staticmethod
    def _load(path: Path) -> dict[str, Any]:
        # A role without per-release vars (fabric_manager) has no vars/Ubuntu-22.yml.
        return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}

    def var(self, name: str) -> Any:
        return self.templar.template(trust_as_template("{{ " + name + " }}"))

    def template(self, name: str) -> str:
        return self.templar.template(trust_as_template((self.dir / "templates" / name).read_text()))


def profile_vars(name: str) -> dict[str, Any]:
    from provisioner import profiles, render

    return render.role_vars(profiles.load(name))


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
