# -*- coding: utf-8 -*-
"""Add the archive components a release needs (contrib, non-free; restricted, universe...) to
apt's own source entries, in the two formats apt reads: one-line (sources.list) and deb822
(*.sources). Pure text in, text out: the module apt_components writes the result."""

from __future__ import annotations

import re

# A one-line entry: "deb [options] URI suite component...", an optional trailing comment.
ONE_LINE = re.compile(r"^(?P<head>deb(?:-src)?[ \t]+(?:\[[^\]\n]*\][ \t]+)?\S+[ \t]+(?P<suite>\S+))"
                      r"(?P<components>[^\n#]*?)(?P<tail>[ \t]*(?:#.*)?)$")


def _missing(present: list[str], wanted: list[str]) -> list[str]:
    return [c for c in wanted if c not in present]


def one_line(text: str, suites: list[str], components: list[str]) -> str:
    """Each deb/deb-src line for one of `suites` with every component of `components`
    (missing ones appended in the order given); other lines, comments and the rest as they were."""
    out = []
    for line in text.split("\n"):
        m = ONE_LINE.match(line)
        if m and m["suite"] in suites:
            add = _missing(m["components"].split(), components)
            if add:
                line = m["head"] + m["components"].rstrip() + " " + " ".join(add) + m["tail"]
        out.append(line)
    return "\n".join(out)


def deb822(text: str, suites: list[str], components: list[str]) -> str:
    """Each stanza whose Suites name one of `suites` with every component of `components` on
    its Components line; other stanzas and fields as they were."""
    stanzas = re.split(r"(\n[ \t]*\n)", text)  # the separators kept, so the text joins back as it was
    for i in range(0, len(stanzas), 2):
        lines = stanzas[i].split("\n")
        fields = {ln.split(":", 1)[0].strip().lower(): n for n, ln in enumerate(lines)
                  if ":" in ln and not ln.startswith(("#", " ", "\t"))}
        if "suites" not in fields or "components" not in fields:
            continue
        if not set(lines[fields["suites"]].split(":", 1)[1].split()) & set(suites):
            continue
        n = fields["components"]
        add = _missing(lines[n].split(":", 1)[1].split(), components)
        if add:
            lines[n] = lines[n].rstrip() + " " + " ".join(add)
            stanzas[i] = "\n".join(lines)
    return "".join(stanzas)
