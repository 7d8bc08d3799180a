"""Filters for the python_env role: what to do to put an environment back to the package set
its last converge recorded (pip freeze lines), unit-tested in tests/test_pip_filters.py.

  freeze_repair(recorded_lines, now_lines)
      -> {"reinstall": ["name==version", ...]  (removed or changed by hand),
          "remove": ["name", ...]}              (installed by hand)

  env_records(python_env_fact)
      -> {name: record} of the environments the last converge recorded, from the local fact
         python_env.fact: {"envs": {name: record}}, or the one-environment record older
         converges wrote (its fields at the top level)

  envs_dropped(records, envs)
      -> the records (sorted by name) of environments no longer in `envs` (python_env_envs),
         whose folders and builds the role removes

  lock_requirements(lock)
      -> the pip requirements file of an environment's lock ([{name, version, sha256}], from
         provision wheelhouse): one `name==version --hash=sha256:HEX` line per wheel, each field
         checked (a field that could be a pip option or a second requirement is refused)

  lock_differences(frozen_lines, lock)
      -> what the environment's pip freeze has that its lock does not, and the reverse
         (["missing name==version", "extra name==version", "name: version, lock version"]);
         pip, setuptools, wheel and distribute are left out on both sides, as pip freeze does
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.gpu_provisioner.node.plugins.module_utils.pip_freeze import canonical, diff, parse

DOCUMENTATION = ""  # filters document themselves in the docstring above


def _requirement(name: str, version: str) -> str:
    return f"{name} @ {version.removeprefix('@').strip()}" if "://" in version else f"{name}=={version}"


def freeze_repair(recorded_lines: list[str], now_lines: list[str]) -> dict[str, list[str]]:
    change = diff(parse(recorded_lines), parse(now_lines))
    reinstall = {**change["removed"], **{n: v["recorded"] for n, v in change["changed"].items()}}
    return {"reinstall": [_requirement(n, v) for n, v in sorted(reinstall.items())],
            "remove": sorted(change["added"])}


def env_records(fact: dict | None) -> dict[str, dict]:
    fact = fact or {}
    if isinstance(fact.get("envs"), dict):
        return {str(k): v for k, v in fact["envs"].items() if isinstance(v, dict)}
    return {str(fact["name"]): fact} if fact.get("name") and fact.get("env_dir") else {}


# The environment names the profile allows (profiles/field_types.py ENV_NAME).
_ENV_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def envs_dropped(records: dict[str, dict], envs: list[dict]) -> list[dict]:
    """The record is the host's word, so only what the role itself makes is taken from it: an
    environment name the profile could give, at an absolute path ending in that name (the role
    then removes it only where it is the symlink the role switches, and the hidden
    `.<name>-<spec>` builds beside it)."""
    keep = {str(env["name"]) for env in envs}
    dropped = []
    for name in sorted(set(records) - keep):
        env_dir = str(records[name].get("env_dir") or "")
        if (_ENV_NAME.fullmatch(name) and name not in (".", "..") and env_dir.startswith("/")
                and env_dir.endswith("/" + name) and posixpath.normpath(env_dir) == env_dir
                and posixpath.dirname(env_dir) != "/"):
            dropped.append({"name": name, "env_dir": env_dir, "freeze_file": f"{name}.freeze.txt"})
    return dropped


_LOCK_FIELDS = {"name": re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"),
                "version": re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$"), "sha256": re.compile(r"^[0-9a-f]{64}$")}
_NOT_IN_FREEZE = {"pip", "setuptools", "wheel", "distribute"}


def _checked(lock: list[dict]) -> list[dict]:
    for item in lock:
        for field, pattern in _LOCK_FIELDS.items():
            if not isinstance(item, dict) or not pattern.fullmatch(str(item.get(field, ""))):
                raise ValueError(f"lock entry {item!r}: {field} is not a package {field}")
    return lock


def lock_requirements(lock: list[dict]) -> str:
    return "".join(f"{w['name']}=={w['version']} --hash=sha256:{w['sha256']}\n" for w in _checked(lock))


def lock_differences(frozen_lines: list[str], lock: list[dict]) -> list[str]:
    now = {n: v for n, v in parse(frozen_lines).items() if n not in _NOT_IN_FREEZE}
    locked = {canonical(w["name"]): str(w["version"]) for w in _checked(lock) if canonical(w["name"]) not in _NOT_IN_FREEZE}
    change = diff(locked, now)
    return ([f"missing {n}=={v}" for n, v in change["removed"].items()]
            + [f"extra {n}=={v}" for n, v in change["added"].items()]
            + [f"{n}: {v['now']}, lock {v['recorded']}" for n, v in change["changed"].items()])


class FilterModule:
    def filters(self):
        return {"freeze_repair": freeze_repair, "env_records": env_records, "envs_dropped": envs_dropped,
                "lock_requirements": lock_requirements, "lock_differences": lock_differences}
