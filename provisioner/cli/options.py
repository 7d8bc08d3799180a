"""Options that several commands share, and the fleet options gathered into one object.

Every command that talks to hosts takes the same fleet options (--limit, --forks, --json,
--runs-dir, --batch, --max-fail, --junit, and how to become root); `Fleet` carries them,
validated, from the command to the engine instead of a list of positional parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

from provisioner.engine.runner import Become
from provisioner.errors import ProvisionError

Profile = Annotated[str, typer.Option("--profile", "-p", help="Built-in profile name or path to a profile file.")]
InventoryArg = Annotated[Path, typer.Argument(help="Ansible inventory: hosts.ini or a YAML inventory.")]
Limit = Annotated[Optional[str], typer.Option("--limit", "-l", help="Only these hosts/groups (Ansible pattern).")]
Forks = Annotated[Optional[int], typer.Option("--forks", "-f", min=1, help="Hosts worked on in parallel.")]
Json = Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout instead of a table.")]
RunsDir = Annotated[Path, typer.Option("--runs-dir", envvar="PROVISION_RUNS_DIR",
                                       help="Where run records are kept.")]
Batch = Annotated[Optional[str], typer.Option("--batch", help="Work on N hosts (or P%) at a time, like Ansible's serial.")]
MaxFail = Annotated[Optional[str], typer.Option("--max-fail", help="Abandon the remaining batches once more than P% "
                                                "of a batch failed (default: never).")]
Junit = Annotated[Optional[Path], typer.Option("--junit", help="Also write the report as JUnit XML to this file "
                                               "(one testcase per host per check, for CI).")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show every host and every check (default: a "
                                       "summary line and one line per host that is not ok).")]
Output = Annotated[Path, typer.Option("--output", "-o", help="Folder to write into.")]
AskBecomePass = Annotated[bool, typer.Option("--ask-become-pass", "-K", help="Ask for the password the plays' "
                                             "become (sudo) needs; it is kept in memory only.")]
BecomePasswordFile = Annotated[Optional[Path], typer.Option(
    "--become-password-file", help="A file holding the become password (for cron and CI; keep it owner-only).")]
BecomeMethod = Annotated[str, typer.Option("--become-method", help="How the plays gain root: sudo, su, doas, ...")]
BECOME_METHODS = ("sudo", "su", "doas", "pbrun", "pfexec", "dzdo", "ksu", "runas", "machinectl", "sesu")
Force = Annotated[bool, typer.Option("--force", help="Replace output files provision did not write, write into a "
                                     "non-empty folder, or replace a symbolic link (never a device or a folder).")]
DEFAULT_RUNS_DIR = Path("provision-runs")


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
    verbose: bool = False

    @classmethod
    def of(cls, limit: str | None, forks: int | None, as_json: bool, runs_dir: Path, batch: str | None,
           max_fail: str | None, junit: Path | None, force: bool = False, *, ask_become_pass: bool = False,
           become_password_file: Path | None = None, become_method: str = "sudo", verbose: bool = False) -> Fleet:
        if junit is not None:  # refused before any host is touched, not after the run
            from provisioner.outputs import check_file

            check_file(junit, force=force, what="--junit")
        become = parse_become(ask_become_pass, become_password_file, become_method)
        return cls(limit, forks, as_json, runs_dir, parse_batch(batch), parse_max_fail(max_fail), junit, force,
                   become, verbose)


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
            with path.open("rb"):
                pass
        except OSError as exc:
            raise ProvisionError(f"cannot read the become password file: {exc.strerror}", where=str(path),
                                 fix="create it (owner-only, the password on one line) or use --ask-become-pass") from None
        return Become(method, path.resolve())
    return Become(method, ask=ask)


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
