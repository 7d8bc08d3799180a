"""`provision lab`: local test hosts (development tooling). provisioner.lab is imported only
when a lab command runs, so the rest of the CLI never pays for it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from provisioner.cli.app import Session, app, friendly, session
from provisioner.errors import ProvisionError

lab_app = typer.Typer(help="Local test hosts (podman containers with systemd, no GPU).", no_args_is_help=True)
app.add_typer(lab_app, name="lab")

Prefix = Annotated[str, typer.Option("--prefix", help="Name prefix of the lab's containers.")]
Workdir = Annotated[Path, typer.Option("--workdir", help="Where hosts.ini and the lab's SSH key go.")]


def _lab():
    try:
        from provisioner import lab
    except ImportError as exc:  # a partial install; the lab is development tooling
        raise ProvisionError(f"the lab cannot be loaded: {exc}", where="provision lab",
                             fix="install the lab extra: pip install 'gpu-provisioner[lab]'") from None
    return lab


@lab_app.command("up")
@friendly
def lab_up(
    ctx: typer.Context,
    hosts: Annotated[int, typer.Option("--hosts", "-n", min=1, help="How many hosts (lab.hosts.MAX_HOSTS at most).")] = 3,
    prefix: Prefix = "lab",
    workdir: Workdir = Path("lab"),
    apt_cache: Annotated[bool, typer.Option(help="Share one apt cache between the hosts.")] = True,
) -> None:
    """Start N Debian 12 systemd containers reachable over SSH, and write <workdir>/hosts.ini."""
    s = session(ctx)
    result = _lab().up(hosts, prefix, workdir, apt_cache=apt_cache, progress=lambda m: s.say(m, to_err=True))
    _lab_table(s, result.hosts)
    s.say(f"inventory: {result.inventory}  ({result.seconds:.0f}s; image {result.image})")
    s.say(f"next: provision up --profile debian12-lab {result.inventory}")


@lab_app.command("down")
@friendly
def lab_down(ctx: typer.Context, prefix: Prefix = "lab", workdir: Workdir = Path("lab")) -> None:
    """Remove the lab's containers and the files lab up wrote."""
    s = session(ctx)
    result = _lab().down(prefix, workdir, progress=lambda m: s.say(m, to_err=True))
    s.say(f"removed {len(result.removed_containers)} container(s) and {len(result.removed_files)} file(s)")


@lab_app.command("status")
@friendly
def lab_status(ctx: typer.Context,
               prefix: Annotated[Optional[str], typer.Option("--prefix", help="Only this lab (default: all).")] = None,
               ) -> None:
    """List the lab's hosts: state, address, systemd state."""
    s = session(ctx)
    hosts = _lab().status(prefix)
    if not hosts:
        s.say("no lab hosts (start some with: provision lab up)")
        return
    _lab_table(s, hosts)


def _lab_table(s: Session, hosts) -> None:
    from rich.table import Table

    table = Table("host", "state", "address", "systemd", title="lab hosts (no GPU)", title_justify="left")
    for h in hosts:
        table.add_row(h.name, h.state, h.ip or "-", h.systemd or "-")
    s.out.print(table)
