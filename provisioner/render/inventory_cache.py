"""The inventory as Ansible's parser last read it, kept between runs.

Importing Ansible and parsing the inventory is about 0.35 s of every command, most of what a
command that contacts no host pays (`check --from-prometheus` on 100 hosts: about 0.9 s in
all). So a successful read is kept, keyed by everything it depended on: the inventory file's
bytes, the names and bytes of every file under the `group_vars/` and `host_vars/` folders
beside it (any added, changed or removed file is a miss, used by the inventory or not), the
ANSIBLE_* environment, the ansible-core and gpu-provisioner versions, and the source of the
modules that turn Ansible's answer into ours. Anything else is a miss and a fresh parse; a
refused inventory is never kept (the next run refuses it again with Ansible's message).

The entry is as trusted as the inventory itself (it decides what every host gets), so it is
read only from a file this user owns that nobody else can write, in a folder made 0700; a
damaged or foreign entry is ignored, never an error. One entry per inventory path: a changed
inventory replaces its entry. Warnings Ansible's parser prints are not repeated on a hit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from importlib import metadata
from pathlib import Path

from provisioner import paths

FORMAT = 1
VARS_FOLDERS = ("group_vars", "host_vars")
MAX_FILES = 2000          # more files beside an inventory than this: not kept (hashing them costs more than a parse)
MAX_ENTRY = 16 << 20      # a 100-host inventory's entry is ~50 KB


def _path(inventory: Path) -> Path:
    return paths.cache_dir("inventory") / (hashlib.sha256(str(inventory).encode()).hexdigest()[:32] + ".json")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


def key(inventory: Path, sources: list[Path]) -> str | None:
    """The digest of everything a parse of `inventory` depends on; None when there is too much
    beside it to be worth keeping, or a file cannot be read (the parse will say why)."""
    digest = hashlib.sha256(f"{FORMAT}\0{_version('ansible-core')}\0{_version('gpu-provisioner')}\0".encode())
    try:
        for source in sources:
            digest.update(source.read_bytes())
        digest.update(b"\0inventory\0" + inventory.read_bytes())
        count = 0
        for folder in VARS_FOLDERS:
            for root, dirs, files in os.walk(inventory.parent / folder, followlinks=True):
                dirs.sort()
                for name in sorted(files):
                    count += 1
                    if count > MAX_FILES:
                        return None
                    file = Path(root, name)
                    digest.update(b"\0" + os.fsencode(file.relative_to(inventory.parent)) + b"\0" + file.read_bytes())
    except OSError:
        return None
    for name in sorted(os.environ):
        if name.startswith("ANSIBLE_"):
            digest.update(f"\0{name}={os.environ[name]}".encode())
    return digest.hexdigest()


def get(inventory: Path, digest: str | None) -> dict | None:
    """The kept parse of `inventory` when its key is `digest`, as Inventory's fields; else None."""
    if digest is None:
        return None
    try:
        fd = os.open(_path(inventory), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 or st.st_size > MAX_ENTRY:
            return None
        try:
            entry = json.loads(f.read(MAX_ENTRY))
        except ValueError:
            return None
    if not isinstance(entry, dict) or entry.get("key") != digest or entry.get("source") != str(inventory):
        return None
    return entry.get("inventory")


def put(inventory: Path, digest: str | None, fields: dict) -> None:
    """Keep `fields` (an Inventory's, as plain JSON values) for `inventory` under `digest`: best
    effort, a cache that cannot be written only costs a parse next time."""
    if digest is None:
        return
    path = _path(inventory)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"key": digest, "source": str(inventory), "inventory": fields}, f)
        tmp.replace(path)
    except (OSError, TypeError, ValueError):  # TypeError/ValueError: a value JSON cannot carry: not kept
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
