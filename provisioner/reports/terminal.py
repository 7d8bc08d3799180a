"""What reaches the operator's terminal. Text from hosts, Ansible, captures and run folders
is data: a GPU name, a task's failure message or a report.json field may carry escape
sequences that clear the screen, set the title, write the clipboard (OSC 52) or make links
(OSC 8), and bidi controls that make a line read differently from what it says.

One sanitiser, `clean`, shows every such character as a visible escape (`\\x1b`, `\\u202e`)
and keeps newlines and tabs for layout. `console()` is the one way the CLI makes a Rich
console: it cleans every string it renders, and its markup, emoji codes (Ansible's `:end:`
is not 🔚) and highlighting are off unless a call asks for markup (`markup=True`, with
every data part passed through `rich.markup.escape`). `text()` makes a cleaned Text for
tables and other renderables, which no console cleans again.
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.text import Text

# C0 controls but tab and newline (ESC, BEL, CR, BS...), DEL, C1 controls (0x9b is a CSI by
# itself on some terminals), and the Unicode bidi controls: LRE..RLO, LRI..PDI, LRM, RLM, ALM.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: object) -> str:
    """`text` with every terminal control character written out as a visible escape."""
    return CONTROLS.sub(_visible, str(text))


def text(value: object, style: str = "") -> Text:
    """Data as a Rich Text: cleaned, never read as markup or emoji codes."""
    return Text(clean(value), style=style)


class _CleanConsole(Console):
    def render_str(self, text: str, **kwargs) -> Text:
        # Every str printed or put in a table passes here, markup or not: cleaned before Rich reads it.
        return super().render_str(clean(text), **kwargs)


def console(*, stderr: bool = False, **options) -> Console:
    """The console for people: cleans what it prints; markup only where a call asks for it."""
    return _CleanConsole(stderr=stderr, markup=False, emoji=False, highlight=False, **options)
