# -*- coding: utf-8 -*-
"""The DDP_RESULT lines ddp_smoke.py's ranks print, read back from torchrun's output.

The local ranks of one node share torchrun's stdout, and with PYTHONUNBUFFERED each print()
is two writes (the text, then the newline): two ranks finishing together can leave
"DDP_RESULT {..}DDP_RESULT {..}\\n\\n". Each text is one write under PIPE_BUF, so never cut;
the results are found wherever they start, not only at the start of a line. A result is a
flat JSON object (no nested objects)."""

from __future__ import annotations

import json
import re

_RESULT = re.compile(r"DDP_RESULT (\{[^{}]*\})")


def parse(stdout: str) -> list[dict]:
    found = []
    for match in _RESULT.finditer(stdout or ""):
        try:
            value = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found
