"""`provision profiles`: list, show and validate profiles."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from provisioner.cli.app import app, friendly, session
from provisioner.cli.options import FilesRoot
from provisioner.errors import ProvisionError

profiles_app = typer.Typer(help="List, show and validate profiles.", invoke_without_command=True)
app.add_typer(profiles_app, name="profiles")


@profiles_app.callback()
@friendly
def profiles_list(ctx: typer.Context) -> None:
    """List the built-in profiles (name, GPUs, CUDA, driver, purpose)."""
    if ctx.invoked_subcommand:
        return
    from rich.table import Table

    from provisioner import profiles

    table = Table("profile", "GPUs", "CUDA", "driver", "purpose", title="built-in profiles", title_justify="left")
    for name in profiles.builtin_names():
        p = profiles.load(name).profile
        gpus = f"{p.hardware.gpu.count}x {p.hardware.gpu.model}" if p.expects_gpu else "none"
        table.add_row(name, gpus, ", ".join(p.cuda.toolkits), f"{p.driver.version} ({p.driver.source})", p.description)
    session(ctx).out.print(table)


@profiles_app.command("show")
@friendly
def profiles_show(ctx: typer.Context,
                  ref: Annotated[str, typer.Argument(help="A built-in name or a path to a profile file.")]) -> None:
    """Print the fully resolved profile (extends applied, defaults filled in) as YAML."""
    from provisioner import profiles

    loaded = profiles.load(ref)
    sys.stdout.write(f"# resolved from: {', '.join(str(f) for f in loaded.files)}\n")
    sys.stdout.write(f"# sha256: {loaded.digest}\n")
    sys.stdout.write(profiles.to_yaml(loaded.profile))


@profiles_app.command("validate")
def profiles_validate(ctx: typer.Context,
                      paths: Annotated[list[str], typer.Argument(help="Profile files or built-in names.")],
                      strict: Annotated[bool, typer.Option("--strict", help="Refuse warnings too (an end-of-life "
                                                                          "driver branch): exit 1.")] = False,
                      files_root: FilesRoot = None) -> None:
    """Validate profiles (schema, compatibility matrix, the files they name); exit 1 if any is invalid.

    Offline: NVIDIA package versions are checked against the committed snapshot only, as a
    note; render, preflight and up resolve them against the repository's live index."""
    from provisioner import profiles
    from provisioner.profiles import controller_files

    s, bad = session(ctx), 0
    for ref in paths:
        try:
            loaded = controller_files.resolve(profiles.load(ref), files_root)
            for warning in loaded.warnings:
                s.err.print(f"[yellow]warn[/]  {escape(ref)}: {escape(warning.render())}", markup=True,
                            soft_wrap=True)
            if loaded.advisory:
                s.err.print(f"[cyan]note[/]  {escape(ref)}: {escape(loaded.advisory)}", markup=True, soft_wrap=True)
            if strict:
                profiles.refuse_warnings(loaded)
            s.out.print(f"[green]ok[/]    {escape(ref)} ({escape(loaded.profile.name)})", markup=True)
        except ProvisionError as exc:
            bad += 1
            s.err.print(f"[red]error[/] {escape(ref)}: {escape(str(exc))}", markup=True, soft_wrap=True)
    raise typer.Exit(1 if bad else 0)
