"""The commands that take a profile and an inventory: render, and those that talk to hosts
(preflight, up, check, verify). Each validates everything before any host is touched
(engine.commands.prepare), runs, prints the report and exits with its code."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from provisioner.cli.app import Session, app, friendly, session
from provisioner.cli.options import (DEFAULT_RUNS_DIR, AskBecomePass, Batch, BecomeMethod, BecomePasswordFile, Fleet,
                                     Force, Forks, InventoryArg, Json, Junit, Limit, MaxFail, Output, Profile, RunsDir)


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


def talk_to_hosts(s: Session, command: str, profile: str, inventory: Path, fleet: Fleet, *, strict: bool = False,
                  **options: bool) -> None:
    """Validate, run `command` on the hosts with live progress, show the report, exit with its code."""
    from provisioner.engine import commands
    from provisioner.engine.progress import Progress

    target = commands.prepare(profile, inventory)  # everything validated before any host is touched
    _warn_dropped(s, target, strict=strict)
    become = fleet.become.prompted()
    with Progress(s.err if fleet.as_json else s.out) as progress:
        report = commands.execute(command, target, runs_dir=fleet.runs_dir, limit=fleet.limit, forks=fleet.forks,
                                  batch=fleet.batch, max_fail=fleet.max_fail, hook=progress, become=become,
                                  **options)
    show(s, report, fleet.as_json, fleet.junit, force=fleet.force)
    raise typer.Exit(report.exit_code)


def show(s: Session, report, as_json: bool, junit: Path | None, html: Path | None = None, *,
         force: bool = False) -> None:
    """The report as a table (or JSON on stdout), and the files asked for beside it."""
    from provisioner.reports.table import render_table

    if as_json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
    else:
        render_table(report, s.out)
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
                become_method: BecomeMethod = "sudo") -> None:
        talk_to_hosts(session(ctx), command, profile, inventory, Fleet.of(
            limit, forks, as_json, runs_dir, batch, max_fail, junit, force, ask_become_pass=ask_become_pass,
            become_password_file=become_password_file, become_method=become_method))

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
           become_method: BecomeMethod = "sudo") -> None:
    """Verify the hosts against the profile (nvidia-smi and friends); changes nothing.

    --network: iperf3 between host pairs; --ddp: a DDP job across the hosts."""
    talk_to_hosts(session(ctx), "verify", profile, inventory, Fleet.of(
        limit, forks, as_json, runs_dir, batch, max_fail, junit, force, ask_become_pass=ask_become_pass,
        become_password_file=become_password_file, become_method=become_method), network=network, ddp=ddp)


@app.command("up")
@friendly
def up(ctx: typer.Context, profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None,
       as_json: Json = False, runs_dir: RunsDir = DEFAULT_RUNS_DIR, batch: Batch = None, max_fail: MaxFail = None,
       junit: Junit = None, force: Force = False,
       full: Annotated[bool, typer.Option("--full", help="Converge every host, even one preflight finds exactly "
                                                         "as its last converge with this profile left it.")] = False,
       ask_become_pass: AskBecomePass = False, become_password_file: BecomePasswordFile = None,
       become_method: BecomeMethod = "sudo",
       strict: Annotated[bool, typer.Option("--strict", help="Refuse a profile with warnings (an end-of-life "
                                                             "driver branch) before touching any host.")] = False) -> None:
    """Converge the hosts to the profile, then verify them (preflight -> converge -> verify).

    A host already in the state its last converge with this profile recorded is not converged again.

    --full converges it anyway; verify runs on every host."""
    talk_to_hosts(session(ctx), "up", profile, inventory, Fleet.of(
        limit, forks, as_json, runs_dir, batch, max_fail, junit, force, ask_become_pass=ask_become_pass,
        become_password_file=become_password_file, become_method=become_method), strict=strict, full=full)


@app.command("check")
@friendly
def check(ctx: typer.Context, profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None,
          as_json: Json = False, runs_dir: RunsDir = DEFAULT_RUNS_DIR, batch: Batch = None, max_fail: MaxFail = None,
          junit: Junit = None, force: Force = False,
          deep: Annotated[bool, typer.Option("--deep", help="Run the whole converge in check mode with diffs "
                                                            "(slower; also sees what a changed profile would do).")] = False,
          ask_become_pass: AskBecomePass = False, become_password_file: BecomePasswordFile = None,
          become_method: BecomeMethod = "sudo") -> None:
    """Drift: compare each host with the state recorded at its last converge; changes nothing.

    Names every managed package, hold, file and unit that moved since, and the profile's change.

    --deep runs the converge in check mode with diffs instead (slower)."""
    talk_to_hosts(session(ctx), "check", profile, inventory, Fleet.of(
        limit, forks, as_json, runs_dir, batch, max_fail, junit, force, ask_become_pass=ask_become_pass,
        become_password_file=become_password_file, become_method=become_method), deep=deep)
