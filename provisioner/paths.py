"""Where things live: the package's data, templates and built-in profiles, and the Ansible
content (playbooks/, roles/), in the installed package or in the checkout when running
from source."""

from __future__ import annotations

import os
from pathlib import Path

from provisioner.errors import ProvisionError

_PACKAGE = Path(__file__).resolve().parent
DATA_DIR = _PACKAGE / "data"            # the compatibility matrix, the Grafana dashboard
TEMPLATES_DIR = _PACKAGE / "templates"  # the HTML report, the bundle's scripts and texts
BUILTIN_PROFILES_DIR = _PACKAGE / "profiles"


def state_dir() -> Path:
    """This user's state on the controller: $XDG_STATE_HOME/gpu-provisioner (default
    ~/.local/state/gpu-provisioner). It holds the record of what this controller did (the
    profiles `up` applied, by digest, for `up --rollback`): per user, whatever the working
    folder, and kept when run folders are pruned (XDG: state "that should persist between
    restarts", such as "actions history"; not data a user edits, not a cache)."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"  # the spec ignores relative paths
    return root / "gpu-provisioner"


def cache_dir(kind: str) -> Path:
    """This user's cache of `kind` on the controller: $XDG_CACHE_HOME/gpu-provisioner/<kind>
    (default ~/.cache/...): what a later run can rebuild, kept only to make it faster."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"  # the spec ignores relative paths
    return root / "gpu-provisioner" / kind


# The Ansible content is one collection, gpu_provisioner.node: roles, playbooks and our
# modules (plugins/modules). The same folder serves a checkout (at the repository root),
# the wheel (inside the package, see pyproject.toml) and `ansible-galaxy collection build`.
NAMESPACE, COLLECTION = "gpu_provisioner", "node"
FQCN = f"{NAMESPACE}.{COLLECTION}"
_COLLECTION_DIR = Path("ansible_collections") / NAMESPACE / COLLECTION


def ansible_root() -> Path:
    """The collection's folder (galaxy.yml, playbooks/, roles/, plugins/)."""
    for base in (_PACKAGE / "ansible", _PACKAGE.parent):
        root = base / _COLLECTION_DIR
        if (root / "playbooks" / "site.yml").is_file() and (root / "roles").is_dir():
            return root
    raise ProvisionError("the playbooks and roles are missing from this installation",
                         where=str(_PACKAGE), fix="reinstall: pip install --force-reinstall gpu-provisioner")


def collections_path() -> Path:
    """The folder holding ansible_collections/: what Ansible's collections_path must name."""
    return ansible_root().parents[2]


def playbook(name: str) -> Path:
    return ansible_root() / "playbooks" / f"{name}.yml"


def roles_dir() -> Path:
    return ansible_root() / "roles"
