"""Running a small playbook for real through ansible-runner, against this machine over
the local connection, and reading its event stream (tests of the roles' task files)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import ansible_runner
import yaml

from .conftest import REPO

LOCAL = f'localhost ansible_connection=local ansible_python_interpreter="{sys.executable}"'


class Run:
    def __init__(self, result) -> None:
        self.rc = result.rc
        self.events = list(result.events)
        self.stdout = result.stdout.read()

    def results(self, task: str) -> list[dict]:
        """The runner_on_* events of tasks named `task`."""
        return [e for e in self.events if e.get("event", "").startswith("runner_on_")
                and e.get("event_data", {}).get("task") == task and e["event"] != "runner_on_start"]

    def status(self, task: str) -> list[str]:
        return [e["event"].removeprefix("runner_on_") for e in self.results(task)]

    def started(self, task: str) -> bool:
        return any(e.get("event") == "runner_on_start" and e["event_data"].get("task") == task for e in self.events)

    def changed(self) -> int:
        stats = next(e for e in reversed(self.events) if e.get("event") == "playbook_on_stats")["event_data"]
        return sum((stats.get("changed") or {}).values())

    def changed_tasks(self) -> list[str]:
        return [e["event_data"]["task"] for e in self.events
                if e.get("event") == "runner_on_ok" and e["event_data"].get("res", {}).get("changed")]


def play(tmp: Path, name: str, plays: list, inventory: str, check: bool = False) -> Run:
    """Run `plays` (Python data, written as YAML) against the INI `inventory`."""
    folder = tmp / name
    (folder / "runner").mkdir(parents=True)
    (folder / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    (folder / "hosts.ini").write_text(inventory)
    result = ansible_runner.run(
        private_data_dir=str(folder / "runner"), playbook=str(folder / "play.yml"),
        inventory=str(folder / "hosts.ini"), quiet=True, cmdline="--check" if check else None,
        envvars={"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                 "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1",
                 "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_DEPRECATION_WARNINGS": "0"})
    return Run(result)
