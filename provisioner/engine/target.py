"""What a run acts on: the loaded profile and the inventory, validated together
(commands.prepare makes one). Its own module so that commands.py and drift.py both import it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from provisioner import profiles
from provisioner.profiles import packages
from provisioner.render import host_digest, host_overrides, plan_for, role_vars
from provisioner.render import inventory as inventory_mod


@dataclass(frozen=True)
class Target:
    loaded: profiles.Loaded
    inventory: inventory_mod.Inventory
    # Where NVIDIA's package versions come from (packages.resolve): the live index for what
    # changes hosts (render, preflight, up); the index last read for what only judges them
    # (check, verify, diagnose), so the archive moving on is not drift.
    resolution: packages.Mode = "live"

    @cached_property
    def plan(self) -> packages.Plan:
        return plan_for(self.loaded, self.resolution)

    @cached_property
    def role_vars(self) -> dict:
        """The profile as role variables (render.role_vars), made once per run: the rendered
        group_vars and the check's reading of which components are off share them."""
        return role_vars(self.loaded, self.plan)

    def digest_for(self, host: str | None) -> str:
        """The digest `host` records when converged: the profile's, with its overrides."""
        if host is None or host not in self.inventory.hosts:
            return self.loaded.digest
        return host_digest(self.loaded, host_overrides(self.loaded, self.inventory, host))
