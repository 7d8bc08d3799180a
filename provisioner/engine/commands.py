"""The commands that talk to hosts: preflight, up, check, verify.

Everything is validated (profile, compatibility, inventory) before any host is
touched. Each command gets its own run folder holding the rendered inventory, the
ansible-runner artifacts of every playbook it ran, and report.json; report.json is
written when the run starts and after every step, so a run killed halfway still says
how far it got.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Literal

from provisioner.render import inventory as inventory_mod
from provisioner import outputs
from provisioner.errors import ProvisionError
from provisioner.judge import distro as distro_mod
from provisioner.judge import kernels as kernels_mod
from provisioner.judge import preflight as preflight_mod
from provisioner.judge import scratch as scratch_mod
from provisioner import profiles
from provisioner.profiles import controller_files
from provisioner.render import role_specs
from provisioner.judge import verify as verify_mod
from provisioner.verdicts.checks import failed, passed
from provisioner.render import render
from provisioner.reports.report import HostReport, Report
from provisioner.engine import accept as accept_mod
from provisioner.engine import drift, profile_store, rolling
from provisioner.engine.runner import Become, EventHook, PlaybookRun, run_playbook
from provisioner.engine.target import Target

Command = Literal["preflight", "up", "check", "verify", "accept"]
STEPS: dict[str, tuple[str, ...]] = {
    "preflight": ("preflight",),
    # survey: preflight and verification in one module call per host (playbooks/survey.yml);
    # only the hosts not in their recorded state are then converged and verified.
    "up": ("survey", "site", "verify"),
    "check": ("check",),
    "verify": ("verify",),
}
# The steps that gate the ones after them: a host goes on only on its own good answer.
GATES = ("preflight", "survey")
# `check --deep`: the whole converge play in check mode with diffs, instead of the one
# module call that compares each host with the state recorded at its last converge.
DEEP_CHECK = ("deep-check",)
# `up --full` and a rollout converge every host, so verifying before the converge would be
# wasted: plain preflight first.
UP_CONVERGING = ("preflight", "site", "verify")


def prepare(profile_ref: str, inventory_path: Path, files_root: Path | None = None) -> Target:
    """Validate everything the run needs; raises ProvisionError before any host is touched.
    `files_root`: where the files the profile names are read (None: the profile's folder)."""
    loaded = controller_files.resolve(profiles.load(profile_ref), files_root)
    inventory = inventory_mod.load(inventory_path)
    role_specs.check_inventory(inventory, loaded.profile)
    return Target(loaded, inventory)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_run_dir(base: Path, command: str, profile: str) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    fix = "pass --runs-dir (or $PROVISION_RUNS_DIR) naming a folder you can write to"
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        for n in range(1, 1000):
            path = base / (f"{stamp}-{command}-{profile}" + (f"-{n}" if n > 1 else ""))
            try:
                path.mkdir(mode=0o700)
                return path.resolve()
            except FileExistsError:
                continue
    except FileExistsError:
        raise ProvisionError("the runs folder is a file, not a folder", where=str(base), fix=fix) from None
    except OSError as exc:
        raise ProvisionError(f"cannot create a run folder: {exc.strerror or exc}", where=str(base), fix=fix) from None
    raise ProvisionError("cannot create a run folder: 999 runs this second already", where=str(base), fix=fix)


def _fold(report: Report, step: str, run: PlaybookRun, target: Target, command: str = "") -> None:
    """Merge one playbook's results into the per-host report."""
    by_name = {h.name: h for h in report.hosts}
    profile = target.loaded.profile
    variables = target.role_vars if step == "check" else {}
    for name, result in sorted(run.hosts.items()):
        host = by_name.get(name)
        if host is None:
            host = HostReport(name, "ok")
            report.hosts.append(host)
            by_name[name] = host
        host.failures.extend(result.failures)
        if result.status in ("unreachable", "failed"):
            host.status = result.status
            continue
        if step in GATES:  # the survey's verification: _fold_surveyed
            host.checks.extend(preflight_mod.judge(profile, result.reported.get("provisioner_preflight", {})))
            kernels = (result.reported.get("provisioner_state") or {}).get("kernels")
            host.checks.extend(kernels_mod.judge_secure_boot(profile, kernels))
            host.checks.extend(kernels_mod.judge_modules(profile, kernels, before_up=command == "up"))
            # What the host's own archive offers of the profile's distro packages (apt_offer).
            host.checks.extend(distro_mod.judge(profile, result.reported.get("provisioner_apt_offer")))
        elif step == "site":
            host.checks.extend(_reboot_check(result.reported.get("provisioner_reboot")))
            host.changed_tasks.extend(result.changed_tasks)
            host.diffs.update(result.diffs)
            if result.changed_tasks and host.status == "ok":
                host.status = "changed"
        elif step == "check":
            state = result.reported.get("provisioner_state") or {}
            host.checks.extend(drift.recorded_profile_check(state if state.get("recorded") else {}, target, name))
            host.checks.extend(kernels_mod.judge_modules(profile, state.get("kernels")))
            found = (drift.state_drift(state) + drift.components_off(state, variables)
                     + drift.mig_drift(state, profile))
            for item, detail in found + scratch_mod.problems(profile, state.get("scratch")):
                host.changed_tasks.append(item)
                host.diffs[item] = detail
            if host.changed_tasks:
                host.status = "drift"
        elif step == "deep-check":
            host.changed_tasks.extend(result.changed_tasks)
            host.diffs.update(result.diffs)
            recorded = (result.facts.get("ansible_local") or {}).get("provisioner") or {}
            host.checks.extend(drift.recorded_profile_check(recorded, target, name))
            if result.changed_tasks:
                host.status = "drift"
        elif step == "verify":
            host.checks.extend(_verify_checks(profile, result.reported))
            if command == "accept":
                host.checks.extend(accept_mod.verify_checks(target.loaded, result.reported.get("provisioner_verify") or {}))
    report.errors.extend(run.errors)
    report.hosts.sort(key=lambda h: h.name)


def _verify_checks(profile, reported: dict):
    try:
        probe = (reported.get("provisioner_verify") or {}).get("probe") or {}
        return (verify_mod.judge(profile, reported.get("provisioner_verify", {}))
                + kernels_mod.judge_modules(profile, probe.get("kernels"))
                + scratch_mod.judge(profile, probe.get("scratch")))
    except Exception as exc:  # noqa: BLE001 - a judge bug fails this host's verify, the run goes on
        return [failed("verify", f"judging this host's verification report raised {type(exc).__name__}: {exc} "
                                 "(a bug: please report it with the run folder)")]


def _fold_surveyed(report: Report, run: PlaybookRun, target: Target, in_sync: set[str]) -> set[str]:
    """The survey's verification, for the hosts whose converge is skipped and that passed
    preflight: they are verified by that same call, not again after the converge step."""
    surveyed = set()
    for host in report.hosts:
        result = run.hosts.get(host.name)
        if host.name in in_sync and result and not host.broken and not any(c.status == "fail" for c in host.checks):
            host.checks.extend(_verify_checks(target.loaded.profile, result.reported))
            surveyed.add(host.name)
    return surveyed


def _reboot_check(reboot: dict | None):
    """A host a role found needing a reboot (the driver: a module to load; mig: MIG mode pending
    and the GPU reset failed): rebooted by the run, or not and why."""
    if not reboot or not reboot.get("required"):
        return []
    reason = " ".join(str(reboot.get("reason", "")).split())
    if str(reboot.get("rebooting")).lower() == "true":
        return [passed("reboot", f"rebooted: {reason}")]
    why = " ".join(str(reboot.get("why_not", "")).split())
    return [failed("reboot", f"needs a reboot, not done ({why}): {reason}. Reboot it, or set reboot.allowed: true "
                             "and re-run provision up (with --batch to reboot a few hosts at a time)")]


def _healthy(report: Report, limit: str | None) -> str:
    """The --limit for the next step: hosts with no failure and no failed check so far.
    No host results at all is no host (fail closed): an empty answer from the gate never
    lets the converge run on every host, unchecked."""
    return ",".join(h.name for h in report.hosts if not h.broken and not any(c.status == "fail" for c in h.checks))


def execute(
    command: Command,
    target: Target,
    *,
    runs_dir: Path,
    limit: str | None = None,
    forks: int | None = None,
    batch: str | None = None,
    max_fail: int | None = None,
    hook: EventHook | None = None,
    deep: bool = False,
    full: bool = False,
    become: Become | None = None,
    network: bool = False,
    ddp: bool = False,
    hooks: rolling.Hooks | None = None,
    resume_command: str = "",
    accept=None,
) -> Report:
    """Run `command`'s playbooks in order; a host that fails a step is left out of the next.

    deep (check): run the converge play in check mode instead of comparing with the
    recorded state; full (up): converge every host, even those whose preflight found them
    exactly in the state recorded at their last converge with this profile.

    batch: how many hosts (N or P%) converge at once (the plays' `serial`); max_fail:
    the percentage of a batch that may fail before the remaining batches are abandoned
    (default: never, so one bad host never stops the others). become: how the plays gain
    root (method, and the password file or typed password); default sudo with no password.
    network / ddp (verify): then iperf3 between host pairs / a DDP job across the hosts
    (engine/network.py, engine/ddp.py), on the hosts that were reachable.

    hooks (up, with batch): a rolling change (engine/rolling.py): after preflight, the
    controller walks the batches itself (drain, converge, verify, gate, undrain per batch)
    and stops at the first failed one unless max_fail allows more; resume_command is the
    command a stopped rollout prints to be resumed.

    accept (command "accept"): the engine/accept.Request (level, fleet, price, drain)."""
    if hooks and (command != "up" or not batch):
        raise ProvisionError("--drain, --undrain and --gate need `provision up` with --batch", where="--batch",
                             fix="add --batch 1 (one host at a time) or --batch 10%")
    if command == "accept":
        accept = accept or accept_mod.Request()
        accept.check(target.loaded.profile)
        if accept.fleet:
            from provisioner.engine.network import switches, test_address

            for host in target.inventory.hostnames():  # a bad address is refused before any host is touched
                test_address(target.inventory, host)
            switches(target.inventory, target.inventory.hostnames())  # and a bad or partial grouping
    # Run records name hosts and hold their facts: owner-only, whatever the caller's umask.
    old_umask = os.umask(0o077)
    if command in ("check", "verify", "accept"):
        target = dataclasses.replace(target, resolution="recorded")
    try:
        steps = DEEP_CHECK if command == "check" and deep else STEPS.get(command, ())
        if command == "accept":
            steps = accept_mod.steps(accept)
        if command == "up" and (full or hooks):
            steps = UP_CONVERGING
        if command == "verify" and (network or ddp):
            from provisioner.engine.network import test_address

            for host in target.inventory.hostnames():  # a bad address is refused before any host is touched
                test_address(target.inventory, host)
            steps += ("network",) * network + ("ddp",) * ddp
        return _execute(command, steps, target, runs_dir, limit, forks, batch, max_fail, hook, full, become,
                        hooks or None, resume_command, accept)
    finally:
        os.umask(old_umask)


def _execute(command: Command, steps: tuple[str, ...], target: Target, runs_dir: Path, limit: str | None,
             forks: int | None, batch: str | None, max_fail: int | None, hook: EventHook | None,
             full: bool, become: Become | None, hooks: rolling.Hooks | None = None,
             resume_command: str = "", accept=None) -> Report:
    loaded = target.loaded
    extravars: dict[str, object] = {}
    # A rollout (hooks): the controller walks the batches, so no serial and no
    # max_fail_percentage inside the plays.
    if batch and not hooks:
        extravars["provisioner_serial"] = batch
    if max_fail is not None and not hooks:
        extravars["provisioner_max_fail_percentage"] = max_fail
    if accept is not None:
        extravars.update(accept_mod.verify_extravars(loaded.profile, accept.level))
    run_dir = new_run_dir(runs_dir, command, loaded.profile.name)
    inventory_dir = run_dir / "inventory"
    try:
        render(loaded, target.inventory, inventory_dir, forks or 20, variables=target.role_vars)
        outputs.write_file(run_dir / "profile.yml", profiles.to_yaml(loaded.profile), mode=0o600)
        if command == "up":  # what a later `up --rollback` goes back to, from this controller's own copy
            profile_store.keep(loaded, target.inventory)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)  # no empty run record for a run that never started
        raise
    report = Report(command, loaded.profile.name, loaded.digest, str(target.inventory.source), run_dir,
                    started=_now(), interrupted=True)
    report.write()  # "interrupted" until the last step says otherwise
    try:
        in_sync: set[str] = set()
        surveyed: set[str] = set()  # verified by the survey already
        for step in steps:
            step_limit = limit if step == steps[0] else _healthy(report, limit)
            if hooks and step == "site":  # every healthy host rolls, even one whose converge is skipped
                if step_limit:
                    _roll(report, target, step_limit, in_sync, batch or "1", max_fail, hooks, resume_command,
                          lambda playbook, hosts, ident: run_playbook(
                              playbook, inventory_dir, run_dir, limit=",".join(hosts), forks=forks,
                              extravars=extravars, hook=hook, become=become, ident=ident), hook)
                break  # the rollout verified each batch itself
            done = {"site": in_sync, "verify": surveyed}.get(step)
            if done:  # after preflight/survey, so step_limit names the healthy hosts
                step_limit = ",".join(h for h in (step_limit or "").split(",") if h and h not in done)
            if step in ("network", "ddp"):  # across hosts: every host still reachable takes part
                from provisioner.engine import across

                across.run_step(step, report, target, inventory_dir, run_dir, limit, forks, hook, become)
                report.write()
                continue
            if step in ("accept", "fleet"):  # engine/accept.py: the node measurements, the fleet all-reduce
                accept_mod.run_step(step, accept, report, target, inventory_dir, run_dir, limit, forks, hook, become)
                report.write()
                continue
            if step_limit == "":
                continue  # no host left for this step
            playbook = {"deep-check": "site"}.get(step, step)
            run = run_playbook(playbook, inventory_dir, run_dir, limit=step_limit, forks=forks,
                               check=step == "deep-check", extravars=extravars, hook=hook, become=become)
            _fold(report, step, run, target, command)
            if step in GATES and not report.hosts and not run.errors:
                report.errors.append(f"{step} returned no result for any host (limit {step_limit or 'all'}): "
                                     "nothing after it ran. Fix: read the run folder's artifacts/"
                                     f"{playbook} (provision report {run_dir})")
                report.interrupted = False  # it ended, refusing: the error says why
                return report
            if step in GATES and command == "up" and not full:
                in_sync = _skip_converged(report, run, target)
                for host in report.hosts:  # not converged: the archive is not asked for anything
                    if host.name in in_sync:
                        host.checks = distro_mod.in_recorded_state(host.checks)
            if step == "survey":
                surveyed = _fold_surveyed(report, run, target, in_sync)
            if run.status in ("canceled", "timeout"):
                return report
            report.write()
        report.interrupted = False
        return report
    except KeyboardInterrupt:
        return report  # still marked interrupted; the record says how far it got
    finally:
        report.finished = _now()
        report.write()
        _owner_only(run_dir)


def _roll(report: Report, target: Target, healthy: str, in_sync: set[str], batch: str, max_fail: int | None,
          hooks: rolling.Hooks, resume_command: str, play, hook: EventHook | None) -> None:
    """The converge and verify steps of a rolling `up`, one batch at a time, in the
    inventory's order."""
    wanted = set(healthy.split(","))
    hosts = [h for h in target.inventory.hosts if h in wanted]

    def step(name: str):
        def run(names: list[str], number: int) -> None:
            result = play(name, names, f"{name}-batch{number}")
            _fold(report, name, result, target)
            if result.status in ("canceled", "timeout"):
                raise KeyboardInterrupt  # the record stays "interrupted", with the rollout so far
            report.write()
        return run

    rolling.roll(report, hosts, batch, hooks, max_fail, converge=step("site"), verify=step("verify"),
                 skip_converge=in_sync, emit=hook, resume_command=resume_command)


def _skip_converged(report: Report, run: PlaybookRun, target: Target) -> set[str]:
    """Hosts preflight found exactly as their last converge with this profile left them:
    the converge is skipped for them (verify still runs)."""
    skip = set()
    for host in report.hosts:
        result = run.hosts.get(host.name)
        if result and not host.broken and drift.in_recorded_state(result.reported.get("provisioner_state") or {}, target,
                                                                           host.name):
            skip.add(host.name)
            host.checks.append(passed("converge", "skipped: the host is in the state its last converge with this "
                                                  "profile recorded (provision up --full converges anyway)"))
    return skip


def _owner_only(folder: Path) -> None:
    """ansible-runner writes some files (the fact cache) world-readable whatever the umask."""
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & 0o700)
