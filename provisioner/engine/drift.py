"""Drift: how a host's recorded state (what its last converge applied, read back by the
provisioner_state module in one call) differs from now, and from the profile asked for.
Pure functions over the module's result; preflight and check both use them."""

from __future__ import annotations

from provisioner.judge import kernels, mig
from provisioner.profiles.models import Profile
from provisioner.verdicts.checks import failed
from provisioner.engine.target import Target


# The drift item of packages dpkg left half-configured (also named so from Prometheus: engine/prometheus.py).
DPKG_ITEM = "dpkg: packages left half-configured by an interrupted run"


def state_drift(state: dict) -> list[tuple[str, str]]:
    """The differences provisioner_state found between a host and its record, as
    (item, what changed) pairs, plus packages dpkg left half-configured."""
    found = [(d["item"], f"recorded: {d['recorded']}; now: {d['now']}") for d in state.get("differences") or []]
    if state.get("dpkg_audit"):
        found.append((DPKG_ITEM, " ".join(str(state["dpkg_audit"]).split())[:500]))
    return found


def mig_drift(state: dict, profile: Profile) -> list[tuple[str, str]]:
    """The GPUs whose MIG mode or instances differ from mig.layout (instances lost at a reboot,
    MIG mode off), from what provisioner_state read with `mig: true`."""
    return mig.differences(profile, state.get("mig")) if profile.mig.layout else []


def in_recorded_state(state: dict, target: Target, host: str | None = None) -> bool:
    """Converged with this very profile, nothing managed has moved since, every installed
    kernel has the driver's module (a kernel installed since needs one built) and the MIG layout
    is in place (lost at a reboot: up re-applies it): no converge needed."""
    return (bool(state.get("recorded")) and not state_drift(state) and not recorded_profile_check(state, target, host)
            and not kernels.missing(target.loaded.profile, state.get("kernels") or {})
            and not mig_drift(state, target.loaded.profile))


def recorded_profile_check(recorded: dict, target: Target, host: str | None = None):
    """The host's record against the profile asked for (and the host's allowed
    inventory_overrides, which are part of the digest it records)."""
    name, digest = target.loaded.profile.name, target.digest_for(host)
    if not recorded:
        return [failed("recorded profile", "this host was never converged by provision (no local fact)")]
    if recorded.get("profile") != name:
        return [failed("recorded profile", f"converged with profile {recorded.get('profile')!r}, not {name!r}")]
    if recorded.get("profile_sha256") != digest:
        what = "the profile or this host's inventory_overrides" if digest != target.loaded.digest else "the profile"
        return [failed("recorded profile", f"{what} changed since this host was converged (re-run provision up)")]
    return []


# The role variables that switch a component on; a role not named here has one switch,
# <role>_enabled, and a role with none (common, nvidia_driver) is always on.
SWITCHES: dict[str, tuple[str, ...]] = {
    "dcgm_exporter": ("dcgm_exporter_enabled", "dcgm_exporter_install_dcgm"),
    # The network role runs for iperf3 and for an InfiniBand profile's RDMA stack: on while either is.
    "network": ("network_iperf3", "network_infiniband"),
}


def components_off(state: dict, variables: dict) -> list[tuple[str, str]]:
    """Components the host's record says it has and the profile turns off (or drops): what
    `provision up` would remove, as (item, what is left) pairs. `variables`: the profile's
    role variables (render.role_vars)."""
    installed = {}
    for role, items in (state.get("components") or {}).items():
        # Installed means packages or units; a role's own fact file stays while it is off.
        left = "; ".join(f"{kind.replace('_', ' ')}: {', '.join(items[kind])}" for kind in
                         ("held_packages", "packages", "units") if items.get(kind))
        if left:
            installed[role] = left
    return off_components(installed, variables)


def off_components(installed: dict[str, str], variables: dict) -> list[tuple[str, str]]:
    """The roles of `installed` (role -> what of it the record lists) the profile turns off:
    the record read over SSH (components_off) and the one Prometheus carries
    (engine/prometheus.py) are judged here alike."""
    found = []
    for role, left in sorted(installed.items()):
        switches = SWITCHES.get(role, (f"{role}_enabled",))
        if not any(s in variables for s in switches) or any(variables.get(s) for s in switches):
            continue
        found.append((f"component {role} is off in the profile",
                      f"still on this host ({left}); provision up removes it"))
    return found
