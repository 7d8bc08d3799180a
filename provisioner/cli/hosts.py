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
from provisioner.cli.options import (MAX_FORKS, FilesRoot, Fleet, FleetOptions, Force, InventoryArg, Output,
                                     Profile, ansible_verbosity, fleet_options)

# up's own options, grouped in its help beside the fleet options' panels (cli/options.py).
CONVERGE_PANEL, ROLLING_PANEL = "How up converges", "Rolling changes and rollback"


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
    forks: Annotated[int, typer.Option("--forks", "-f", min=1, max=MAX_FORKS, help=f"forks in the rendered ansible.cfg "
                                       f"(at most {MAX_FORKS})")] = 20,
    force: Force = False,
    files_root: FilesRoot = None,
) -> None:
    """Write the inventory, group_vars and ansible.cfg Ansible will see, without running anything."""
    from provisioner import paths
    from provisioner.engine import commands
    from provisioner.render import render as render_dir

    s = session(ctx)
    target = commands.prepare(profile, inventory, files_root)
    _warn_dropped(s, target)
    written = render_dir(target.loaded, target.inventory, output, forks, force=force, variables=target.role_vars)
    if target.plan.origin:
        s.say(f"NVIDIA package versions from {target.plan.origin}")
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

    target = commands.prepare(profile, inventory, fleet.files_root)  # everything validated before any host is touched
    if check_target:
        check_target(target)
    _warn_dropped(s, target, strict=strict)
    beat = heartbeat_seconds()
    become = fleet.become.prompted()
    with ansible_verbosity(fleet.verbose), Progress(s.err if fleet.as_json else s.out, heartbeat=beat) as progress:
        report = commands.execute(command, target, runs_dir=fleet.runs_dir, limit=fleet.limit, forks=fleet.forks,
                                  batch=fleet.batch, max_fail=fleet.max_fail, hook=progress, become=become,
                                  **options)
    show(s, report, fleet.as_json, fleet.junit, force=fleet.force, verbose=fleet.verbose)
    raise typer.Exit(report.exit_code)


def show(s: Session, report, as_json: bool, junit: Path | None, html: Path | None = None, *,
         force: bool = False, verbose: int = 0) -> None:
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
    """preflight: the fleet options only, and its playbook."""

    @friendly
    @fleet_options()
    def handler(ctx: typer.Context, profile: Profile, inventory: InventoryArg, fleet: FleetOptions) -> None:
        talk_to_hosts(session(ctx), command, profile, inventory, fleet.fleet())

    handler.__doc__ = doc
    app.command(command)(handler)


_read_only_command("preflight", "Read-only: check the hosts' hardware and OS against the profile.")


@app.command("verify")
@friendly
@fleet_options()
def verify(ctx: typer.Context, profile: Profile, inventory: InventoryArg, fleet: FleetOptions,
           network: Annotated[bool, typer.Option("--network", help="Also measure the network between host pairs "
                                                                   "with iperf3 (a ring), and InfiniBand ports, "
                                                                   "against the profile's network section.")] = False,
           ddp: Annotated[bool, typer.Option("--ddp", help="Also run a small DDP job with torchrun across the hosts "
                                                           "(NCCL with GPUs, gloo without).")] = False,
           from_prometheus: Annotated[Optional[str], typer.Option(
               "--from-prometheus", metavar="URL",
               help="Judge only what the nodes' provision-state.timer and dcgm-exporter published to this "
                    "Prometheus (its base URL), in one query: nvidia-smi, GPU count, driver version, persistence "
                    "mode, ECC and Xid; every other check is listed as not judged. A host whose timer data is "
                    "missing or older than 3 timer intervals is unknown (exit 1).")] = None) -> None:
    """Verify the hosts against the profile (nvidia-smi and friends); changes nothing.

    --network: iperf3 between host pairs; --ddp: a DDP job across the hosts. --from-prometheus
    reads what the nodes published instead of asking them (a subset of the checks)."""
    if from_prometheus is not None:
        given = [name for name, on in (("--network", network), ("--ddp", ddp)) if on]
        if given:
            raise ProvisionError(f"{given[0]} does nothing with --from-prometheus: no host is contacted",
                                 where=given[0], fix=f"drop {given[0]}, or drop --from-prometheus to ask the hosts")
        _from_prometheus(session(ctx), "verify", profile, inventory, fleet, from_prometheus)
        return
    talk_to_hosts(session(ctx), "verify", profile, inventory, fleet.fleet(), network=network, ddp=ddp)


@app.command("accept")
@friendly
@fleet_options(without=("batch", "max_fail"))
def accept(ctx: typer.Context, profile: Profile, inventory: InventoryArg, fleet: FleetOptions,
           level: Annotated[str, typer.Option("--level", help="quick: verify, dcgmi diag -r 1, an all-reduce across "
                                              "each node's GPUs, the exporter's metric contract; standard: adds dcgmi "
                                              "diag -r 2, GEMM per precision, memory bandwidth, host-to-device and "
                                              "GPU-to-GPU copies; burn-in: adds dcgmi diag -r 3 and a sustained GEMM load "
                                              "(--duration or the profile's accept.burn_in.duration_s) with clocks, "
                                              "temperatures, throttle reasons, ECC and Xid watched throughout.")]
           = "quick",
           across: Annotated[bool, typer.Option("--fleet", help="Also an all-reduce across all the hosts (NCCL with "
                                                "GPUs, gloo without); below its floor, the slow node is searched for "
                                                "by halving and named with its drain command.")] = False,
           price: Annotated[Optional[float], typer.Option("--price-per-hour", help="What one node costs per hour ($): "
                            "runs the reference workload (a small transformer, synthetic data, fixed shapes) and prints "
                            "samples/s, samples/s per $/hour and $ per million samples per node and for the fleet.")]
           = None,
           drain_hook: Annotated[Optional[str], typer.Option("--drain-hook", help="The command that drains the slow "
                                 "node --fleet names ({host} is replaced by the shell-quoted name); default Slurm's "
                                 "scontrol update ... state=drain. Printed; run only with --run-drain.")] = None,
           run_drain: Annotated[bool, typer.Option("--run-drain", help="Run the drain command of the slow node "
                                                   "--fleet names (bounded; its output kept in the run folder).")]
           = False,
           timeout: Annotated[int, typer.Option("--timeout", min=10, max=3600, help="Seconds each measurement job "
                                                "may run on a host before it is killed with its processes.")]
           = 600,
           duration: Annotated[Optional[int], typer.Option("--duration", help="Seconds of sustained load at --level "
                                                           "burn-in (10 to 86400); wins over the profile's "
                                                           "accept.burn_in.duration_s.")] = None) -> None:
    """Measure each node against its GPUs' floors (and price it); changes nothing.

    The verify probe, dcgmi diag, all-reduce, GEMM and bandwidth figures judged against the
    floors of data/gpu_skus.yml or the profile's accept.floors; uncalibrated floors only warn.
    --fleet: the all-reduce across hosts and the slow node. --price-per-hour: the cost table."""
    from provisioner.engine.accept import Request

    request = Request(level=level, fleet=across, price_per_hour=price, drain_hook=drain_hook, run_drain=run_drain,
                      timeout_s=timeout, duration_s=duration)
    request.check()  # before any host is touched
    talk_to_hosts(session(ctx), "accept", profile, inventory, fleet.fleet(), accept=request)


@app.command("up")
@friendly
@fleet_options()
def up(ctx: typer.Context, profile: Profile, inventory: InventoryArg, fleet: FleetOptions,
       full: Annotated[bool, typer.Option("--full", help="Converge every host, even one preflight finds exactly "
                                                         "as its last converge with this profile left it.",
                                          rich_help_panel=CONVERGE_PANEL)] = False,
       strict: Annotated[bool, typer.Option("--strict", help="Refuse a profile with warnings (an end-of-life "
                                                             "driver branch) before touching any host.",
                                            rich_help_panel=CONVERGE_PANEL)] = False,
       drain: Annotated[Optional[str], typer.Option("--drain", help="Rolling change: run CMD on this machine for each "
                        "host before its batch is converged ({host} is replaced by the shell-quoted name; "
                        "PROVISION_HOST is set). Needs --batch.", rich_help_panel=ROLLING_PANEL)] = None,
       undrain: Annotated[Optional[str], typer.Option("--undrain", help="Run CMD for each host of a batch once it "
                          "verified and passed the gate.", rich_help_panel=ROLLING_PANEL)] = None,
       gate: Annotated[Optional[str], typer.Option("--gate", help="Run CMD for each host after its batch verified, "
                       "before undrain; a non-zero exit fails the batch.", rich_help_panel=ROLLING_PANEL)] = None,
       hook_timeout: Annotated[float, typer.Option("--hook-timeout", min=1, help="Seconds a drain, gate or undrain "
                               "command may run before it is killed and counts as failed.",
                               rich_help_panel=ROLLING_PANEL)] = HOOK_TIMEOUT,
       resume: Annotated[Optional[Path], typer.Option("--resume", help="Resume the rollout that stopped in this run "
                         "folder (yours, writable by no one else): its failed and untouched hosts, with its batch "
                         "and max-fail. Its hooks run only when given again (the printed resume line carries them) "
                         "or confirmed at a terminal.", rich_help_panel=ROLLING_PANEL)] = None,
       yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not show the plan and ask before converging (a run "
                                          "without a terminal, or with --json, never asks).",
                                          rich_help_panel=CONVERGE_PANEL)] = False,
       rollback: Annotated[bool, typer.Option("--rollback", help="Return the hosts to the profile they ran before "
                           "their last change: its held versions, files and units. Each host's state record names "
                           "that profile's sha256; the profile is this controller's own copy (every profile up "
                           "applies is kept), or --profile when its sha256 is that one; else --profile names the "
                           "profile they run now. The digest and the diff are shown first. Works with "
                           "--batch/--drain/--gate.", rich_help_panel=ROLLING_PANEL)]
       = False) -> None:
    """Converge the hosts to the profile, then verify them (preflight -> converge -> verify).

    A host already in the state its last converge with this profile recorded is not converged again.

    --full converges it anyway; verify runs on every host.

    With --batch and --drain/--undrain/--gate: a rolling change, batch by batch (drain, converge,
    verify, gate, undrain), stopping at the first failed batch unless --max-fail allows more.

    --rollback: back to the profile each host ran before its last change, from the controller's own copy.

    On a terminal, up first shows what it would do (provision plan) and asks; --yes skips that."""
    from provisioner.engine import rolling

    # Hooks a stopped rollout's record holds and the command line did not give again are shown
    # and asked about only where a person can answer.
    confirm = (lambda question: typer.confirm(question, default=False, err=True)) if sys.stdin.isatty() else None
    request = rolling.up_request(limit=fleet.limit, batch=fleet.batch, max_fail=fleet.max_fail, drain=drain,
                                 undrain=undrain, gate=gate, hook_timeout=hook_timeout, resume=resume,
                                 rollback=rollback, confirm=confirm)
    validated = fleet.fleet(limit=request.limit, batch=request.batch, max_fail=request.max_fail)
    back = None
    if rollback:
        from dataclasses import replace

        from provisioner import profiles
        from provisioner.engine import commands
        from provisioner.engine.rollback import plan

        validated = replace(validated, become=validated.become.prompted())  # asked once, for the read and the converge
        with ansible_verbosity(validated.verbose):
            back = plan(commands.prepare(profile, inventory, validated.files_root), validated.runs_dir,
                        limit=validated.limit, forks=validated.forks, become=validated.become)
        _show_rollback(session(ctx), back, to_err=validated.as_json)
        # The kept copy lies in the controller's store: its files are still read from the
        # files root of the profile named now.
        validated = replace(validated, files_root=validated.files_root or profiles.find(profile).parent)
        profile = str(back.path)

    def check_target(target) -> None:  # before any host is touched
        request.check_target(target)
        if back is not None:
            back.check_target(target)

    if _asks(yes, validated.as_json) and back is None and resume is None:
        from dataclasses import replace

        validated = replace(validated, become=validated.become.prompted())  # asked once, for the plan and the run
        shown = _plan(session(ctx), profile, inventory, validated, check_target=check_target)
        show_plan(session(ctx), shown, as_json=False, verbose=validated.verbose)
        if not typer.confirm("Converge the hosts as planned?", default=False, err=True):
            session(ctx).say("nothing was changed", to_err=True)
            raise typer.Exit(shown.exit_code)

    talk_to_hosts(session(ctx), "up", profile, inventory, validated, check_target=check_target, strict=strict,
                  full=full, hooks=request.hooks or None,
                  resume_command=request.resume_command(profile, inventory, validated.batch, validated.max_fail))


def _asks(yes: bool, as_json: bool) -> bool:
    """Whether up shows the plan and asks first: only where a person reads and answers (stdin
    and stdout a terminal), not with --yes or --json. Scripts, CI and cron never wait on it."""
    return not yes and not as_json and sys.stdin.isatty() and sys.stdout.isatty()


def _plan(s: Session, profile: str, inventory: Path, fleet: Fleet, check_target=None):
    from provisioner.engine import commands
    from provisioner.engine.plan import plan
    from provisioner.engine.progress import Progress

    target = commands.prepare(profile, inventory, fleet.files_root)  # everything validated before any host is touched
    if check_target:
        check_target(target)
    _warn_dropped(s, target)
    with ansible_verbosity(fleet.verbose), Progress(s.err, heartbeat=heartbeat_seconds()) as progress:
        return plan(target, fleet.runs_dir, limit=fleet.limit, forks=fleet.forks, become=fleet.become.prompted(),
                    hook=progress)


def show_plan(s: Session, result, as_json: bool, verbose: int = 0) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
        return
    for line in result.lines(verbose=verbose > 0):
        s.say(line)


@app.command("plan")
@friendly
@fleet_options(without=("batch", "max_fail", "junit", "force"))
def plan_command(ctx: typer.Context, profile: Profile, inventory: InventoryArg, fleet: FleetOptions) -> None:
    """Read-only: what up would change on each host, and what that disrupts.

    Packages to install, upgrade, downgrade or remove (exact versions), holds, and each host's
    disruption: none, service restart, driver unload (every process and unit holding
    /dev/nvidia*) or reboot. Exit 0: nothing to do; 2: changes pending; 1: an error."""
    s = session(ctx)
    validated = fleet.fleet()
    result = _plan(s, profile, inventory, validated)
    show_plan(s, result, validated.as_json, validated.verbose)
    raise typer.Exit(result.exit_code)


def _show_rollback(s: Session, back, *, to_err: bool) -> None:
    """What the rollback goes back to, from where, and how that differs from now: before it starts."""
    from rich.markup import escape

    source = "the controller's copy, kept when up applied it" if back.kept else "the --profile file"
    s.say(escape(f"rollback: {len(back.hosts)} host(s) back to profile {back.back_to.profile.name!r} (sha256 "
                 f"{back.digest}): {', '.join(back.hosts)}"), to_err=to_err)
    s.say(escape(f"rollback: from {source}: {back.path}"), to_err=to_err)
    diff = back.diff()
    if back.now is None:
        s.say("rollback: no diff: this controller has no copy of the profile the hosts run now", to_err=to_err)
    elif not diff:
        s.say("rollback: the profile they go back to is the one they run now", to_err=to_err)
    for line in diff:
        s.say(escape(line), to_err=to_err)


@app.command("check")
@friendly
@fleet_options()
def check(ctx: typer.Context, profile: Profile, inventory: InventoryArg, fleet: FleetOptions,
          deep: Annotated[bool, typer.Option("--deep", help="Run the whole converge in check mode with diffs "
                                                            "(slower; also sees what a changed profile would do).")] = False,
          from_prometheus: Annotated[Optional[str], typer.Option(
              "--from-prometheus", metavar="URL",
              help="Read every host's state from this Prometheus (its base URL) in one query instead of "
                   "asking the hosts: what each node's provision-state.timer published. A host whose data is "
                   "missing or older than 3 timer intervals is unknown (exit 1).")] = None) -> None:
    """Drift: compare each host with the state recorded at its last converge; changes nothing.

    Names every managed package, hold, file and unit that moved since, and the profile's change.

    --deep runs the converge in check mode with diffs instead (slower); only --deep takes --batch
    and --max-fail. --from-prometheus reads what the nodes' timers published instead of asking
    the hosts: one query for the whole fleet, the same verdicts."""
    if from_prometheus is not None:
        _check_from_prometheus(session(ctx), profile, inventory, fleet, from_prometheus, deep)
        return
    if not deep and (fleet.batch is not None or fleet.max_fail is not None):
        # Plain check reads every host's record in one call per host, all hosts at once: batches
        # would change nothing but its speed, so taking the options and ignoring them misleads.
        raise ProvisionError("plain check works on every host at once; --batch and --max-fail apply to check --deep",
                             where="--batch" if fleet.batch is not None else "--max-fail",
                             fix="drop --batch/--max-fail, or add --deep to run the converge in check mode batch by "
                                 "batch")
    talk_to_hosts(session(ctx), "check", profile, inventory, fleet.fleet(), deep=deep)


def _check_from_prometheus(s: Session, profile: str, inventory: Path, fleet: FleetOptions, url: str,
                           deep: bool) -> None:
    if deep:
        raise ProvisionError("--deep does nothing with --from-prometheus: no host is contacted", where="--deep",
                             fix="drop --deep, or drop --from-prometheus to ask the hosts")
    _from_prometheus(s, "check", profile, inventory, fleet, url)


def _from_prometheus(s: Session, command: str, profile: str, inventory: Path, fleet: FleetOptions, url: str) -> None:
    """check or verify --from-prometheus: no host is contacted, so the options that shape a run
    on the hosts are refused rather than ignored."""
    from provisioner.engine import commands, prometheus

    given = [name for name, on in (("--batch", fleet.batch is not None),
                                   ("--max-fail", fleet.max_fail is not None), ("--forks", fleet.forks is not None),
                                   ("--ask-become-pass", fleet.ask_become_pass),
                                   ("--become-password-file", fleet.become_password_file is not None)) if on]
    if given:
        raise ProvisionError(f"{given[0]} does nothing with --from-prometheus: no host is contacted",
                             where=given[0], fix=f"drop {given[0]}, or drop --from-prometheus to ask the hosts")
    options = fleet.fleet()
    target = commands.prepare(profile, inventory, options.files_root)
    _warn_dropped(s, target)
    run = prometheus.check if command == "check" else prometheus.verify
    report = run(target, url, runs_dir=options.runs_dir, limit=options.limit)
    show(s, report, options.as_json, options.junit, force=options.force, verbose=options.verbose)
    raise typer.Exit(report.exit_code)
