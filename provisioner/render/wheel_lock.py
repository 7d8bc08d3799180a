"""An environment's lock in a wheelhouse (`provision wheelhouse`): every wheel it installs,
by name, version, file and sha256, and what it was collected for (the requirements, the
Python, the platform). `provision wheelhouse` writes one per environment under
<wheelhouse>/locks/<name>.json; `render` reads it back for the python_env role, which installs
the environment from the copied wheelhouse with `pip install --no-index --require-hashes`
against it and records the result, the package set drift compares against.

The lock is read from the operator's files root, but what pip sees of it is rendered by us
(`name==version --hash=sha256:...`), each field checked here: never a pip option.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provisioner.errors import ProvisionError

LOCKS = "locks"
NAME = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
VERSION = r"^[0-9][0-9A-Za-z.+!_-]*$"
WHEEL = r"^[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl$"


class Wheel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME)
    version: str = Field(pattern=VERSION)
    file: str = Field(pattern=WHEEL)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Lock(BaseModel):
    model_config = ConfigDict(extra="forbid")
    env: str
    python: str = Field(pattern=r"^3\.\d{1,2}$")
    platform: str
    requirements: list[str]
    wheels: list[Wheel] = Field(min_length=1)


def path(folder: Path | str, env: str) -> Path:
    return Path(folder) / LOCKS / f"{env}.json"


def is_locked(folder: Path | str) -> bool:
    """A wheelhouse `provision wheelhouse` made (it has locks/): environments install from it only."""
    return (Path(folder) / LOCKS).is_dir()


def read(folder: Path | str, env: str) -> Lock:
    where = path(folder, env)
    try:
        return Lock.model_validate(json.loads(where.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ProvisionError(f"the wheelhouse {folder} has no lock for the environment {env}", where=str(where),
                             fix="collect it again: provision wheelhouse --profile P -o <the wheelhouse>") from None
    except (OSError, ValueError, ValidationError) as exc:
        raise ProvisionError(f"the environment {env}'s lock is not one provision wheelhouse wrote "
                             f"({str(exc).splitlines()[0][:200]})", where=str(where),
                             fix="collect it again: provision wheelhouse --profile P -o <the wheelhouse>") from None


def dump(lock: Lock) -> str:
    return json.dumps(lock.model_dump(), indent=2, sort_keys=True) + "\n"
