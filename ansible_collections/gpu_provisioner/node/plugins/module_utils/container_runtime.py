# -*- coding: utf-8 -*-
"""The `nvidia` runtime merged into a container engine's own configuration, and taken out again.

The effect is `nvidia-ctk runtime configure`'s (provisioner/data/container_toolkit.yml cites
what it writes, per engine, in NVIDIA/nvidia-container-toolkit), done by this tested code so
that a user's settings survive and the engine restarts only when its configuration changed:

- Docker, /etc/docker/daemon.json: `runtimes.nvidia = {"path": "nvidia-container-runtime",
  "args": []}`, `default-runtime: nvidia` when asked (and taken out when no longer asked, if it
  names nvidia), `features.cdi: true` when asked. Every other key is kept as it was. The file
  is written as nvidia-ctk writes it (JSON, 4-space indent), and only when its data changed.
- containerd, /etc/containerd/config.toml, config version 2 (containerd 1.x) or 3
  (containerd 2.x): the table `plugins.<CRI plugin>.containerd.runtimes.nvidia` with
  `options.BinaryName = /usr/bin/nvidia-container-runtime`, its other settings copied from the
  default runtime's table (else runc's, else crun's) as nvidia-ctk does, so SystemdCgroup and
  the like carry over. The user's file is never rewritten: the table is APPENDED as one block
  between marker comments, which is all that removal takes out, so comments, order and
  formatting stay byte for byte. The block is written by the small emitter below (scalars
  and lists of scalars only: no TOML writer in the dependencies, and tomllib only reads); the
  result is read back with tomllib and must hold exactly the table meant, else nothing is
  written. Version 1 files, and a `nvidia` runtime the user defined that differs from ours,
  are refused with the fix. Making nvidia containerd's default is not offered: Kubernetes
  selects it per pod with a RuntimeClass whose handler is `nvidia`, and the default lives in
  a table the user's file already holds (it could only be set by rewriting their file).
- Podman needs no registration: it reads CDI specs from /etc/cdi.

Pure functions of the file's text (None: no file); the standard library only, plus tomllib
(Python 3.11+) or tomli where the host's Python is older.
"""

from __future__ import annotations

import copy
import json
import re

try:
    import tomllib
except ImportError:  # Python 3.10 (Ubuntu 22.04's): tomli, where installed
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

RUNTIME = "nvidia"
DOCKER_RUNTIME = {"path": "nvidia-container-runtime", "args": []}
CONTAINERD_BINARY = "/usr/bin/nvidia-container-runtime"
CONTAINERD_RUNTIME_TYPE = "io.containerd.runc.v2"
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
BEGIN = "# BEGIN gpu-provisioner: the nvidia runtime (managed; removed when the profile turns containers off)"
END = "# END gpu-provisioner: the nvidia runtime"


class ConfigError(ValueError):
    """The engine's configuration cannot be merged as it is: what is wrong and the fix."""


# ---------------------------------------------------------------------------------- Docker

def _docker_load(text):
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"daemon.json is not JSON ({exc}); fix or remove it, dockerd refuses it too") from None
    if not isinstance(data, dict):
        raise ConfigError("daemon.json is not a JSON object; dockerd refuses it too")
    if not isinstance(data.get("runtimes", {}), dict):
        raise ConfigError('daemon.json: "runtimes" is not an object; make it one ({"name": {"path": ...}})')
    if not isinstance(data.get("features", {}), dict):
        raise ConfigError('daemon.json: "features" is not an object; make it one ({"cdi": true})')
    return data


def _docker_text(data):
    return json.dumps(data, indent=4) + "\n"


def docker_merge(text, default=False, cdi=False):
    """(new text, changed): `text` with the nvidia runtime registered, nvidia the default
    runtime or not (`default`), CDI on when `cdi`; every other key as it was. Unchanged data
    returns `text` itself."""
    before = _docker_load(text)
    data = copy.deepcopy(before)
    data.setdefault("runtimes", {})[RUNTIME] = copy.deepcopy(DOCKER_RUNTIME)
    if default:
        data["default-runtime"] = RUNTIME
    elif data.get("default-runtime") == RUNTIME:
        del data["default-runtime"]  # dockerd's own default (runc) again
    if cdi:
        data.setdefault("features", {})["cdi"] = True
    if data == before:
        return text, False
    return _docker_text(data), True


def docker_remove(text):
    """(new text or None to delete the file, changed): the nvidia runtime and a default-runtime
    naming it taken out; nothing else (features.cdi stays: Docker's own feature, which the
    user may want). A file left empty carried nothing of the user's: None deletes it."""
    before = _docker_load(text)
    data = copy.deepcopy(before)
    runtimes = data.get("runtimes", {})
    runtimes.pop(RUNTIME, None)
    if "runtimes" in data and not runtimes:
        del data["runtimes"]
    if data.get("default-runtime") == RUNTIME:
        del data["default-runtime"]
    if data == before:
        return text, False
    return (_docker_text(data) if data else None), True


def docker_state(text):
    """What daemon.json says of the nvidia runtime: registered (as we register it), the
    path it names, whether it is the default and whether CDI is on."""
    data = _docker_load(text)
    entry = data.get("runtimes", {}).get(RUNTIME)
    path = entry.get("path") if isinstance(entry, dict) else None
    return {"registered": entry == DOCKER_RUNTIME, "path": path,
            "default": data.get("default-runtime") == RUNTIME,
            "cdi": data.get("features", {}).get("cdi") is True}


# ------------------------------------------------------------------------------ containerd

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_string(s):
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key):
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    return None  # floats, dates, tables: not copied


def _toml_value(value):
    if isinstance(value, list):
        items = [_toml_scalar(v) for v in value]
        return None if None in items else "[" + ", ".join(items) + "]"
    return _toml_scalar(value)


def _emit_table(path, table):
    """`[a."b.c".d]` and its scalar (and list-of-scalar) keys; sub-tables after it."""
    lines = ["[" + ".".join(_toml_key(p) for p in path) + "]"]
    subtables = []
    for key, value in table.items():
        if isinstance(value, dict):
            subtables.append((key, value))
            continue
        emitted = _toml_value(value)
        if emitted is not None:
            lines.append(f"  {_toml_key(key)} = {emitted}")
    for key, value in subtables:
        lines.extend(_emit_table(path + [key], value))
    return lines


def _toml_load(text, what="config.toml"):
    if tomllib is None:
        raise ConfigError("reading containerd's config.toml needs Python 3.11 (tomllib) or the tomli module on the host; "
                          "install python3-tomli")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} is not valid TOML ({exc}); containerd refuses it too") from None


def _split_block(text):
    """(the user's text without our block, whether the block was there)."""
    lines = (text or "").splitlines(keepends=True)
    bare = [ln.rstrip("\n") for ln in lines]
    if BEGIN not in bare:
        return text or "", False
    start = bare.index(BEGIN)
    if END not in bare[start:]:
        raise ConfigError(f"config.toml holds {BEGIN!r} without its end line; remove the block's lines and run again")
    end = bare.index(END, start)
    return "".join(lines[:start] + lines[end + 1:]), True


def _version(data):
    version = data.get("version", 1 if data else None)
    if version is None:
        return None  # empty or comments only: the block brings `version`
    if version not in CRI_PLUGIN:
        raise ConfigError(f"containerd config version {version!r} is not supported (2 for containerd 1.x, 3 for 2.x); "
                          "migrate it with `containerd config migrate`")
    return version


def _runtimes(data, version):
    cri = data.get("plugins", {}).get(CRI_PLUGIN[version], {})
    containerd = cri.get("containerd", {}) if isinstance(cri, dict) else {}
    return containerd if isinstance(containerd, dict) else {}, containerd.get("runtimes", {}) if isinstance(containerd, dict) else {}


def containerd_table(data, version):
    """The nvidia runtime's table as nvidia-ctk builds it: the default runtime's (not an
    nvidia one), else runc's, else crun's, copied; runtime_type filled; our BinaryName."""
    containerd, runtimes = _runtimes(data, version)
    default = containerd.get("default_runtime_name")
    names = ([default] if isinstance(default, str) and default and not default.startswith("nvidia") else []) + ["runc", "crun"]
    base = next((runtimes[n] for n in names if isinstance(runtimes.get(n), dict)), {})
    table = copy.deepcopy(base)
    if not table.get("runtime_type"):
        table["runtime_type"] = CONTAINERD_RUNTIME_TYPE
    options = table.get("options") if isinstance(table.get("options"), dict) else {}
    table["options"] = {**options, "BinaryName": CONTAINERD_BINARY}
    return table


def _without_uncopied(table):
    """What `table` is once written by the emitter (values it does not copy dropped)."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out[key] = _without_uncopied(value)
        elif _toml_value(value) is not None:
            out[key] = value
    return out


def containerd_merge(text, new_version=2):
    """(new text, changed): the nvidia runtime's table appended to the user's config.toml as
    our block (replacing our earlier block); `new_version` for a file with no settings yet."""
    original = text or ""
    user_text, _ = _split_block(original)
    user = _toml_load(user_text)
    version = _version(user)
    block_version = version is None
    version = version or new_version
    _, runtimes = _runtimes(user, version)
    if RUNTIME in runtimes:  # the user's own (nvidia-ctk's, say): accepted as it is when it is ours in effect
        mine = runtimes[RUNTIME]
        binary = mine.get("options", {}).get("BinaryName") if isinstance(mine, dict) else None
        if binary != CONTAINERD_BINARY:
            raise ConfigError(f"config.toml already defines the {RUNTIME} runtime with BinaryName {binary!r}; "
                              f"remove that table (plugins.\"{CRI_PLUGIN[version]}\".containerd.runtimes.{RUNTIME}) "
                              "and run again, so the product manages it")
        return (user_text, user_text != original)
    table = _without_uncopied(containerd_table(user, version))
    block = [BEGIN] + (["version = " + str(version)] if block_version else [])
    block += _emit_table(["plugins", CRI_PLUGIN[version], "containerd", "runtimes", RUNTIME], table) + [END]
    # Appended after the user's last line: removal takes these lines out and leaves theirs.
    new = user_text + ("" if not user_text or user_text.endswith("\n") else "\n") + "\n".join(block) + "\n"
    merged = _toml_load(new, "config.toml with the nvidia runtime added")
    if _runtimes(merged, version)[1].get(RUNTIME) != table:
        raise ConfigError("config.toml: the nvidia runtime's table did not read back as written "
                          "(the file defines its tables in a form a separate table cannot extend); "
                          "run `nvidia-ctk runtime configure --runtime=containerd` by hand or simplify the file")
    return new, new != original


def containerd_remove(text):
    """(new text, changed): our block taken out; the user's text as it was before it."""
    user_text, had = _split_block(text or "")
    return (user_text if had else text), had


def containerd_state(text):
    """What config.toml says of the nvidia runtime: registered (BinaryName ours), managed
    (our block), the config version and the CRI plugin it is under."""
    data = _toml_load(text or "")
    _, managed = _split_block(text or "")
    version = _version(data)
    if version is None:
        return {"registered": False, "managed": managed, "version": None, "binary": None}
    entry = _runtimes(data, version)[1].get(RUNTIME)
    binary = entry.get("options", {}).get("BinaryName") if isinstance(entry, dict) else None
    return {"registered": binary == CONTAINERD_BINARY, "managed": managed, "version": version, "binary": binary}
