"""Writing the files a command was asked to write, without clobbering anything else.

Every output (render -o, monitoring -o, bundle -o and its cloud-init snippet, --html,
--junit, report.json) goes through here, so the same rules hold everywhere:

- only regular files are written: a device (`-o /dev/null` as root), a folder or a
  socket is never replaced, with or without --force;
- a symbolic link is not followed: without --force it is refused (writing through it
  would replace the file it points at); with --force the link itself is replaced;
- an existing file is replaced only with --force, unless the caller owns it (`replace`:
  a run folder's own report.json, a file in a folder check_folder found ours);
- an output folder must be new, empty, or one we rendered before (recognised by the
  header our files start with); a folder holding someone's own ansible.cfg or
  hosts.yml needs --force, and `/` or a system folder (/usr, /etc, ...) is always refused,
  also when the path reaches one through a link;
- every file is written atomically: a temporary file beside it, then a rename, so a
  reader (or a killed run) never sees half a file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from provisioner.errors import ProvisionError
from provisioner.safe_paths import control_character, system_dir_reason

# Every text file we render starts with this; it is how a folder we rendered is recognised.
SIGNATURE = "# Rendered by `provision "
FORCE_FIX = "pass another path, or --force to replace it"


def absolute(path: Path | str) -> Path:
    """The path made absolute without following links (resolve() would hide a link).
    Output paths are printed and written into ansible.cfg: one line, no control characters."""
    found = control_character(str(path))
    if found:
        raise ProvisionError(f"the output path holds control characters ({found})", where=repr(str(path)),
                             fix="pass a path without newlines or control characters")
    return Path(os.path.abspath(os.path.expanduser(str(path))))


def _check_parents(path: Path) -> None:
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            raise ProvisionError(f"cannot write {path.name} under {parent}: it is a file, not a folder",
                                 where=str(path), fix="pass a path inside a folder")


def check_file(path: Path | str, *, force: bool = False, what: str = "output", replace: bool = False) -> Path:
    """The absolute path `path`, refused unless writing a regular file there is safe.
    replace: an existing regular file there is the caller's own (see the module docstring)."""
    path = absolute(path)
    _check_parents(path)
    if path.is_symlink():
        if not force:
            raise ProvisionError(f"the {what} path is a symbolic link (to {os.readlink(path)}); writing it would "
                                 "replace the file it points at", where=str(path), fix=FORCE_FIX + " (the link itself)")
        return path
    if path.exists():
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ProvisionError(f"the {what} path is a folder", where=str(path),
                                 fix="pass a file name inside it, e.g. " + str(path / "report"))
        if not stat.S_ISREG(mode):
            raise ProvisionError(f"the {what} path is not a regular file (a device, pipe or socket); "
                                 "it is never replaced", where=str(path), fix="pass the path of a regular file")
        if not (force or replace):
            raise ProvisionError(f"the {what} path holds a file already; it is replaced only with --force",
                                 where=str(path), fix=FORCE_FIX)
    return path


def write_file(path: Path | str, data: str | bytes, *, force: bool = False, mode: int = 0o644,
               what: str = "output", replace: bool = False) -> Path:
    """Write `data` to `path` atomically, after check_file; returns the absolute path."""
    path = check_file(path, force=force, what=what, replace=replace)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ProvisionError(f"cannot write the {what}: {exc.strerror or exc}", where=str(path),
                             fix="pass a path in a folder you can write to") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ProvisionError(f"cannot write the {what}: {exc.strerror or exc}", where=str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_private(path: Path | str, what: str, fix: str) -> Path:
    """`path`, a folder or file provision wrote and now reads back, refused unless it is the
    user's alone: owned by them, writable by no one else, not a symbolic link. What others
    can write to could hold anything by the time it is read (a run folder's hooks run here)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ProvisionError(f"cannot read the {what}: {exc.strerror or exc}", where=str(path), fix=fix) from None
    problem = None
    if stat.S_ISLNK(st.st_mode):
        problem = f"is a symbolic link (to {os.readlink(path)})"
    elif st.st_uid != os.getuid():
        problem = f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    elif st.st_mode & 0o022:
        who = {0o020: "its group", 0o002: "others", 0o022: "its group and others"}[st.st_mode & 0o022]
        problem = f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise ProvisionError(f"the {what} {problem}: it is not read", where=str(path), fix=fix)
    return path


def _ours(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().startswith(SIGNATURE)
    except OSError:
        return False


def check_folder(folder: Path | str, names: list[str], *, force: bool = False) -> Path:
    """The absolute output folder, refused unless writing `names` (paths relative to it) there
    is safe: new or empty, or rendered by us before, or --force. Text files we would
    replace must carry our header; files without one (JSON) are replaced only in a
    folder one of our headed files marks as ours."""
    folder = absolute(folder)
    # The path as given and as its links resolve: `-o link-to-/etc` is /etc.
    reason = system_dir_reason(str(folder)) or system_dir_reason(os.path.realpath(folder))
    if reason:
        raise ProvisionError(f"refusing to write into {folder}: {reason}", where=str(folder),
                             fix="pass a new folder of its own, e.g. -o out/")
    if folder.is_symlink() and not force:
        raise ProvisionError(f"the output folder is a symbolic link (to {os.readlink(folder)})", where=str(folder),
                             fix="pass the real folder, or --force")
    if folder.exists() and not folder.is_dir():
        raise ProvisionError("the output path exists and is not a folder", where=str(folder),
                             fix="pass a new or existing folder with -o")
    _check_parents(folder / "x")
    targets = [folder / name for name in names]
    for target in targets:
        check_file(target, force=force, what=f"output file {target.relative_to(folder)}", replace=True)
    if force or not folder.exists():
        return folder
    try:
        empty = not any(folder.iterdir())
    except OSError as exc:
        raise ProvisionError(f"cannot read the output folder: {exc.strerror}", where=str(folder)) from None
    if empty:
        return folder
    existing = [t for t in targets if t.exists()]
    headed = [t for t in existing if _ours(t)]
    foreign = [t for t in existing if not _ours(t) and t.suffix != ".json"]
    if foreign:
        raise ProvisionError(f"{foreign[0].name} in the output folder was not written by provision (it has no "
                             "`# Rendered by provision` header); it is not replaced", where=str(foreign[0]),
                             fix="pass a new folder with -o, or --force to replace it")
    if not headed:
        raise ProvisionError("the output folder is not empty and holds nothing provision rendered", where=str(folder),
                             fix="pass a new or empty folder with -o, or --force to write into it anyway")
    return folder
