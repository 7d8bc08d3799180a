"""The profile digest hashes the model without its defaults (issue 34, item 5): a release
that adds a field leaves every digest a host recorded unchanged, with no per-field
exceptions in digest(). Its cost: a default that changed would leave hosts converged
with the old default looking current. So the defaults are frozen here.

A new field: run `python -m tests.test_profile_digest` to add its default to
tests/data/profile-defaults.json (it never rewrites a default that is already there).
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from provisioner import profiles
from provisioner.profiles.models import Profile

SNAPSHOT = Path(__file__).parent / "data" / "profile-defaults.json"


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def defaults() -> dict[str, object]:
    """Every field's default, by model and field name, as JSON would hold it."""
    out: dict[str, object] = {}
    todo, seen = [Profile], set()
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            todo += _models(field.annotation)
            if field.default is PydanticUndefined and field.default_factory is None:
                continue  # required: no default to freeze
            value = field.get_default(call_default_factory=True)
            value = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
            out[f"{model.__name__}.{name}"] = json.loads(json.dumps(value, default=str))
    return dict(sorted(out.items()))


def _kept(old, new) -> bool:
    """`new` keeps every default `old` had; a key only `new` has is a new field of a section,
    frozen under its own name (the digest leaves defaults out, so it moves no digest)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return all(k in new and _kept(v, new[k]) for k, v in old.items())
    return old == new


def test_no_default_changed_and_every_new_field_is_frozen():
    frozen = json.loads(SNAPSHOT.read_text())
    now = defaults()
    changed = {k: (frozen[k], now[k]) for k in frozen.keys() & now.keys() if not _kept(frozen[k], now[k])}
    assert not changed, (f"defaults changed {changed}: hosts converged with the old default would keep their "
                         "digest; make the new behaviour a new field or value instead")
    new = sorted(now.keys() - frozen.keys())
    assert not new, f"new fields {new}: run `python -m tests.test_profile_digest` to freeze their defaults"


def test_a_field_at_its_default_leaves_the_digest_as_it_was(tmp_path: Path):
    loaded = profiles.load("h100-train")
    child = tmp_path / "c.yml"
    # written out at their defaults: the same digest as leaving them out
    child.write_text("extends: h100-train\nname: h100-train\n"
                     f"description: {loaded.profile.description}\nreboot: {{}}\n")
    assert profiles.load(str(child)).digest == loaded.digest
    data = profiles.as_dict(loaded.profile)
    assert "reboot" in data  # the resolved profile carries it; the digest just does not hash defaults


def test_the_digest_ignores_nothing_that_is_set(tmp_path: Path):
    loaded = profiles.load("debian12-lab")
    base = loaded.digest
    for extra in ("cuda:\n  forward_compat: true\n", "dcgm:\n  exporter:\n    listen_address: 127.0.0.2\n"):
        child = tmp_path / "c.yml"
        child.write_text(f"extends: debian12-lab\nname: debian12-lab\n"
                         f"description: {loaded.profile.description}\n{extra}")
        try:
            other = profiles.load(str(child)).digest
        except Exception as err:  # a setting this profile cannot take is not this test's business
            raise AssertionError(f"{extra!r}: {err}") from err
        assert other != base, extra


if __name__ == "__main__":
    frozen = json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {}
    added = {k: v for k, v in defaults().items() if k not in frozen}
    SNAPSHOT.write_text(json.dumps(dict(sorted({**frozen, **added}.items())), indent=1) + "\n")
    print(f"{len(added)} new default(s) frozen in {SNAPSHOT}", file=sys.stderr)
