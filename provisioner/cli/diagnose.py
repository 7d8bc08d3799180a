"""`provision diagnose`: collect evidence from the hosts when something is wrong (read-only,
bounded), print the summary, write one tarball per run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from provisioner.cli.app import app, friendly, session
from provisioner.cli.options import FleetOptions, InventoryArg, Profile, fleet_options


@app.command("diagnose")
@friendly
@fleet_options(without=("batch", "max_fail", "junit", "verbose"))
def diagnose(ctx: typer.Context, profile: Profile, inventory: InventoryArg, fleet: FleetOptions,
             output: Annotated[Optional[Path], typer.Option(
                 "--output", "-o", help="Write the tarball here (default: diagnose.tar.gz in the run folder).")] = None,
             dry_run: Annotated[bool, typer.Option(
                 "--dry-run", help="List the commands diagnose runs on each host, and contact none.")] = False) -> None:
    """Read-only: collect logs and tool output from the hosts, and say what is wrong and how to fix it.

    Per host: the NVIDIA units' journal, kernel messages with Xids, nvidia-smi -q and a short
    dmon sample, dkms, the loaded module against the packages, Secure Boot, holds and pins,
    the state record's diff, ibstat. Bounded in time and size; never reads secrets.

    Exit 0: no fault found; 2: a fault found; 1: a host could not be diagnosed."""
    from provisioner.engine import commands
    from provisioner.engine import diagnose as engine

    s = session(ctx)
    target = commands.prepare(profile, inventory, fleet.files_root)  # everything validated before any host is touched
    if dry_run:
        for line in engine.dry_run_lines(target.loaded.profile):
            s.say(line)
        raise typer.Exit(0)
    validated = fleet.fleet()
    result = engine.diagnose(target, runs_dir=validated.runs_dir, output=output, force=validated.force,
                             limit=validated.limit, forks=validated.forks, become=validated.become.prompted())
    if validated.as_json:
        sys.stdout.write(json.dumps(result.as_dict(), indent=2) + "\n")
    else:
        s.out.print(result.summary, highlight=False, markup=False, soft_wrap=True)
        for error in result.collection.errors:
            s.warn(error)
    s.say(f"tarball: {result.tarball}", to_err=validated.as_json)
    raise typer.Exit(result.exit_code)
