"""What `provision up` would do to each host, from up's own read-only survey (one probe call
per host): the packages it installs, upgrades, downgrades or removes at their exact
versions, the holds it sets, and how much the change disrupts the host.

Pure: the survey's results in, a `HostPlan` out. The versions come from the same places up
takes them: NVIDIA's packages from the package resolution (profiles/packages.py, the pins
render hands the roles), the distribution's packages from what the host's own archive offers
(judge/distro.chosen); what is installed now, and held, from the host (the probe's
provisioner_packages). A host found in the state its last converge with this profile recorded
is not converged (engine/drift.in_recorded_state, as up decides): nothing to do.

Disruption classes, from least to most: none (libraries, files, environments: nothing
restarts); service restart (a unit of ours is restarted, started or stopped); driver unload
(a new driver module replaces the loaded one: every process and unit holding /dev/nvidia*
is listed, judge/holders.py); reboot (the swap cannot happen under what holds the GPUs).
The host takes the reboot-free activation decision on its holders (module_utils/holders.py)
and the driver role acts on the same decision, so `reboot` (whether up reboots, or asks for
one) is set exactly where the class is reboot; a swap that still fails on the host (the old
module turns out busy once the daemons are stopped) falls back to the reboot there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from provisioner.judge import distro as distro_judge
from provisioner.judge import holders as holders_mod
from provisioner.profiles import distro
from provisioner.profiles.catalogue import compare_versions
from provisioner.profiles.models import Profile

Disruption = Literal["none", "service restart", "driver unload", "reboot"]
ORDER: tuple[Disruption, ...] = ("none", "service restart", "driver unload", "reboot")
Action = Literal["install", "upgrade", "downgrade", "reinstall", "remove"]
# Components whose packages run a unit of ours: a change restarts it.
SERVICES = ("fabric_manager", "dcgm", "dcgm_exporter")
# A distribution package's component, from the profile field that names it (profiles/distro.py).
FIELD_COMPONENT = {"driver": "driver", "cuda": "cuda_toolkit"}


@dataclass(frozen=True)
class Change:
    package: str
    component: str
    action: Action
    now: str          # "" = not installed
    to: str           # "" = removed

    def describe(self) -> str:
        if self.action == "install":
            return f"install {self.package} {self.to}"
        if self.action == "remove":
            return f"remove {self.package} {self.now}"
        return f"{self.action} {self.package} {self.now} -> {self.to}"


@dataclass
class HostPlan:
    host: str
    status: Literal["unchanged", "changes", "unreachable", "failed"] = "unchanged"
    why: str = ""                                   # why up converges it (or why it is not planned)
    changes: list[Change] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)  # packages up will newly hold
    drift: list[str] = field(default_factory=list)  # what differs from its record, restored by up
    disruption: Disruption = "none"
    disruption_why: str = ""
    holders: list[holders_mod.Holder] = field(default_factory=list)
    activation: holders_mod.Activation | None = None
    reboot: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "status": self.status, "why": self.why,
            "packages": [{"package": c.package, "component": c.component, "action": c.action, "now": c.now,
                          "to": c.to} for c in self.changes],
            "holds": self.holds, "drift": self.drift, "disruption": self.disruption,
            "disruption_why": self.disruption_why,
            "holders": [{"pid": h.pid, "command": h.command, "user": h.user, "unit": h.unit, "kind": h.kind,
                         "devices": h.devices} for h in self.holders],
            "activation": None if self.activation is None else {
                "load_without_reboot": self.activation.load, "why": self.activation.why,
                "stop_units": list(self.activation.stop_units)},
            "reboot": self.reboot,
        }


def _dict(value: Any) -> dict:
    """A host's answer where a mapping is expected: anything else counts as nothing said."""
    return value if isinstance(value, dict) else {}


def _compare(a: str, b: str) -> int:
    return compare_versions(a, b)


def _change(package: str, component: str, now: dict | None, to: str) -> Change | None:
    installed = str((now or {}).get("version") or "")
    if not installed:
        return Change(package, component, "install", "", to)
    if not to or installed == to:
        return None
    return Change(package, component, "upgrade" if _compare(to, installed) > 0 else "downgrade", installed, to)


def wanted(profile: Profile, pins: dict[str, dict[str, str]], offer: dict | None) -> dict[str, tuple[str, str]]:
    """{package: (component, exact version up installs)}; "" where only the host's archive
    can say at converge (it was not asked: the survey asks only hosts not in their record)."""
    out = {name: (component, version) for component, named in pins.items() for name, version in named.items()}
    chosen = distro_judge.chosen(profile, offer)
    for name, w in distro.wanted(profile).items():
        out.setdefault(name, (FIELD_COMPONENT.get(w.field.split(".")[0], w.field.split(".")[0]), chosen.get(name, "")))
    return out


def host_plan(host: str, profile: Profile, pins: dict[str, dict[str, str]], reported: dict[str, Any], *,
              in_record: bool, drift: list[tuple[str, str]], removed: list[tuple[str, str]]) -> HostPlan:
    """One surveyed host's plan. reported: the survey's provisioner_* results; in_record:
    drift.in_recorded_state (up skips the converge); drift / removed: engine/drift's
    state_drift and components_off pairs."""
    plan = HostPlan(host)
    reported = _dict(reported)
    probe = _dict(_dict(reported.get("provisioner_verify")).get("probe"))
    found = holders_mod.from_probe(reported.get("provisioner_holders"))
    plan.holders = found
    if in_record:
        plan.why = "in the state its last converge with this profile recorded: up does not converge it"
        return plan
    state = _dict(reported.get("provisioner_state"))
    if not state.get("recorded"):
        plan.why = "never converged by provision"
    elif state.get("profile") != profile.name:
        plan.why = f"converged with profile {str(state.get('profile'))[:100]!r}"
    else:
        plan.why = "the profile or the host changed since its last converge"
    installed = _dict(reported.get("provisioner_packages"))
    for name, (component, version) in sorted(wanted(profile, pins, reported.get("provisioner_apt_offer")).items()):
        now = installed.get(name) if isinstance(installed.get(name), dict) else None
        change = _change(name, component, now, version)
        if change:
            plan.changes.append(change)
        if not (now or {}).get("hold"):  # every package up pins is held (DESIGN: pinned exactly and held)
            plan.holds.append(name)
    plan.drift = [f"{item}: {detail}" for item, detail in drift]
    for item, detail in removed:
        plan.drift.append(f"{item}: {detail}")
    plan.status = "changes" if plan.changes or plan.holds or plan.drift or not state.get("recorded") else "unchanged"
    _disruption(plan, profile, probe, reported, removed)
    return plan


def _disruption(plan: HostPlan, profile: Profile, probe: dict, reported: dict, removed: list) -> None:
    components = {c.component for c in plan.changes}
    container = str(probe.get("container") or "")
    lspci = _dict(reported.get("provisioner_preflight")).get("lspci") or []
    loaded = str(probe.get("module_version") or "")
    if "driver" in components and not container and lspci:
        # The driver role's own rule (roles/nvidia_driver/vars/main.yml reboot_due): the
        # installed module is not the loaded one on a host with an NVIDIA device.
        plan.activation = holders_mod.activation(_dict(reported.get("provisioner_holders")), plan.holders)
        if plan.activation.load and profile.driver.secure_boot == "sign":  # the role does not try (kernel.yml)
            plan.activation = holders_mod.Activation(False, "with Secure Boot signing the new module loads only "
                                                            "once its key is enrolled, at a boot")
        # The driver role loads the new module in place where the host's decision allows it
        # (roles/nvidia_driver/tasks/kernel.yml, driver_activation); a reboot otherwise.
        plan.reboot = loaded != profile.driver.version and not plan.activation.load
        plan.disruption = "driver unload" if plan.activation.load else "reboot"
        plan.disruption_why = f"driver {loaded or 'not loaded'} -> {profile.driver.version}: {plan.activation.why}"
        if plan.reboot:
            plan.disruption_why += ("; up reboots the host to load it" if profile.reboot.allowed else
                                    "; up asks for a reboot (reboot.allowed is false)")
        return
    restarts = sorted(components & ({"driver"} | set(SERVICES)))
    if restarts or removed or any(d.startswith("unit ") for d in plan.drift):
        plan.disruption = "service restart"
        why = [f"{c} packages change" for c in restarts]
        if "driver" in restarts:  # roles/nvidia_driver stops these while the driver's packages move
            why[restarts.index("driver")] += (" (persistenced, fabric manager, DCGM and the exporter stop while they move"
                                              + (f"; a {container} container: no kernel module is loaded or swapped)"
                                                 if container else ")"))
        why += [item for item, _ in removed] + [d for d in plan.drift if d.startswith("unit ")]
        plan.disruption_why = "; ".join(why)
    elif plan.changes or plan.drift:
        plan.disruption_why = "libraries, files or environments only: nothing restarts"


@dataclass
class FleetPlan:
    profile: str
    hosts: list[HostPlan] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    run_dir: str = ""

    @property
    def exit_code(self) -> int:
        if self.errors or any(h.status in ("unreachable", "failed") for h in self.hosts):
            return 1
        return 2 if any(h.status == "changes" for h in self.hosts) else 0

    def worst(self) -> Disruption:
        return max((h.disruption for h in self.hosts), key=ORDER.index, default="none")

    def summary(self) -> str:
        changing = [h for h in self.hosts if h.status == "changes"]
        counts: dict[str, int] = {}
        for h in self.hosts:
            for c in h.changes:
                counts[c.action] = counts.get(c.action, 0) + 1
        actions = ", ".join(f"{n} {a}" for a, n in sorted(counts.items())) or "no package changes"
        reboots = sum(h.reboot for h in self.hosts)
        broken = sum(h.status in ("unreachable", "failed") for h in self.hosts)
        return (f"plan {self.profile}: {len(changing)} of {len(self.hosts)} host(s) change ({actions}); "
                f"worst disruption: {self.worst()}; {reboots} reboot(s)" + (f"; {broken} not surveyed" if broken else ""))

    def lines(self, verbose: bool = False) -> list[str]:
        """The plan for people: the summary, then each host that changes or could not be surveyed."""
        out = [self.summary()]
        for h in sorted(self.hosts, key=lambda h: h.host):
            if h.status == "unchanged" and not verbose:
                continue
            out.append(f"{h.host}: {h.status}" + (f" ({h.why})" if h.why else ""))
            out += [f"  {c.describe()}  [{c.component}]" for c in h.changes]
            if h.holds:
                out.append(f"  hold {', '.join(h.holds)}")
            out += [f"  restore {d}" for d in h.drift]
            if h.status == "changes":
                out.append(f"  disruption: {h.disruption}" + (f" ({h.disruption_why})" if h.disruption_why else ""))
                out += [f"  holder: {x.describe()} [{x.kind}]" for x in h.holders]
                out.append(f"  reboot: {'yes' if h.reboot else 'no'}")
        out += [f"error: {e}" for e in self.errors]
        if self.run_dir:
            out.append(f"run folder: {self.run_dir}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"command": "plan", "profile": self.profile, "exit_code": self.exit_code, "summary": self.summary(),
                "worst_disruption": self.worst(), "reboots": [h.host for h in self.hosts if h.reboot],
                "hosts": [h.as_dict() for h in sorted(self.hosts, key=lambda h: h.host)], "errors": self.errors,
                "run_dir": self.run_dir}
