"""Where things live: the package's data, templates and built-in profiles, and the Ansible
content (playbooks/, roles/), in the installed package or in the checkout when running
from source."""

from __future__ import annotations

from pathlib import Path

from provisioner.errors import ProvisionError

_PACKAGE = Path(__file__).resolve().parent
DATA_DIR = _PACKAGE / "data"            # the compatibility matrix, the Grafana dashboard
TEMPLATES_DIR = _PACKAGE / "templates"  # the HTML report, the bundle's scripts and texts
BUILTIN_PROFILES_DIR = _PACKAGE / "profiles"


def ansible_root() -> Path:
    # A wheel carries them as provisioner/ansible/{playbooks,roles} (see pyproject.toml);
    # an editable install or a checkout has them at the repository root.
    for root in (_PACKAGE / "ansible", _PACKAGE.parent):
        if (root / "playbooks" / "site.yml").is_file() and (root / "roles").is_dir():
            return root
    raise ProvisionError("the playbooks and roles are missing from this installation",
                         where=str(_PACKAGE), fix="reinstall: pip install --force-reinstall gpu-provisioner")


def playbook(name: str) -> Path:
    return ansible_root() / "playbooks" / f"{name}.yml"


def roles_dir() -> Path:
    return ansible_root() / "roles"
