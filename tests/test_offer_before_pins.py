"""apt's offer is checked before anything is pinned (issue 27, item 4).

pinned_packages used to write its apt preferences first and ask `apt-cache madison` second:
a version the host's sources do not carry left the host with a preferences file pinned to a
version it could not install. The static tests read every role's task lists as YAML
(following include_tasks / import_tasks within the role, and blocks) and check that in each
flow that pins, the assert on apt's offer comes before

  - any task that writes apt preferences (dest/path under /etc/apt/preferences.d, directly
    or through a role variable, or content from the apt_preferences filter),
  - any install at pinned versions (ansible.builtin.apt or gpu_provisioner.node.apt_install;
    as_pins / as_install, or name=version),
  - any hold (apt_hold, dpkg_selections hold, apt-mark hold),

and that nothing at all that changes the host comes before it. The offer assert is an
ansible.builtin.assert whose `that` reads, directly or through set_fact, what a read-only
`apt-cache madison` / `apt-cache policy` task registered.

The last tests run pinned_packages for real against this machine (an `ansible` test) with
versions apt does not offer, and check that the run stops and leaves no preferences file.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from .conftest import ROLES

PREFERENCES_DIR = "/etc/apt/preferences.d"
# Modules that only read the host or the play (a command/shell only when it says it changes nothing).
READ_ONLY = {"setup", "include_vars", "assert", "set_fact", "debug", "stat", "slurp", "find", "fail",
             "meta", "package_facts", "service_facts", "getent", "include_tasks", "import_tasks"}
INCLUDES = {"include_tasks", "import_tasks"}
PIN_FILTERS = re.compile(r"\b(as_pins|as_install)\b")


# --------------------------------------------------------------------------- reading task lists

def module(task: dict) -> tuple[str, object]:
    """The task's module (short name) and its arguments; FQCN modules only (ansible-lint's rule)."""
    for key, value in task.items():
        if "." in key:
            return key.rsplit(".", 1)[1], value
    return "", None


def _flat(tasks: list | None) -> list[dict]:
    out: list[dict] = []
    for task in tasks or []:
        if "block" in task:
            out += _flat(task["block"]) + _flat(task.get("rescue")) + _flat(task.get("always"))
        else:
            out.append(task)
    return out


def flow(read: Callable[[str], list | None], name: str, seen: tuple[str, ...] = ()) -> list[tuple[str, dict]]:
    """The tasks of task file `name` in run order, (file, task), with the role's own
    include_tasks / import_tasks expanded where they stand."""
    out: list[tuple[str, dict]] = []
    for task in _flat(read(name)):
        mod, args = module(task)
        target = args if isinstance(args, str) else (args or {}).get("file") if isinstance(args, dict) else None
        if mod in INCLUDES and target and "{{" not in target and target not in seen:
            target = target if target.endswith((".yml", ".yaml")) else target + ".yml"
            out.append((name, task))
            out += flow(read, target, (*seen, name))
        else:
            out.append((name, task))
    return out


def entry_points(files: list[str], read: Callable[[str], list | None]) -> list[str]:
    """main.yml, and every task file main.yml does not reach (run with tasks_from)."""
    reached = {f for f, _ in flow(read, "main.yml")} if "main.yml" in files else set()
    return (["main.yml"] if "main.yml" in files else []) + [f for f in files if f not in reached]


# --------------------------------------------------------------------------- what a task does

def _text(value: object) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6) if not isinstance(value, str) else value


def _resolve(path: str, variables: dict) -> str:
    """A dest that is one role variable ("{{ x_preferences_file }}") read from the role's defaults/vars."""
    match = re.fullmatch(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", path.strip())
    return str(variables.get(match.group(1), path)) if match else path


def writes_preferences(task: dict, variables: dict) -> bool:
    mod, args = module(task)
    if not isinstance(args, dict):
        return False
    if args.get("state") == "absent":
        return False
    paths = [_resolve(str(args[key]), variables) for key in ("dest", "path") if key in args]
    return (any(p.startswith(PREFERENCES_DIR) for p in paths)
            or (mod in {"copy", "template", "lineinfile", "blockinfile"} and "apt_preferences" in _text(args)))


def installs_pinned(task: dict) -> bool:
    mod, args = module(task)
    if mod not in {"apt", "apt_install"} or not isinstance(args, dict) or "name" not in args:
        return False
    names = args["name"]
    if isinstance(names, str):
        return bool(PIN_FILTERS.search(names)) or ("{{" not in names and "=" in names)
    return any(isinstance(n, str) and "=" in n and "{{" not in n for n in names)


def holds(task: dict) -> bool:
    mod, args = module(task)
    if mod == "apt_hold":
        return isinstance(args, dict) and args.get("state", "held") == "held"
    if mod == "dpkg_selections":
        return isinstance(args, dict) and args.get("selection") == "hold"
    if mod in {"command", "shell"}:
        words = _text(args)
        return "apt-mark" in words and re.search(r"\bhold\b", words) is not None
    return False


def pins(task: dict, variables: dict) -> str:
    """What kind of pin the task commits to the host ("" for none)."""
    if writes_preferences(task, variables):
        return "writes apt preferences"
    if installs_pinned(task):
        return "installs at pinned versions"
    if holds(task):
        return "holds packages"
    return ""


def changes_host(task: dict) -> bool:
    mod, args = module(task)
    if mod in {"command", "shell"}:
        return str(task.get("changed_when", "")).strip().lower() != "false"
    return mod not in READ_ONLY and mod != ""


def asks_apt_offer(task: dict) -> bool:
    mod, args = module(task)
    words = _text(args)
    return (mod in {"command", "shell"} and "apt-cache" in words and re.search(r"\b(madison|policy)\b", words) is not None
            and "register" in task)


def _mentions(value: object, names: set[str]) -> bool:
    text = _text(value)
    return any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def violations(steps: list[tuple[str, dict]], variables: dict) -> list[str]:
    """Each pin (and each host change) that runs before the offer assert, in one flow."""
    offer_vars: set[str] = set()
    checked = False
    found = []
    for file, task in steps:
        mod, args = module(task)
        name = task.get("name", "?")
        if not checked:
            if asks_apt_offer(task):
                offer_vars.add(task["register"])
                continue
            if mod == "set_fact" and offer_vars and _mentions([args, task.get("vars")], offer_vars):
                offer_vars |= {k for k in (args or {}) if k not in {"cacheable"}}
                continue
            if mod == "assert" and offer_vars and _mentions([args.get("that"), task.get("vars")], offer_vars):
                checked = True
                continue
            kind = pins(task, variables)
            if kind:
                found.append(f"{file}: {kind} before apt's offer is checked: {name}")
            elif changes_host(task):
                found.append(f"{file}: changes the host ({mod}) before apt's offer is checked: {name}")
    return found


def role_flows(read: Callable[[str], list | None], files: list[str], variables: dict) -> dict[str, list[tuple[str, dict]]]:
    """The role's flows that pin anything: entry file -> its steps."""
    flows = {entry: flow(read, entry) for entry in entry_points(files, read)}
    return {entry: steps for entry, steps in flows.items() if any(pins(t, variables) for _, t in steps)}


def check_role(read: Callable[[str], list | None], files: list[str], variables: dict) -> list[str]:
    return [v for steps in role_flows(read, files, variables).values() for v in violations(steps, variables)]


# --------------------------------------------------------------------------- the roles as they are

def _role_reader(role: Path) -> Callable[[str], list | None]:
    return lambda name: yaml.safe_load((role / "tasks" / name).read_text())


def _role_variables(role: Path) -> dict:
    variables: dict = {}
    for path in (role / "defaults" / "main.yml", role / "vars" / "main.yml"):
        if path.exists():
            variables.update(yaml.safe_load(path.read_text()) or {})
    return variables


def _role_files(role: Path) -> list[str]:
    return sorted(p.name for p in (role / "tasks").glob("*.yml"))


ROLE_DIRS = sorted(p for p in ROLES.iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ROLE_DIRS, ids=lambda p: p.name)
def test_apts_offer_is_checked_before_anything_is_pinned(role: Path):
    found = check_role(_role_reader(role), _role_files(role), _role_variables(role))
    assert found == [], "\n".join(found)


def test_the_scan_sees_every_role_that_pins():
    """Not vacuous: the roles that write pins, install at pinned versions or hold are found."""
    pinning = {role.name for role in ROLE_DIRS
               if role_flows(_role_reader(role), _role_files(role), _role_variables(role))}
    assert pinning == {"pinned_packages", "nvidia_driver", "cuda_toolkit"}
    kinds = {pins(t, _role_variables(ROLES / "pinned_packages"))
             for _, t in flow(_role_reader(ROLES / "pinned_packages"), "main.yml")} - {""}
    assert kinds == {"writes apt preferences", "installs at pinned versions", "holds packages"}


# The order pinned_packages had before this fix (git show 6f1f7d6:.../pinned_packages/tasks/main.yml),
# trimmed to the tasks that matter: the scan must refuse it.
OLD_PINNED_PACKAGES = """
- name: Pin the packages to exact versions in apt's preferences.
  ansible.builtin.copy:
    dest: "{{ pinned_packages_preferences_file }}"
    content: "{{ pinned_packages_pins | gpu_provisioner.node.apt_preferences('NVIDIA', 'NVIDIA CUDA', 'x') }}"
    mode: "0644"
- name: Ask apt which versions its sources offer.
  ansible.builtin.command:
    argv: "{{ ['apt-cache', 'madison'] + (pinned_packages_pins | list) }}"
  register: pinned_packages_madison
  changed_when: false
  check_mode: false
- name: Note which pinned versions apt does not offer.
  ansible.builtin.set_fact:
    pinned_packages_unoffered: "{{ pinned_packages_pins | gpu_provisioner.node.pins_unoffered(pinned_packages_madison.stdout_lines
      | gpu_provisioner.node.madison_versions) }}"
- name: Stop when apt does not offer the pinned versions.
  ansible.builtin.assert:
    that: pinned_packages_unoffered | length == 0
- name: Install at exactly the pinned versions.
  ansible.builtin.apt:
    name: "{{ pinned_packages_pins | gpu_provisioner.node.as_pins }}"
"""


def test_the_scan_refuses_the_old_order_of_pinned_packages():
    variables = _role_variables(ROLES / "pinned_packages")
    found = check_role(lambda name: yaml.safe_load(OLD_PINNED_PACKAGES), ["main.yml"], variables)
    assert found == ["main.yml: writes apt preferences before apt's offer is checked: "
                     "Pin the packages to exact versions in apt's preferences."]


def test_the_scan_wants_an_assert_that_reads_the_offer_and_follows_includes():
    tasks = {
        "main.yml": [
            {"name": "Ask apt.", "ansible.builtin.command": {"argv": ["apt-cache", "policy", "x"]},
             "register": "x_policy", "changed_when": False},
            # An assert that reads something else is not the offer check.
            {"name": "Unrelated.", "ansible.builtin.assert": {"that": "x_other | length > 0"}},
            {"name": "Go on.", "ansible.builtin.include_tasks": "install.yml"}],
        "install.yml": [
            {"name": "Pin by hand.", "ansible.builtin.lineinfile": {"path": "/etc/apt/preferences.d/x", "line": "Pin: 1"}},
            {"name": "Hold.", "ansible.builtin.command": {"argv": ["apt-mark", "hold", "x"]}, "changed_when": True}],
    }
    found = check_role(tasks.get, ["install.yml", "main.yml"], {})
    assert found == ["install.yml: writes apt preferences before apt's offer is checked: Pin by hand.",
                     "install.yml: holds packages before apt's offer is checked: Hold."]
    tasks["main.yml"].insert(1, {"name": "Check.", "ansible.builtin.assert": {"that": "x_policy.stdout is search('x')"}})
    assert check_role(tasks.get, ["install.yml", "main.yml"], {}) == []


# --------------------------------------------------------------------------- for real, against localhost

ABSENT = {"bash": "0.0-0", "gpu-provisioner-no-such-package": "1.0-1"}


def _pinned_packages_play(tmp_path: Path) -> list:
    return [{"name": "Run pinned_packages with versions apt does not offer.", "hosts": "local", "gather_facts": False,
             "tasks": [{"name": "Pin, install and hold what apt does not offer.",
                        "ansible.builtin.include_role": {"name": "gpu_provisioner.node.pinned_packages"},
                        "vars": {"pinned_packages_pins": ABSENT, "pinned_packages_what": "test packages",
                                 "pinned_packages_preferences_file": str(tmp_path / "provisioner-test.pref")}}]}]


@pytest.mark.ansible
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_pinned_packages_stops_before_writing_when_apt_does_not_offer_the_version(tmp_path: Path, check: bool):
    """A version no apt source offers (bash at 0.0-0, a package that does not exist): the run
    stops at the offer assert naming what apt offers instead, and writes no preferences file.
    Safe on this machine: apt-cache madison only reads, and the file would go under tmp_path."""
    if shutil.which("apt-cache") is None:
        pytest.skip("apt-cache is not installed")
    from .ansibleplay import LOCAL, play

    run = play(tmp_path, "pins", _pinned_packages_play(tmp_path), f"[local]\n{LOCAL}\n", check=check)
    stop = "Stop when apt does not offer the pinned versions of test packages"
    pin = "Pin the packages to exact versions from NVIDIA's repository in apt's preferences, for test packages"
    assert not (tmp_path / "provisioner-test.pref").exists()
    if check:
        # Check mode says what it would install once the repository is there, and writes nothing.
        assert run.rc == 0, run.stdout[-3000:]
        (said,) = run.results("Say what would be installed once NVIDIA's repository is there (check mode only).")
        assert "bash=0.0-0" in said["event_data"]["res"]["msg"]
        assert run.status(stop) in (["skipped"], [])       # ansible-core 2.15 sends no event for this skip
        return
    assert run.rc != 0
    assert run.status(stop) == ["failed"]
    msg = run.results(stop)[0]["event_data"]["res"]["msg"]
    assert "bash=0.0-0 (apt offers: " in msg and "bash=0.0-0 (apt offers: no version" not in msg
    assert "gpu-provisioner-no-such-package=1.0-1 (apt offers: no version of gpu-provisioner-no-such-package)" in msg
    assert not run.started(pin)
