"""The command reference page, written from the Typer app itself (scripts/gen-docs writes it to
docs/reference/commands.md; tests/test_docs.py fails when the committed page is stale), so the
manual lists exactly the commands and options `provision --help` has."""

from __future__ import annotations

import typer.main

from provisioner.cli import app

INTRO = """\
# Command reference

Generated from the `provision` command line (`provisioner/cli/`) by `scripts/gen-docs`; do not
edit by hand. `provision COMMAND --help` says the same. Exit codes, for every command: 0 ok
(converged, verified, no drift), 1 an error (bad input, a mistyped option, a failed or
unreachable host, an interrupted run), 2 drift found or verification failed.
"""


def _commands(group, path: tuple[str, ...] = ()):
    """Every command, depth first in the order `--help` lists them, with its full name."""
    for name, command in group.commands.items():
        if command.hidden:
            continue
        yield (*path, name), command
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def _kind(param, ctx) -> str:
    if getattr(param, "count", False):
        return "counted flag"
    if getattr(param, "is_flag", False):
        return "flag"
    try:
        return param.display_type(ctx).lower().strip("<>")
    except Exception:  # noqa: BLE001  (an odd parameter type still gets a row)
        return "value"


def _default(param) -> str:
    value = param.default
    if param.required:
        return "required"
    if value is None or value is False or value == () or getattr(param, "is_flag", False):
        return "-"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _names(param) -> str:
    if param.param_type_name == "argument":
        return f"`{param.name.upper()}`"
    return ", ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))


def undocumented() -> list[str]:
    """Every command without help and every argument or option without help text:
    tests/test_docs.py keeps this empty."""
    missing = []
    root = typer.main.get_command(app)
    for path, command in _commands(root):
        if not (command.help or "").strip():
            missing.append(" ".join(path))
        missing += [f"{' '.join(path)} {p.name}" for p in command.params if not (getattr(p, "help", "") or "").strip()]
    return missing


def page() -> str:
    try:  # Typer's own copy of click where it has one: the Context its commands expect
        import typer._click as click
    except ImportError:  # pragma: no cover
        import click

    root = typer.main.get_command(app)
    out = [INTRO.rstrip(), "", "## Commands", ""]
    out += [f"- [`provision {' '.join(path)}`](#provision-{'-'.join(path)}): {_cell((c.help or '').split(chr(10))[0])}"
            for path, c in _commands(root)]
    for path, command in _commands(root):
        ctx = click.Context(command, info_name=" ".join(("provision", *path)))
        out += ["", f"## provision {' '.join(path)}", "", (command.help or "").strip(), ""]
        arguments = [p.name.upper() + ("..." if p.nargs == -1 else "") for p in command.params
                     if p.param_type_name == "argument"]
        more = ["COMMAND"] if hasattr(command, "commands") else []
        out += ["```", " ".join(["provision", *path, "[OPTIONS]", *arguments, *more]), "```"]
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        if not params:
            continue
        out += ["", "| argument or option | kind | default | group | what it does |", "|---|---|---|---|---|"]
        for p in params:
            panel = getattr(p, "rich_help_panel", None) or ("Arguments" if p.param_type_name == "argument" else "Options")
            env = f" (environment: `{p.envvar}`)" if isinstance(p.envvar, str) else ""
            out.append(f"| {_names(p)} | {_cell(_kind(p, ctx))} | {_cell(_default(p))} | {_cell(panel)} | "
                       f"{_cell(p.help)}{env} |")
    return "\n".join(out) + "\n"
