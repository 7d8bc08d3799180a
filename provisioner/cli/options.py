"""Options that several commands share, and the fleet options gathered into one object.

Every command that talks to hosts takes the same fleet options (--limit, --forks, --json,
--runs-dir, --batch, --max-fail, --junit, and how to become root); `Fleet` carries them,
validated, from the command to the engine instead of a list of positional parameters.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import shlex
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from provisioner.engine.runner import Become
from provisioner.errors import ProvisionError

Profile = Annotated[str, typer.Option("--profile", "-p", help="Built-in profile name or path to a profile file.")]
InventoryArg = Annotated[Path, typer.Argument(help="Ansible inventory: hosts.ini or a YAML inventory.")]
FilesRoot = Annotated[Optional[Path], typer.Option(
    "--files-root", envvar="PROVISION_FILES_ROOT", help="The folder the files a profile names (CA certificates, a "
    "wheelhouse, an installer, a binary, a tarball) are read from, relative paths there; nothing outside it is "
    "read. Default: the profile file's own folder.")]
# The help panels the fleet options are grouped under (`provision up --help` has 21 options).
HOSTS_PANEL, OUTPUT_PANEL, BECOME_PANEL = "Which hosts, how many at a time", "Output and records", "Becoming root"
Limit = Annotated[Optional[str], typer.Option("--limit", "-l", help="Only these hosts/groups (Ansible pattern).",
                                              rich_help_panel=HOSTS_PANEL)]
# One controller carries a few hundred hosts at once (docs/fleets.md): more forks than that is a
# typo (--forks 1000000). More than the hosts costs nothing: Ansible starts one worker per host at most.
MAX_FORKS = 500
Forks = Annotated[Optional[int], typer.Option("--forks", "-f", min=1, max=MAX_FORKS, rich_help_panel=HOSTS_PANEL,
                                              help=f"Hosts worked on in parallel (at most {MAX_FORKS}).")]
Json = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout instead of a table.",
                                    rich_help_panel=OUTPUT_PANEL)]
RunsDir = Annotated[Path, typer.Option("--runs-dir", envvar="PROVISION_RUNS_DIR",
                                       help="Where run records are kept.", rich_help_panel=OUTPUT_PANEL)]
Batch = Annotated[Optional[str], typer.Option("--batch", help="Work on N hosts (or P%) at a time, like Ansible's serial.",
                                              rich_help_panel=HOSTS_PANEL)]
MaxFail = Annotated[Optional[str], typer.Option("--max-fail", help="Abandon the remaining batches once more than P% "
                                                "of a batch failed (default: never).", rich_help_panel=HOSTS_PANEL)]
Junit = Annotated[Optional[Path], typer.Option("--junit", help="Also write the report as JUnit XML to this file "
                                               "(one testcase per host per check, for CI).",
                                               rich_help_panel=OUTPUT_PANEL)]
# Counted, as Ansible counts it: -v every host and every check, -vv also every changed task,
# -vvv and more also Ansible's own verbosity in the run record (artifacts/<playbook>/stdout).
Verbose = Annotated[int, typer.Option("--verbose", "-v", count=True, help="-v: show every host and every check "
                                      "(default: a summary line and one line per host that is not ok); -vv: also "
                                      "every changed task; -vvv (or more v's): also run Ansible with that "
                                      "verbosity, its output in the run record.", rich_help_panel=OUTPUT_PANEL)]
ANSIBLE_VERBOSE_FROM = 3  # -vvv: where Ansible's own verbosity starts, as `ansible-playbook -vvv`
Output = Annotated[Path, typer.Option("--output", "-o", help="Folder to write into.")]
AskBecomePass = Annotated[bool, typer.Option("--ask-become-pass", "-K", help="Ask for the password the plays' "
                                             "become (sudo) needs; it is kept in memory only.",
                                             rich_help_panel=BECOME_PANEL)]
BecomePasswordFile = Annotated[Optional[Path], typer.Option(
    "--become-password-file", help="A file holding the become password (for cron and CI): an owner-only, non-executable regular file, else refused.",
    rich_help_panel=BECOME_PANEL)]
BecomeMethod = Annotated[str, typer.Option("--become-method", help="How the plays gain root: sudo, su, doas, ...",
                                           rich_help_panel=BECOME_PANEL)]
BECOME_METHODS = ("sudo", "su", "doas", "pbrun", "pfexec", "dzdo", "ksu", "runas", "machinectl", "sesu")
Force = Annotated[bool, typer.Option("--force", help="Replace output files provision did not write, write into a "
                                     "non-empty folder, or replace a symbolic link (never a device or a folder).",
                                     rich_help_panel=OUTPUT_PANEL)]
DEFAULT_RUNS_DIR = Path("provision-runs")


# The fleet options, declared once: FleetOptions' fields (names and defaults) with the Typer
# option each is typed as. `fleet_options` gives a command all of them (or all but some) and
# the command receives them as one FleetOptions, validated into a Fleet by .fleet().
FLEET_OPTIONS: dict[str, Any] = {
    "limit": Limit, "forks": Forks, "as_json": Json, "runs_dir": RunsDir, "batch": Batch, "max_fail": MaxFail,
    "junit": Junit, "force": Force, "ask_become_pass": AskBecomePass, "become_password_file": BecomePasswordFile,
    "become_method": BecomeMethod, "verbose": Verbose, "files_root": FilesRoot,
}


@dataclass(frozen=True)
class FleetOptions:
    """The fleet options as typed (strings and flags, not yet validated)."""

    limit: str | None = None
    forks: int | None = None
    as_json: bool = False
    runs_dir: Path = DEFAULT_RUNS_DIR
    batch: str | None = None
    max_fail: str | None = None
    junit: Path | None = None
    force: bool = False
    ask_become_pass: bool = False
    become_password_file: Path | None = None
    become_method: str = "sudo"
    verbose: int = 0
    files_root: Path | None = None

    def fleet(self, **changes: Any) -> Fleet:
        """Validated: refused here, before any host is touched (`changes`: values a stopped
        rollout's record supplies, for instance)."""
        o = replace(self, **changes)
        if o.junit is not None:  # refused before any host is touched, not after the run
            from provisioner.outputs import check_file

            check_file(o.junit, force=o.force, what="--junit")
        become = parse_become(o.ask_become_pass, o.become_password_file, o.become_method)
        return Fleet(o.limit, o.forks, o.as_json, o.runs_dir, parse_batch(o.batch), parse_max_fail(o.max_fail), o.junit,
                     o.force, become, o.verbose, o.files_root)


def fleet_options(*, without: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Give a command the fleet options (but `without`): Typer sees each as a parameter of
    the command, after its required arguments; the command gets them as `fleet: FleetOptions`."""
    defaults = {f.name: f.default for f in fields(FleetOptions) if f.name not in without}

    def decorate(fn: Callable) -> Callable:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "fleet"]
        required = [p for p in own if p.default is inspect.Parameter.empty]
        extra = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                                   annotation=FLEET_OPTIONS[n]) for n, default in defaults.items()]
        params = required + extra + [p for p in own if p not in required]

        @functools.wraps(fn)
        def command(*args, **kwargs):
            return fn(*args, fleet=FleetOptions(**{n: kwargs.pop(n) for n in defaults}), **kwargs)

        command.__signature__ = inspect.Signature(params)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


@dataclass(frozen=True)
class Fleet:
    """The fleet options of one command, validated."""

    limit: str | None = None
    forks: int | None = None
    as_json: bool = False
    runs_dir: Path = DEFAULT_RUNS_DIR
    batch: str | None = None
    max_fail: int | None = None
    junit: Path | None = None
    force: bool = False
    become: Become = field(default_factory=Become)
    verbose: int = 0  # how many -v: see Verbose
    files_root: Path | None = None  # where the profile's controller files are read (None: its folder)


def parse_become(ask: bool, password_file: Path | None, method: str) -> Become:
    """The become settings, checked before any host is touched (the prompt for the
    password comes later, once the profile and inventory are known to be good)."""
    if method not in BECOME_METHODS:
        raise ProvisionError(f"--become-method {method!r} is not a become method Ansible ships", where="--become-method",
                             fix=f"use one of: {', '.join(BECOME_METHODS)}")
    if ask and password_file is not None:
        raise ProvisionError("--ask-become-pass and --become-password-file both give the become password",
                             where="--ask-become-pass", fix="use one of them")
    if password_file is not None:
        path = password_file.expanduser()
        try:
            with path.open("rb") as f:
                mode = os.fstat(f.fileno()).st_mode
        except OSError as exc:
            raise ProvisionError(f"cannot read the become password file: {exc.strerror}", where=str(path),
                                 fix="create it (owner-only, the password on one line) or use --ask-become-pass") from None
        # Ansible runs an executable password file and takes its output as the password; one
        # that others can read or write gives root on every host to whoever can.
        problem = ("is not a regular file" if not stat.S_ISREG(mode)
                   else "is executable (Ansible would run it, not read it)" if mode & 0o111
                   else "can be read or written by group or others" if mode & 0o077 else None)
        if problem:
            raise ProvisionError(f"the become password file {problem} (mode {stat.filemode(mode)})", where=str(path),
                                 fix=f"make it an owner-only file holding the password: chmod 600 {shlex.quote(str(path))}")
        return Become(method, path.resolve())
    return Become(method, ask=ask)


@contextlib.contextmanager
def ansible_verbosity(verbose: int):
    """-vvv and more: Ansible runs with that verbosity (ANSIBLE_VERBOSITY reaches every
    playbook ansible-runner starts, which inherits this environment) while the command runs."""
    if verbose < ANSIBLE_VERBOSE_FROM:
        yield
        return
    before = os.environ.get("ANSIBLE_VERBOSITY")
    os.environ["ANSIBLE_VERBOSITY"] = str(verbose)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ANSIBLE_VERBOSITY", None)
        else:
            os.environ["ANSIBLE_VERBOSITY"] = before


def parse_batch(value: str | None) -> str | None:
    match = re.fullmatch(r"([1-9]\d*)(%?)", value) if value is not None else None
    if value is not None and (not match or match.group(2) and int(match.group(1)) > 100):
        raise ProvisionError(f"--batch {value!r} is not a host count or a percentage", where="--batch",
                             fix="use a number of hosts (--batch 10) or a percentage (--batch 20%)")
    return value


def parse_max_fail(value: str | None) -> int | None:
    if value is None:
        return None
    match = re.fullmatch(r"(\d{1,3})%?", value)
    if not match or int(match.group(1)) > 100:
        raise ProvisionError(f"--max-fail {value!r} is not a percentage", where="--max-fail",
                             fix="use 0 to 100, e.g. --max-fail 10%")
    return int(match.group(1))
