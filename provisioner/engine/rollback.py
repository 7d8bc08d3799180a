"""`provision up --rollback`: back to the profile each host ran before its last change.

Every converge records, on the host, the digest of the profile it applied; when a converge
brings a new profile, the record before becomes `previous` (plugins/module_utils/state.py).
A rollback reads those records with the one-call check play (changes nothing) and hands the
profile they name to an ordinary `up`, so holds, pins, files and units come back as that
profile's converge makes them, with --batch/--drain/--gate as for any rollout.

What a host reports is its word: it names a digest, and the profile comes from the
controller, never from the host. Each digest is looked up among the profiles this
controller's `up` applied (engine/profile_store.py), or is the digest of the --profile
given; the profile YAML a record carries is never loaded. So one dishonest host can neither
choose what the others get nor make the controller read its files (`extends:`, CA paths).

--profile names either the profile the hosts run now (the way back then comes from the
controller's copy) or the one they go back to (its digest must be the one they report);
anything else is refused, as is a digest the controller never applied (pass its file with
--profile).

A host whose converge with the new profile began and failed halfway (a failed batch) has
its record marked `pending`: it goes back to the profile it has on record.

One profile per rollback: hosts whose previous profiles differ are refused, named, with
the --limit that rolls each group back. A host with no previous profile (converged once,
or never) is refused by name before anything is touched.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from provisioner import profiles
from provisioner.engine import profile_store
from provisioner.engine.runner import Become, EventHook, run_playbook
from provisioner.engine.target import Target
from provisioner.errors import ProvisionError

STORE_FIX = "pass the profile they ran before with --profile FILE (its sha256 must be the one shown)"


@dataclass(frozen=True)
class Rollback:
    back_to: profiles.Loaded  # the controller's copy, or the --profile file
    hosts: tuple[str, ...]
    now: profiles.Loaded | None  # what they run now, when the controller knows it
    read_from: Path  # the run folder of the read

    @property
    def path(self) -> Path:
        return self.back_to.files[0]

    @property
    def digest(self) -> str:
        return self.back_to.digest

    @property
    def kept(self) -> bool:
        """The profile is the controller's own copy (not the --profile file)."""
        return self.path.resolve().parent == profile_store.folder().resolve()

    def check_target(self, target: Target) -> None:
        """The converge applies the very profile shown (its file is read again for it)."""
        if target.loaded.digest != self.digest:
            raise ProvisionError(f"the profile changed since the rollback read it (sha256 {self.digest[:12]} shown, "
                                 f"{target.loaded.digest[:12]} now); nothing was touched", where=str(self.path),
                                 fix="run provision up --rollback again")

    def diff(self) -> list[str]:
        """The change the rollback makes to the profile, as a unified diff (now -> back)."""
        if self.now is None:
            return []
        return list(difflib.unified_diff(
            profiles.to_yaml(self.now.profile).splitlines(), profiles.to_yaml(self.back_to.profile).splitlines(),
            f"now: {self.now.profile.name} (sha256 {self.now.digest[:12]})",
            f"back to: {self.back_to.profile.name} (sha256 {self.digest[:12]})", lineterm=""))


def _digest(value) -> str:
    """A digest a host reported, or "" when it is not one (a host's word is never a path)."""
    return value if isinstance(value, str) and profile_store.DIGEST.match(value) else ""


def _now(state: dict) -> str:
    """The digest of the profile a host runs now: a converge that began and did not finish
    (pending) counts, since that is the profile the operator rolls back from."""
    pending = state.get("pending")
    return _digest(pending.get("profile_sha256")) if isinstance(pending, dict) else _digest(state.get("profile_sha256"))


def _back(state: dict) -> str:
    back = state.get("rollback_to")
    return _digest(back.get("profile_sha256")) if isinstance(back, dict) else ""


def choose(states: dict[str, dict], target: Target, where: str) -> tuple[profiles.Loaded, list[str],
                                                                          profiles.Loaded | None]:
    """The one profile the hosts go back to, the hosts, and what they run now (None when the
    controller has no copy). `states`: host -> provisioner_state compare's result. Raises
    ProvisionError naming the hosts that have nothing to go back to, the digests the
    controller never applied, or the groups whose previous profiles differ."""
    never = sorted(h for h, s in states.items() if not s.get("recorded"))
    none = sorted(h for h, s in states.items() if s.get("recorded") and not _back(s))
    if never or none:
        what = "; ".join(filter(None, [
            f"never converged by provision: {', '.join(never)}" if never else "",
            f"no previous profile recorded (converged with one profile only, or before rollbacks were recorded): "
            f"{', '.join(none)}" if none else ""]))
        raise ProvisionError(f"nothing to roll back to on {len(never) + len(none)} host(s): {what}; nothing was touched",
                             where=where, fix="leave those hosts out with --limit, or converge them with the profile "
                                              "you want (provision up --profile ...)")
    by_digest: dict[str, list[str]] = {}
    for host, state in sorted(states.items()):
        by_digest.setdefault(_back(state), []).append(host)
    found: dict[str, tuple[profiles.Loaded, list[str]]] = {}
    missing = []
    for digest, hosts in by_digest.items():
        named = all(target.digest_for(h) == digest for h in hosts)
        loaded = target.loaded if named else profile_store.find(digest)
        if loaded is None:
            missing.append(f"sha256 {digest} ({', '.join(hosts)})")
        else:
            found.setdefault(loaded.digest, (loaded, []))[1].extend(hosts)
    if missing:
        raise ProvisionError(f"this controller never applied the profile the hosts report they ran before: "
                             f"{'; '.join(missing)}; the copy in their state records is never used; nothing was "
                             "touched", where=str(profile_store.folder()), fix=STORE_FIX)
    if len(found) > 1:
        listed = "; ".join(f"--limit {','.join(sorted(hosts))} (back to {loaded.profile.name!r})"
                           for loaded, hosts in found.values())
        raise ProvisionError(f"the hosts ran different profiles before their last change: {listed}; nothing was "
                             "touched", where=where, fix="roll each group back on its own with the --limit shown")
    ((back_to, hosts),) = found.values()
    hosts.sort()
    if back_to.digest == target.loaded.digest:  # --profile is the way back: what they run now only from the controller's copies
        nows = {_now(states[h]) for h in hosts}
        return back_to, hosts, profile_store.find(nows.pop()) if len(nows) == 1 and "" not in nows else None
    elsewhere = [h for h in hosts if _now(states[h]) != target.digest_for(h)]
    if elsewhere:
        raise ProvisionError(f"--profile {target.loaded.profile.name!r} (sha256 {target.loaded.digest[:12]}) is "
                             f"neither the profile {', '.join(elsewhere)} run now nor the one they go back to "
                             f"({back_to.profile.name!r}, sha256 {back_to.digest[:12]}); nothing was touched",
                             where=str(target.loaded.files[0]),
                             fix="pass --profile the profile the hosts run now, or the file of the one they go back to")
    return back_to, hosts, target.loaded


def plan(target: Target, runs_dir: Path, *, limit: str | None, forks: int | None, become: Become | None,
         hook: EventHook | None = None) -> Rollback:
    """Read every host's record (check.yml: one module call each, changes nothing) and find
    the profile they go back to among the controller's own."""
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
    states = {h: s if isinstance(s, dict) else {} for h, s in states.items()}
    back_to, hosts, now = choose(states, target, str(run_dir))
    return Rollback(back_to, tuple(hosts), now, run_dir)
