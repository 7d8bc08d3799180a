"""Finding, composing (`extends:`) and validating profiles.

A profile is named by a built-in name (a file in provisioner/profiles/) or a path.
`extends:` deep-merges the parent under the child: mappings merge key by key, every
other value (lists included) is replaced whole, so a child never has to guess how two
lists would combine.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from provisioner import paths
from provisioner.errors import ProvisionError
from provisioner.profiles.models import Profile
from provisioner.yamlfile import line_of, read_yaml

BUILTIN_DIR = paths.BUILTIN_PROFILES_DIR


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yml"))


def find(ref: str, relative_to: Path | None = None) -> Path:
    """The file a profile reference names: a path if it looks like one, else a built-in."""
    if ref.endswith(".ini"):  # the arguments swapped: an INI file is always an inventory
        raise ProvisionError("an .ini file is an Ansible inventory, not a profile", where=ref,
                             fix="pass the profile with --profile and the inventory as the argument: "
                                 "provision up --profile PROFILE hosts.ini")
    looks_like_path = "/" in ref or ref.endswith((".yml", ".yaml"))
    if looks_like_path:
        path = Path(ref).expanduser()
        if relative_to is not None and not path.is_absolute():
            path = relative_to / path
        if path.is_dir():
            raise ProvisionError("the profile is a folder, not a profile file", where=str(path),
                                 fix="name the profile's .yml file inside it")
        if not path.is_file():
            raise ProvisionError("profile file not found", where=str(path),
                                 fix="check the path, or name a built-in profile (provision profiles)")
        return path
    if Path(ref).is_dir():  # `-p site` with a folder named site here: say so, not "unknown profile"
        raise ProvisionError("the profile is a folder, not a profile file", where=ref,
                             fix="name the profile's .yml file inside it, or a built-in profile (provision profiles)")
    path = BUILTIN_DIR / f"{ref}.yml"
    if not path.is_file():
        raise ProvisionError(f"unknown profile {ref!r}",
                             fix=f"use one of: {', '.join(builtin_names())}, or a path to a .yml file")
    return path


def deep_merge(parent: dict, child: dict) -> dict:
    merged = dict(parent)
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class Loaded:
    profile: Profile
    files: tuple[Path, ...]  # the profile's own file first, then its ancestors
    warnings: tuple = ()     # compat.Problem with severity "warning" (end-of-life driver...): `--strict` refuses them
    # What the offline snapshot says of the profile's NVIDIA package versions when it lacks
    # one (packages.snapshot_advisory): said by `profiles validate`, never a refusal: the
    # live index decides at render time (packages.resolve).
    advisory: str | None = None
    # The controller files the profile names, as written -> the checked absolute path the
    # roles read (controller_files.resolve). Empty until checked, and for a bundle, whose
    # node reads them from its own disk.
    local_files: Mapping[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return digest(self.profile)


MAX_EXTENDS = 16  # deeper than any real hierarchy; a longer chain is a mistake, not a design


def _raw_chain(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict, tuple[Path, ...]]:
    path = path.resolve()
    if len(seen) >= MAX_EXTENDS:
        raise ProvisionError(f"the extends: chain is longer than {MAX_EXTENDS} profiles "
                             f"({seen[0].name} -> ... -> {path.name})", where=str(seen[-1]),
                             fix="flatten the chain: let a profile extend a built-in or one shared base")
    if path in seen:
        cycle = " -> ".join(p.name for p in (*seen, path))
        raise ProvisionError(f"profiles extend each other in a circle: {cycle}", where=str(path),
                             fix="remove one of the extends: lines")
    data = read_yaml(path)
    if data is None:
        raise ProvisionError("the profile is empty", where=str(path), fix="see provision profiles show h100-train")
    if not isinstance(data, dict):
        raise ProvisionError(f"a profile is a mapping of settings, not a {type(data).__name__}", where=f"{path}:1",
                             fix="start the file with `name: ...`")
    parent_ref = data.get("extends")
    if parent_ref is None:
        return data, (path,)
    if not isinstance(parent_ref, str):
        raise ProvisionError("extends: takes one profile name or path", where=f"{path}:{line_of(path, ('extends',))}")
    parent_data, parent_files = _raw_chain(find(parent_ref, relative_to=path.parent), (*seen, path))
    # The child's name never comes from the parent: two profiles with one name would share
    # run folders and state records. Its description does, unless the child writes its own.
    parent_data = {k: v for k, v in parent_data.items() if k != "name"}
    return deep_merge(parent_data, data), (path, *parent_files)


def _describe(error: dict, files: tuple[Path, ...]) -> str:
    loc = tuple(part for part in error["loc"] if not isinstance(part, str) or not part.startswith("function-"))
    field = ".".join(str(p) for p in loc) or "(top level)"
    where = files[0]
    line = None
    for candidate in files if error["type"] != "missing" else ():  # the first file that writes the field
        line = line_of(candidate, loc)
        if line is not None and (len(loc) <= 1 or line_of(candidate, loc[:1]) is not None):
            where = candidate
            break
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown setting (a typo, or a setting this version does not have)"
    elif error["type"] == "missing":
        message = "required setting is missing"
    elif error["type"] == "literal_error" and "expected" in error.get("ctx", {}):
        message = f"must be one of {error['ctx']['expected']}"
    if not loc:  # a check across sections names its fields: point at one the profile's own file writes
        named = [tuple(n.split(".")) for n in re.findall(r"\b[a-z_]+(?:\.[a-z_]+)+\b", message)]
        for candidate, keys in ((c, k) for c in files for k in named):
            written = line_of(candidate, keys)
            if written is not None and written != line_of(candidate, keys[:-1]):
                return f"{candidate}:{written}: {message}"
    loc_text = f"{where}:{line}" if line else str(where)
    return f"{loc_text}: {field}: {message}"


def _where(files: tuple[Path, ...], loc: tuple[str | int, ...]) -> str:
    """file:line of the first file of the chain that writes the field `loc`."""
    for candidate in files:
        line = line_of(candidate, loc)
        if line is not None and (len(loc) <= 1 or line_of(candidate, loc[:1]) is not None):
            return f"{candidate}:{line}"
    return str(files[0])


def _refuse_secrets(value: Any, files: tuple[Path, ...], loc: tuple[str | int, ...] = ()) -> None:
    """A profile is shared between teams and copied into every run folder and bundle: no value
    in it may carry a credential (a URL's password, a token, a webhook URL), whatever its field."""
    from provisioner.profiles import secrets

    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_secrets(item, files, (*loc, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_secrets(item, files, (*loc, i))
    elif isinstance(value, str) and secrets.holds_secret(value):
        field = ".".join(str(p) for p in loc)
        raise ProvisionError(f"{field} carries a credential (a URL's password, an access token or a webhook URL); "
                             "it would be copied into every run folder, bundle and host", where=_where(files, loc),
                             fix="give the hosts their credentials another way (netrc, pip.conf, an apt auth.conf, "
                                 "the environment) and keep the profile free of them")


def load(ref: str) -> Loaded:
    """Load, compose and validate a profile; every failure is a ProvisionError."""
    from provisioner.profiles import compat  # the matrix is data; loading it waits until needed

    path = find(ref)
    data, files = _raw_chain(path)
    _refuse_secrets(data, files)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        lines = [_describe(err, files) for err in exc.errors()]
        raise ProvisionError(
            "invalid profile:\n  " + "\n  ".join(lines),
            fix="see the field reference in README.md, or `provision profiles show h100-train` for a full example",
        ) from None
    if profile.hardware.gpu.architecture is None:  # resolved once, shown by `profiles show`
        profile.hardware.gpu.architecture = compat.architecture_of(profile)
    found = compat.check(profile)
    problems = [p for p in found if p.severity == "error"]
    if problems:
        raise ProvisionError(
            f"incompatible versions in profile {profile.name!r} ({files[0]}):\n  "
            + "\n  ".join(p.render() for p in problems),
            fix="apply the suggested fix, or see `provision profiles show` of a built-in that is known to work",
        )
    # No package versions are resolved here: loading works offline for every command,
    # `judge` and `report` included. render/up resolve them (packages.resolve).
    from provisioner.profiles import packages, toolkit
    try:
        packages.check_key_fingerprint(profile)
        toolkit.check_key_fingerprint(profile)
        toolkit.check_engine(profile)
        advisory = packages.snapshot_advisory(profile)
    except ProvisionError as exc:
        where = _where(files, tuple(exc.where.split("."))) if exc.where and exc.where.startswith(("mirrors.", "containers.")) else None
        raise ProvisionError(exc.message, where=where or f"{files[0]}: {exc.where}", fix=exc.fix) from None
    return Loaded(profile, files, tuple(p for p in found if p.severity == "warning"), advisory)


def refuse_warnings(loaded: Loaded) -> None:
    """`--strict`: a profile with warnings is refused like an invalid one."""
    if loaded.warnings:
        raise ProvisionError(
            f"profile {loaded.profile.name!r} has warnings and --strict refuses them:\n  "
            + "\n  ".join(w.render() for w in loaded.warnings),
            where=str(loaded.files[0]), fix="apply the suggested fix, or run without --strict")


def as_dict(profile: Profile) -> dict[str, Any]:
    """The resolved profile as plain data, `extends` dropped (it has been applied)."""
    return profile.model_dump(mode="json", exclude={"extends"})


def to_yaml(profile: Profile) -> str:
    return yaml.safe_dump(as_dict(profile), sort_keys=False, default_flow_style=False)


def digest(profile: Profile) -> str:
    """A stable hash of what the profile asks for; hosts record it to detect profile changes.

    Fields at their defaults are left out, so a release that adds a field leaves every
    digest a host recorded as it was (no per-field exceptions here). The other side of
    that: a changed default would not change a digest, so defaults are frozen
    (tests/test_profile_digest.py); a new behaviour is a new field or value.
    """
    data = profile.model_dump(mode="json", exclude={"extends"}, exclude_defaults=True)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
