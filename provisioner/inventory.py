"""Reading the user's inventory with Ansible's own inventory plugins.

Ansible's InventoryManager only warns about a file it cannot parse and carries on with
no hosts; we call the ini/yaml plugins directly so that a malformed hosts.ini stops the
run with the parser's own message (and the line it points at).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import ProvisionError

# Variables that carry secrets. They are never written into a rendered inventory; pass
# them through Ansible's own channels instead (vault, --ask-become-pass, ssh-agent).
SECRET_VARS = re.compile(
    r"^(ansible_(ssh_|become_|sudo_|su_)?pass(word)?|ansible_ssh_private_key|.*_(password|passwd|secret|token))$"
)
# Facts Ansible adds to every host itself; not the user's.
_MAGIC_VARS = {"inventory_file", "inventory_dir"}


@dataclass
class Group:
    name: str
    hosts: list[str]
    children: list[str]
    vars: dict[str, Any]


@dataclass
class Inventory:
    source: Path
    hosts: dict[str, dict[str, Any]]  # host -> its own variables
    groups: dict[str, Group]
    dropped_secrets: list[str] = field(default_factory=list)  # "host node2: ansible_become_password"

    def hostnames(self) -> list[str]:
        return sorted(self.hosts)


def _plain(value: Any) -> Any:
    """Ansible's own (tagged) str/dict/list subclasses as plain Python values."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return str(value)


def _plugin_for(path: Path) -> str:
    return "yaml" if path.suffix in (".yml", ".yaml") else "ini"


def line_where(path: Path, wanted: Callable[[str], bool]) -> str:
    """file:line of the first line (not a comment) `wanted` accepts, or the file alone."""
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if wanted(line) and not line.lstrip().startswith(("#", ";")):
            return f"{path}:{number}"
    return str(path)


def _line_hint(path: Path, message: str) -> str:
    """file:line for the parser's complaint, found by the text it quotes."""
    quoted = re.search(r"got: (.+)$|'([^']+)'", message)
    needle = next((g for g in (quoted.groups() if quoted else ()) if g), None)
    return line_where(path, lambda line: needle.strip() in line) if needle else str(path)


def load(path: Path) -> Inventory:
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ProvisionError("inventory file not found", where=str(path),
                             fix="pass the path of your hosts.ini (see inventories/example/hosts.ini)")
    if _plugin_for(path) == "yaml":
        from provisioner.yamlfile import read_yaml

        read_yaml(path)  # syntax errors with line and column, before Ansible's vaguer message

    from ansible.errors import AnsibleError
    from ansible.inventory.data import InventoryData
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader

    data = InventoryData()
    plugin = inventory_loader.get(_plugin_for(path))
    try:
        plugin.parse(data, DataLoader(), str(path), cache=False)
        data.reconcile_inventory()
    except AnsibleError as exc:
        message = str(exc.message).removeprefix("Failed to parse inventory: ")
        if "not enough values to unpack" in message:  # Ansible's own words for a line it could not split
            message = "a line could not be read as a host, a `[group]` header or `key=value` (an unclosed `[`?)"
        raise ProvisionError(f"cannot parse the inventory: {message}", where=_line_hint(path, message),
                             fix="hosts.ini takes lines like `node1 ansible_host=10.0.0.5` under `[group]` headers; "
                                 "see inventories/example/hosts.ini") from None
    if not data.hosts:
        raise ProvisionError("the inventory has no hosts", where=str(path),
                             fix="add at least one host line, e.g. `node1 ansible_host=10.0.0.5`")

    dropped: list[str] = []

    def keep(owner: str, variables: dict[str, Any]) -> dict[str, Any]:
        kept = {}
        for name, value in sorted(variables.items()):
            if name in _MAGIC_VARS:
                continue
            if SECRET_VARS.match(name):
                dropped.append(f"{owner}: {name}")
                continue
            kept[str(name)] = _plain(value)
        return kept

    hosts = {name: keep(f"host {name}", host.vars) for name, host in sorted(data.hosts.items())}
    groups = {
        name: Group(
            name=name,
            hosts=sorted(h.name for h in group.hosts),
            children=sorted(c.name for c in group.child_groups),
            vars=keep(f"group {name}", group.vars),
        )
        for name, group in sorted(data.groups.items())
    }
    return Inventory(source=path, hosts=hosts, groups=groups, dropped_secrets=dropped)


def to_yaml_inventory(inventory: Inventory) -> dict[str, Any]:
    """The inventory in Ansible's YAML inventory shape, every host and group in sorted order."""

    def group_body(group: Group) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if group.hosts and group.name != "all":
            body["hosts"] = {h: (inventory.hosts[h] or None) for h in group.hosts}
        if group.children:
            body["children"] = {c: group_body(inventory.groups[c]) for c in group.children}
        if group.vars:
            body["vars"] = group.vars
        return body

    top = group_body(inventory.groups["all"])
    # Hosts in no group of their own sit under `ungrouped`, which Ansible reconciles.
    return {"all": top}
