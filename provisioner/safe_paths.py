"""Paths that are safe to own: absolute, normalised, and not the system's own folders.

The python_env role builds, switches and removes environments under the profile's
prefix, and `render -o` writes into a folder; neither may ever be `/`, `/usr`, `/etc`,
`/opt` itself and the like, where a rebuild or a rendered file would damage the host.
And no path (nor any other one-line text) may hold a control or line-breaking character.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata

# Folders of the system itself. A subfolder of one (/opt/venvs, /usr/local/envs) is fine;
# the folder itself, never.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr",
    "/var", "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/sbin", "/usr/share", "/usr/src", "/var/cache",
    "/var/lib", "/var/log", "/var/tmp", "/var/run", "/var/spool", "/var/mail", "/var/opt", "/etc/profile.d",
})
# Pseudo filesystems: nothing of ours belongs anywhere under them.
_VIRTUAL = ("/proc/", "/sys/", "/dev/", "/run/")
# Characters a path we hand to a shell profile, a unit or apt may hold.
PATH_CHARS = re.compile(r"^[A-Za-z0-9._/+@,:=~-]+$")


def system_dir_reason(path: str) -> str | None:
    """Why `path` (absolute) is a system folder, or None when it is not one."""
    normal = posixpath.normpath(path)
    if normal in SYSTEM_DIRS:
        return f"{normal} is a system folder"
    if (normal + "/").startswith(_VIRTUAL):
        return f"{normal} is on a pseudo filesystem ({normal.split('/')[1]})"
    return None


def host_dir_problem(path: str) -> str | None:
    """What is wrong with `path` as a folder we own on a host, or None."""
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path (start it with /)"
    if not PATH_CHARS.match(path):
        return f"{path!r} holds a character a path here may not (letters, digits and ._/+@,:=~- only)"
    normal = posixpath.normpath(path)
    reason = system_dir_reason(normal)
    if reason:
        return reason
    if normal != path or path.startswith("//"):
        return f"{path!r} is not normalised; write {normal}"
    return None


def control_character(value: str) -> str | None:
    """The first control or line-breaking character in `value`, described; None if none."""
    for index, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            name = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(char, f"U+{ord(char):04X}")
            return f"{name} at character {index + 1}"
    return None
