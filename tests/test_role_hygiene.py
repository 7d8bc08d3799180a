"""Role hygiene that a converge on a good day does not show.

Booleans: an INI inventory gives every value as a string, so `dcgm_exporter_enabled=false`
reaches the role as "false". ansible-core <= 2.18 treats that string as true in a bare
`when: dcgm_exporter_enabled`, and 2.19 refuses the conditional. Every boolean variable in
a boolean context (`when:`, `changed_when:`, `failed_when:`, `until:`, assert's `that:`, and
`if`/`not`/`and`/`or` inside Jinja) must go through `| bool`. The static test reads every
role and playbook file with Jinja's own parser; the last test runs the dcgm_exporter role
for real with its switches given as "false" in an INI inventory.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2 import nodes

from provisioner import profiles
from provisioner.render import role_vars

from .ansibleplay import LOCAL, play
from .conftest import COLLECTION, PLAYBOOKS, ROLES

CONDITION_KEYS = {"when", "changed_when", "failed_when", "until", "that"}
_ENV = jinja2.Environment()


def _yaml_files() -> list[Path]:
    return sorted(ROLES.glob("*/*/*.yml")) + sorted(PLAYBOOKS.glob("*.yml"))


def _templates() -> list[Path]:
    return sorted(ROLES.glob("*/templates/*.j2"))


def _is_boolean_expression(value: object) -> bool:
    """Whether a set_fact or vars/ value is one Jinja expression yielding a boolean
    (a test, a comparison, and/or/not, or `| bool`)."""
    if not isinstance(value, str) or not (value.strip().startswith("{{") and value.strip().endswith("}}")):
        return False
    body = _ENV.parse(value.strip()).body
    if len(body) != 1 or not isinstance(body[0], nodes.Output) or len(body[0].nodes) != 1:
        return False
    node = body[0].nodes[0]
    return isinstance(node, (nodes.Test, nodes.Compare, nodes.And, nodes.Or, nodes.Not)) or (
        isinstance(node, nodes.Filter) and node.name == "bool")


def _derived_booleans(data: object, in_vars_file: bool) -> set[str]:
    found: set[str] = set()
    if isinstance(data, dict):
        facts = data.get("ansible.builtin.set_fact")
        items = list(facts.items()) if isinstance(facts, dict) else []
        if in_vars_file:
            items += list(data.items())
        found |= {name for name, value in items if _is_boolean_expression(value)}
        for value in data.values():
            found |= _derived_booleans(value, False)
    elif isinstance(data, list):
        for item in data:
            found |= _derived_booleans(item, False)
    return found


@functools.cache
def boolean_variables() -> frozenset[str]:
    """The roles' boolean variables: typed bool in meta/argument_specs.yml, the
    provisioner_* booleans the CLI renders, and the booleans the roles derive themselves
    (vars/ files and set_fact values that are one boolean expression)."""
    names: set[str] = set()
    for path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        for spec in yaml.safe_load(path.read_text())["argument_specs"].values():
            names |= {k for k, v in (spec.get("options") or {}).items() if v.get("type") == "bool"}
    for name in profiles.builtin_names():
        names |= {k for k, v in role_vars(profiles.load(name)).items()
                  if k.startswith("provisioner_") and isinstance(v, bool)}
    for path in _yaml_files():
        names |= _derived_booleans(yaml.safe_load(path.read_text()), path.parent.name == "vars")
    return frozenset(names)


def _bare(node: nodes.Node, boolean: bool, known: set[str]) -> list[str]:
    """Known boolean variables used as a truth value without `| bool` under `node`."""
    if isinstance(node, nodes.Name):
        return [node.name] if boolean and node.name in known else []
    if isinstance(node, nodes.Filter):
        found = _bare(node.node, boolean and node.name != "bool", known) if node.node is not None else []
        for arg in [*node.args, *node.kwargs]:
            found += _bare(arg, False, known)
        return found
    if isinstance(node, nodes.Not):
        return _bare(node.node, True, known)
    if isinstance(node, (nodes.And, nodes.Or)):
        return _bare(node.left, True, known) + _bare(node.right, True, known)
    if isinstance(node, nodes.CondExpr):
        found = _bare(node.test, True, known) + _bare(node.expr1, boolean, known)
        return found + (_bare(node.expr2, boolean, known) if node.expr2 is not None else [])
    if isinstance(node, nodes.If):
        found = _bare(node.test, True, known)
        for child in [*node.body, *node.elif_, *node.else_]:
            found += _bare(child, False, known)
        return found
    found = []
    for child in node.iter_child_nodes():
        found += _bare(child, False, known)
    return found


def _violations(data: object, known: set[str], task: str) -> list[tuple[str, str, str, str]]:
    """(task, key, expression, variable) for each bare boolean in a YAML document."""
    out = []
    if isinstance(data, dict):
        task = data["name"] if isinstance(data.get("name"), str) else task
        for key, value in data.items():
            if key in CONDITION_KEYS:
                for expression in value if isinstance(value, list) else [value]:
                    if isinstance(expression, str):
                        tree = _ENV.parse("{% if " + expression + " %}{% endif %}")
                        out += [(task, key, expression, name) for name in _bare(tree, False, known)]
            else:
                out += _violations(value, known, task)
    elif isinstance(data, list):
        for item in data:
            out += _violations(item, known, task)
    elif isinstance(data, str) and ("{{" in data or "{%" in data):
        out += [(task, "jinja", data, name) for name in _bare(_ENV.parse(data), False, known)]
    return out


def test_the_boolean_variables_are_found():
    # The scan below is only as good as this set: the variables of the hazard must be in it.
    known = boolean_variables()
    assert {"dcgm_exporter_enabled", "dcgm_exporter_install_dcgm", "python_env_enabled",
            "common_manage_apt_components", "provisioner_reboot_allowed", "provisioner_expects_gpu",
            "fabric_manager_wanted", "python_env_torch_from_wheelhouse"} <= known


def test_the_scan_finds_a_bare_boolean_and_accepts_bool_filtered_ones():
    known = {"x_enabled"}
    bad = yaml.safe_load("""
- name: A.
  ansible.builtin.debug: {msg: "{{ 'on' if x_enabled else 'off' }}"}
  when: x_enabled
- name: B.
  ansible.builtin.debug: {msg: hi}
  when: [not x_enabled | default(false), y == 1 and x_enabled]
""")
    good = yaml.safe_load("""
- name: C.
  ansible.builtin.debug: {msg: "{{ 'on' if x_enabled | bool else 'off' }} {{ x_enabled }}"}
  when: [not x_enabled | bool, x_enabled is defined, x_enabled | default(false) | bool]
""")
    assert [(t, k, v) for t, k, _, v in _violations(bad, known, "")] == [
        ("A.", "jinja", "x_enabled"), ("A.", "when", "x_enabled"), ("B.", "when", "x_enabled"),
        ("B.", "when", "x_enabled")]
    assert _violations(good, known, "") == []


@pytest.mark.parametrize("path", [*_yaml_files(), *_templates()], ids=lambda p: str(p.relative_to(COLLECTION)))
def test_boolean_variables_go_through_the_bool_filter(path: Path):
    known = boolean_variables()
    if path.suffix == ".j2":
        found = [("template", "jinja", "", name) for name in _bare(_ENV.parse(path.read_text()), False, known)]
    else:
        found = _violations(yaml.safe_load(path.read_text()), known, "")
    assert found == [], "\n".join(f"{task!r} {key}: {name} without | bool in {expr.strip()!r}"
                                  for task, key, expr, name in found)


@pytest.mark.ansible
def test_dcgm_exporter_enabled_false_from_an_ini_inventory_takes_the_remove_path(tmp_path: Path):
    """The whole dcgm_exporter role in check mode, with both of its switches given as the
    INI string "false": nothing of DCGM or the exporter is installed, the remove path runs."""
    if Path("/etc/systemd/system/dcgm-exporter.service").exists():
        pytest.skip("this machine runs a dcgm-exporter of its own")
    (tmp_path / "facts").mkdir()
    inventory = (f"[gpu]\n{LOCAL} dcgm_exporter_enabled=false dcgm_exporter_install_dcgm=false "
                 f"dcgm_exporter_facts_dir={tmp_path}/facts dcgm_exporter_config_dir={tmp_path}/etc\n")
    run = play(tmp_path, "dcgm", [{
        "name": "Run the dcgm_exporter role with its switches off.", "hosts": "gpu", "gather_facts": False,
        "roles": [{"role": "gpu_provisioner.node.dcgm_exporter"}],
        "tasks": [{"name": "Hand what the role declares it manages to the test.",
                   "ansible.builtin.debug": {"var": "dcgm_exporter_managed"}}]}], inventory, check=True)
    assert run.rc == 0, run.stdout[-3000:]
    assert run.status("Install DCGM and run its host engine.") == ["skipped"]
    assert run.status("Install dcgm-exporter as a hardened systemd service.") == ["skipped"]
    assert not run.started("Stop when no checksummed dcgm-exporter binary is given.")  # exporter.yml never ran
    assert run.status("Check whether an earlier run installed the exporter's unit.") == ["ok"]  # remove.yml ran
    (said,) = run.results("Say in one line that DCGM is not installed here.")
    assert "no dcgm-exporter either" in said["event_data"]["res"]["msg"]
    (declared,) = run.results("Hand what the role declares it manages to the test.")
    managed = declared["event_data"]["res"]["dcgm_exporter_managed"]
    assert managed["units"] == [] and managed["held_packages"] == []
