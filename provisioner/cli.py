"""The `provision` command line. Thin: parse arguments, call the library, render the result.

Errors a person can fix arrive as ProvisionError and are printed once, as one message
with the fix, exit code 1; --debug shows the traceback too.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from provisioner import __version__
from provisioner.errors import ProvisionError

app = typer.Typer(help="Take GPU servers to a verified, ready-to-train state from one profile.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=True)
profiles_app = typer.Typer(help="List, show and validate profiles.", invoke_without_command=True)
lab_app = typer.Typer(help="Local test hosts (podman containers with systemd, no GPU).", no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")
app.add_typer(lab_app, name="lab")

out = Console()
err = Console(stderr=True)
_state = {"debug": False}


def friendly(fn: Callable) -> Callable:
    """Turn ProvisionError into one clear message and exit 1 (a traceback only with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ProvisionError as exc:
            if _state["debug"]:
                raise
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        out.print(f"provision {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
) -> None:
    _state["debug"] = debug


# --- profiles ------------------------------------------------------------------------

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
    out.print(table)


@profiles_app.command("show")
@friendly
def profiles_show(ref: Annotated[str, typer.Argument(help="A built-in name or a path to a profile file.")]) -> None:
    """Print the fully resolved profile (extends applied, defaults filled in) as YAML."""
    from provisioner import profiles

    loaded = profiles.load(ref)
    sys.stdout.write(f"# resolved from: {', '.join(str(f) for f in loaded.files)}\n")
    sys.stdout.write(f"# sha256: {loaded.digest}\n")
    sys.stdout.write(profiles.to_yaml(loaded.profile))


@profiles_app.command("validate")
def profiles_validate(paths: Annotated[list[str], typer.Argument(help="Profile files or built-in names.")]) -> None:
    """Validate profiles (schema and compatibility matrix); exit 1 if any is invalid."""
    from provisioner import profiles

    bad = 0
    for ref in paths:
        try:
            loaded = profiles.load(ref)
            out.print(f"[green]ok[/]    {escape(ref)} ({loaded.profile.name})", highlight=False)
        except ProvisionError as exc:
            bad += 1
            err.print(f"[red]error[/] {escape(ref)}: {escape(str(exc))}", highlight=False, soft_wrap=True)
    raise typer.Exit(1 if bad else 0)


# --- render and the commands that talk to hosts ----------------------------------------

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


def _batch(value: str | None) -> str | None:
    match = re.fullmatch(r"([1-9]\d*)(%?)", value) if value is not None else None
    if value is not None and (not match or match.group(2) and int(match.group(1)) > 100):
        raise ProvisionError(f"--batch {value!r} is not a host count or a percentage", where="--batch",
                             fix="use a number of hosts (--batch 10) or a percentage (--batch 20%)")
    return value


def _max_fail(value: str | None) -> int | None:
    if value is None:
        return None
    match = re.fullmatch(r"(\d{1,3})%?", value)
    if not match or int(match.group(1)) > 100:
        raise ProvisionError(f"--max-fail {value!r} is not a percentage", where="--max-fail",
                             fix="use 0 to 100, e.g. --max-fail 10%")
    return int(match.group(1))


@app.command()
@friendly
def render(
    profile: Profile,
    inventory: InventoryArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the inventory into.")],
    forks: Annotated[int, typer.Option("--forks", "-f", min=1, help="forks in the rendered ansible.cfg")] = 20,
) -> None:
    """Write the inventory, group_vars and ansible.cfg Ansible will see, without running anything."""
    from provisioner import engine, paths
    from provisioner.render import render as render_dir

    target = engine.prepare(profile, inventory)
    for line in target.inventory.dropped_secrets:
        err.print(f"[yellow]warning:[/] left out secret {line}; pass it with ansible-vault, "
                  "--ask-become-pass or the environment", highlight=False)
    files = render_dir(target.loaded, target.inventory, output, forks)
    for path in files:
        out.print(str(path), highlight=False)
    out.print(f"run: ANSIBLE_CONFIG={output.resolve()}/ansible.cfg ansible-playbook {paths.playbook('site')}",
              highlight=False, soft_wrap=True)


def _talk_to_hosts(command: str, profile: str, inventory: Path, limit: str | None, forks: int | None,
                   as_json: bool, runs_dir: Path, batch: str | None, max_fail: str | None,
                   junit: Path | None = None, deep: bool = False, full: bool = False) -> None:
    from provisioner import engine
    from provisioner.progress import Progress

    batch, max_fail_pct = _batch(batch), _max_fail(max_fail)
    target = engine.prepare(profile, inventory)  # everything validated before any host is touched
    for line in target.inventory.dropped_secrets:
        err.print(f"[yellow]warning:[/] not passing secret {line} from the inventory file; "
                  "use ansible-vault, --ask-become-pass or the environment", highlight=False)
    console = err if as_json else out
    with Progress(console) as progress:
        report = engine.execute(command, target, runs_dir=runs_dir, limit=limit, forks=forks, batch=batch,
                                max_fail=max_fail_pct, hook=progress, deep=deep, full=full)
    _show(report, as_json, junit)
    raise typer.Exit(report.exit_code)


def _show(report, as_json: bool, junit: Path | None, html: Path | None = None) -> None:
    """The report as a table (or JSON on stdout), and the files asked for beside it."""
    from provisioner.report import render_table

    if as_json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
    else:
        render_table(report, out)
    console = err if as_json else out
    if html is not None:
        from provisioner import html_report

        console.print(f"html: {html_report.write(report, html)}", highlight=False)
    if junit is not None:
        from provisioner import junit as junit_mod

        console.print(f"junit: {junit_mod.write(report, junit)}", highlight=False)


def _host_command(command: str, doc: str) -> None:
    @friendly
    def handler(profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None,
                as_json: Json = False, runs_dir: RunsDir = Path("provision-runs"), batch: Batch = None,
                max_fail: MaxFail = None, junit: Junit = None) -> None:
        _talk_to_hosts(command, profile, inventory, limit, forks, as_json, runs_dir, batch, max_fail, junit)

    handler.__doc__ = doc
    app.command(command)(handler)


_host_command("preflight", "Read-only: check the hosts' hardware and OS against the profile.")
_host_command("verify", "Verify the hosts against the profile (nvidia-smi and friends); changes nothing.")


@app.command("up")
@friendly
def up(profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None, as_json: Json = False,
       runs_dir: RunsDir = Path("provision-runs"), batch: Batch = None, max_fail: MaxFail = None, junit: Junit = None,
       full: Annotated[bool, typer.Option("--full", help="Converge every host, even one preflight finds exactly "
                                                         "as its last converge with this profile left it.")] = False,
       ) -> None:
    """Converge the hosts to the profile, then verify them (preflight -> converge -> verify).

    A host already in the state its last converge with this profile recorded is not converged again.

    --full converges it anyway; verify runs on every host."""
    _talk_to_hosts("up", profile, inventory, limit, forks, as_json, runs_dir, batch, max_fail, junit, full=full)


@app.command("check")
@friendly
def check(profile: Profile, inventory: InventoryArg, limit: Limit = None, forks: Forks = None, as_json: Json = False,
          runs_dir: RunsDir = Path("provision-runs"), batch: Batch = None, max_fail: MaxFail = None,
          junit: Junit = None,
          deep: Annotated[bool, typer.Option("--deep", help="Run the whole converge in check mode with diffs "
                                                            "(slower; also sees what a changed profile would do).")] = False,
          ) -> None:
    """Drift: compare each host with the state recorded at its last converge; changes nothing.

    Names every managed package, hold, file and unit that moved since, and the profile's change.

    --deep runs the converge in check mode with diffs instead (slower)."""
    _talk_to_hosts("check", profile, inventory, limit, forks, as_json, runs_dir, batch, max_fail, junit, deep=deep)


# --- ecosystem: monitoring, past reports, bundles ----------------------------------------

@app.command()
@friendly
def monitoring(
    profile: Profile,
    inventory: InventoryArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write prometheus/ and grafana/ into.")],
) -> None:
    """Render Prometheus file_sd targets + a scrape config for the hosts' dcgm-exporters, and a Grafana dashboard."""
    from provisioner import engine
    from provisioner import monitoring as monitoring_mod

    target = engine.prepare(profile, inventory)
    result = monitoring_mod.render(target.loaded, target.inventory, output)
    for warning in result.warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    for path in result.files:
        out.print(str(path), highlight=False)
    out.print(f"{len(result.targets)} target(s); dashboard panels: {', '.join(result.panels)}",
              highlight=False, soft_wrap=True)
    if result.unpanelled:
        out.print(f"collected but shown in no panel: {', '.join(result.unpanelled)}", highlight=False, soft_wrap=True)
    out.print(f"check: promtool check config {output.resolve()}/prometheus/scrape-dcgm.yml", highlight=False,
              soft_wrap=True)


@app.command("report")
@friendly
def report_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder (printed as `run record:` at the end of a run).")],
    html: Annotated[Optional[Path], typer.Option("--html", help="Also write the report as one self-contained "
                                                 "HTML page to this file.")] = None,
    junit: Junit = None,
    as_json: Json = False,
) -> None:
    """Show a past run's report again (from its report.json); --html writes it as a web page."""
    from provisioner import html_report

    report = html_report.load_report(run_dir)
    _show(report, as_json, junit, html)


@app.command()
@friendly
def bundle(
    profile: Profile,
    output: Annotated[Path, typer.Option("--output", "-o", help="The tarball to write.")] = Path("bundle.tar.gz"),
    cloud_init_url: Annotated[Optional[str], typer.Option(
        "--cloud-init-url", help="Also write <output>.cloud-init.yml: a #cloud-config that fetches the bundle from "
                                 "this URL (or path on the node), checks its sha256 and applies it at first boot.")] = None,
) -> None:
    """Write a self-contained tarball (playbooks, roles, resolved profile, local.yml) a node applies to itself."""
    from provisioner import bundle as bundle_mod
    from provisioner import profiles

    loaded = profiles.load(profile)
    for warning in bundle_mod.warnings_for(loaded):
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    path = bundle_mod.build(loaded, output)
    digest = bundle_mod.sha256_of(path)
    out.print(f"{path}  sha256 {digest}", highlight=False, soft_wrap=True)
    if cloud_init_url:
        snippet = path.with_name(path.name.removesuffix(".gz").removesuffix(".tar") + ".cloud-init.yml")
        snippet.write_text(bundle_mod.cloud_init(cloud_init_url, digest,
                                                 pip_index_url=loaded.profile.mirrors.pip_index_url), encoding="utf-8")
        out.print(f"cloud-init: {snippet}", highlight=False)
    out.print(f"apply on a node (root): mkdir -p /opt/provisioner/bundle && tar -xzf {path.name} "
              "-C /opt/provisioner/bundle && /opt/provisioner/bundle/apply.sh", highlight=False, soft_wrap=True)


# --- lab ------------------------------------------------------------------------------

Prefix = Annotated[str, typer.Option("--prefix", help="Name prefix of the lab's containers.")]
Workdir = Annotated[Path, typer.Option("--workdir", help="Where hosts.ini and the lab's SSH key go.")]


@lab_app.command("up")
@friendly
def lab_up(
    hosts: Annotated[int, typer.Option("--hosts", "-n", min=1, max=64, help="How many hosts.")] = 3,
    prefix: Prefix = "lab",
    workdir: Workdir = Path("lab"),
    apt_cache: Annotated[bool, typer.Option(help="Share one apt cache between the hosts.")] = True,
) -> None:
    """Start N Debian 12 systemd containers reachable over SSH, and write <workdir>/hosts.ini."""
    from provisioner import lab

    result = lab.up(hosts, prefix, workdir, apt_cache=apt_cache, progress=lambda m: err.print(m, highlight=False))
    _lab_table(result.hosts)
    out.print(f"inventory: {result.inventory}  ({result.seconds:.0f}s; image {result.image})", highlight=False)
    out.print(f"next: provision up --profile debian12-lab {result.inventory}", highlight=False)


@lab_app.command("down")
@friendly
def lab_down(prefix: Prefix = "lab", workdir: Workdir = Path("lab")) -> None:
    """Remove the lab's containers and the files lab up wrote."""
    from provisioner import lab

    result = lab.down(prefix, workdir, progress=lambda m: err.print(m, highlight=False))
    out.print(f"removed {len(result.removed_containers)} container(s) and {len(result.removed_files)} file(s)")


@lab_app.command("status")
@friendly
def lab_status(prefix: Annotated[Optional[str], typer.Option("--prefix", help="Only this lab (default: all).")] = None
               ) -> None:
    """List the lab's hosts: state, address, systemd state."""
    from provisioner import lab

    hosts = lab.status(prefix)
    if not hosts:
        out.print("no lab hosts (start some with: provision lab up)")
        return
    _lab_table(hosts)


def _lab_table(hosts) -> None:
    from rich.table import Table

    table = Table("host", "state", "address", "systemd", title="lab hosts (no GPU)", title_justify="left")
    for h in hosts:
        table.add_row(h.name, h.state, h.ip or "-", h.systemd or "-")
    out.print(table)


def main() -> None:
    os.environ.setdefault("ANSIBLE_NOCOLOR", "1")
    app(prog_name="provision")


if __name__ == "__main__":
    main()
