"""Judging what a host's own distribution archive offers (the module apt_offer, run by
preflight.yml and survey.yml) against what the profile takes from it (profiles/distro.py).

One check per package, named `archive <package>`: it passes with the exact version the
role will install and where it comes from (`nvidia-driver 535.309.01-0+deb12u1 from
http://deb.debian.org/debian-security bookworm-security (Release Date: ...)`), and fails
naming each source the host's apt read, its Release Date, the nearest versions it does
carry, and the fix. A failed check keeps the host out of the converge (commands._healthy),
so nothing on it changes."""

from __future__ import annotations

from typing import Any

from provisioner.profiles import distro
from provisioner.profiles.models import Profile
from provisioner.verdicts.checks import Check, failed, passed, skipped

PREFIX = "archive"
FIX_SOURCES = "fix the host's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d) so they name its distribution's archive"


def _date(source: dict[str, Any]) -> str:
    return (source.get("release") or {}).get("Date") or "unknown"


def _where(source: dict[str, Any]) -> str:
    return f"{source.get('uri', '?')} {source.get('suite', '?')}"


def _sources_read(offer: dict[str, Any]) -> str:
    """Every source the host's apt read for the archive: used ones with their Release Date,
    the others with why they do not count."""
    parts = []
    for s in offer.get("sources") or []:
        if s.get("used"):
            parts.append(f"{_where(s)} (Release Date: {_date(s)})")
        else:
            said = "; ".join(s.get("messages") or [])
            parts.append(f"{_where(s)} (not used: {s.get('why_not') or 'not verified'}{': ' + said if said else ''})")
    return "; ".join(parts) or "no source"


def judge(profile: Profile, offer: dict[str, Any] | None) -> list[Check]:
    want = distro.wanted(profile)
    if not want:
        return []
    if not offer:
        return [failed(PREFIX, "the host did not report what its distribution archive offers (up's survey asks only "
                               "a host that is not in its recorded state): run `provision preflight`, or `provision "
                               "up --full`")]
    if offer.get("error"):
        return [failed(PREFIX, f"could not read what the host's distribution archive offers: {offer['error']}. "
                               f"Read: {_sources_read(offer)}. Fix: {FIX_SOURCES}, or the host's apt proxy "
                               "and network path to them")]
    sources = {(s.get("uri"), s.get("suite")): s for s in offer.get("sources") or []}
    offered = offer.get("packages") or {}
    checks = []
    for name, w in sorted(want.items()):
        versions = [o for o in offered.get(name) or [] if isinstance(o, dict) and o.get("version")]
        o = _pick(w, versions)
        if o:
            best = str(o["version"])
            source = sources.get((o.get("uri"), o.get("suite")), {})
            checks.append(passed(f"{PREFIX} {name}", f"{name} {best} from {o.get('uri')} {o.get('suite')} "
                                                     f"(Release Date: {_date(source)})"))
            continue
        near = distro.nearest([str(o["version"]) for o in versions], w.version)
        carried = ", ".join(
            f"{v} ({' / '.join(sorted({o.get('suite', '?') for o in versions if o['version'] == v}))})" for v in near)
        field_fix = (f"pick a version the archive carries ({w.field} in the profile), or {FIX_SOURCES}"
                     if w.rule != "any" else FIX_SOURCES)
        checks.append(failed(f"{PREFIX} {name}", f"{name} {w.describe()} ({w.field}) is not in the host's archive: "
                                                 f"{_sources_read(offer)}; nearest versions it carries: "
                                                 f"{carried or 'no version of ' + name}. Fix: {field_fix}"))
    return checks


def _pick(w: distro.Want, versions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The offer the role installs for `w`: the newest version that fits it."""
    fits = [o for o in versions if distro.matches(w, str(o["version"]))]
    if not fits:
        return None
    best = distro.newest([str(o["version"]) for o in fits])
    return next(o for o in fits if o["version"] == best)


def chosen(profile: Profile, offer: dict[str, Any] | None) -> dict[str, str]:
    """{package: the exact version the role will install} from what the host's archive offers
    (apt_offer), for the packages it offers a fitting version of: what `provision plan` shows."""
    offered = (offer or {}).get("packages") if isinstance(offer, dict) else None
    if not isinstance(offered, dict):
        return {}
    out = {}
    for name, w in distro.wanted(profile).items():
        o = _pick(w, [o for o in offered.get(name) or [] if isinstance(o, dict) and o.get("version")])
        if o:
            out[name] = str(o["version"])
    return out


def in_recorded_state(checks: list[Check]) -> list[Check]:
    """A host found in the state its last converge with this profile recorded is not
    converged again: nothing is installed, so the archive no longer carrying a version is no
    reason to stop it (it is still said)."""
    return [skipped(c.name, f"not converged (in its recorded state), nothing installed: {c.detail}")
            if c.status == "fail" and c.name.split(" ", 1)[0] == PREFIX else c for c in checks]
