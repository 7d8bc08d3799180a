"""YAML files read with their line numbers kept, so errors can point into the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import ProvisionError


# libyaml's parser where PyYAML has it: the package's own data (the compatibility matrix,
# the roles' argument specs) parses about 8x faster, which every command pays at start.
_DATA_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_data(text: str) -> Any:
    """Parse YAML the package ships (trusted, known good): safe, and fast."""
    return yaml.load(text, Loader=_DATA_LOADER)  # noqa: S506 - a safe loader


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors become ProvisionError naming file:line:column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProvisionError("file not found", where=str(path), fix="check the path") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ProvisionError(f"cannot read: {exc.__class__.__name__}", where=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        context = exc.context
        if context and exc.context_mark and mark and exc.context_mark.line != mark.line:
            context = f"{context} (from line {exc.context_mark.line + 1})"
        problem = " ".join(filter(None, [context, exc.problem]))
        raise ProvisionError(f"YAML syntax error: {problem}", where=where,
                             fix="fix the indentation or quoting at that line") from None
    except yaml.YAMLError as exc:
        raise ProvisionError(f"YAML error: {exc}", where=str(path)) from None


def line_of(path: Path, keys: tuple[str | int, ...]) -> int | None:
    """The 1-based line where `keys` (a field path) is written in the file, or the
    line of its deepest ancestor that is written there; None if none is."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            match = next((pair for pair in node.value if pair[0].value == key), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line
