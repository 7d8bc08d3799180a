"""The profiles `provision up` applied, kept on the controller by digest: what `up --rollback`
goes back to (engine/rollback.py).

A host's state record names the digest of the profile it ran before, and carries a copy of
that profile's YAML; the copy is the host's word, and a host that lies about it would choose
what every host of its group gets. So the YAML a host sends is never loaded: the digest is
looked up here, in the controller's own copies.

Content-addressed, under paths.state_dir()/profiles (owner-only):
- `<sha256>.yml`: a resolved profile, loaded only when its digest is its name;
- `<sha256>.json`: for a host converged with per-host overrides (the profile's
  `inventory_overrides`), whose record names a digest over the profile's and the overrides
  (render.host_digest): exactly the text that was hashed, checked against its name before
  the profile digest in it is followed.
A copy that does not hash to its name is refused, never used.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from provisioner import outputs, paths, profiles
from provisioner.errors import ProvisionError
from provisioner.render import host_digest_source, host_overrides
from provisioner.render.inventory import Inventory

DIGEST = re.compile(r"^[0-9a-f]{64}$")


def folder() -> Path:
    return paths.state_dir() / "profiles"


def _private(path: Path) -> Path:
    return outputs.check_private(path, "profile store", fix="make it yours and owner-only (chmod go-w), or remove "
                                                             "it and pass the profile to go back to with --profile FILE")


def keep(loaded: profiles.Loaded, inventory: Inventory) -> Path:
    """Keep the profile `up` is about to apply, and the digest each host with overrides will
    record; returns the profile's copy. Before any host is touched: a rollback must find it."""
    base = folder()
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ProvisionError(f"cannot keep the applied profile for rollbacks: {exc.strerror or exc}", where=str(base),
                             fix="set XDG_STATE_HOME to a folder you can write to") from None
    _private(base)
    kept = outputs.write_file(base / f"{loaded.digest}.yml", profiles.to_yaml(loaded.profile), mode=0o600,
                              what="kept profile", replace=True)
    for host in inventory.hosts:
        overrides = host_overrides(loaded, inventory, host)
        if overrides:
            source = host_digest_source(loaded.digest, overrides)
            name = hashlib.sha256(source.encode()).hexdigest()
            outputs.write_file(base / f"{name}.json", source, mode=0o600, what="kept host digest", replace=True)
    return kept


def find(digest: str) -> profiles.Loaded | None:
    """The profile this controller applied under `digest` (a profile's, or a host's with its
    overrides), loaded and checked against it; None when it was never kept here."""
    if not DIGEST.match(digest):  # a host's word: never a path
        raise ProvisionError(f"{digest!r} is not a sha256 digest", fix="a host's state record was edited; converge it "
                                                                      "again with provision up")
    base = folder()
    if not base.exists():
        return None
    _private(base)
    alias = base / f"{digest}.json"
    if alias.exists():
        source = _private(alias).read_bytes()
        try:
            target = json.loads(source)["profile_sha256"] if hashlib.sha256(source).hexdigest() == digest else None
        except (ValueError, KeyError, TypeError):
            target = None
        if not isinstance(target, str) or not DIGEST.match(target):
            raise ProvisionError("the kept host digest does not hash to its name", where=str(alias),
                                 fix="remove it, and pass the profile to go back to with --profile FILE")
        digest = target
    path = base / f"{digest}.yml"
    if not path.exists():
        return None
    loaded = profiles.load(str(_private(path)))
    if loaded.digest != digest or len(loaded.files) != 1:  # nothing of another file (extends:) either
        raise ProvisionError("the kept profile does not hash to its name", where=str(path),
                             fix="remove it, and pass the profile to go back to with --profile FILE")
    return loaded
