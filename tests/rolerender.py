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
from ansible.template import Templar, trust_as_template

from .conftest import ROLES


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
        defaults = yaml.safe_load((self.dir / "defaults" / "main.yml").read_text()) or {}
        derived = yaml.safe_load((self.dir / "vars" / "main.yml").read_text()) or {}
        os_vars = yaml.safe_load((self.dir / "vars" / "Ubuntu-22.yml").read_text()) or {}
        variables = {**defaults, **overrides, **os_vars, **derived,
                     "ansible_managed": "Ansible managed", **(facts or {})}
        self.templar = Templar(loader=DataLoader(), variables=_trust(variables))

    def var(self, name: str) -> Any:
        return self.templar.template(trust_as_template("{{ " + name + " }}"))

    def template(self, name: str) -> str:
        return self.templar.template(trust_as_template((self.dir / "templates" / name).read_text()))


def profile_vars(name: str) -> dict[str, Any]:
    from provisioner import profiles, render

    return render.role_vars(profiles.load(name))


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
