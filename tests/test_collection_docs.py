"""The collection stands on its own: its README names every role, module and filter and shows
the render-driven flow; ansible-doc shows every module's EXAMPLES (each task's options are
the module's own) and every filter's documentation; each filter's example returns what its
documentation says it does; the README's playbook parses against the collection."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import COLLECTION, DATA, REPO

README = (COLLECTION / "README.md").read_text()
MODULES = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
ROLES = sorted(p.name for p in (COLLECTION / "roles").iterdir() if (p / "meta" / "main.yml").is_file())
BIN = Path(sys.executable).parent
ENV = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1", "PYTHONPATH": str(REPO)}
ENV.pop("ANSIBLE_CONFIG", None)


def _filters() -> list[str]:
    """Every filter name a FilterModule in plugins/filter returns, read from the source."""
    names = []
    for path in sorted((COLLECTION / "plugins" / "filter").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "filters":
                names += [k.value for d in ast.walk(node) if isinstance(d, ast.Dict) for k in d.keys]
    return sorted(names)


FILTERS = _filters()


def test_the_readme_lists_every_role_module_and_filter_and_says_render_drives_the_roles():
    assert len(ROLES) >= 14 and len(MODULES) >= 9 and len(FILTERS) >= 26
    for name in ROLES + MODULES + FILTERS:
        assert f"`{name}`" in README, f"{name} is not in the collection's README"
    assert "provision render" in README and "driven by `provision render`" in README


def test_every_filter_has_its_documentation_file_and_no_file_is_left_over():
    docs = sorted(p.stem for p in (COLLECTION / "plugins" / "filter").glob("*.yml"))
    assert docs == FILTERS


def _doc_json(*args: str) -> dict:
    run = subprocess.run([str(BIN / "ansible-doc"), "-j", *args], capture_output=True, text=True, env=ENV,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "[ERROR]" not in run.stderr and "WARNING" not in run.stderr, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.mark.ansible
def test_ansible_doc_shows_every_modules_examples_with_the_modules_own_options():
    docs = _doc_json(*(f"gpu_provisioner.node.{m}" for m in MODULES))
    assert sorted(docs) == [f"gpu_provisioner.node.{m}" for m in MODULES]
    for fqcn, entry in docs.items():
        options = entry["doc"].get("options", {})
        required = {name for name, spec in options.items() if spec.get("required")}
        tasks = yaml.safe_load(entry["examples"] or "")
        assert isinstance(tasks, list) and tasks, f"{fqcn} has no EXAMPLES"
        for task in tasks:
            assert task.get("name"), f"{fqcn}: an example task without a name"
            args = task[fqcn]
            assert set(args) <= set(options), f"{fqcn}: example options it does not have: {set(args) - set(options)}"
            assert required <= set(args), f"{fqcn}: example leaves out required {required - set(args)}"


@pytest.mark.ansible
def test_ansible_doc_shows_every_filter_and_each_example_returns_what_it_says(tmp_path):
    docs = _doc_json("-t", "filter", *(f"gpu_provisioner.node.{f}" for f in FILTERS))
    assert sorted(docs) == [f"gpu_provisioner.node.{f}" for f in FILTERS]
    tasks = []
    for fqcn, entry in docs.items():
        doc = entry["doc"]
        assert doc["short_description"] and doc["description"] and doc["options"]["_input"]["description"], fqcn
        assert entry["return"]["_value"]["type"], fqcn
        # Each example applies the filter (set_fact) and asserts what it returns: run as they are.
        example = yaml.safe_load(entry["examples"])
        applied, said = example
        assert fqcn in applied["ansible.builtin.set_fact"]["result"], fqcn
        assert said["ansible.builtin.assert"] == {"that": "result == expected"}, fqcn
        tasks += example
    playbook = tmp_path / "examples.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Filter examples.", "hosts": "localhost", "gather_facts": False,
                                         "connection": "local", "tasks": tasks}], sort_keys=False))
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook)], capture_output=True,
                         text=True, env=ENV, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"ok={2 * len(FILTERS)}" in run.stdout, run.stdout[-2000:]


def _readme_playbook() -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", README, re.S)
    assert len(blocks) == 1, "the collection's README has one example playbook"
    return blocks[0]


@pytest.mark.ansible
def test_the_readme_playbook_parses_against_the_collection_with_renders_variables(tmp_path):
    """What the README shows, up to running it: render writes the inventory and variables, and
    the playbook's roles and module resolve in the collection (a converge of it on a lab host is
    tests/integration/test_collection_lab.py, make test-extended)."""
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nnode1 ansible_host=192.0.2.1\n")
    rendered = tmp_path / "inventory"
    run = subprocess.run([sys.executable, "-m", "provisioner.cli", "render", "--profile",
                          str(DATA / "profiles" / "lab-driver-only.yml"), str(hosts), "-o", str(rendered)],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "gpu.yml").write_text(_readme_playbook())
    listed = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(rendered / "hosts.yml"), "gpu.yml",
                             "--list-tasks"], cwd=tmp_path, capture_output=True, text=True, env=ENV, timeout=300)
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    for role in ("common", "nvidia_driver"):
        assert f"gpu_provisioner.node.{role} :" in listed.stdout, listed.stdout[-3000:]
    assert "Record what the roles manage" in listed.stdout


def _undescribed(entries: dict | None, kind: str, path: str = "") -> list[str]:
    out = []
    for name, spec in (entries or {}).items():
        if not isinstance(spec, dict) or not spec.get("description"):
            out.append(f"{kind} {path}{name}")
            continue
        out += _undescribed(spec.get("suboptions" if kind == "option" else "contains"), kind, f"{path}{name}.")
    return out


@pytest.mark.parametrize("module", MODULES)
def test_every_module_option_and_return_value_has_a_description(module: str):
    """ansible-doc's text view (what a user types) refuses a module with an undescribed
    option or return value, where the JSON view above shows it; so every one is described."""
    tree = ast.parse((COLLECTION / "plugins" / "modules" / f"{module}.py").read_text())
    docs = {node.targets[0].id: yaml.safe_load(node.value.value) or {} for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in {"DOCUMENTATION", "RETURN"} and isinstance(node.value, ast.Constant)}
    doc = docs["DOCUMENTATION"]
    missing = ([] if doc.get("description") else ["the module's description"]) + _undescribed(
        doc.get("options"), "option") + _undescribed(docs.get("RETURN"), "return value")
    assert not missing, f"{module}: no description for {missing}"


@pytest.mark.ansible
def test_ansible_doc_text_view_shows_every_module():
    run = subprocess.run([str(BIN / "ansible-doc"), *(f"gpu_provisioner.node.{m}" for m in MODULES)],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert run.returncode == 0 and "[ERROR]" not in run.stderr, run.stderr[-3000:]
    for module in MODULES:
        assert f"gpu_provisioner.node.{module}" in run.stdout, module
