"""What a run acts on: the loaded profile and the inventory, validated together
(commands.prepare makes one). Its own module so that commands.py and drift.py both import it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from provisioner import profiles
from provisioner.render import host_digest, host_overrides, role_vars
from provisioner.render import inventory as inventory_mod


@dataclass(frozen=True)
class Target:
    loaded: profiles.Loaded
    inventory: inventory_mod.Inventory

    @cached_property
    def role_vars(self) -> dict:
        """The profile as role variables (render.role_vars), made once per run: the rendered
        group_vars and the check's reading of which components are off share them."""
        return role_vars(self.loaded)

    def digest_for(self, host: str | None) -> str:
        """The digest `host` records when converged: the profile's, with its overrides."""
        if host is None or host not in self.inventory.hosts:
            return self.loaded.digest
        return host_digest(self.loaded, host_overrides(self.loaded, self.inventory, host))
