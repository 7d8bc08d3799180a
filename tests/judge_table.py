"""The fixture table: every capture in tests/data/fixtures (expected verdicts in
tests/test_verify.py's VERDICTS) and tests/data/captures (manifest.yml) judged through
`provision judge`'s library function, against the manifest's verdicts.

    .venv/bin/python -m tests.judge_table
"""

from __future__ import annotations

import collections
from pathlib import Path

import yaml

from provisioner.judge import captures
from provisioner.profiles.models import Profile
from provisioner.profiles import deep_merge
from provisioner import profiles

CAPTURES = Path(__file__).resolve().parent / "data" / "captures"
READER_FORMS = {"gpus": None, "smi-error": "nvidia-smi error", "processes": "nvidia-smi processes csv",
                "topo": "nvidia-smi topo -m", "nvlink": "nvidia-smi nvlink -s", "nccl": "nccl-tests log",
                "metrics": "dcgm-exporter scrape", "diag": "dcgmi diag", "discovery": "dcgmi discovery", "cmd": None}


def manifest_profile(spec: dict) -> Profile:
    spec = dict(spec)
    base = spec.pop("base")
    data = deep_merge(profiles.as_dict(profiles.load(base).profile), spec)
    data["fabric_manager"]["version"] = None
    return Profile.model_validate(data)


def cases(fixtures: Path):
    """(group, path, profile, verdict, check, detail) for every capture we hold a verdict for."""
    from tests.test_verify import VERDICTS, H100

    for name, (reader, p, verdict, check, detail) in sorted(VERDICTS.items()):
        group = "/".join(name.split("/")[:2]) if name.startswith("nvidia-smi/") else name.split("/")[0]
        if reader == "cmd":
            yield group, fixtures / name, H100, "unreadable", None, "a command line"
        else:
            yield group, fixtures / name, p or H100, verdict, check, detail
    for name, entry in sorted(yaml.safe_load((CAPTURES / "manifest.yml").read_text())["captures"].items()):
        yield "tests/data/captures", CAPTURES / name, manifest_profile(entry["profile"]), entry["verdict"], \
            entry.get("check"), entry.get("detail")


def right(result: captures.Judged, verdict: str, check: str | None, detail: str | None) -> bool:
    if verdict == "unreadable":
        return result.unreadable is not None and (detail is None or detail in result.unreadable)
    if result.unreadable:
        return False
    if verdict == "pass" and any(c.status == "fail" for c in result.checks):
        return False
    if check is None:
        return verdict != "pass" or any(c.status == "pass" for c in result.checks)
    deciding = [c for c in result.checks if c.name == check]
    return bool(deciding) and deciding[0].status == verdict and (detail is None or detail in deciding[0].detail)


def table(fixtures: Path) -> list[tuple[str, int, int]]:
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for group, path, profile, verdict, check, detail in cases(fixtures):
        result = captures.judge_files(profile, [path])[0]
        counts[group][0] += right(result, verdict, check, detail)
        counts[group][1] += 1
    return [(g, ok, n) for g, (ok, n) in sorted(counts.items())]


if __name__ == "__main__":
    from tests.conftest import _fixtures

    rows = table(_fixtures())
    print(f"{'group':28} judged right / files")
    for group, ok, n in rows:
        print(f"{group:28} {ok:3} / {n}")
    print(f"{'total':28} {sum(r[1] for r in rows):3} / {sum(r[2] for r in rows)}")
