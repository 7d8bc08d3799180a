"""Reading a run's ansible-runner event stream while the run is still going."""

from __future__ import annotations

import json
from pathlib import Path


def task_started(runs: Path, task: str, host: str | None = None) -> bool:
    """Whether a run under `runs` has started a task whose name contains `task` (on `host`)."""
    for event in runs.glob("*/artifacts/site/job_events/*.json"):
        try:
            data = json.loads(event.read_text())
        except (OSError, ValueError):
            continue  # being written, or renamed from -partial.json since the glob
        details = data.get("event_data", {})
        if (data.get("event") == "runner_on_start" and task in details.get("task", "")
                and host in (None, details.get("host"))):
            return True
    return False
