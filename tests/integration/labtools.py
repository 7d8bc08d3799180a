"""What the lab-host tests share: the driver-only profile, podman, fresh lab hosts, and
reading a run's ansible-runner event stream while the run is still going."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

# Driver-only: no CUDA toolkit, no Python env (the Molecule scenarios converge the full stack).
DRIVER_ONLY = str(Path(__file__).resolve().parents[1] / "data" / "profiles" / "lab-driver-only.yml")


def podman(*args: str, check: bool = False, input: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, input=input, check=check, timeout=timeout)


@contextlib.contextmanager
def lab_hosts(count: int, tag: str, tmp_path_factory, *, converged: str | None = None,
              run_args: tuple[str, ...] = ()) -> Iterator:
    """`count` lab hosts (`provision lab up`), removed afterwards whatever happens: fresh ones,
    or with `converged=PROFILE` hosts started from the image of a host `provision up`
    converged with that profile (provisioner.lab.converged: made once per profile and
    product, then reused by every test that needs a converged host, not the converge).
    `run_args`: more `podman run` options for the hosts."""
    from provisioner import lab
    from provisioner.lab import converged as converged_image

    workdir = tmp_path_factory.mktemp("lab")
    prefix = f"t{os.getpid()}{tag}"
    try:
        image = converged_image.ensure(converged, runs_dir=tmp_path_factory.mktemp("converged-image")) if converged else None
        yield lab.up(count, prefix, workdir, image=image, run_args=run_args)  # image None: the base image
    finally:
        # The apt cache stays up: the other lab stream of the CI stage (scripts/ci-stages) may
        # be between `lab up`'s cache start and its containers' start, where down, seeing no
        # container running, would stop the cache under it.
        lab.down(prefix, workdir, stop_cache=False)


def task_started(runs: Path, task: str, host: str | None = None, playbook: str = "site") -> bool:
    """Whether a run under `runs` has started a task whose name contains `task` (on `host`)."""
    for event in runs.glob(f"*/artifacts/{playbook}/job_events/*.json"):
        try:
            data = json.loads(event.read_text())
        except (OSError, ValueError):
            continue  # being written, or renamed from -partial.json since the glob
        details = data.get("event_data", {})
        if (data.get("event") == "runner_on_start" and task in details.get("task", "")
                and host in (None, details.get("host"))):
            return True
    return False
