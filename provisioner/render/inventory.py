"""Reading the user's inventory with Ansible's own inventory plugins.

Ansible's InventoryManager only warns about a file it cannot parse and carries on with
no hosts; we call the ini/yaml plugins directly so that a malformed hosts.ini stops the
run with the parser's own message (and the line it points at).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner.profiles import secrets
from provisioner.render import inventory_cache
from provisioner.errors import ProvisionError

# Facts Ansible adds to every host itself; not the user's.
_MAGIC_VARS = {"inventory_file", "inventory_dir"}
_BOM = b"\xef\xbb\xbf"


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
    # owner ("host node1", "group gpu") -> variable -> the file that set it, when not `source`
    # (group_vars/gpu.yml, host_vars/node1/main.yml)
    origins: dict[str, dict[str, Path]] = field(default_factory=dict)

    def hostnames(self) -> list[str]:
        return sorted(self.hosts)

    def effective_vars(self, host: str) -> dict[str, Any]:
        """The variables `host` ends up with, in Ansible's order: `all`, then groups by depth
        (a child after its parent) and name, then the host's own."""
        merged: dict[str, Any] = {}
        for name in self._groups_in_order(host):
            merged.update(self.groups[name].vars)
        merged.update(self.hosts.get(host, {}))
        return merged

    def owner_of(self, host: str, name: str) -> str:
        """Who gives `host` its variable `name`: "host node1", or the group that wins ("group gpu")."""
        if name in self.hosts.get(host, {}):
            return f"host {host}"
        return next((f"group {g}" for g in reversed(self._groups_in_order(host)) if name in self.groups[g].vars),
                    f"host {host}")

    def _groups_in_order(self, host: str) -> list[str]:
        parents: dict[str, set[str]] = {}
        for group in self.groups.values():
            for child in group.children:
                parents.setdefault(child, set()).add(group.name)

        def depth(name: str, seen: frozenset = frozenset()) -> int:
            above = parents.get(name, set()) - seen
            return 1 + max((depth(p, seen | {name}) for p in above), default=-1)

        member = {g.name for g in self.groups.values() if host in g.hosts}
        todo = list(member)
        while todo:
            for parent in parents.get(todo.pop(), ()):
                if parent not in member:
                    member.add(parent)
                    todo.append(parent)
        return sorted(member | {"all"} & set(self.groups), key=lambda g: (depth(g), g))

    def where(self, owner: str, name: str) -> str:
        """file:line where `owner` sets the variable `name` (or the file alone)."""
        path = self.origins.get(owner, {}).get(name, self.source)
        pattern = re.compile(rf"(^|\s){re.escape(name)}\s*[=:]")
        return line_where(path, pattern.search)


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
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return str(path)
    for number, line in enumerate(text.splitlines(), 1):
        if wanted(line) and not line.lstrip().startswith(("#", ";")):
            return f"{path}:{number}"
    return str(path)


def _line_hint(path: Path, message: str) -> str:
    """file:line for the parser's complaint, found by the text it quotes."""
    quoted = re.search(r"got: (.+)$|'([^']+)'", message)
    needle = next((g for g in (quoted.groups() if quoted else ()) if g), None)
    return line_where(path, lambda line: needle.strip() in line) if needle else str(path)


_FIX = "pass the path of your hosts.ini or hosts.yml (see inventories/example/hosts.ini)"
# An inventory host name reaches hook commands ({host}), run-folder paths and printed commands:
# it must be a host name (RFC 1123 labels, with `_` as Ansible allows), or an IP address.
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?")


def host_name_problem(name: str) -> str | None:
    """Why `name` is not a host name we take from an inventory (None: it is one)."""
    import ipaddress

    if HOST_NAME.fullmatch(name):
        return None
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    shown = name if len(name) <= 60 else name[:60] + f"... ({len(name)} characters)"
    return (f"inventory host {shown!r} is not a host name: letters, digits, '-' and '_' in dot-separated labels "
            "of at most 63, 253 characters in all, or an IPv4 or IPv6 address")


def _usable_file(given: Path) -> Path:
    """The inventory file, resolved; refused with the reason when it is not one we can read."""
    try:
        path = Path(given).expanduser().resolve(strict=True)
    except FileNotFoundError:
        raise ProvisionError("inventory file not found", where=str(given), fix=_FIX) from None
    except (RuntimeError, OSError) as exc:  # a symlink loop (RuntimeError before Python 3.13), ENAMETOOLONG...
        raise ProvisionError(f"the inventory path cannot be resolved: {getattr(exc, 'strerror', None) or exc}",
                             where=str(given), fix="pass the path of a regular file, not a broken or looping link"
                             ) from None
    if path.is_dir():
        raise ProvisionError("the inventory is a folder; provision reads one inventory file (an Ansible inventory "
                             "folder is not supported)", where=str(path),
                             fix="pass the hosts.ini or hosts.yml inside it; group_vars/ and host_vars/ beside that "
                                 "file are read")
    if not path.is_file():
        raise ProvisionError("the inventory is not a regular file", where=str(path), fix=_FIX)
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise ProvisionError(f"cannot read the inventory: {exc.strerror}", where=str(path),
                             fix="check the file's permissions") from None
    if head.startswith(b"#!") and os.access(path, os.X_OK):
        raise ProvisionError("the inventory is an executable script; dynamic inventory scripts are not supported "
                             "(it was not run)", where=str(path),
                             fix="run it yourself and save its hosts as a YAML inventory "
                                 "(ansible-inventory -i SCRIPT --list -y > hosts.yml), then pass that file")
    if head.startswith(_BOM):
        raise ProvisionError("the inventory starts with a UTF-8 byte-order mark (BOM), which Ansible reads as part "
                             "of the first line", where=f"{path}:1", fix="save the file as UTF-8 without BOM")
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProvisionError(f"the inventory is not UTF-8 text (byte {exc.start + 1})", where=str(path),
                             fix="save it as UTF-8 text") from None
    return path


def _vars_files(loader, base: Path, subdir: str, name: str) -> list[Path]:
    """Ansible's own lookup of group_vars/<name>, <name>.yml, <name>/ beside the inventory."""
    folder = base / subdir
    if not folder.is_dir() or name.startswith("/"):
        return []
    # ansible-core 2.15 returns bytes paths here, 2.19 str ones.
    return [Path(os.fsdecode(f)) for f in loader.find_vars_files(str(folder), name)]


def _load_vars_file(loader, path: Path) -> dict[str, Any]:
    from ansible.errors import AnsibleError

    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        raise ProvisionError("the variables file is encrypted with ansible-vault; provision does not read vaults "
                             "(secrets never go into its rendered files)", where=str(path),
                             fix="keep secrets out of group_vars/host_vars given to provision: use ssh-agent, "
                                 "--ask-become-pass, or the environment")
    from provisioner.yamlfile import read_yaml

    read_yaml(path)  # syntax errors with line and column
    try:
        data = loader.load_from_file(str(path), cache="none")
    except AnsibleError as exc:
        raise ProvisionError(f"cannot read the variables file: {exc.message}", where=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProvisionError(f"a variables file is a mapping of names to values, not a {'list' if isinstance(data, list) else type(data).__name__}",
                             where=f"{path}:1", fix="write `name: value` lines")
    return data


# Top-level keys only a profile has: an inventory's top level names groups, and no group
# is called `hardware` or `driver` by accident next to `name` and `description`.
_PROFILE_KEYS = {"extends", "hardware", "driver", "cuda"}


def _refuse_a_profile(path: Path, content: object) -> None:
    """A profile passed where the inventory goes (the arguments swapped, or -p forgotten):
    Ansible would read its sections as groups, warn once per key and find no host."""
    if isinstance(content, dict) and "name" in content and _PROFILE_KEYS & set(content):
        raise ProvisionError("this is a profile, not an inventory", where=str(path),
                             fix=f"pass it as --profile {path.name} and the inventory (hosts.ini or hosts.yml) as "
                                 "the argument: provision up --profile PROFILE INVENTORY")


# The modules whose code shapes what load() returns: a change to them is a cache miss.
_SHAPED_BY = [Path(__file__), Path(secrets.__file__), Path(inventory_cache.__file__)]


def load(path: Path) -> Inventory:
    """The inventory as Ansible's parser reads it (kept between runs while nothing it read has
    changed: render/inventory_cache)."""
    path = _usable_file(path)
    key = inventory_cache.key(path, _SHAPED_BY)
    kept = inventory_cache.get(path, key)
    if kept is not None:
        try:
            return _from_fields(kept)
        except (KeyError, TypeError, AttributeError):
            pass  # an entry of another shape: parse again
    inv = _parse(path)
    inventory_cache.put(path, key, _to_fields(inv))
    return inv


def _to_fields(inv: Inventory) -> dict[str, Any]:
    """An Inventory as plain JSON values (its paths as text): what the cache keeps."""
    return dict(asdict(inv), source=str(inv.source),
                origins={owner: {name: str(where) for name, where in found.items()}
                         for owner, found in inv.origins.items()})


def _from_fields(fields: dict[str, Any]) -> Inventory:
    """_to_fields read back."""
    return Inventory(source=Path(fields["source"]), hosts=fields["hosts"],
                     groups={name: Group(**g) for name, g in fields["groups"].items()},
                     dropped_secrets=fields["dropped_secrets"],
                     origins={owner: {name: Path(where) for name, where in found.items()}
                              for owner, found in fields["origins"].items()})


def _parse(path: Path) -> Inventory:
    if _plugin_for(path) == "yaml":
        from provisioner.yamlfile import read_yaml

        content = read_yaml(path)  # syntax errors with line and column, before Ansible's vaguer message
        if content is None:
            raise ProvisionError("the inventory has no hosts (the YAML file is empty)", where=str(path),
                                 fix="add `all: {hosts: {node1: {ansible_host: 10.0.0.5}}}`")
        _refuse_a_profile(path, content)

    from ansible.errors import AnsibleError
    from ansible.inventory.data import InventoryData
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import inventory_loader

    data = InventoryData()
    loader = DataLoader()
    plugin = inventory_loader.get(_plugin_for(path))
    defined = _record_definitions(plugin)
    try:
        plugin.parse(data, loader, str(path), cache=False)
        data.reconcile_inventory()
    # Ansible raises a bare Exception for some structures ("can't add group to itself" for
    # `all: {children: {all: }}`): every failure of its parser is the inventory's, not ours.
    except Exception as exc:  # noqa: BLE001
        text = exc.message if isinstance(exc, AnsibleError) else str(exc)
        message = " ".join(str(text).removeprefix("Failed to parse inventory: ").split())
        if "not enough values to unpack" in message:  # Ansible's own words for a line it could not split
            message = "a line could not be read as a host, a `[group]` header or `key=value` (an unclosed `[`?)"
        raise ProvisionError(f"cannot parse the inventory: {message}", where=_line_hint(path, message),
                             fix="hosts.ini takes lines like `node1 ansible_host=10.0.0.5` under `[group]` headers; "
                                 "a YAML inventory `all: {children: {gpu: {hosts: {node1: {ansible_host: ...}}}}}`; "
                                 "see inventories/example/hosts.ini") from None
    if not data.hosts:
        raise ProvisionError("the inventory has no hosts", where=str(path),
                             fix="add at least one host line, e.g. `node1 ansible_host=10.0.0.5`")
    for name in sorted(data.hosts):
        problem = host_name_problem(str(name))
        if problem:
            raise ProvisionError(problem, where=line_where(path, lambda line, n=str(name): n in line),
                                 fix="name the host with a plain host name and give its address in ansible_host")
    for name, count in sorted(defined.items()):
        if count > 1:
            _refuse_split_definition(path, name, count)

    dropped: list[str] = []
    origins: dict[str, dict[str, Path]] = {}

    def with_files(owner: str, subdir: str, name: str, variables: dict[str, Any]) -> dict[str, Any]:
        merged = dict(variables)
        for found in _vars_files(loader, path.parent, subdir, name):  # files win over the inventory, as in Ansible
            for key, value in _load_vars_file(loader, found).items():
                merged[key] = value
                origins.setdefault(owner, {})[str(key)] = found
        return merged

    def keep(owner: str, variables: dict[str, Any]) -> dict[str, Any]:
        kept = {}
        for name, value in sorted(variables.items(), key=lambda kv: str(kv[0])):
            name = str(name)
            if name in _MAGIC_VARS:
                continue
            if secrets.is_secret_name(name) or secrets.holds_secret(value) and not isinstance(value, (dict, list)):
                dropped.append(f"{owner}: {name}")
                continue
            kept[name] = secrets.strip(_plain(value), f"{owner}: {name}", dropped)
        return kept

    hosts = {str(name): keep(f"host {name}", with_files(f"host {name}", "host_vars", str(name), host.vars))
             for name, host in sorted(data.hosts.items())}
    groups = {
        str(name): Group(
            name=str(name),
            hosts=sorted(str(h.name) for h in group.hosts),
            children=sorted(str(c.name) for c in group.child_groups),
            vars=keep(f"group {name}", with_files(f"group {name}", "group_vars", str(name), group.vars)),
        )
        for name, group in sorted(data.groups.items())
    }
    inv = Inventory(source=path, hosts=hosts, groups=groups, dropped_secrets=dropped, origins=origins)
    _check_ports(inv)
    return inv


def _record_definitions(plugin) -> dict[str, int]:
    """How many times the plugin gives each host variables (or a :port), counted as it parses."""
    counts: dict[str, int] = {}
    populate = plugin._populate_host_vars

    def recording(hosts, variables, group=None, port=None):
        if variables or port is not None:
            for host in hosts:
                counts[str(host)] = counts.get(str(host), 0) + 1
        return populate(hosts, variables, group, port)

    plugin._populate_host_vars = recording
    return counts


def _refuse_split_definition(path: Path, host: str, count: int) -> None:
    """One host given variables in several places: Ansible merges them silently, the last
    line winning per variable, so its address can come from one line and its port from another."""
    start = re.compile(rf"\s*['\"]?{re.escape(host)}['\"]?(:\d+)?(\s|:|$)")
    lines = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if start.match(line) and (_plugin_for(path) == "yaml" or "=" in line or start.match(line).group(1))]
    at = f" (lines {', '.join(map(str, lines))})" if len(lines) > 1 else ""
    raise ProvisionError(f"host {host} is given variables in {count} places{at}: Ansible merges them silently, so its "
                         "address could come from one and its port from another",
                         where=f"{path}:{lines[1]}" if len(lines) > 1 else str(path),
                         fix=f"give {host}'s variables once (one line, or host_vars/{host}.yml) and list it in other "
                             "groups by name only")


def _check_ports(inv: Inventory) -> None:
    """ansible_port is a number: `ansible_port=ssh` would reach every command line as it is."""
    owners = [(f"host {h}", v) for h, v in inv.hosts.items()] + [(f"group {g.name}", g.vars) for g in inv.groups.values()]
    for owner, variables in owners:
        for name in ("ansible_port", "ansible_ssh_port"):
            value = variables.get(name)
            if value is None or isinstance(value, str) and "{{" in value:  # unset, or Ansible's to template
                continue
            if isinstance(value, bool) or not re.fullmatch(r"[0-9]{1,5}", str(value)) or not 1 <= int(value) <= 65535:
                raise ProvisionError(f"{owner}: {name} {value!r} is not a port number (1-65535)",
                                     where=inv.where(owner, name), fix=f"set {name} to the SSH port, e.g. {name}=22")


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
