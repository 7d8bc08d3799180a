"""The files a profile names on the controller, read only from where the operator put them.

A profile is shared between teams, and the controller copies what it names to every host
(CA certificates into the trust store, a wheelhouse, an installer, a binary, a tarball) or
checksums it first. Unchecked, `mirrors.ca_certificates: [/etc/shadow]` would copy the
controller's own secrets to the fleet, and a wrong sha256 would answer with the digest of
any file the operator can read (a hash oracle). So each such path must lie inside one
folder, the files root: `--files-root` ($PROVISION_FILES_ROOT), else the folder of the
profile's own file. Relative paths are resolved there; the containment is judged on the
path as written before anything is opened (a path outside says nothing of what is there)
and again with symbolic links resolved; only regular files are read (the wheelhouse: a
folder, each wheel in it a regular file inside the root). A CA file must hold PEM
certificates and nothing else: a private key in it is refused. The roles are given the
checked absolute paths, so they read and checksum nothing outside the root.

A path a built-in profile itself names is the package's own configuration (the lab's
wheelhouse, /opt/wheels) and is taken as written wherever it appears: in a profile that
extends the built-in, and in the flattened copy a rollback applies. Any other path is checked.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import stat
from pathlib import Path

from provisioner import paths
from provisioner.errors import ProvisionError
from provisioner.yamlfile import line_of, load_data, read_bounded

# A CA bundle is a few hundred KiB at most (the whole Mozilla store is ~220 KiB).
CA_CAP = 1 << 20

_BEGIN = re.compile(rb"-----BEGIN ([^\r\n-]{1,64})-----")
_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
_FIX = ("put the file in the files root (the profile's folder, or --files-root / $PROVISION_FILES_ROOT) and name "
        "it relative to that folder")
_CA_FIX = "name a file that holds the CA's certificate(s) only, PEM-encoded (-----BEGIN CERTIFICATE-----)"


class _Refused(Exception):
    def __init__(self, message: str, fix: str = _FIX):
        super().__init__(message)
        self.fix = fix


# The profile fields that name controller files (a URL in the last three is downloaded by the hosts).
FIELDS: tuple[tuple[str, ...], ...] = (("mirrors", "ca_certificates"), ("mirrors", "wheelhouse_source"),
                                       ("python_env", "conda_installer"), ("nccl", "tests_source"),
                                       ("dcgm", "exporter", "binary"))


@dataclasses.dataclass(frozen=True)
class Named:
    """One controller path a profile names."""

    loc: tuple[str | int, ...]  # the profile field, as pydantic locates it
    value: str                  # as written
    kind: str                   # "ca" (a PEM CA file), "file" or "wheelhouse" (a folder of wheels)

    @property
    def field(self) -> str:
        return ".".join(str(part) for part in self.loc)


@functools.cache
def shipped() -> frozenset[tuple[str, str]]:
    """(field, path) for each controller path a built-in profile names itself: the package's own."""
    out = set()
    for path in sorted(paths.BUILTIN_PROFILES_DIR.glob("*.yml")):
        data = load_data(path.read_text(encoding="utf-8")) or {}
        for loc in FIELDS:
            value = functools.reduce(lambda d, key: d.get(key) if isinstance(d, dict) else None, loc, data)
            out.update((".".join(loc), v) for v in (value if isinstance(value, list) else [value])
                       if isinstance(v, str) and "://" not in v)
    return frozenset(out)


def _env_loc(env) -> tuple:
    """Where the profile gave an environment: ("python_env",) or ("python_envs", N)."""
    if env.where == "python_env":
        return ("python_env",)
    return ("python_envs", int(env.where.removeprefix("python_envs[").rstrip("]")))


def named(profile) -> list[Named]:
    """Every controller path in `profile` (URLs are not paths: hosts download those)."""
    m, out = profile.mirrors, []
    out += [Named(("mirrors", "ca_certificates", i), v, "ca") for i, v in enumerate(m.ca_certificates)]
    if m.wheelhouse_source:
        out.append(Named(("mirrors", "wheelhouse_source"), m.wheelhouse_source, "wheelhouse"))
    installers = [((*_env_loc(env), "conda_installer"), env.conda_installer) for env in profile.python_envs]
    for loc, value in (*installers,
                       (("nccl", "tests_source"), profile.nccl.tests_source),
                       (("dcgm", "exporter", "binary"), profile.dcgm.exporter.binary)):
        if value and "://" not in value:
            out.append(Named(loc, value, "file"))
    return out


def files_root(given: Path | None, profile_file: Path) -> Path:
    """The folder controller files are read from: `given`, else the profile file's own."""
    root = (given.expanduser() if given is not None else profile_file.parent).resolve()
    if not root.is_dir():
        raise ProvisionError("the files root is not a folder", where=str(given or root),
                             fix="pass --files-root (or $PROVISION_FILES_ROOT) naming the folder that holds the "
                                 "files the profile names")
    return root


def resolve(loaded, given_root: Path | None = None):
    """`loaded` with every controller file its profile names checked under the files root,
    and `local_files` mapping each, as written, to the absolute path the roles will read.
    Raises ProvisionError naming the profile file, line and field."""
    root = files_root(given_root, loaded.files[0])
    local: dict[str, str] = {}
    for item in named(loaded.profile):
        if (".".join(str(k) for k in item.loc if isinstance(k, str)), item.value) in shipped():
            continue  # the package's own configuration, taken as written
        writer = next((f for f in loaded.files if line_of(f, item.loc, exact=True) is not None), None)
        where = f"{writer}:{line_of(writer, item.loc, exact=True)}" if writer else str(loaded.files[0])
        try:
            local[item.value] = str(_check(root, item))
        except _Refused as exc:
            raise ProvisionError(f"{item.field}: {exc}", where=where, fix=exc.fix) from None
    return dataclasses.replace(loaded, local_files=local)


def _inside(root: Path, value: str) -> Path:
    """`value` (relative to `root`, or absolute) as a real path inside `root`."""
    candidate = Path(value) if value.startswith("/") else root / value
    # Judged first on the path as written: one outside the root is never opened or looked at.
    if not Path(os.path.normpath(candidate)).is_relative_to(root):
        raise _Refused(f"{value!r} is outside the files root {root}")
    real = candidate.resolve()
    if not real.is_relative_to(root):
        raise _Refused(f"{value!r} leads out of the files root {root} through a symbolic link")
    return real


def _check(root: Path, item: Named) -> Path:
    real = _inside(root, item.value)
    try:
        mode = real.stat().st_mode
    except FileNotFoundError:
        raise _Refused(f"{item.value!r} does not exist in the files root {root}") from None
    if item.kind == "wheelhouse":
        if not stat.S_ISDIR(mode):
            raise _Refused(f"{item.value!r} is not a folder (a wheelhouse is a folder of .whl files)")
        for wheel in sorted(real.glob("*.whl")):  # what the role copies (a fileglob of *.whl)
            _inside(root, str(wheel))
        return real
    if not stat.S_ISREG(mode):
        raise _Refused(f"{item.value!r} is not a regular file")
    if item.kind == "ca":
        try:
            data = read_bounded(real, CA_CAP, "CA certificate file")
        except ProvisionError as exc:
            raise _Refused(f"{item.value!r}: {exc.message}", _CA_FIX) from None
        problem = pem_problem(data)
        if problem:
            raise _Refused(f"{item.value!r} {problem}", _CA_FIX)
    return real


def pem_problem(data: bytes) -> str | None:
    """Why `data` is not PEM certificates and nothing else, or None when it is. Text around
    the blocks (openssl x509 -text, comments) is allowed; any other PEM block is not."""
    import ssl  # only a profile that names a CA file pays for OpenSSL's bindings

    labels = [label.decode("ascii", "replace") for label in _BEGIN.findall(data)]
    if any("PRIVATE KEY" in label for label in labels):
        return "holds a private key: a CA file holds certificates only, and a key never leaves the controller"
    others = sorted({label for label in labels if label != "CERTIFICATE"})
    if others:
        return f"holds {', '.join(others)}, not only certificates"
    blocks = _CERTIFICATE.findall(data)
    if not blocks:
        return "is not a PEM certificate (no -----BEGIN CERTIFICATE----- block)"
    if len(blocks) != len(labels):
        return "has a certificate block without its -----END CERTIFICATE----- line"
    for number, block in enumerate(blocks, 1):
        try:
            der = ssl.PEM_cert_to_DER_cert(block.decode("ascii"))
            # OpenSSL's own X.509 parser (the standard library's; no new dependency).
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=der)
        except (UnicodeDecodeError, ValueError, ssl.SSLError):
            return f"has a certificate block ({number} of {len(blocks)}) that is not an X.509 certificate"
    return None
