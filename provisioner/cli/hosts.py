"""The commands that take a profile and an inventory: render, and those that talk to hosts
(preflight, up, check, verify). Each validates everything before any host is touched
(engine.commands.prepare), runs, prints the report and exits with its code."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from provisioner.cli.app import Session, app, friendly, session
from provisioner.engine.rolling import HOOK_TIMEOUT
from provisioner.errors import ProvisionError
from provisioner.cli.options import (DEFAULT_RUNS_DIR, AskBecomePass, Batch, BecomeMethod, BecomePasswordFile, Fleet,
                                     Force, Forks, InventoryArg, Json, Junit, Limit, MaxFail, Output, Profile, RunsDir,
                                     Verbose)


def _warn_dropped(s: Session, target, *, strict: bool = False) -> None:
    for line in target.inventory.dropped_secrets:
        s.warn(f"left out secret {line}; pass it with ansible-vault, --ask-become-pass or the environment")
    for problem in target.loaded.warnings:  # e.g. an end-of-life driver branch
        s.warn(problem.render())
    if strict:
        from provisioner import profiles

        profiles.refuse_warnings(target.loaded)


@app.command()
@friendly
def render(
    ctx: typer.Context,
    profile: Profile,
    inventory: InventoryArg,
    output: Output,
    forks: Annotated[int, typer.Option("--forks", "-f", min=1, help="forks in the rendered ansible.cfg")] = 20,
    force: Force = False,
) -> None:
    """Write the inventory, group_vars and ansible.cfg Ansible will see, without running anything."""
    from provisioner import paths
    from provisioner.engine import commands
    from provisioner.render import render as render_dir

    s = session(ctx)
    target = commands.prepare(profile, inventory)
    _warn_dropped(s, target)
    written = render_dir(target.loaded, target.inventory, output, forks, force=force)
    for path in written:
        s.say(str(path))
    cfg = shlex.quote(f"{written[0].parent}/ansible.cfg")
    s.say(f"run: ANSIBLE_CONFIG={cfg} ansible-playbook {paths.FQCN}.site")


def heartbeat_seconds() -> float:
    """How often a non-terminal gets a "still working" line: $PROVISION_HEARTBEAT_SECONDS, default 30."""
    from provisioner.engine.progress import HEARTBEAT_SECONDS

    value = os.environ.get("PROVISION_HEARTBEAT_SECONDS")
    try:
        seconds = HEARTBEAT_SECONDS if value is None else float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ProvisionError(f"PROVISION_HEARTBEAT_SECONDS={value!r} is not a number of seconds",
                             where="PROVISION_HEARTBEAT_SECONDS", fix="use e.g. 30, or 0 for no heartbeat")
    return seconds


def talk_to_hosts(s: Session, command: str, profile: str, inventory: Path, fleet: Fleet, *,
                  check_target=None, strict: bool = False, **options) -> None:
    """Validate, run `command` on the hosts with live progress, show the report, exit with its code."""
    from provisioner.engine import commands
    from provisioner.engine.progress import Progress

    target = commands.prepare(profile, inventory)  # everything validated before any host is touched
    if check_target:
        check_target(target)
    _warn_dropped(s, target, strict=strict)
    beat = heartbeat_seconds()
    become = fleet.become.prompted()
    with Progress(s.err if fleet.as_json else s.out, heartbeat=beat) as progress:
        report = commands.execute(command, target, runs_dir=fleet.runs_dir, limit=fleet.limit, forks=fleet.forks,
                                  batch=fleet.batch, max_fail=fleet.max_fail, hook=progress, become=become,
                                  **options)
    show(s, report, fleet.as_json, fleet.junit, force=fleet.force, verbose=fleet.verbose)
    raise typer.Exit(report.exit_code)


def show(s: Session, report, as_json: bool, junit: Path | None, html: Path | None = None, *,
         force: bool = False, verbose: bool = False) -> None:
    """The report as a summary for people (or JSON on stdout), and the files asked for beside it."""
    from provisioner.reports.table import render_table

    if as_json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
    else:
        render_table(report, s.out, verbose=verbose)
    if html is not None:
        from provisioner.reports import html as html_report

        s.say(f"html: {html_report.write(report, html, force=force)}", to_err=as_json)
    if junit is not None:
        from provisioner.reports import junit as junit_mod

        s.say(f"junit: {junit_mod.write(report, junit, force=force)}", to_err=as_json)


def _read_only_command(command: str, doc: str) -> None:
    """preflight and verify: the same options, only the playbook differs."""

    @friendly
    def handler(ctx: typer.Context, profile: Profile, inventory: InventoryArg, limit: Limit = None,
                forks: Forks = None, as_json: Json = False, runs_dir: RunsDir = DEFAULT_RUNS_DIR, batch: Batch = None,
                max_fail: MaxFail = None, junit: Junit = None, force: Force = False,
                ask_become_pass: AskBecomePass = False, become_password_file: BecomePasswordFile = None,
                become_method: BecomeMethod = "sudo", verbose: Verbose = False) -> None:
        talk_to_hosts(session(ctx), command, profile, inventory, Fleet.of(
            limit, forks, as_json, runs_dir, batch, max_fail, junit, force, ask_become_pass=ask_become_pass,
            become_password_file=become_password_file, become_method=become_method, verbose=verbose))

    handler.__doc__ = doc
    app.command(command)(handler)


_read_only_command("preflight", "Read-only: check the hosts' hardware and OS against the profile.")


@app.command("verify")
@friendly
def verify(ctx: typer.Context, profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None,
           as_json: Json = False, runs_dir: RunsDir = DEFAULT_RUNS_DIR, batch: Batch = None, max_fail: MaxFail = None,
           junit: Junit = None, force: Force = False,
           network: Annotated[bool, typer.Option("--network", help="Also measure the network between host pairs "
                                                                   "with iperf3 (a ring), and InfiniBand ports, "
                                                                   "against the profile's network section.")] = False,
           ddp: Annotated[bool, typer.Option("--ddp", help="Also run a small DDP job with torchrun across the hosts "
                                                           "(NCCL with GPUs, gloo without).")] = False,
           ask_become_pass: AskBecomePass = False, become_password_file: BecomePasswordFile = None,
           become_method: BecomeMethod = "sudo", verbose: Verbose = False) -> None:
    """Verify the hosts against the profile (nvidia-smi and friends); changes nothing.

    --network: iperf3 between host pairs; --ddp: a DDP job across the hosts."""
    talk_to_hosts(session(ctx), "verify", profile, inventory, Fleet.of(
        limit, forks, as_json, runs_dir, batch, max_fail, junit, force, ask_become_pass=ask_become_pass,
        become_password_file=become_password_file, become_method=become_method, verbose=verbose),
        network=network, ddp=ddp)


@app.command("up")
@friendly
def up(ctx: typer.Context, profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None,
       as_json: Json = False, runs_dir: RunsDir = DEFAULT_RUNS_DIR, batch: Batch = None, max_fail: MaxFail = None,
       junit: Junit = None, force: Force = False,
       full: Annotated[bool, typer.Option("--full", help="Converge every host, even one preflight finds exactly "
                                                         "as its last converge with this profile left it.")] = False,
       ask_become_pass: AskBecomePass = False, become_password_file: BecomePasswordFile = None,
       become_method: BecomeMethod = "sudo", verbose: Verbose = False,
       strict: Annotated[bool, typer.Option("--strict", help="Refuse a profile with warnings (an end-of-life "
                                                             "driver branch) before touching any host.")] = False,
       drain: Annotated[Optional[str], typer.Option("--drain", help="Rolling change: run CMD on this machine for each "
                        "host before its batch is converged ({host} is replaced by the shell-quoted name; "
                        "PROVISION_HOST is set). Needs --batch.")] = None,
       undrain: Annotated[Optional[str], typer.Option("--undrain", help="Run CMD for each host of a batch once it "
                          "verified and passed the gate.")] = None,
       gate: Annotated[Optional[str], typer.Option("--gate", help="Run CMD for each host after its batch verified, "
                       "before undrain; a non-zero exit fails the batch.")] = None,
       hook_timeout: Annotated[float, typer.Option("--hook-timeout", min=1, help="Seconds a drain, gate or undrain "
                               "command may run before it is killed and counts as failed.")] = HOOK_TIMEOUT,
       resume: Annotated[Optional[Path], typer.Option("--resume", help="Resume the rollout that stopped in this run "
                         "folder: its failed and untouched hosts, with its batch, max-fail and hooks unless "
                         "given again.")] = None,
       rollback: Annotated[bool, typer.Option("--rollback", help="Return the hosts to the profile they ran before "
                           "their last change (kept in each host's state record): its held versions, files and "
                           "units. --profile names the profile they run now. Works with --batch/--drain/--gate.")]
       = False) -> None:
    """Converge the hosts to the profile, then verify them (preflight -> converge -> verify).

    A host already in the state its last converge with this profile recorded is not converged again.

    --full converges it anyway; verify runs on every host.

    With --batch and --drain/--undrain/--gate: a rolling change, batch by batch (drain, converge,
    verify, gate, undrain), stopping at the first failed batch unless --max-fail allows more.

    --rollback: back to the profile each host ran before its last change."""
    from provisioner.engine import rolling

    record = rolling.resume_state(resume) if resume is not None else {}
    if record and limit:
        raise ProvisionError("--resume and --limit both choose the hosts", where="--resume",
                             fix="use --resume RUN_DIR, or the --limit it printed")
    kept = record.get("hooks", {})
    hooks = rolling.Hooks(rolling.parse_hook(drain, "--drain") or kept.get("drain"),
                          rolling.parse_hook(undrain, "--undrain") or kept.get("undrain"),
                          rolling.parse_hook(gate, "--gate") or kept.get("gate"),
                          hook_timeout if hook_timeout != HOOK_TIMEOUT else record.get("hook_timeout", HOOK_TIMEOUT))
    batch = batch or record.get("batch")
    if max_fail is None and record.get("max_fail") is not None:
        max_fail = str(record["max_fail"])
    fleet = Fleet.of(record.get("limit", limit), forks, as_json, runs_dir, batch, max_fail, junit, force,
                     ask_become_pass=ask_become_pass, become_password_file=become_password_file,
                     become_method=become_method, verbose=verbose)
    if hooks and not fleet.batch:
        raise ProvisionError("--drain, --undrain and --gate roll the fleet batch by batch: --batch is missing",
                             where="--batch", fix="add --batch 1 (one host at a time) or --batch 10%")

    if rollback:
        if resume is not None:
            raise ProvisionError("--rollback and --resume both choose the profile", where="--rollback",
                                 fix="resume a stopped rollback with the --resume it printed, without --rollback")
        from dataclasses import replace

        from provisioner.engine import commands
        from provisioner.engine.rollback import previous_profile

        fleet = replace(fleet, become=fleet.become.prompted())  # asked once, for the read and the converge
        s = session(ctx)
        back = previous_profile(commands.prepare(profile, inventory), fleet.runs_dir, limit=fleet.limit,
                                forks=fleet.forks, become=fleet.become)
        s.say(f"rollback: {len(back.hosts)} host(s) back to profile {back.profile!r} (sha256 {back.sha256[:12]}), "
              f"from their state records: {back.path}", to_err=as_json)
        profile = str(back.path)

    def same_profile(target) -> None:
        if record and record.get("profile_sha256") != target.loaded.digest:
            raise ProvisionError("the profile changed since the stopped rollout", where=str(resume),
                                 fix=f"to roll the hosts it left with this profile, pass --limit {record['limit']} "
                                     "instead of --resume")

    words = ["provision", "up", "--profile", profile, str(inventory), "--batch", fleet.batch or "1",
             *(["--max-fail", f"{fleet.max_fail}"] if fleet.max_fail is not None else []), *hooks.cli_words()]
    talk_to_hosts(session(ctx), "up", profile, inventory, fleet, check_target=same_profile, strict=strict, full=full,
                  hooks=hooks or None, resume_command=shlex.join(words) if hooks else "")


@app.command("check")
@friendly
def check(ctx: typer.Context, profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None,
          as_json: Json = False, runs_dir: RunsDir = DEFAULT_RUNS_DIR, batch: Batch = None, max_fail: MaxFail = None,
          junit: Junit = None, force: Force = False,
          deep: Annotated[bool, typer.Option("--deep", help="Run the whole converge in check mode with diffs "
                                                            "(slower; also sees what a changed profile would do).")] = False,
          ask_become_pass: AskBecomePass = False, become_password_file: BecomePasswordFile = None,
          become_method: BecomeMethod = "sudo", verbose: Verbose = False) -> None:
    """Drift: compare each host with the state recorded at its last converge; changes nothing.

    Names every managed package, hold, file and unit that moved since, and the profile's change.

    --deep runs the converge in check mode with diffs instead (slower)."""
    talk_to_hosts(session(ctx), "check", profile, inventory, Fleet.of(
        limit, forks, as_json, runs_dir, batch, max_fail, junit, force, ask_become_pass=ask_become_pass,
        become_password_file=become_password_file, become_method=become_method, verbose=verbose), deep=deep)
