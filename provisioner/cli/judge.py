"""`provision judge`: captured outputs judged offline (logic in provisioner/judge/captures.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from provisioner.cli.app import app, friendly, session
from provisioner.cli.options import Json, Profile


@app.command("judge")
@friendly
def judge_command(
    ctx: typer.Context,
    profile: Profile,
    files: Annotated[list[Path], typer.Argument(help="Captured outputs: nvidia-smi (any form), nccl-tests, dcgmi, "
                                                     "an exporter scrape, a kernel log, nvbandwidth, acceptance "
                                                     "measurements (scripts/gpu-machine-check).")],
    json_out: Json = False,
) -> None:
    """Judge captured nvidia-smi / NCCL / DCGM / nvbandwidth output against a profile, touching no host.

    Exit 0: every check passes; 2: a check fails; 1: an input could not be read, or a bad profile."""
    from provisioner import profiles
    from provisioner.judge import captures

    s = session(ctx)
    loaded = profiles.load(profile)
    results = captures.judge_files(loaded.profile, files)
    code = captures.exit_code(results)
    if json_out:  # json escapes every control character (and all but ASCII): no capture's text reaches the terminal raw
        sys.stdout.write(json.dumps({"profile": loaded.profile.name, "exit_code": code,
                                     "files": [r.as_dict() for r in results]}, indent=2) + "\n")
    else:
        marks = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[dim]skip[/]"}
        for r in results:
            s.say(f"[bold]{escape(r.path)}[/] ({r.form or 'unknown form'}): {r.status}", markup=True)
            if r.unreadable:
                s.say(f"  [red]unreadable[/]: {escape(r.unreadable)}", markup=True)
            for c in r.checks:
                s.say(f"  {marks[c.status]}  {escape(c.name)}: {escape(c.detail)}", markup=True)
    raise typer.Exit(code)
