# -*- coding: utf-8 -*-
"""A Python environment is its owner's code: root reads it, and runs it only as that owner.

Whoever owns an environment can write into it, and a `.pth` file in its site-packages runs
at every start of its Python, whoever starts it. So root never starts an environment's
Python when its owner is another user (issue 28, item 5):

- its packages are read from the `*.dist-info` / `*.egg-info` metadata in its site-packages
  by the Python running this code (the system Python: an Ansible module's interpreter, or
  `python3 -I -S` in provision-state.service), which opens those files as data and imports
  nothing from the environment;
- a probe that must start it (import torch) runs as its owner (run_as_owner).

The standard library only: the node's own checker (state_metrics.py) imports this too.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pwd
import re
import stat
import subprocess

from ansible_collections.gpu_provisioner.node.plugins.module_utils.pip_freeze import canonical, parse

# lib/python3.11/site-packages (and lib/python3.13t/... of a free-threaded build).
_SITE = re.compile(r"^python(\d+)\.(\d+)(t?)$")
MAX_BYTES = 4 * 1024 * 1024  # per metadata file: far above a real one, long description included
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def prefix(python: str) -> str:
    """The environment a Python of it belongs to: <prefix>/bin/python -> <prefix>. The
    interpreter itself is not resolved (a venv's bin/python links to the system's)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(python)))


def site_packages(python: str) -> list[str] | None:
    """The site-packages folder(s) of a venv or conda environment, from its layout alone
    (<prefix>/lib/pythonX.Y/site-packages, for an X.Y its bin/ has): nothing of it runs.
    None when the environment is gone (its Python is not there) or cannot be read."""
    if not os.path.exists(python):
        return None
    root = prefix(python)
    lib = os.path.join(root, "lib")
    try:
        names = sorted(os.listdir(lib)) if os.path.isdir(lib) else []
    except OSError:
        return None
    found = []
    for name in names:
        folder = os.path.join(lib, name, "site-packages")
        if _SITE.match(name) and os.path.isdir(folder):
            found.append((folder, os.path.exists(os.path.join(root, "bin", name))))
    # A folder an older Python left (conda after an upgrade) is not the environment's.
    return [f for f, ours in found if ours] or [f for f, _ in found]


def _build_backends_hidden(folder: str) -> bool:
    """pip freeze leaves out setuptools, wheel and distribute under Python < 3.12 (pip
    itself always): the same here, so a record made by pip freeze still compares equal."""
    match = _SITE.match(os.path.basename(os.path.dirname(folder)))
    return bool(match) and (int(match.group(1)), int(match.group(2))) < (3, 12)


def _requirement(name: str, version: str, direct_url: str | None) -> str | None:
    """One line as pip freeze writes it; None for an editable install (pip writes `-e`,
    which is not a package we pin). A direct reference (PEP 610 direct_url.json) is
    `name @ url`, as pip writes it."""
    try:
        ref = json.loads(direct_url) if direct_url else None
    except ValueError:
        ref = None
    if not isinstance(ref, dict) or not isinstance(ref.get("url"), str):
        return f"{name}=={version}"
    url, fragments = ref["url"], []
    vcs, archive, folder = (ref.get(k) if isinstance(ref.get(k), dict) else None
                            for k in ("vcs_info", "archive_info", "dir_info"))
    if folder and folder.get("editable"):
        return None
    if vcs:
        url = f"{vcs.get('vcs')}+{url}@{vcs.get('commit_id')}"
    elif archive and isinstance(archive.get("hash"), str):
        fragments.append(archive["hash"])
    if isinstance(ref.get("subdirectory"), str) and ref["subdirectory"]:
        fragments.append("subdirectory=" + ref["subdirectory"])
    return f"{name} @ {url}" + ("#" + "&".join(fragments) if fragments else "")


class _Metadata(importlib.metadata.Distribution):
    """One *.dist-info / *.egg-info of an environment, its files read as data: regular files
    only, no link followed at the last step, at most MAX_BYTES each (a METADATA the owner
    made a link to /dev/zero, or a FIFO, is no package, not a hang)."""

    def __init__(self, path: str):
        self._path = path

    def read_text(self, filename):
        path = os.path.join(self._path, filename) if filename else self._path  # '': an egg-info file itself
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = os.read(fd, MAX_BYTES + 1)
        finally:
            os.close(fd)
        return data.decode("utf-8", "replace") if len(data) <= MAX_BYTES else None

    def locate_file(self, path):
        return os.path.join(os.path.dirname(self._path), path)


def frozen(folders: list[str]) -> list[str]:
    """The packages installed in these site-packages folders, as the lines `pip freeze`
    prints (name==version, or name @ url), sorted as pip sorts them. Read from the
    metadata files only: no code of the environment is imported or run."""
    lines, seen = {}, set()
    for folder in folders:
        hidden = {"pip"} | ({"setuptools", "wheel", "distribute"} if _build_backends_hidden(folder) else set())
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue  # removed while being read
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            dist = _Metadata(os.path.join(folder, entry))
            if not any(dist.read_text(f) for f in ("METADATA", "PKG-INFO", "")):
                continue  # no metadata to read (or too large, or not a file)
            name, version = dist.metadata.get("Name"), dist.metadata.get("Version")
            if not name or not version or canonical(name) in seen:
                continue  # broken metadata; or a name found already (the first wins, as in pip)
            seen.add(canonical(name))
            line = _requirement(name, version, dist.read_text("direct_url.json"))
            if line and canonical(name) not in hidden:
                lines[name] = line
    return [lines[name] for name in sorted(lines, key=str.lower)]


def installed(folders: list[str]) -> dict[str, str]:
    """{canonical name: version (or the url of a direct reference)}: pip_freeze.parse's shape."""
    return parse(frozen(folders))


def owner_of(python: str, recorded: dict | None = None) -> str:
    """Who an environment's code runs as: anyone but root who owns it or its site-packages
    (they can write into it), else the owner python_env recorded for this Python, else root."""
    uids = []
    for path in [prefix(python)] + (site_packages(python) or []):
        try:
            uids.append(os.stat(path).st_uid)
        except OSError:
            continue
    for uid in uids:
        if uid != 0:
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return str(uid)
    if (recorded or {}).get("python") == python and (recorded or {}).get("owner"):
        return str(recorded["owner"])
    return "root"


def as_owner(owner: str, env: dict[str, str] | None = None) -> dict:
    """subprocess keyword arguments that start a child as `owner` (a user name or uid): its
    uid, primary group and groups, a minimal environment with its HOME (nothing of root's
    environment), in /. Raises LookupError for an unknown user and PermissionError where
    this process, not root, cannot become another user."""
    try:
        pw = pwd.getpwuid(int(owner)) if str(owner).isdigit() else pwd.getpwnam(owner)
    except KeyError:
        raise LookupError(f"the environment's owner {owner!r} is not a user on this host") from None
    child = {"env": {"PATH": PATH, "HOME": pw.pw_dir or "/", "USER": pw.pw_name, "LOGNAME": pw.pw_name,
                     "LANG": "C.UTF-8", **(env or {})}, "cwd": "/"}
    if os.geteuid() == pw.pw_uid:
        return child
    if os.geteuid() != 0:
        raise PermissionError(f"cannot run as the environment's owner {pw.pw_name}: this process is not root")
    return {**child, "user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": os.getgrouplist(pw.pw_name, pw.pw_gid)}


def run_as_owner(argv: list[str], owner: str, *, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(argv) as the environment's owner (see as_owner); kwargs as subprocess.run's."""
    return subprocess.run(argv, check=False, **kwargs, **as_owner(owner, env))
