"""Commands that write files for the tools around us: monitoring configuration, a past
run's report again (table, JSON, HTML, JUnit), and the self-applying bundle."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from provisioner.cli.app import app, friendly, session
from provisioner.cli.hosts import show
from provisioner.cli.options import FilesRoot, Force, InventoryArg, Json, Junit, Profile, Verbose


@app.command()
@friendly
def monitoring(
    ctx: typer.Context,
    profile: Profile,
    inventory: InventoryArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write prometheus/ and grafana/ into.")],
    force: Force = False,
    files_root: FilesRoot = None,
) -> None:
    """Render Prometheus file_sd targets + a scrape config for the hosts' dcgm-exporters, and a Grafana dashboard."""
    from provisioner.engine import commands
    from provisioner.reports import monitoring as monitoring_mod

    s = session(ctx)
    target = commands.prepare(profile, inventory, files_root)
    result = monitoring_mod.render(target.loaded, target.inventory, output, force=force)
    for warning in result.warnings:
        s.warn(warning)
    for path in result.files:
        s.say(str(path))
    s.say(f"{len(result.targets)} target(s); dashboard panels: {', '.join(result.panels)}")
    if result.unpanelled:
        s.say(f"collected but shown in no panel: {', '.join(result.unpanelled)}")
    prom = result.files[0].parents[1] / "prometheus"
    s.say(f"state panels: {', '.join(result.state_panels)}")
    s.say(f"check: promtool check config {shlex.quote(str(prom / 'scrape-dcgm.yml'))}; "
          f"promtool check config {shlex.quote(str(prom / 'scrape-node.yml'))} (it loads the alerting rules)")


@app.command("report")
@friendly
def report_command(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A run folder (printed as `run record:` at the end of a run).")],
    html: Annotated[Optional[Path], typer.Option("--html", help="Also write the report as one self-contained "
                                                 "HTML page to this file.")] = None,
    junit: Junit = None,
    as_json: Json = False,
    force: Force = False,
    verbose: Verbose = 0,
) -> None:
    """Show a past run's report again (from its report.json); --html writes it as a web page."""
    from provisioner.reports import report

    from provisioner.outputs import check_file

    for flag, path in (("--html", html), ("--junit", junit)):
        if path is not None:
            check_file(path, force=force, what=flag)
    show(session(ctx), report.load(run_dir), as_json, junit, html, force=force, verbose=verbose)


@app.command()
@friendly
def bundle(
    ctx: typer.Context,
    profile: Profile,
    output: Annotated[Path, typer.Option("--output", "-o", help="The tarball to write.")] = Path("bundle.tar.gz"),
    cloud_init_url: Annotated[Optional[str], typer.Option(
        "--cloud-init-url", help="Also write <output>.cloud-init.yml: a #cloud-config that fetches the bundle from "
                                 "this URL (or path on the node), checks its sha256 and applies it at first boot.")] = None,
    wheels: Annotated[Optional[Path], typer.Option(
        "--wheels", help="Take ansible-core and its dependencies for the node (this controller's versions, as "
                         "wheels for the node's Python) from this folder instead of downloading them; the error "
                         "for a missing one prints the pip download command that fills it.")] = None,
    force: Force = False,
) -> None:
    """Write a self-contained tarball (playbooks, roles, resolved profile, local.yml) a node applies to itself."""
    from provisioner.render import bundle as bundle_mod
    from provisioner import profiles

    from provisioner.outputs import check_file, write_file

    s = session(ctx)
    if cloud_init_url is not None:
        bundle_mod.check_source(cloud_init_url)  # before anything is written
    loaded = profiles.load(profile)
    for warning in bundle_mod.warnings_for(loaded):
        s.warn(warning)
    snippet = bundle_mod.snippet_path(check_file(output, force=force, what="bundle"))
    if cloud_init_url is not None:
        check_file(snippet, force=force, what="cloud-init snippet")
    path = bundle_mod.build(loaded, output, force=force, wheels=wheels)
    digest = bundle_mod.sha256_of(path)
    s.say(f"{path}  sha256 {digest}")
    if cloud_init_url is not None:
        write_file(snippet, bundle_mod.cloud_init(cloud_init_url, digest), force=force, what="cloud-init snippet")
        s.say(f"cloud-init: {snippet}")
    s.say(f"apply on a node (root): mkdir -p /opt/provisioner/bundle && tar -xzf {shlex.quote(path.name)} "
          "-C /opt/provisioner/bundle && /opt/provisioner/bundle/apply.sh")


@app.command()
@friendly
def wheelhouse(
    ctx: typer.Context,
    profile: Profile,
    output: Annotated[Path, typer.Option("--output", "-o", help="The wheelhouse folder to write (new, empty, or one "
                                                                "provision wheelhouse wrote before).")],
    platform: Annotated[str, typer.Option(
        "--platform", help="The hosts' wheel platform tag, e.g. manylinux_2_36_x86_64 (Debian 12, glibc 2.36; "
                           "older manylinux tags are accepted with it, as pip does).")],
    python_version: Annotated[Optional[str], typer.Option(
        "--python-version", help="The hosts' Python (3.11); every environment's python must be it. Left out, each "
                                 "environment's own python is used.")] = None,
    find_links: Annotated[Optional[list[Path]], typer.Option(
        "--find-links", help="A local folder of wheels to take wheels from before any index (repeatable); a PyTorch "
                             "wheel found here is used instead of the PyTorch index.")] = None,
    force: Force = False,
) -> None:
    """Collect every wheel the profile's environments install, with a lock per environment, for offline hosts."""
    from provisioner import profiles
    from provisioner.engine import wheelhouse as wheelhouse_mod
    from provisioner.outputs import absolute

    s = session(ctx)
    loaded = profiles.load(profile)
    for got in wheelhouse_mod.collect(loaded, output, platform=platform, python_version=python_version,
                                      find_links=list(find_links or []), force=force):
        s.say(f"{got.env}: {got.wheels} wheels, {got.bytes / 1e6:.0f} MB, lock {got.lock}")
    s.say(f"use it: mirrors.wheelhouse_source: {absolute(output)} (up installs each environment from it with "
          "pip --no-index --require-hashes)")
