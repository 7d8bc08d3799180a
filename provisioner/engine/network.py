"""`provision verify --network` and `--ddp`: which hosts take part, in which order, at which
address, and (network) which pairs iperf3 measures.

The address under test of a host is its inventory variable `network_test_address` (the
network role's, so role_specs types it), else its `ansible_host`, else its name; it must be
an IP address or a host name. Pairs are a ring (each host to the next: N pairs for N hosts,
never N^2) or a sample (a random ring cut to `network.sample_pairs`).
"""

from __future__ import annotations

import ipaddress
import random
import re
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import ProvisionError
from provisioner.render.inventory import Inventory, line_where
from provisioner.profiles.models import Profile

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


@dataclass(frozen=True)
class Pair:
    client: str  # host names
    server: str


def selected_hosts(inventory_file: Path, limit: str | None) -> list[str]:
    """The hosts `limit` selects, in Ansible's own order (its pattern language, its parser)."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    manager = InventoryManager(loader=DataLoader(), sources=[str(inventory_file)])
    return [h.name for h in manager.get_hosts(limit or "all")]


def test_address(inventory: Inventory, host: str) -> str:
    variables = inventory.effective_vars(host)
    for name in ("network_test_address", "ansible_host"):
        value = str(variables.get(name) or "").strip()
        if value:
            break
    else:
        name, value = "(the host's name)", host
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        if _HOSTNAME.match(value):
            return value
    owner = f"host {host}"
    path = inventory.origins.get(owner, {}).get(name, inventory.source)
    # The line that sets it: an INI host line names the host first; else where Ansible's loader says.
    where = line_where(path, lambda line: line.split()[:1] == [host] and value in line)
    if where == str(path):
        where = inventory.where(owner, name)
    raise ProvisionError(f"host {host}: {name} {value!r} is neither an IP address nor a host name", where=where,
                         fix="set network_test_address to the address to test (e.g. the host's IPoIB or data-network IP)")


_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def switches(inventory: Inventory, hosts: list[str]) -> dict[str, list[str]] | None:
    """The hosts grouped by their inventory variable `network_switch` (the switch, or rack, each
    hangs off: set per host, or once for a group with `[rack1:vars]`), for the slow-node search;
    None when no host sets it. Every host or none: a fleet half labelled is refused."""
    found: dict[str, list[str]] = {}
    missing = []
    for host in hosts:
        value = str(inventory.effective_vars(host).get("network_switch") or "").strip()
        if not value:
            missing.append(host)
            continue
        if not _GROUP_NAME.match(value):
            owner = inventory.owner_of(host, "network_switch")
            raise ProvisionError(f"{owner}: network_switch {value!r} is not a switch or rack name",
                                 where=inventory.where(owner, "network_switch"),
                                 fix="name it with letters, digits, '.', '_' or '-' (e.g. leaf-07 or rack12)")
        found.setdefault(value, []).append(host)
    if found and missing:
        raise ProvisionError(f"network_switch is set for {len(hosts) - len(missing)} host(s) but not for "
                             f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}", where=str(inventory.source),
                             fix="set network_switch for every host of the fleet (per host or on its group), or for none")
    return found or None


def pairs(hosts: list[str], pairing: str = "ring", sample: int = 16, seed: int | None = None) -> list[Pair]:
    if len(hosts) < 2:
        return []
    order = list(hosts)
    if pairing == "sample":
        random.Random(seed).shuffle(order)
    ring = [Pair(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]  # two hosts: both ways
    return ring[:sample] if pairing == "sample" else ring


def server_lifetime(duration: int) -> int:
    """Seconds an iperf3 server may listen (its one test, the pair's start-up and the play's
    turns), after which `timeout` ends it whatever happens to the controller."""
    return 4 * (duration + 30)


def network_plan(profile: Profile, inventory: Inventory, hosts: list[str], seed: int | None = None) -> tuple[dict, list[Pair]]:
    """host -> what it does in the playbook (network.yml), and the pairs."""
    net = profile.network
    chosen = pairs(hosts, net.pairing, net.sample_pairs, seed)
    address = {h: test_address(inventory, h) for h in hosts}
    plan = {h: {"address": address[h], "port": net.port, "serve": False, "peer": "", "peer_port": net.port}
            for h in hosts}
    for pair in chosen:
        plan[pair.server]["serve"] = True
        plan[pair.client]["peer"] = address[pair.server]
    return plan, chosen
