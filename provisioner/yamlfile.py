"""The operator's files, read bounded (regular files only, a size cap), and YAML files read
with their line numbers kept, so errors can point into the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import ProvisionError


# libyaml's parser where PyYAML was built with it (the wheels are), PyYAML's pure-Python one
# otherwise: the same safe constructor either way, about 8x faster with libyaml, which every
# command pays at start (the catalogue alone is ~10k lines). Both give nodes and errors marks
# with a line and column, which is all the error messages below use.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DATA_LOADER = _SAFE_LOADER


def load_data(text: str) -> Any:
    """Parse YAML the package ships (trusted, known good): safe, and fast."""
    return yaml.load(text, Loader=_DATA_LOADER)  # noqa: S506 - a safe loader


# A profile is a few kilobytes; a capture of nvidia-smi, dcgmi or a kernel log tens to
# hundreds. Far above either, so a real file never meets it.
PROFILE_CAP = 1 << 20
CAPTURE_CAP = 16 << 20


def read_bounded(path: Path | str, cap: int, what: str = "file") -> bytes:
    """A regular file's bytes, at most `cap` of them: a FIFO, a device (/dev/zero) or a
    file over the cap is one clear error, never a hang or a read of everything. The size is
    checked on the open file, and the read stops at the cap whatever it said."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a FIFO never waits for a writer
    except FileNotFoundError:
        raise ProvisionError(f"{what} not found", where=str(path), fix="check the path") from None
    except OSError as exc:
        raise ProvisionError(f"cannot read the {what}: {exc.strerror}", where=str(path)) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise ProvisionError(f"the {what} is a folder, not a file", where=str(path), fix=f"give the {what}'s file")
        if not stat.S_ISREG(st.st_mode):
            raise ProvisionError(f"the {what} is not a regular file (a pipe, a device or a socket)", where=str(path),
                                 fix=f"save the {what} to a file first, then give that file")
        if st.st_size > cap:
            raise ProvisionError(f"the {what} is {st.st_size:,} bytes, over the {cap:,} a {what} can be",
                                 where=str(path), fix=f"give the {what} itself, not a larger file")
        data = f.read(cap + 1)
    if len(data) > cap:  # it grew while being read
        raise ProvisionError(f"the {what} is over the {cap:,} bytes a {what} can be", where=str(path))
    return data


class DuplicateKey(yaml.MarkedYAMLError):
    pass


class _UniqueKeyLoader(_SAFE_LOADER):
    """PyYAML's safe loader (libyaml's parser where there is one), refusing a key written twice in one mapping: YAML says keys are
    unique, PyYAML keeps the last one silently, and in a shared profile the first one is the
    one a reader sees. (A `<<` merge may still be overridden: that is what it is for.)"""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    first = seen[key].start_mark
                    raise DuplicateKey(None, None, f"the key {key!r} is written twice in one mapping, on line "
                                                   f"{first.line + 1} and line {key_node.start_mark.line + 1}",
                                       key_node.start_mark)
                seen[key] = key_node
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors and keys written twice become ProvisionError naming
    file:line:column."""
    try:
        text = read_bounded(path, PROFILE_CAP).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProvisionError(f"cannot read: {exc.__class__.__name__}", where=str(path)) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a safe loader
    except DuplicateKey as exc:
        mark = exc.problem_mark
        raise ProvisionError(exc.problem, where=f"{path}:{mark.line + 1}:{mark.column + 1}",
                             fix="keep one of the two (YAML would silently use the last one)") from None
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


def line_of(path: Path, keys: tuple[str | int, ...], *, exact: bool = False) -> int | None:
    """The 1-based line where `keys` (a field path) is written in the file, or the
    line of its deepest ancestor that is written there (`exact`: None unless `keys`
    itself is); None if none is."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # noqa: S506 - safe
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for key in keys:
        if isinstance(node, yaml.MappingNode):
            match = next((pair for pair in node.value if pair[0].value == key), None)
            if match is None:
                return None if exact else line
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return None if exact else line
    return line
