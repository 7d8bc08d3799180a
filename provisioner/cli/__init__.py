"""The `provision` command line. Thin: parse arguments, call the library, render the result.

app (the Typer application, its Session context object and error handling), options (the
shared options and the Fleet object), and one module per command group: profiles, hosts
(render, preflight, up, check, verify), artifacts (monitoring, report, bundle), lab.
"""

from __future__ import annotations

import os

from provisioner.cli import artifacts, catalogue, diagnose, hosts, judge, lab, profiles  # noqa: F401  (each registers its commands)
from provisioner.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    os.environ.setdefault("ANSIBLE_NOCOLOR", "1")
    app(prog_name="provision")
