"""Filters for the python_env role: what to do to put an environment back to the package set
its last converge recorded (pip freeze lines), unit-tested in tests/test_pip_filters.py.

  freeze_repair(recorded_lines, now_lines)
      -> {"reinstall": ["name==version", ...]  (removed or changed by hand),
          "remove": ["name", ...]}              (installed by hand)
"""

from __future__ import annotations

from ansible_collections.gpu_provisioner.node.plugins.module_utils.pip_freeze import diff, parse

DOCUMENTATION = ""  # filters document themselves in the docstring above


def _requirement(name: str, version: str) -> str:
    return f"{name} @ {version.removeprefix('@').strip()}" if "://" in version else f"{name}=={version}"


def freeze_repair(recorded_lines: list[str], now_lines: list[str]) -> dict[str, list[str]]:
    change = diff(parse(recorded_lines), parse(now_lines))
    reinstall = {**change["removed"], **{n: v["recorded"] for n, v in change["changed"].items()}}
    return {"reinstall": [_requirement(n, v) for n, v in sorted(reinstall.items())],
            "remove": sorted(change["added"])}


class FilterModule:
    def filters(self):
        return {"freeze_repair": freeze_repair}
