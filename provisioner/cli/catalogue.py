"""`provision catalogue refresh`: write a flavour's package snapshot from a live signed index."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Optional

import typer

from provisioner.cli.app import app, friendly, session
from provisioner.cli.options import Force
from provisioner.errors import ProvisionError

catalogue_app = typer.Typer(help="The offline snapshot of NVIDIA's CUDA repository that `profiles validate` reads.")
app.add_typer(catalogue_app, name="catalogue")


@catalogue_app.command("refresh")
@friendly
def catalogue_refresh(
    ctx: typer.Context,
    flavour: Annotated[str, typer.Option("--flavour", help="The repository flavour: ubuntu2204, ubuntu2404.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The snapshot file to write.")],
    mirror: Annotated[Optional[str], typer.Option(
        "--mirror", help="A mirror of NVIDIA's repositories root (the folder holding ubuntu2204/); default NVIDIA's.")] = None,
    key_url: Annotated[Optional[str], typer.Option("--key-url", help="The signing key (default: beside the repository).")] = None,
    fingerprint: Annotated[Optional[str], typer.Option(
        "--fingerprint", help="The key's fingerprint (default: NVIDIA's, from the current snapshot).")] = None,
    force: Force = False,
) -> None:
    """Read the flavour's signed index (InRelease verified against the pinned key, Packages
    against its signed SHA256) and write the package families the tool installs, every
    version citing the index, with the Release Date and Packages sha256 at the top."""
    import yaml

    from provisioner.outputs import check_file, write_file
    from provisioner.profiles import aptindex, catalogue

    s = session(ctx)
    check_file(output, force=force, what="snapshot")                  # refused before any fetch
    if fingerprint is not None:
        from provisioner.profiles.models import check_fingerprint

        try:
            check_fingerprint(fingerprint.upper())
        except ValueError as exc:
            raise ProvisionError(str(exc), where="--fingerprint", fix="pass the key's full fingerprint") from None
    cat = catalogue.load(flavour)
    url = f"{mirror.rstrip('/')}/{cat.path}/" if mirror else cat.url
    repo = aptindex.Repository(url=aptindex.check_url(url, "--mirror"), key_url=key_url or f"{url}{cat.key.file}",
                               fingerprint=(fingerprint or cat.key.fingerprint).upper())
    index = aptindex.read(repo)
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    data = catalogue.refresh(cat, index, today)
    head = (f"# A snapshot of NVIDIA's CUDA repository, {flavour}: `provision catalogue refresh` read\n"
            f"# {index.url} (Release Date: {index.release_date}) on {today}.\n")
    write_file(output, head + yaml.safe_dump(data, sort_keys=False, width=120), force=force, what="snapshot")
    count = sum(len(v) for v in data["packages"].values())
    s.say(f"{output}: {len(data['packages'])} packages, {count} versions from {index.url} "
          f"(Release Date: {index.release_date})")
