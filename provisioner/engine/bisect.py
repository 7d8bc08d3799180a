"""Finding the slow node of a fleet: when an all-reduce across the hosts falls short of its
floor, halve the suspects until one host (or the link between groups of hosts) is left, then
confirm it before naming it. Pure logic around a `measure_round([hosts, ...]) -> [bus bandwidth,
...]` callable, so the search is tested with simulated measurements and runs unchanged over real
ones.

Rounds: the whole fleet (1), one halving per round (ceil(log2 N)), one confirmation (1): at
most ceil(log2 N) + 2. The measurements of one round use disjoint hosts, so a round is one call
of `measure_round` with its host sets, which runs their all-reduces side by side (one ddp play
per round, engine/accept.py). After the first halving a suspect half is always measured together with hosts already
cleared, so every measurement is an all-reduce across two or more hosts. A host is named only
when its group fell short in the search AND again in the confirmation while cleared hosts alone
met the floor, and every reading agrees (each all-reduce with it short, each without it not); anything else (both halves short, neither short, a confirmation that disagrees)
ends as "inconclusive" and names nobody: a noisy or contradictory measurement never drains a
healthy host. Topology-aware: with hosts grouped (racks, switches: the inventory's
`network_switch`), whole groups are halved first; two halves that each meet the floor alone
while together they fall short name the link between them, and a group whose hosts all fall
short (each of its hosts beside cleared hosts, twice, every reading agreeing) is named as the
group: its switch or uplink, or more than one of its hosts. Only a single node gets
a drain command.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from provisioner.engine import rolling
from provisioner.engine.network import _HOSTNAME
from provisioner.errors import ProvisionError

# One round: disjoint host sets in, one bus bandwidth (GB/s) per set out, in their order.
MeasureRound = Callable[[list[list[str]]], Sequence[float]]


@dataclass(frozen=True)
class Measured:
    hosts: tuple[str, ...]
    busbw_gbps: float
    short: bool


@dataclass
class Finding:
    verdict: str                     # healthy | node | group | link | inconclusive
    culprit: str | None = None       # the host, the group's name, or "A | B" for a link between two sets of hosts
    why: str = ""
    floor_gbps: float = 0.0
    rounds: list[list[Measured]] = field(default_factory=list)

    @property
    def round_count(self) -> int:
        return len(self.rounds)

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "culprit": self.culprit, "why": self.why, "floor_gbps": self.floor_gbps,
                "rounds": [[dict(asdict(m), hosts=list(m.hosts)) for m in r] for r in self.rounds]}


def bound(hosts: int) -> int:
    """The most rounds a search over `hosts` takes: ceil(log2 N) + 2."""
    return math.ceil(math.log2(max(hosts, 2))) + 2


def _halves(items: list) -> tuple[list, list]:
    middle = (len(items) + 1) // 2
    return items[:middle], items[middle:]


def _flat(units: list[list[str]]) -> list[str]:
    return [h for unit in units for h in unit]


def find_slow(hosts: Sequence[str], floor_gbps: float, measure_round: MeasureRound,
              groups: dict[str, list[str]] | None = None) -> Finding:
    """`groups`: the inventory's grouping by rack or switch (group -> hosts), or None."""
    hosts = list(hosts)
    finding = Finding("inconclusive", floor_gbps=floor_gbps)

    def run(*sets: Sequence[str]) -> list[Measured]:
        chosen = [list(s) for s in sets]
        if len(set(_flat(chosen))) != len(_flat(chosen)):  # side by side: no host in two all-reduces
            raise ValueError(f"one round's host sets overlap: {chosen}")
        values = [float(v) for v in measure_round(chosen)]
        if len(values) != len(chosen):
            raise ValueError(f"measure_round gave {len(values)} figure(s) for {len(chosen)} host set(s)")
        measured = [Measured(tuple(s), v, v < floor_gbps) for s, v in zip(chosen, values)]
        finding.rounds.append(measured)
        return measured

    if len(hosts) < 2:
        finding.why = "an all-reduce across hosts needs two hosts or more"
        return finding
    (whole,) = run(hosts)
    if not whole.short:
        finding.verdict, finding.why = "healthy", f"{whole.busbw_gbps:g} GB/s across {len(hosts)} hosts"
        return finding
    named = {tuple(g): name for name, g in (groups or {}).items() if g}
    grouped = [list(g) for g in named]
    units = grouped if len(grouped) > 1 and sorted(_flat(grouped)) == sorted(hosts) else [[h] for h in hosts]
    by_group = units is grouped
    cleared: list[str] = []
    narrowed: str | None = None  # the group the search has narrowed to (its hosts searched next)
    while len(units) > 1 or len(units[0]) > 1:
        narrowed = None
        if len(units) == 1:  # one group left: its hosts become the units
            narrowed = named.get(tuple(units[0])) if by_group else None
            units, by_group = [[h] for h in units[0]], False
            if narrowed and len(cleared) >= len(units):
                # Each of its hosts beside cleared hosts of its own, at once: one short names the
                # host (confirmed below), all short (twice, with other company) name the group.
                members = _flat(units)
                company = [cleared[i::len(members)] for i in range(len(members))]
                short = [m.hosts[0] for m in run(*[[h] + c for h, c in zip(members, company)]) if m.short]
                if len(short) == len(members):
                    again = run(*[[h] + c for h, c in zip(members, company[1:] + company[:1])])
                    disagree = [m for r in finding.rounds[1:] for m in r if bool(set(members) & set(m.hosts)) != m.short]
                    if disagree:
                        finding.why = f"group {narrowed}: {len(disagree)} reading(s) disagree with it"
                        return finding
                    finding.verdict, finding.culprit = "group", narrowed
                    finding.why = (f"every all-reduce with a host of {narrowed} ({' '.join(members)}) fell short of "
                                   f"{floor_gbps:g} GB/s, each of its hosts twice beside cleared hosts (last: "
                                   f"{', '.join(f'{m.busbw_gbps:g}' for m in again)} GB/s); cleared hosts met it: "
                                   f"its switch or uplink, or more than one of its hosts")
                    return finding
                if len(short) != 1:
                    finding.why = (f"group {narrowed}: {len(short)} of its {len(members)} hosts fell short beside "
                                   "cleared hosts: more than one slow host, or noise")
                    return finding
                units, cleared = [short], cleared + [h for h in members if h != short[0]]
                break
        a, b = _halves(units)
        left, right = _flat(a), _flat(b)
        if cleared:
            ref_a, ref_b = _halves(cleared)
            if not ref_b:  # a single cleared host: pair it with the half that needs a partner
                ref_a, ref_b = ([], ref_a) if len(left) > 1 else (ref_a, [])
            sets = [left + ref_a, right + ref_b]
        else:
            sets = [left, right]
        measurable = [s for s in sets if len(s) > 1]
        if not measurable:
            finding.why = f"{' and '.join(sets[0] + sets[1])}: two hosts and nothing cleared to compare them with"
            return finding
        results = dict(zip(map(tuple, measurable), run(*measurable)))
        short_a = results[tuple(sets[0])].short if tuple(sets[0]) in results else None
        short_b = results[tuple(sets[1])].short if tuple(sets[1]) in results else None
        if short_a is None:  # a lone host on the left: the right decides
            short_a = not short_b
        if short_b is None:
            short_b = not short_a
        if short_a and not short_b:
            units, cleared = a, cleared + right
        elif short_b and not short_a:
            units, cleared = b, cleared + left
        elif not short_a and not short_b and by_group and not cleared:
            # Each half meets the floor alone, together they do not: the link between them.
            check = run(left + right)
            again = run(left, right) if check[0].short else []  # each half alone once more: a link, not noise
            if check[0].short and not any(m.short for m in again):
                finding.verdict, finding.culprit = "link", f"{' '.join(left)} | {' '.join(right)}"
                finding.why = (f"each half meets {floor_gbps:g} GB/s alone, twice; together "
                               f"{check[0].busbw_gbps:g} GB/s, twice short: the link between them")
            else:
                finding.why = ("the whole fleet fell short once, then met the floor: an intermittent shortfall"
                               if not check[0].short else "a half that met the floor alone fell short alone later: noise")
            return finding
        else:
            finding.why = ("both halves fell short: more than one slow host, or a shared link" if short_a
                           else "neither half fell short, though the whole did: noise or an intermittent fault")
            return finding
    suspect = units[0][0]
    # Confirm with fresh company: the hosts that shared the suspect's last reading are measured
    # alone (a slow host among them, wrongly cleared, then shows), the others join the suspect.
    # (None when the suspect's half was a lone host that could not be measured: the other half cleared it.)
    last = set(next((m.hosts for m in finding.rounds[-1] if suspect in m.hosts), ())) - {suspect}
    fresh = [h for h in cleared if h not in last]
    ref_a, ref_b = (fresh, [h for h in cleared if h in last]) if fresh and len(last) > 1 else _halves(cleared)
    if not ref_b:
        finding.why = f"{suspect}: not enough cleared hosts to confirm it"
        return finding
    if len(ref_b) > 1:
        with_suspect, without = run([suspect] + ref_a, ref_b)
        cleared_ok = not without.short
    else:  # one host left over: the cleared hosts were already measured meeting the floor
        (with_suspect,) = run([suspect] + ref_a)
        cleared_ok = True
    # Every reading must agree: each all-reduce with the suspect short, each without it not.
    disagree = [m for r in finding.rounds[1:] for m in r if (suspect in m.hosts) != m.short]
    if with_suspect.short and cleared_ok and not disagree:
        finding.verdict, finding.culprit = "node", suspect
        finding.why = (f"every all-reduce with {suspect} fell short of {floor_gbps:g} GB/s (confirmed: "
                       f"{with_suspect.busbw_gbps:g} GB/s with {', '.join(ref_a)}); cleared hosts met it")
    else:
        finding.why = (f"{suspect} was not confirmed: " + (f"{len(disagree)} reading(s) disagree with it" if disagree
                       else "the confirmation round disagreed with the search"))
    return finding


def drain_command(host: str, reason: str, hook: str | None = None) -> str:
    """The command that drains `host`: the site's --drain hook ({host} replaced, shell-quoted),
    else Slurm's scontrol. Shell-quoted; printed, and run only when asked."""
    if not _HOSTNAME.match(host) or host.startswith("-"):
        raise ProvisionError(f"{host!r} is not a host name; no drain command is made for it", where=host,
                             fix="name the host by its inventory name")
    if hook:
        return rolling.command_for(hook, host)
    return shlex.join(["scontrol", "update", f"nodename={host}", "state=drain",
                       f"reason=[node_problem] {' '.join(reason.split())[:200]}"])


def run_drain(template: str, host: str, run_dir: Path, timeout: float = rolling.HOOK_TIMEOUT) -> rolling.HookRun:
    """Run the drain (only when the operator asked): bounded, its output kept in the run folder."""
    return rolling.run_hook("drain", template, host, run_dir, 0, timeout)
