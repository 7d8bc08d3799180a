# -*- coding: utf-8 -*-
"""`pip freeze` output as data, and what changed between two of them: shared by the
provisioner_state module (drift of a Python environment) and the python_env role's
filters (putting it back)."""

from __future__ import annotations

import re

_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==|\s@\s)\s*(.+)$")


def canonical(name: str) -> str:
    """PEP 503 names: Foo_Bar and foo-bar are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(lines: list[str]) -> dict[str, str]:
    """{canonical name: version (or the `@ url` of a direct reference)} of a freeze."""
    found = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue  # comments, `-e` editables and options are not packages we pin
        match = _NAME.match(line)
        if match:
            found[canonical(match.group(1))] = match.group(2).strip()
    return found


def diff(recorded: dict[str, str], now: dict[str, str]) -> dict[str, dict]:
    """added / removed / changed packages of `now` against `recorded`."""
    return {
        "added": {n: now[n] for n in sorted(set(now) - set(recorded))},
        "removed": {n: recorded[n] for n in sorted(set(recorded) - set(now))},
        "changed": {n: {"recorded": recorded[n], "now": now[n]} for n in sorted(set(now) & set(recorded))
                    if now[n] != recorded[n]},
    }
