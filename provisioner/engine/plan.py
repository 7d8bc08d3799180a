"""`provision plan`: what `up` would do, from up's own first step. The survey playbook
(playbooks/survey.yml: one probe call per host, read-only) runs in a run folder of its own;
judge/plan.py turns each host's answer into its plan. Changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

from provisioner import outputs
from provisioner.engine import drift
from provisioner.engine.runner import Become, EventHook, run_playbook
from provisioner.engine.target import Target
from provisioner.judge import plan as plan_mod


def plan(target: Target, runs_dir: Path, *, limit: str | None = None, forks: int | None = None,
         become: Become | None = None, hook: EventHook | None = None) -> plan_mod.FleetPlan:
    from provisioner.engine.commands import new_run_dir
    from provisioner.render import render

    old_umask = os.umask(0o077)  # run records name hosts and hold their facts: owner-only
    try:
        run_dir = new_run_dir(runs_dir, "plan", target.loaded.profile.name)
        render(target.loaded, target.inventory, run_dir / "inventory", forks or 20, variables=target.role_vars)
        run = run_playbook("survey", run_dir / "inventory", run_dir, limit=limit, forks=forks, hook=hook, become=become)
        result = fold(target, run.hosts, run.errors)
        result.run_dir = str(run_dir)
        outputs.write_file(run_dir / "plan.json", _json(result), mode=0o600)
        return result
    finally:
        os.umask(old_umask)


def fold(target: Target, hosts: dict, errors: list[str]) -> plan_mod.FleetPlan:
    """Each surveyed host's plan (runner HostResults by name)."""
    profile = target.loaded.profile
    pins = target.plan.pins
    result = plan_mod.FleetPlan(profile.name, errors=list(errors))
    for name, host in sorted(hosts.items()):
        if host.status in ("unreachable", "failed"):
            result.hosts.append(plan_mod.HostPlan(name, host.status, "; ".join(host.failures)[:500] or host.status))
            continue
        state = host.reported.get("provisioner_state") or {}
        state = state if isinstance(state, dict) else {}
        result.hosts.append(plan_mod.host_plan(
            name, profile, pins, host.reported, in_record=drift.in_recorded_state(state, target, name),
            drift=drift.state_drift(state), removed=drift.components_off(state, target.role_vars)))
    if not hosts and not errors:
        result.errors.append("the survey returned no result for any host")
    return result


def _json(result: plan_mod.FleetPlan) -> str:
    import json

    return json.dumps(result.as_dict(), indent=2) + "\n"
