"""The string types of profile fields: what each may hold, so none can break out of the
file, unit, shell profile, URL or cloud-init document it ends up in.

A newline in `mirrors.apt_proxy` would add a line to apt.conf.d (AllowUnauthenticated),
one in the CUDA repository URL an option to its deb822 source (Trusted: yes), one in
`python_env.prefix` a command to /etc/profile.d. So every string a profile gives is
checked here: control characters are refused everywhere, URLs must parse with a scheme
we support, names follow the grammar of what they name, paths are absolute and normal.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

from provisioner.safe_paths import PATH_CHARS, control_character, host_dir_problem


def single_line(value: str) -> str:
    found = control_character(value)
    if found:
        raise ValueError(f"control characters are not allowed ({found}): the value must be one line of text")
    return value


URL_SCHEMES = ("http", "https")


def _url(value: str, schemes: tuple[str, ...]) -> str:
    single_line(value)
    if any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a URL: it holds a space")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL: {exc}") from None
    if parts.scheme not in schemes:
        raise ValueError(f"{value!r} is not a URL of a supported scheme ({', '.join(s + '://' for s in schemes)})")
    if parts.password is not None:
        # It would be written into group_vars, every run folder and every bundle.
        raise ValueError("a URL may not carry a password (user:password@): it would be written to every rendered "
                         "file and host; give the host its credentials another way (netrc, pip.conf, an apt auth.conf)")
    if parts.scheme != "file" and not parts.hostname:
        raise ValueError(f"{value!r} has no host name")
    if parts.scheme == "file" and (parts.netloc not in ("", "localhost") or not parts.path.startswith("/")):
        raise ValueError(f"{value!r}: a file:// URL names an absolute path (file:///srv/mirror)")
    return value


def web_url(value: str) -> str:
    return _url(value, URL_SCHEMES)


def repo_url(value: str) -> str:
    """A package repository: on the web, or a folder on the host (file://)."""
    return _url(value, (*URL_SCHEMES, "file"))


def _path(value: str) -> str:
    single_line(value)
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path (start it with /)")
    if not PATH_CHARS.match(value):
        raise ValueError(f"{value!r} holds a character a path here may not (letters, digits and ._/+@,:=~- only)")
    return value


def controller_path(value: str) -> str:
    """A file or folder on the controller, inside the files root (profiles/controller_files.py
    checks it there): relative to that root, or absolute. `~` is not expanded and `..` never
    climbs out: a shared profile must not name the operator's own files."""
    single_line(value)
    if value.startswith("~"):
        raise ValueError(f"{value!r}: ~ is not expanded here; give a path inside the files root (relative to it, "
                         "or absolute)")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} climbs out with ..: give a path inside the files root")
    if not PATH_CHARS.match(value):
        raise ValueError(f"{value!r} holds a character a path here may not (letters, digits and ._/+@,:=~- only)")
    return value


def url_or_controller_path(value: str) -> str:
    """An artifact the controller hands to hosts: an http(s) URL, or a controller file
    (controller_path)."""
    if "://" in value:
        return web_url(value)
    return controller_path(value)


def url_or_path(value: str) -> str:
    """An http(s) URL, or an absolute path (on the node, or given to the bundle)."""
    if "://" in value:
        return web_url(value)
    return _path(value)


def owned_dir(value: str) -> str:
    """A folder the roles own on a host (built, switched, removed): never a system folder."""
    single_line(value)
    problem = host_dir_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def pip_requirement(value: str) -> str:
    """One pip requirement (PEP 508), never a pip option such as --index-url."""
    from packaging.requirements import InvalidRequirement, Requirement

    single_line(value)
    try:
        Requirement(value)
    except InvalidRequirement as exc:
        raise ValueError(f"{value!r} is not a pip requirement (name, optional ==version): {exc}") from None
    return value


_CONDA_SPEC = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*([=<>!~]{1,2}[A-Za-z0-9_.*+!,<>=-]*)?$")
_CONDA_CHANNEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*$")


def conda_spec(value: str) -> str:
    single_line(value)
    if not _CONDA_SPEC.match(value):
        raise ValueError(f"{value!r} is not a conda package spec (name, optional =version, no spaces)")
    return value


def conda_channel(value: str) -> str:
    if "://" in value:
        # conda checks no signature on a channel's packages: over http anyone on the path could
        # replace any of them, so a channel URL is https only.
        return _url(value, ("https",))
    single_line(value)
    if not _CONDA_CHANNEL.match(value):
        raise ValueError(f"{value!r} is not a conda channel name (conda-forge) or an https URL")
    return value


SingleLine = Annotated[str, AfterValidator(single_line)]
WebUrl = Annotated[str, AfterValidator(web_url)]
RepoUrl = Annotated[str, AfterValidator(repo_url)]
UrlOrPath = Annotated[str, AfterValidator(url_or_path)]
ControllerPath = Annotated[str, AfterValidator(controller_path)]
UrlOrControllerPath = Annotated[str, AfterValidator(url_or_controller_path)]
OwnedDir = Annotated[str, AfterValidator(owned_dir)]
PipRequirement = Annotated[str, AfterValidator(pip_requirement)]
CondaSpec = Annotated[str, AfterValidator(conda_spec)]
CondaChannel = Annotated[str, AfterValidator(conda_channel)]
# A Unix account name (useradd's default grammar).
USER_NAME = r"^[a-z_][a-z0-9_-]{0,31}$"
# An environment's folder name: no slash, and never `.` or `..` (it must stay inside its prefix).
ENV_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
COLLECTOR = r"^DCGM_(FI|EXP)_[A-Z0-9_]+$"
