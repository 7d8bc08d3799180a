"""Fixtures the lab test modules share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def standin():
    """The stand-in CUDA repository built from its own manifest and served over HTTP for the
    module's tests: (repo, url); stopped after them."""
    from provisioner.lab import cudarepo

    repo = cudarepo.build()
    url = cudarepo.serve(repo)
    try:
        yield repo, url
    finally:
        cudarepo.stop()
