"""`provision bundle`: one tarball a node applies to itself (cloud-init, ansible-pull, by hand).

Past a few hundred hosts one controller is the bottleneck; a node that converges itself
at boot needs no controller at all. The bundle holds everything the converge needs:

    ansible_collections/         the same content `provision up` runs (gpu_provisioner.node)
    profile.yml                  the resolved profile (for people; the roles read group_vars)
    inventory/hosts.ini          localhost, connection local
    inventory/group_vars/all/provisioner.yml   the profile as the roles' variables
    ansible.cfg                  relative collections_path and inventory
    local.yml                    applies gpu_provisioner.node.site to localhost
    wheels/                      ansible-core and its dependencies as the controller runs them, and
                                 requirements.txt pinning each file by its sha256 (bundle_wheels.py)
    apply.sh                     fetch-less apply: venv with those wheels (--no-index --require-hashes), then local.yml
    README.md, BUNDLE.json       what this is, and the profile/version it was made from

The tarball is deterministic: sorted entries, fixed mtime, uid/gid 0, no gzip timestamp,
so the same profile and content give the same bytes (and the same sha256).
`cloud_init()` renders a #cloud-config that fetches it, checks its sha256, unpacks it and
runs `ansible-playbook -i inventory local.yml`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from pathlib import Path

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from provisioner import __version__, paths, profiles
from provisioner.errors import ProvisionError
from provisioner.profiles import Loaded, controller_files
from provisioner.profiles.models import DEFAULT_PYTHON
from provisioner.render.ansible_data import dump_unsafe
from provisioner.outputs import check_file, write_file
from provisioner.render import bundle_wheels, role_vars

# 2026-01-01T00:00:00Z: entries get this mtime (or $SOURCE_DATE_EPOCH).
FIXED_MTIME = 1767225600
INSTALL_DIR = "/opt/provisioner"
_SKIP_DIRS = {"__pycache__", ".git", "molecule", ".pytest_cache", ".cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".retry", ".swp", "~")

TEMPLATES = paths.TEMPLATES_DIR / "bundle"
_STATIC = {"local.yml": "local.yml", "ansible.cfg": "ansible.cfg", "inventory/hosts.ini": "hosts.ini"}


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _template(template: str, **values: object) -> str:
    """A bundle text from provisioner/templates/bundle. Values go in as data: shell words
    through `shq`, nothing from a profile is ever template source."""
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, autoescape=False,
                      keep_trailing_newline=True)
    env.filters["shq"] = _sh_quote
    return env.get_template(template).render(**values)


def _mtime() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH")
    return int(value) if value and value.isdigit() else FIXED_MTIME


def _content_files() -> dict[str, Path]:
    """The collection (playbooks, roles, modules) as archive name -> file on disk, under
    ansible_collections/ as in the checkout, so the bundle's ansible.cfg finds it at `.`."""
    root, base = paths.ansible_root(), paths.collections_path()
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith(".") or name.endswith(_SKIP_SUFFIXES):
                continue
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue  # no links in a bundle: it must unpack the same anywhere
            files[path.relative_to(base).as_posix()] = path
    return files


def check_source(url_or_path: str) -> str:
    """Where a node fetches the bundle (--cloud-init-url): an http(s) or file:// URL, or
    an absolute path on the node; one line, no spaces. It goes into a shell script and a
    cloud-config, where a newline could add a `bootcmd:` that runs before the sha256 check."""
    from provisioner.profiles.field_types import repo_url, url_or_path as _url_or_path

    try:
        if url_or_path.startswith("file://"):
            repo_url(url_or_path)
        else:
            _url_or_path(url_or_path)
    except ValueError as exc:
        raise ProvisionError(f"--cloud-init-url: {exc}", where="--cloud-init-url",
                             fix="pass https://host/path/bundle.tar.gz, file:///path or /path on the node") from None
    return url_or_path


def snippet_path(tarball: Path) -> Path:
    """The cloud-init snippet written beside the tarball."""
    return tarball.with_name(tarball.name.removesuffix(".gz").removesuffix(".tar") + ".cloud-init.yml")


def warnings_for(loaded: Loaded) -> list[str]:
    """Profile settings that name files on the controller, which a self-applying node lacks."""
    p = loaded.profile
    out = []
    if p.mirrors.wheelhouse_source:
        out.append(f"mirrors.wheelhouse_source ({p.mirrors.wheelhouse_source}) is a folder on the controller; "
                   "with the bundle it is read on the node itself, so put the wheels there first")
    if p.mirrors.ca_certificates:
        out.append("mirrors.ca_certificates name files on the controller; the node reads them from its own disk")
    installers = [(f"{env.where}.conda_installer", env.conda_installer) for env in p.python_envs]
    for label, value in (*installers,
                         ("dcgm.exporter.binary", p.dcgm.exporter.binary), ("nccl.tests_source", p.nccl.tests_source)):
        if value and not value.startswith(("http://", "https://")):
            out.append(f"{label} ({value}) is a path: it must exist on the node itself")
    return out


def node_python(loaded: Loaded) -> str:
    """The node's system python3 (apply.sh makes its venv with it): the profile's OS's."""
    return DEFAULT_PYTHON[loaded.profile.os]


def _check_node_paths(loaded: Loaded) -> None:
    relative = [item for item in controller_files.named(loaded.profile) if not item.value.startswith("/")]
    if relative:  # no files root on the node: the roles would look among their own files
        raise ProvisionError(f"{relative[0].field}: {relative[0].value!r} is a path in the controller's files root, "
                             "but a bundle's node reads it from its own disk", where=str(loaded.files[0]),
                             fix="give the file's absolute path on the node, or an https URL")


def wheels_for(loaded: Loaded, folder: Path | None, scratch: Path) -> list[bundle_wheels.Wheel]:
    """ansible-core and its dependencies for the node, at the controller's versions: taken
    from `folder` (--wheels), else downloaded into `scratch` (kept while the bundle is built)."""
    python = node_python(loaded)
    wanted = bundle_wheels.pins(python, loaded.profile.os)
    if folder is None:
        bundle_wheels.download(wanted, python, scratch)
        folder = scratch
    return bundle_wheels.collect(wanted, python, folder)


def members(loaded: Loaded, wheels: list[bundle_wheels.Wheel]) -> dict[str, bytes | Path]:
    """Everything in the bundle: archive name -> bytes, or the file whose bytes go in."""
    p = loaded.profile
    _check_node_paths(loaded)
    python = node_python(loaded)
    header = f"# Rendered by `provision bundle` from profile {p.name} (sha256 {loaded.digest}).\n"
    manifest = {"profile": p.name, "profile_sha256": loaded.digest, "provisioner_version": __version__,
                "python": python, "wheels": {w.pin.name: w.pin.version for w in wheels},
                "apply": "ansible-playbook -i inventory local.yml"}
    generated: dict[str, bytes | Path] = {
        **{name: (TEMPLATES / source).read_bytes() for name, source in _STATIC.items()},
        "README.md": _template("README.md.j2", name=p.name, digest=loaded.digest, version=__version__,
                               install_dir=INSTALL_DIR, python=python,
                               ansible_core=next((w.pin.version for w in wheels if w.pin.name == bundle_wheels.ROOT),
                                                 "(none)")).encode(),
        "BUNDLE.json": (json.dumps(manifest, indent=2) + "\n").encode(),
        "apply.sh": _template("apply.sh.j2", install_dir=INSTALL_DIR, wheels=bundle_wheels.FOLDER,
                              requirements=bundle_wheels.REQUIREMENTS).encode(),
        bundle_wheels.REQUIREMENTS: bundle_wheels.requirements(wheels, python).encode(),
        **{f"{bundle_wheels.FOLDER}/{w.filename}": w.data for w in wheels},
        # !unsafe: the profile is data, never template source (see provisioner/render/ansible_data.py)
        # The bundle always installs provision-state.timer: a node that converges itself
        # reports its own drift to Prometheus, with no controller to run `provision check`.
        "inventory/group_vars/all/provisioner.yml": (
            header + dump_unsafe({**role_vars(loaded), "state_timer_enabled": True})).encode(),
        "profile.yml": (header + profiles.to_yaml(p)).encode(),
    }
    content: dict[str, bytes | Path] = dict(_content_files())
    clash = sorted(set(content) & set(generated))
    if clash:  # cannot happen with ansible_collections/ only; kept so a future folder cannot shadow a file
        raise ProvisionError(f"bundle entries collide: {', '.join(clash)}")
    return {**content, **generated}


def _tarinfo(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type = size, mode, kind
    info.mtime = _mtime()
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def build(loaded: Loaded, out_path: Path, *, force: bool = False, wheels: Path | None = None) -> Path:
    """Write the bundle tarball (gzip) for `loaded`; returns its path. Same input, same bytes.
    Written atomically, only as a regular file (outputs.write_file). ansible-core's wheels
    come from `wheels` (a folder) or are downloaded (bundle_wheels.py)."""
    out_path = check_file(out_path, force=force, what="bundle")
    _check_node_paths(loaded)
    with tempfile.TemporaryDirectory(prefix="provision-bundle-") as scratch:
        entries = members(loaded, wheels_for(loaded, wheels, Path(scratch)))
        data = _tarball(entries)
    return write_file(out_path, data, force=force, mode=0o644, what="bundle")


def _tarball(entries: dict[str, bytes | Path]) -> bytes:
    dirs = sorted({str(Path(name).parents[i]) for name in entries for i in range(len(Path(name).parents) - 1)})
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted([*dirs, *entries], key=lambda n: n.split("/")):
            if name in dirs and name not in entries:
                tar.addfile(_tarinfo(name + "/", 0, 0o755, tarfile.DIRTYPE))
                continue
            source = entries[name]
            if isinstance(source, Path):
                data = source.read_bytes()
                executable = source.stat().st_mode & stat.S_IXUSR
            else:
                data = source
                executable = name == "apply.sh"
            tar.addfile(_tarinfo(name, len(data), 0o755 if executable else 0o644), io.BytesIO(data))
    return raw.getvalue()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def apply_script(url_or_path: str, sha256: str) -> str:
    """The shell script the cloud-config runs: fetch, check sha256, unpack, then the
    bundle's own apply.sh (which makes the ansible-core venv and converges)."""
    return _template("fetch-and-apply.sh.j2", source=url_or_path, sha256=sha256, install_dir=INSTALL_DIR)


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks, so the script in the cloud-config reads as a script."""


_LiteralDumper.add_representer(
    str, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def cloud_init(url_or_path: str, sha256: str | None = None) -> str:
    """A #cloud-config that applies the bundle at first boot.

    url_or_path: where the node gets the tarball (https://..., file://... or a path on
    the node). sha256: the tarball's; read from url_or_path when that is a file here."""
    check_source(url_or_path)
    if sha256 is None:
        local = Path(url_or_path.removeprefix("file://")).expanduser()
        if not local.is_file():
            raise ProvisionError("the bundle's sha256 is needed to render the cloud-init snippet",
                                 where=url_or_path, fix="pass the sha256 of the tarball, or build it first "
                                                        "(provision bundle -o FILE --cloud-init-url URL)")
        sha256 = sha256_of(local)
    sha256 = sha256.lower()
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ProvisionError(f"{sha256!r} is not a sha256 (64 hex digits)", where="sha256")
    config = {
        "write_files": [{
            "path": "/usr/local/sbin/provision-apply-bundle",
            "owner": "root:root",
            "permissions": "0755",
            "content": apply_script(url_or_path, sha256),
        }],
        "runcmd": [["/usr/local/sbin/provision-apply-bundle"]],
    }
    body = yaml.dump(config, Dumper=_LiteralDumper, sort_keys=False, default_flow_style=False, width=1000)
    return (f"#cloud-config\n# Rendered by `provision bundle` (gpu-provisioner {__version__}): apply the bundle "
            f"{url_or_path} (sha256 {sha256}) at first boot.\n" + body)
