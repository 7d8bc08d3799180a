"""The roles share instead of copy (issue 34, item 6): what every role does alike lives in
one place, and a copy that creeps back fails here.

- "Record what this role applied": one module, gpu_provisioner.node.role_record; no role
  writes its local fact file (`*.fact`) any other way.
- Holds: one module, gpu_provisioner.node.apt_hold (one apt-mark call per role and run);
  no role holds with dpkg_selections or apt-mark loops again.
- No two roles' task files share five or more identical tasks, once each role's own
  variable prefix is read as the same word (`nccl_facts_dir` and `cudnn_facts_dir` alike).
"""

from __future__ import annotations

import itertools
import json
import re

import yaml

from .conftest import ROLES


def _flat(tasks) -> list[dict]:
    out: list[dict] = []
    for task in tasks or []:
        if isinstance(task, dict) and "block" in task:
            out += _flat(task["block"]) + _flat(task.get("rescue")) + _flat(task.get("always"))
        elif isinstance(task, dict):
            out.append(task)
    return out


def role_tasks() -> dict[str, list[dict]]:
    return {role.name: [t for f in sorted((role / "tasks").glob("*.yml")) for t in _flat(yaml.safe_load(f.read_text()))]
            for role in sorted(ROLES.iterdir()) if (role / "tasks").is_dir()}


def _module(task: dict) -> tuple[str, object]:
    for key, value in task.items():
        if key.startswith(("ansible.builtin.", "gpu_provisioner.node.")):
            return key.rsplit(".", 1)[1], value
    return "", None


def test_every_local_fact_is_written_by_role_record_only():
    recorders, others = set(), []
    for role, tasks in role_tasks().items():
        for task in tasks:
            mod, args = _module(task)
            if mod == "role_record":
                recorders.add(role)
                assert args["role"] == role, f"{role} records as {args['role']}"
            elif isinstance(args, dict) and str(args.get("dest", args.get("path", ""))).endswith(".fact"):
                others.append(f"{role}: {task.get('name')} ({mod})")
    assert not others, f"a local fact written outside role_record: {others}"
    # every role that installs or configures something records it (gpu_verify only reads)
    assert recorders >= {"common", "cuda_repo", "nvidia_driver", "fabric_manager", "cuda_toolkit", "cudnn", "nccl",
                         "tensorrt", "python_env", "dcgm_exporter"}, recorders


def test_holds_go_through_apt_hold_only():
    loose = []
    for role, tasks in role_tasks().items():
        for task in tasks:
            mod, args = _module(task)
            words = json.dumps(args)
            if mod == "dpkg_selections" or (mod in {"command", "shell"} and re.search(r"apt-mark\W+(un)?hold", words)
                                            and "unhold" not in words):
                loose.append(f"{role}: {task.get('name')}")
    assert not loose, f"holds outside apt_hold: {loose}"


def _normalized(role: str, task: dict) -> str:
    text = json.dumps(task, sort_keys=True)
    return re.sub(rf"\b{re.escape(role)}(?=_|\b)", "ROLE", text)


def test_no_two_roles_share_five_identical_tasks():
    tasks = {role: {_normalized(role, t) for t in ts} for role, ts in role_tasks().items()}
    shared = {(a, b): len(tasks[a] & tasks[b]) for a, b in itertools.combinations(sorted(tasks), 2)}
    assert max(shared.values()) < 5, {pair: n for pair, n in shared.items() if n >= 5}


def test_the_comparison_sees_a_copied_flow():
    """The check above is not vacuous: a role's task list against itself renamed shares all."""
    nccl = role_tasks()["nccl"]
    copied = [json.loads(json.dumps(t).replace("nccl", "copycat")) for t in nccl]
    assert len({_normalized("nccl", t) for t in nccl} & {_normalized("copycat", t) for t in copied}) >= 5
