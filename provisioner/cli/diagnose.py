"""`provision diagnose`: collect evidence from the hosts when something is wrong (read-only,
bounded), print the summary, write one tarball per run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from provisioner.cli.app import app, friendly, session
from provisioner.cli.options import (DEFAULT_RUNS_DIR, AskBecomePass, BecomeMethod, BecomePasswordFile, Fleet, Force,
                                     Forks, InventoryArg, Json, Limit, Profile, RunsDir)


@app.command("diagnose")
@friendly
def diagnose(ctx: typer.Context, profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None,
             as_json: Json = False, runs_dir: RunsDir = DEFAULT_RUNS_DIR, force: Force = False,
             output: Annotated[Optional[Path], typer.Option(
                 "--output", "-o", help="Write the tarball here (default: diagnose.tar.gz in the run folder).")] = None,
             dry_run: Annotated[bool, typer.Option(
                 "--dry-run", help="List the commands diagnose runs on each host, and contact none.")] = False,
             ask_become_pass: AskBecomePass = False, become_password_file: BecomePasswordFile = None,
             become_method: BecomeMethod = "sudo") -> None:
    """Read-only: collect logs and tool output from the hosts, and say what is wrong and how to fix it.

    Per host: the NVIDIA units' journal, kernel messages with Xids, nvidia-smi -q and a short
    dmon sample, dkms, the loaded module against the packages, Secure Boot, holds and pins,
    the state record's diff, ibstat. Bounded in time and size; never reads secrets.

    Exit 0: no fault found; 2: a fault found; 1: a host could not be diagnosed."""
    from provisioner.engine import commands
    from provisioner.engine import diagnose as engine

    s = session(ctx)
    target = commands.prepare(profile, inventory)  # everything validated before any host is touched
    if dry_run:
        for line in engine.dry_run_lines(target.loaded.profile):
            s.say(line)
        raise typer.Exit(0)
    fleet = Fleet.of(limit, forks, as_json, runs_dir, None, None, None, force, ask_become_pass=ask_become_pass,
                     become_password_file=become_password_file, become_method=become_method)
    result = engine.diagnose(target, runs_dir=fleet.runs_dir, output=output, force=force, limit=fleet.limit,
                             forks=fleet.forks, become=fleet.become.prompted())
    if as_json:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
    else:
        s.out.print(result.summary, highlight=False, markup=False, soft_wrap=True)
        for error in result.collection.errors:
            s.warn(error)
    s.say(f"tarball: {result.tarball}", to_err=as_json)
    raise typer.Exit(result.exit_code)
