# -*- coding: utf-8 -*-
"""A host's managed state, read and compared with the record of its last converge.

One source for two callers: the provisioner_state module (`provision check`, one module
call per host) and the node's own checker (state_metrics.py, run by provision-state.timer
with plain python3, no Ansible on the node). So this file imports the standard library
only (and pip_freeze and owned_env beside it, stdlib-only too).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile

from ansible_collections.gpu_provisioner.node.plugins.module_utils.container_runtime import (ConfigError, containerd_state,
                                                                                       docker_state)
from ansible_collections.gpu_provisioner.node.plugins.module_utils.owned_env import installed, site_packages
from ansible_collections.gpu_provisioner.node.plugins.module_utils.pip_freeze import diff as freeze_diff

KINDS = ("held_packages", "packages", "files", "units", "python_envs", "runtimes")
# A runtimes item is "<engine>:<config file>": the nvidia runtime registered there (a file the
# user owns too, so its state is the registration, not the file's sha256); or "cdi:<spec>": the
# driver version the CDI spec was generated for, and the installed driver's.
ENGINE_UNITS = {"docker": "docker.service", "containerd": "containerd.service"}
RECORD = "/etc/ansible/facts.d/provisioner.fact"


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """A temporary file in the same folder, then a rename: a reader (node_exporter, whose
    textfile collector ignores names not ending in .prom like the temporary one; Ansible's
    local facts) never sees half a file. The state record, the roles' records (role_record)
    and the node checker's textfile all go through here."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _packages(names: list[str]) -> dict[str, dict]:
    """name -> {version, hold} for installed packages (one dpkg-query for all)."""
    if not names:
        return {}
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}|${Package}|${Version}|${Status}\n", *names],
                         capture_output=True, text=True, check=False).stdout
    found = {}
    for line in out.splitlines():
        abbrev, name, version, status = (line.split("|") + ["", "", "", ""])[:4]
        if abbrev[1:2] == "i":
            found[name] = {"version": version, "hold": status.startswith("hold ")}
    return found


def _files(paths: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for path in paths:
        try:
            with open(path, "rb") as f:
                found[path] = hashlib.sha256(f.read()).hexdigest()
        except FileNotFoundError:
            found[path] = None
    return found


def _units(names: list[str]) -> dict[str, dict]:
    """name -> {enabled, active}, from one `systemctl show` for all."""
    if not names:
        return {}
    out = subprocess.run(["systemctl", "show", "-p", "Id", "-p", "UnitFileState", "-p", "ActiveState", "--", *names],
                         capture_output=True, text=True, check=False).stdout
    found, blocks = {}, [b for b in out.strip().split("\n\n") if b.strip()]
    for name, block in zip(names, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[name] = {"enabled": props.get("UnitFileState") or "absent", "active": props.get("ActiveState", "")}
    return found


def _python_envs(pythons: list[str]) -> dict[str, dict | None]:
    """python -> {package: version} of its environment (None: the environment is gone), read
    from its metadata: root never starts an environment's Python (owned_env.py)."""
    found: dict[str, dict | None] = {}
    for python in pythons:
        folders = site_packages(python)
        found[python] = None if folders is None else installed(folders)
    return found


def runtime_item(item: str) -> tuple[str, str] | None:
    """(engine, path) of a runtimes item; None for anything else (the record is the host's word)."""
    engine, _, path = item.partition(":")
    if engine not in ENGINE_UNITS or not path.startswith(f"/etc/{engine}/") or ".." in path:
        return None
    return engine, path


def _runtime_state(engine: str, text: str | None) -> bool | None:
    """Whether the nvidia runtime is registered as we register it (None: no file)."""
    if text is None:
        return None
    state = docker_state if engine == "docker" else containerd_state
    try:
        return bool(state(text)["registered"])
    except (ConfigError, ValueError):
        return False


# What nvidia-ctk writes into a spec for driver X: its enable-cuda-compat hook's argument, and
# the mounted libcuda.so.X (tests/data/containers' spec; parsers/containers.py reads the same two).
_HOST_DRIVER = re.compile(r"--host-driver-version=(\d+\.\d+(?:\.\d+)?)\b")
_LIBCUDA = re.compile(r"/libcuda\.so\.(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)
# Where the driver's libcuda.so.1 is: the dynamic linker's multiarch folders (Ubuntu, Debian).
LIBCUDA_LINKS = ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1")


def cdi_item(item: str) -> str | None:
    """The spec's path of a "cdi:" runtimes item (under /etc/cdi or /var/run/cdi, where the
    engines read specs); None for anything else."""
    kind, _, path = item.partition(":")
    if kind != "cdi" or not path.startswith(("/etc/cdi/", "/var/run/cdi/")) or ".." in path:
        return None
    return path


def spec_driver(text: str) -> str | None:
    """The driver version a CDI spec was generated for (None: it names none)."""
    found = _HOST_DRIVER.search(text) or _LIBCUDA.search(text)
    return found.group(1) if found else None


def installed_driver(links: tuple[str, ...] | None = None) -> str | None:
    """The installed driver's version, as the file libcuda.so.1 resolves to (libcuda.so.X):
    the library a spec mounts into containers, so a spec naming another version mounts a file
    that is gone. None: no driver library installed."""
    for link in links or LIBCUDA_LINKS:
        found = re.search(r"/libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", os.path.realpath(link))
        if found and os.path.exists(link):
            return found.group(1)
    return None


def _cdi_state(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(4 * 1024 * 1024)
    except FileNotFoundError:
        return None
    return {"spec": spec_driver(text), "driver": installed_driver()}


def _runtimes(items: list[str]) -> dict[str, bool | dict | None]:
    found: dict[str, bool | dict | None] = {}
    for item in items:
        spec = cdi_item(item)
        if spec is not None:
            found[item] = _cdi_state(spec)
            continue
        where = runtime_item(item)
        if where is None:
            continue
        try:
            with open(where[1], encoding="utf-8") as f:
                text: str | None = f.read()
        except FileNotFoundError:
            text = None
        found[item] = _runtime_state(where[0], text)
    return found


def read_state(managed: dict) -> dict:
    installed = _packages(managed.get("held_packages", []) + managed.get("packages", []))  # one dpkg-query
    return {
        "held_packages": {n: installed.get(n) for n in managed.get("held_packages", [])},
        "packages": {n: (n in installed) for n in managed.get("packages", [])},
        "files": _files(managed.get("files", [])),
        "units": _units(managed.get("units", [])),
        "python_envs": _python_envs(managed.get("python_envs", [])),
        "runtimes": _runtimes(managed.get("runtimes", [])),
    }


def _show_package(p: dict | None) -> str:
    if not p:
        return "not installed"
    return p["version"] + (" (held)" if p["hold"] else " (not held)")


def differences(recorded: dict, now: dict) -> list[dict]:
    """Every item whose state differs from the record, in a stable order; each names its
    `kind` (one of KINDS), which the node's textfile counts by."""
    diffs = []

    def add(kind: str, item: str, was, cur) -> None:
        diffs.append({"kind": kind, "item": item, "recorded": was, "now": cur})

    for name, was in sorted(recorded.get("held_packages", {}).items()):
        cur = now["held_packages"].get(name)
        if was and cur and was["version"] == cur["version"] and was["hold"] and not cur["hold"]:
            add("held_packages", f"hold removed: {name}", "held", "not held")
        elif was != cur:
            add("held_packages", f"package {name}", _show_package(was), _show_package(cur))
    for name, was in sorted(recorded.get("packages", {}).items()):
        if was and not now["packages"].get(name):
            add("packages", f"package {name}", "installed", "not installed")
    for path, was in sorted(recorded.get("files", {}).items()):
        cur = now["files"].get(path)
        if cur != was:
            what = "deleted" if cur is None else ("created" if was is None else "changed")
            add("files", f"file {path} {what}", f"sha256 {was}" if was else "absent", f"sha256 {cur}" if cur else "absent")
    for name, was in sorted(recorded.get("units", {}).items()):
        cur = now["units"].get(name) or {}
        for key in ("enabled", "active"):
            if was.get(key) != cur.get(key):
                add("units", f"unit {name} {key}", was.get(key), cur.get(key))
    for python, was in sorted(recorded.get("python_envs", {}).items()):
        cur = now.get("python_envs", {}).get(python)
        if cur is None:
            if was is not None:
                add("python_envs", f"python env {python}", f"{len(was)} packages", "gone")
            continue
        change = freeze_diff(was or {}, cur)
        for name, version in change["removed"].items():
            add("python_envs", f"python package {name} removed ({python})", version, "absent")
        for name, version in change["added"].items():
            add("python_envs", f"python package {name} added ({python})", "absent", version)
        for name, versions in change["changed"].items():
            add("python_envs", f"python package {name} changed ({python})", versions["recorded"], versions["now"])
    for item, was in sorted(recorded.get("runtimes", {}).items()):
        cur = now.get("runtimes", {}).get(item)
        if cdi_item(item) is not None:
            # A spec for another driver than the installed one (a roll or rollback it missed);
            # a deleted or edited spec is the files kind's.
            if isinstance(cur, dict) and cur.get("spec") and cur.get("driver") and cur["spec"] != cur["driver"]:
                add("runtimes", f"{cdi_item(item)} is for driver {cur['spec']}, the installed driver is {cur['driver']}",
                    f"a spec for driver {cur['driver']}", f"a spec for driver {cur['spec']}")
            continue
        if was and not cur:
            engine, _, path = item.partition(":")
            add("runtimes", f"{path} lost the nvidia runtime ({engine})", "registered",
                "file absent" if cur is None else "not registered")
    return diffs


def dpkg_audit() -> str:
    return subprocess.run(["dpkg", "--audit"], capture_output=True, text=True, check=False).stdout.strip()


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def compare(path: str = RECORD) -> dict:
    """The host against its record: recorded (whether a record was found), the profile and
    its sha256 from the record, differences, dpkg_audit, rollback_to (the profile a rollback
    returns to, or None), pending (a converge with another profile that began and did not
    finish) and components (what each role recorded). Reads only; changes nothing."""
    old = load(path)
    if old is None:
        return {"recorded": False, "profile": "", "profile_sha256": "", "differences": [], "dpkg_audit": dpkg_audit(),
                "rollback_to": None, "pending": None, "components": {}}
    state = old.get("state") or {}
    managed = {k: sorted(state.get(k, {})) for k in KINDS}
    return {"recorded": True, "profile": old.get("profile", ""), "profile_sha256": old.get("profile_sha256", ""),
            "differences": differences(state, read_state(managed)), "dpkg_audit": dpkg_audit(),
            # What `provision up --rollback` returns to, and what check compares with the profile's components.
            "rollback_to": rollback_to(old), "pending": old.get("pending"), "components": components_on(old)}


# Day two (issue 22): what a converge installed itself, the previous profile, and what a
# component the profile no longer has leaves behind. Pure functions over records; the
# provisioner_state module does the reading and the changes.

def installed_packages() -> list[str]:
    """Every package dpkg has installed now (one dpkg-query): taken before the roles run,
    so the record can tell what a converge installed from what was there before it."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}|${Package}\n"],
                         capture_output=True, text=True, check=False).stdout
    return sorted({line.split("|", 1)[1] for line in out.splitlines() if line[1:2] == "i" and "|" in line})


def dependencies() -> dict[str, tuple[list[str], list[str]]]:
    """package -> (the names its Depends and Pre-Depends mention, what it Provides), for every
    installed package (one dpkg-query)."""
    # Tabs between the fields: a Depends field holds '|' (alternatives), never a tab.
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${Package}\t${Depends}, ${Pre-Depends}\t${Provides}\n"],
                         capture_output=True, text=True, check=False).stdout
    found = {}
    for line in out.splitlines():
        abbrev, name, depends, provides = (line.split("\t", 3) + ["", "", "", ""])[:4]
        if abbrev[1:2] == "i":
            found[name] = (_names(depends), _names(provides))
    return found


def _names(field: str) -> list[str]:
    """The package names a Depends/Provides field mentions (alternatives, versions and
    architecture qualifiers dropped): `a (>= 1), b | c:any` -> a, b, c."""
    return [alt.split("(")[0].split(":")[0].strip() for group in field.split(",") for alt in group.split("|")
            if alt.split("(")[0].strip()]


def purgeable(candidates: list[str], installed: dict[str, tuple[list[str], list[str]]]) -> tuple[list[str], list[str]]:
    """Which candidates a purge may take without breaking a package that stays: a candidate a
    staying package depends on (by name or by what it provides) stays too, and so on until
    nothing more stays. Returns (purge, still needed). A driver change moves some companion
    packages out of the driver's managed set while the new driver still depends on them."""
    purge = set(candidates) & set(installed)
    while True:
        needed = set()
        for name, (depends, _) in installed.items():
            if name not in purge:
                needed |= set(depends)
        keep = {c for c in purge if c in needed or set(installed[c][1]) & needed}
        if not keep:
            return sorted(purge), sorted(set(candidates) - purge)
        purge -= keep


def merge(components: dict[str, dict]) -> dict[str, list[str]]:
    """The roles' managed items, merged into one sorted list per kind."""
    return {k: sorted({item for role in components.values() for item in role.get(k) or []}) for k in KINDS}


def ours(old: dict | None, managed: dict[str, list[str]], installed_before: list[str] | None) -> list[str]:
    """The managed packages a converge of ours installed: recorded as ours before and still
    managed, or not installed when this converge began. Unknown (no snapshot): only what
    the record already says, so a package that was there before us is never taken for ours."""
    names = set(managed.get("held_packages", [])) | set(managed.get("packages", []))
    kept = set((old or {}).get("ours") or []) & names
    if installed_before is None:
        return sorted(kept)
    return sorted(kept | (names - set(installed_before)))


def previous(old: dict | None, profile_sha256: str) -> dict | None:
    """What a rollback returns to: the last record with another profile. A converge with the
    same profile keeps the previous one it had; with a new profile, the old record becomes it."""
    if not old:
        return None
    if old.get("profile_sha256") == profile_sha256:
        return old.get("previous")
    held = {name: (state or {}).get("version") for name, state in ((old.get("state") or {}).get("held_packages") or {}).items()}
    return {"profile": old.get("profile", ""), "profile_sha256": old.get("profile_sha256", ""),
            "profile_yaml": old.get("profile_yaml", ""), "held_packages": {k: v for k, v in held.items() if v}}


def rollback_to(old: dict | None) -> dict | None:
    """What `up --rollback` returns this host to. Normally the previous record; but when a
    converge with another profile began and never recorded its end (`pending`: it failed
    halfway, as in a failed batch), the host is between the two, and its own record's
    profile is the one to go back to."""
    if not old:
        return None
    if old.get("pending"):
        return previous(old, "")  # the record itself, as previous() keeps it
    return old.get("previous")


def leftovers(old: dict | None, managed: dict[str, list[str]]) -> dict:
    """What the last converge managed and this one no longer does (a component turned off or
    dropped): units to stop and disable, holds to release, packages to purge (only those
    we installed), files to remove (a role lists only files it writes), and packages left
    because they were there before us. Also the components they belonged to."""
    if not old:
        return {"units": [], "unhold": [], "purge": [], "files": [], "kept": [], "components": [], "runtimes": []}
    state = old.get("state") or {}
    gone = {k: sorted(set(state.get(k) or {}) - set(managed.get(k, []))) for k in ("held_packages", "packages", "files",
                                                                                   "units", "runtimes")}
    mine = set(old.get("ours") or [])
    packages = sorted(set(gone["held_packages"]) | set(gone["packages"]))
    components = sorted(role for role, items in (old.get("components") or {}).items()
                        if any(set(items.get(k) or []) & set(gone[k]) for k in gone))
    return {"units": gone["units"], "unhold": gone["held_packages"], "purge": [p for p in packages if p in mine],
            "files": gone["files"], "kept": [p for p in packages if p not in mine], "components": components,
            "runtimes": [item for item in gone["runtimes"] if runtime_item(item)]}


def components_on(record: dict | None) -> dict[str, dict]:
    """The record's components that manage anything (role -> its items)."""
    return {role: items for role, items in ((record or {}).get("components") or {}).items()
            if any(items.get(k) for k in KINDS)}
