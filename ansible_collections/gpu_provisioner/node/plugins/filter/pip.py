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
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.gpu_provisioner.node.plugins.module_utils.pip_freeze import diff, parse

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


class FilterModule:
    def filters(self):
        return {"freeze_repair": freeze_repair, "env_records": env_records, "envs_dropped": envs_dropped}
