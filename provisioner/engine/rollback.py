"""`provision up --rollback`: back to the profile each host ran before its last change.

Every converge records, on the host, the resolved profile it applied; when a converge
brings a new profile, the record before becomes `previous` (its profile, that profile's
YAML and its held package versions: plugins/module_utils/state.py). A rollback reads it
with the one-call check play (changes nothing), writes that profile into a run folder
and hands it to an ordinary `up`, so holds, pins, files and units come back as that
profile's converge makes them, with --batch/--drain/--gate as for any rollout.

A host whose converge with the new profile began and failed halfway (a failed batch) has
its record marked `pending`: it goes back to the profile it has on record.

One profile per rollback: hosts whose previous profiles differ are refused, named, with
the --limit that rolls each group back. A host with no previous profile (converged once,
or never) is refused by name before anything is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioner import outputs
from provisioner.engine.runner import Become, EventHook, run_playbook
from provisioner.errors import ProvisionError


@dataclass(frozen=True)
class Previous:
    profile: str  # the previous profile's name
    sha256: str
    path: Path  # that profile, written into the read's run folder
    hosts: tuple[str, ...]
    held_packages: dict[str, dict[str, str]]  # host -> package -> version it held then


def choose(states: dict[str, dict], where: str) -> tuple[dict, list[str]]:
    """The one profile the hosts go back to (pure: host -> provisioner_state compare's
    result, whose rollback_to is the previous record, or the host's own record when a
    converge with another profile began and did not finish). Raises ProvisionError naming the hosts that have none, or the groups whose
    previous profiles differ."""
    never = sorted(h for h, s in states.items() if not s.get("recorded"))
    none = sorted(h for h, s in states.items() if s.get("recorded") and not (s.get("rollback_to") or {}).get("profile_yaml"))
    if never or none:
        what = "; ".join(filter(None, [
            f"never converged by provision: {', '.join(never)}" if never else "",
            f"no previous profile recorded (converged with one profile only, or before rollbacks were recorded): "
            f"{', '.join(none)}" if none else ""]))
        raise ProvisionError(f"nothing to roll back to on {len(never) + len(none)} host(s): {what}; nothing was touched",
                             where=where, fix="leave those hosts out with --limit, or converge them with the profile "
                                              "you want (provision up --profile ...)")
    groups: dict[str, list[str]] = {}
    for host, state in sorted(states.items()):
        groups.setdefault(state["rollback_to"].get("profile_sha256", ""), []).append(host)
    if len(groups) > 1:
        listed = "; ".join(f"--limit {','.join(hosts)} (back to {states[hosts[0]]['rollback_to'].get('profile')!r})"
                           for hosts in groups.values())
        raise ProvisionError(f"the hosts ran different profiles before their last change: {listed}; nothing was touched",
                             where=where, fix="roll each group back on its own with the --limit shown")
    (hosts,) = groups.values()
    return states[hosts[0]]["rollback_to"], hosts


def previous_profile(target, runs_dir: Path, *, limit: str | None, forks: int | None, become: Become | None,
                     hook: EventHook | None = None) -> Previous:
    """Read every host's record (check.yml: one module call each, changes nothing) and write
    the previous profile they share into that run folder."""
    from provisioner.engine.commands import new_run_dir
    from provisioner.render import render

    run_dir = new_run_dir(runs_dir, "rollback-read", target.loaded.profile.name)
    render(target.loaded, target.inventory, run_dir / "inventory", forks or 20, variables=target.role_vars)
    run = run_playbook("check", run_dir / "inventory", run_dir, limit=limit, forks=forks, hook=hook, become=become)
    unread = sorted(h for h, r in run.hosts.items() if r.status in ("unreachable", "failed"))
    if unread or not run.hosts:
        detail = "; ".join([f"{h}: {'; '.join(run.hosts[h].failures) or run.hosts[h].status}" for h in unread]
                           + run.errors)
        raise ProvisionError(f"cannot read the state record of {', '.join(unread) or 'any host'}"
                             + (f" ({detail})" if detail else "") + "; nothing was changed",
                             where=str(run_dir), fix="make the hosts reachable, or leave them out with --limit")
    states = {h: r.reported.get("provisioner_state") or {} for h, r in run.hosts.items()}
    chosen, hosts = choose(states, str(run_dir))
    path = outputs.write_file(run_dir / "previous-profile.yml",
                              f"# The profile {', '.join(hosts)} ran before their last change (their state record).\n"
                              + chosen["profile_yaml"], mode=0o600, what="previous profile")
    held = {h: {k: str(v) for k, v in (states[h]["rollback_to"].get("held_packages") or {}).items()} for h in hosts}
    return Previous(str(chosen.get("profile", "")), str(chosen.get("profile_sha256", "")), path, tuple(hosts), held)
