#!/usr/bin/env python3
"""Write the manual's generated pages: docs/reference/profile.md from the profile's models and
docs/reference/commands.md from the Typer app. Run it after changing either, and commit the
pages; tests/test_docs.py fails while a committed page differs from what this writes.

  scripts/gen_docs.py           write the pages
  scripts/gen_docs.py --check   exit 1 (naming the page) when a committed page is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this checkout's package, whatever is installed

import yaml  # noqa: E402

from provisioner.cli import reference as commands  # noqa: E402
from provisioner.profiles import BUILTIN_DIR  # noqa: E402
from provisioner.profiles import reference as profile  # noqa: E402

REFERENCE = REPO / "docs" / "reference"


def samples() -> list[dict]:
    """The profiles whose values are the reference's examples: the built-ins, then the tests'."""
    files = sorted(BUILTIN_DIR.glob("*.yml")) + sorted((REPO / "tests" / "data" / "profiles").glob("*.yml"))
    return [data for data in (yaml.safe_load(f.read_text()) for f in files) if isinstance(data, dict)]


def pages() -> dict[Path, str]:
    return {REFERENCE / "profile.md": profile.page(samples()), REFERENCE / "commands.md": commands.page()}


def main(argv: list[str]) -> int:
    stale = [path for path, text in pages().items() if not path.is_file() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(REPO)} is stale: run scripts/gen_docs.py and commit it", file=sys.stderr)
        return 1 if stale else 0
    for path, text in pages().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
