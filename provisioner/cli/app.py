"""The Typer application, its context object and the one place errors become messages.

Every command takes the Typer context first and reads the `Session` from it (ctx.obj):
the consoles and the --debug flag. Errors
a person can fix arrive as ProvisionError and are printed once, as one message with the
fix, exit code 1; --debug shows the traceback too.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Annotated, Callable, Optional

import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from provisioner import __version__
from provisioner.errors import ProvisionError
from provisioner.reports.terminal import console


@dataclass
class Session:
    """What every command shares: where output goes, and whether to show tracebacks. The
    consoles clean what they print and read no markup unless asked (reports/terminal.py):
    messages carry host names, paths and what hosts said."""

    debug: bool = False
    out: Console = field(default_factory=console)
    err: Console = field(default_factory=lambda: console(stderr=True))

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/] {escape(message)}", markup=True, soft_wrap=True)

    def say(self, message: str, *, to_err: bool = False, markup: bool = False) -> None:
        """Print a line: plain text, or with markup=True Rich markup whose data parts went through escape()."""
        (self.err if to_err else self.out).print(message, markup=markup, soft_wrap=True)


def session(ctx: typer.Context) -> Session:
    """The command's Session, made by the app's callback (every command takes `ctx`)."""
    root = ctx.find_root()
    if not isinstance(root.obj, Session):
        root.obj = Session()
    return root.obj


def friendly(fn: Callable) -> Callable:
    """Turn ProvisionError into one clear message and exit 1 (a traceback only with --debug)."""

    @functools.wraps(fn)
    def wrapper(ctx: typer.Context, *args, **kwargs):
        try:
            return fn(ctx, *args, **kwargs)
        except (ProvisionError, OSError) as exc:
            s = session(ctx)
            if s.debug:
                raise
            if isinstance(exc, OSError):  # the machine refused something (a full disk, a permission): say which file
                exc = ProvisionError(f"{exc.strerror or exc}", where=exc.filename and str(exc.filename),
                                     fix="check the path and its permissions")
            s.err.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper


try:  # Typer 0.2x parses with its own copy of click; older ones with click itself
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click import UsageError


@contextlib.contextmanager
def _usage_errors_exit_one():
    """A mistyped option or a bad value is an error like any other: exit 1. Exit 2 means
    "drift found / verification failed" (cron and CI act on it); click's usage errors
    would exit 2 too."""
    try:
        yield
    except UsageError as exc:
        exc.exit_code = 1
        raise


class _Commands(typer.core.TyperGroup):
    """The command group whose usage errors exit 1, at every level (options of the root,
    of a command, of a subgroup's command: all are parsed under the root's invoke)."""

    def make_context(self, *args, **kwargs):
        with _usage_errors_exit_one():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _usage_errors_exit_one():
            return super().invoke(ctx)


app = typer.Typer(cls=_Commands, help="Take GPU servers to a verified, ready-to-train state from one profile.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=True)


def _version(value: bool) -> None:
    if value:
        console().print(f"provision {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    ctx.obj = Session(debug=debug)
