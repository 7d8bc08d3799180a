#!/usr/bin/env python3
"""Regenerate provisioner/data/compat_generated.yml from the vendors' published files.

Run by hand when NVIDIA or PyTorch publish a release, with local copies of:
  --nvidia-releases  NVIDIA's data-center driver releases.json (published beside the
                     driver lifecycle page, docs.nvidia.com/datacenter/tesla/drivers/)
  --pytorch-matrix   PyTorch's RELEASE.md (or the part holding its "Release Compatibility
                     Matrix" and "PyTorch CUDA Support Matrix" tables)
then review the diff of the output and commit it. Nothing here downloads anything.

It has never been run against the live files; it is tested on the committed copies in
tests/data/vendor/ (see SOURCES.md there), and the committed output was made from them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "provisioner" / "data" / "compat_generated.yml"
BRANCH_TYPES = {"lts branch": "lts", "production branch": "production", "new feature branch": "feature"}


class InputError(Exception):
    """A vendor file that does not look as expected: named, with what was wrong."""


def driver_branches(releases: dict) -> dict[int, dict]:
    """releases.json -> {branch: {type, first_release, latest, latest_date}}."""
    out = {}
    for key, info in releases.items():
        if not str(key).isdigit():
            continue
        kind = BRANCH_TYPES.get(info.get("type", ""))
        drivers = info.get("driver_info") or []
        if kind is None or not drivers:
            raise InputError(f"branch {key}: type {info.get('type')!r} or driver_info not understood")
        dates = sorted(d["release_date"] for d in drivers)
        newest = max(drivers, key=lambda d: (d["release_date"], _ver(d["release_version"])))
        out[int(key)] = {"type": kind, "first_release": dates[0], "latest": newest["release_version"],
                         "latest_date": newest["release_date"]}
    if not out:
        raise InputError("no driver branches found")
    return dict(sorted(out.items()))


def _ver(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _rows(lines: list[str], start: int) -> tuple[list[str], list[list[str]]]:
    """The markdown table beginning at or after `start`: its header cells and body rows."""
    i = start
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    table = []
    while i < len(lines) and lines[i].startswith("|"):
        table.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
        i += 1
    if len(table) < 3:
        raise InputError(f"no table after line {start + 1}")
    return table[0], table[2:]


def torch_releases(text: str) -> dict[str, dict]:
    """RELEASE.md's Release Compatibility Matrix -> {series: {indexes, python}}."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if "Release Compatibility Matrix" in line and
               not line.lstrip().startswith("-")), None)
    if at is None:
        raise InputError("no 'Release Compatibility Matrix' section")
    header, rows = _rows(lines, at)
    cols = {name.lower(): n for n, name in enumerate(header)}
    try:
        py, stable, experimental = cols["python"], cols["stable cuda"], cols["experimental cuda"]
    except KeyError as exc:
        raise InputError(f"matrix header lacks {exc}: {header}") from None
    out = {}
    for row in rows:
        low = re.search(r">=\s*(\d+\.\d+)", row[py])
        high = re.search(r"<=\s*\(?\s*(\d+\.\d+)", row[py])
        if not (low and high):
            raise InputError(f"PyTorch {row[0]}: cannot read the Python range {row[py]!r}")
        cudas = re.findall(r"CUDA (\d+)\.(\d+)", row[stable] + " " + row[experimental])
        indexes = sorted({f"cu{major}{minor}" for major, minor in cudas}, key=lambda ix: (len(ix), ix))
        out[row[0]] = {"indexes": indexes, "python": [low.group(1), high.group(1)]}
    return dict(sorted(out.items(), key=lambda kv: _ver(kv[0])))


def torch_arches(text: str) -> dict[str, dict]:
    """RELEASE.md's "PyTorch CUDA Support Matrix" (x86 table) -> {series: {cuXY: [cc], ptx: {}}}."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if re.match(r"For Release .*CUDA Architectures", line)), None)
    if at is None:
        return {}
    releases = re.findall(r"\d+\.\d+", lines[at])
    _, rows = _rows(lines, at)
    arches: dict = {}
    for row in rows:
        major, minor = row[0].split(".")[:2]
        index = f"cu{major}{minor}"
        ccs, ptx = [], None
        for group in re.findall(r"\(([^)]*)\)", row[1]):
            for cc in (c.strip() for c in group.split(",")):
                ccs.append(cc.removesuffix("+PTX"))
                if cc.endswith("+PTX") and "linux" in (row[2] if len(row) > 2 else "").lower():
                    ptx = cc.removesuffix("+PTX")
        arches[index] = sorted(ccs, key=_ver)
        if ptx:
            arches.setdefault("ptx", {})[index] = ptx
    return dict.fromkeys(releases, arches)


def render(nvidia_path: Path, pytorch_path: Path) -> str:
    try:
        releases = json.loads(nvidia_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{nvidia_path}: {exc}") from None
    text = pytorch_path.read_text(encoding="utf-8")
    branches, torch, arches = driver_branches(releases), torch_releases(text), torch_arches(text)
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in (nvidia_path, pytorch_path)}
    out = [
        "# GENERATED by scripts/update_compat_tables.py: do not edit; change its inputs and re-run.",
        f"# NVIDIA releases.json: {nvidia_path.name} (sha256 {digest[nvidia_path]}...)",
        f"# PyTorch release matrix: {pytorch_path.name} (sha256 {digest[pytorch_path]}...)",
        "# Made from the committed copies in tests/data/vendor/ (see SOURCES.md there); never from",
        "# the live files. compat.py merges this under compat.yml (which cites the rest).",
        "",
        "# Driver branches from releases.json: type (lts | production | feature), first release",
        "# date, newest version and its date. End of life: compat.yml driver_lifecycle.",
        "driver_branches:",
        *(f"  {b}: {json.dumps(v)}" for b, v in branches.items()),
        "",
        "# PyTorch releases from the Release Compatibility Matrix: the CUDA wheel indexes each",
        "# publishes (stable and experimental columns; every release also has `cpu`) and its",
        "# Python range. There is no cu122 index: CUDA 12.2 hosts take cu121 wheels.",
        "torch:",
        *(f'  "{s}": {json.dumps(v)}' for s, v in torch.items()),
        "",
        "# GPU architectures (compute capabilities) per release x index, from the PyTorch CUDA",
        "# Support Matrix (x86 builds); ptx: the architecture also shipped as PTX (linux builds).",
        "torch_arches:",
        *(f'  "{s}": {json.dumps(v)}' for s, v in arches.items()),
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvidia-releases", type=Path, required=True, help="local copy of releases.json")
    parser.add_argument("--pytorch-matrix", type=Path, required=True, help="local copy of PyTorch's RELEASE.md")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT.relative_to(REPO)}")
    args = parser.parse_args(argv)
    try:
        text = render(args.nvidia_releases, args.pytorch_matrix)
    except (InputError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
