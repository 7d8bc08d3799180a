"""The roles share instead of copy (issue 34, item 6): what every role does alike lives in
one place, and a copy that creeps back fails here.

- "Record what this role applied": one module, gpu_provisioner.node.role_record; no role
  writes its local fact file (`*.fact`) any other way.
- Holds: one module, gpu_provisioner.node.apt_hold (one apt-mark call per role and run);
  no role holds with dpkg_selections or apt-mark loops again.
- Installs at exact versions: one module, gpu_provisioner.node.apt_install (one apt-get call;
  ansible.builtin.apt builds apt's pin policy anew for every package named: issue 35).
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


def test_installs_at_exact_versions_go_through_apt_install_only():
    loose = []
    for role, tasks in role_tasks().items():
        for task in tasks:
            mod, args = _module(task)
            names = json.dumps(args.get("name", "")) if mod == "apt" and isinstance(args, dict) else ""
            if re.search(r"\b(as_pins|as_install)\b|[a-z0-9]=[0-9]", names):
                loose.append(f"{role}: {task.get('name')}")
    assert not loose, f"pinned installs outside apt_install: {loose}"


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


def _playbook_roles() -> list[dict]:
    entries = []
    for book in sorted((ROLES.parent / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(book.read_text()) or []:
            entries += [r for r in play.get("roles") or [] if isinstance(r, dict)]
    for meta in sorted(ROLES.glob("*/meta/main.yml")):
        entries += [r for r in (yaml.safe_load(meta.read_text()) or {}).get("dependencies") or []
                    if isinstance(r, dict)]
    return entries


def test_what_a_role_manages_is_declared_once_in_its_vars_not_by_a_task():
    """"Declare what this role manages" was a set_fact copied into 12 roles; it is now each
    role's `<role>_managed` in vars/main.yml, read by site.yml's record after the roles ran."""
    declaring_tasks = [f"{role}: {task.get('name')}" for role, tasks in role_tasks().items() for task in tasks
                       if any(str(k).endswith("_managed") for k in (task.get("ansible.builtin.set_fact") or {}))]
    assert not declaring_tasks, f"a role declares what it manages by a task again: {declaring_tasks}"
    site = yaml.safe_load((ROLES.parent / "playbooks" / "site.yml").read_text())[0]
    for name in site["vars"]["site_managed_state_vars"]:
        role = name.removesuffix("_managed")
        declared = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())
        assert set(declared[name]) <= {"packages", "held_packages", "files", "units", "python_envs", "runtimes"}, name
    # the record reads them by name, through the vars lookup (role vars are not hostvars)
    (record,) = [t for t in site["post_tasks"]
                 if (t.get("gpu_provisioner.node.provisioner_state") or {}).get("action") == "record"]
    assert "query('ansible.builtin.vars', *site_managed_state_vars)" in record[
        "gpu_provisioner.node.provisioner_state"]["managed"]


def test_every_role_a_playbook_runs_carries_its_own_name_as_a_tag():
    entries = _playbook_roles()
    assert entries
    for entry in entries:
        short = entry["role"].rsplit(".", 1)[1]
        assert short in (entry.get("tags") or []), f"{entry['role']} has no tag {short!r}"
    tagged = {e["role"].rsplit(".", 1)[1] for e in entries}
    # every role but the library role that others include with their own tags
    assert tagged == {p.name for p in ROLES.iterdir() if (p / "tasks").is_dir()} - {"pinned_packages"}


def test_a_run_limited_by_tags_neither_retires_nor_records():
    """The post tasks carry no tag (not even `always`): under --tags they do not run, so a
    partial run can never retire or re-record what the roles it skipped manage."""
    site = yaml.safe_load((ROLES.parent / "playbooks" / "site.yml").read_text())[0]
    assert "tags" not in site
    for task in site["pre_tasks"] + site["post_tasks"]:
        assert not task.get("tags"), task.get("name")
