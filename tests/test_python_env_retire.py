"""An environment the profile dropped is removed from the host (issue 30): the python_env
role's tasks/retire.yml, run for real over the local connection on folders laid out as the
role lays them out, fed by the filter envs_dropped from a record as the host keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .ansibleplay import LOCAL, play
from .conftest import ROLES

pytestmark = pytest.mark.ansible

RETIRE = ROLES / "python_env" / "tasks" / "retire.yml"


def _layout(tmp: Path) -> tuple[Path, Path]:
    venvs, state = tmp / "venvs", tmp / "state"
    for build in (".jax-0123456789ab", ".jax-ba9876543210", ".jax-b-0123456789ab", ".keep-0123456789ab"):
        (venvs / build / "bin").mkdir(parents=True)
    (venvs / "jax").symlink_to(venvs / ".jax-0123456789ab")
    (venvs / "jax-b").symlink_to(venvs / ".jax-b-0123456789ab")
    (venvs / "keep").symlink_to(venvs / ".keep-0123456789ab")
    (venvs / "mine").mkdir()                       # a real folder where a record points: not ours
    state.mkdir()
    for name in ("jax", "jax-b", "keep", "mine"):
        (state / f"{name}.freeze.txt").write_text("numpy==2.1.0\n")
    return venvs, state


def _retire(tmp: Path, venvs: Path, state: Path, name: str):
    records = {n: {"env_dir": str(venvs / n)} for n in ("jax", "jax-b", "keep", "mine")}
    return play(tmp, name, [{
        "name": "Retire the environments the profile dropped.", "hosts": "all", "gather_facts": False,
        "vars": {"python_env_state_dir": str(state), "python_env_records": records},
        "tasks": [{"name": "Remove each dropped environment.", "ansible.builtin.include_tasks": str(RETIRE),
                   "loop": "{{ python_env_records | gpu_provisioner.node.envs_dropped([{'name': 'keep'}, "
                           "{'name': 'jax-b'}]) }}",
                   "loop_control": {"loop_var": "python_env_dropped"}}]}], LOCAL)


def test_a_dropped_environment_goes_and_nothing_else(tmp_path: Path):
    venvs, state = _layout(tmp_path)
    first = _retire(tmp_path, venvs, state, "first")
    assert first.rc == 0, first.stdout
    # jax: its link, both its builds and its freeze file; jax-b (a name that starts with "jax-")
    # and keep are still listed and untouched; mine is a real folder, so not the role's link.
    assert sorted(p.name for p in venvs.iterdir()) == [".jax-b-0123456789ab", ".keep-0123456789ab", "jax-b", "keep",
                                                       "mine"]
    assert sorted(p.name for p in state.iterdir()) == ["jax-b.freeze.txt", "keep.freeze.txt"]
    again = _retire(tmp_path, venvs, state, "again")
    assert again.rc == 0 and again.changed() == 0, again.stdout
