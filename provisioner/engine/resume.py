"""What `provision up --resume RUN_DIR` takes from a stopped rollout's record, and on what terms.

A run folder read back is untrusted data: it may be shared, copied, or edited by someone
else, and the rollout's hooks in it are shell commands this machine runs. So:

- only a run folder, and a report.json, that belong to the invoking user and that no one
  else can write is read (outputs.check_private);
- every field of the record is validated (RunRecord): a wrong type or value is one error
  naming the field, never a traceback or a widened run;
- the hosts it names must be hosts of the inventory (UpRequest.check_target, in
  engine/rolling.py): `failed: ["all"]` never becomes `--limit all`;
- a hook stored in it runs only when given again on the command line (the printed resume
  line carries them), or when shown and confirmed at a terminal (`confirm`); without a
  terminal it is refused.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from provisioner import outputs
from provisioner.errors import ProvisionError
from provisioner.safe_paths import control_character

Confirm = Callable[[str], bool]  # shows the question, returns the answer (given only with a terminal)
HOOK_FLAGS = {"drain": "--drain", "undrain": "--undrain", "gate": "--gate"}
FIX = "this report.json was edited or written by another tool; resume from the run folder provision printed, or " \
      "run provision up with --limit"


def _shown_plainly(value: str) -> str:
    """A hook is shown before it may run: tabs and newlines (a multi-line hook given on the
    command line) are what they look like; no other control character (ESC, CR) may hide text."""
    found = control_character(value.replace("\t", " ").replace("\n", " "))
    if found:
        raise ValueError(f"holds a control character ({found})")
    return value


def _batch(value: str) -> str:
    if value.endswith("%") and int(value[:-1]) > 100:
        raise ValueError("a percentage above 100")
    return value


# A host name as the inventory allows it (render/inventory.py); membership is checked against
# the inventory itself before any host is touched.
Host = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9_.:-]+$")]
Hook = Annotated[str, StringConstraints(min_length=1, max_length=4096), AfterValidator(_shown_plainly)]
Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class StoredHooks(_Strict):
    drain: Optional[Hook] = None
    undrain: Optional[Hook] = None
    gate: Optional[Hook] = None


class Rollout(_Strict):
    """report.json's `rollout`, as engine/rolling.py writes it."""

    batch: Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,5}%?$"), AfterValidator(_batch)]
    batches: list[list[Host]]
    done: list[Host]
    failed: list[Host]
    untouched: list[Host]
    stopped_at: Optional[Annotated[int, Field(ge=1)]]
    max_fail: Annotated[int, Field(ge=0, le=100)]
    hooks: StoredHooks
    hook_timeout: Annotated[float, Field(ge=1, le=86400, allow_inf_nan=False)]
    resume_command: str


class RunRecord(BaseModel):
    """The report.json of a stopped rollout: the fields --resume reads, and the report's
    other fields typed (reports/report.py; keys a newer version adds are left unread)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    command: Literal["up"]
    profile: str
    profile_sha256: Digest
    inventory: str
    run_dir: str
    started: str
    finished: str
    interrupted: bool
    exit_code: int
    errors: list[str]
    rollout: Rollout
    hosts: list[dict[str, Any]]

    @property
    def left(self) -> list[str]:
        """The hosts left to do: the failed ones (still drained), then the untouched ones."""
        return list(dict.fromkeys([*self.rollout.failed, *self.rollout.untouched]))


# Pydantic's words where they name our classes.
_MESSAGES = {"model_type": "must be a mapping", "model_attributes_type": "must be a mapping",
             "extra_forbidden": "unknown field (a provision report has no such field)"}


def _field_error(exc: ValidationError, where: str) -> ProvisionError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    message = _MESSAGES.get(err["type"], err["msg"].removeprefix("Value error, "))
    found = repr(err.get("input"))  # repr: a control character in it is shown escaped
    found = found if len(found) <= 60 else found[:57] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return ProvisionError(f"report.json field {field}: {message} (found {found}){more}", where=where, fix=FIX)


def read(run_dir: Path) -> RunRecord:
    """The stopped rollout's record, from a run folder that is the user's alone, validated."""
    from provisioner.reports import report as report_mod

    run_dir = Path(run_dir).expanduser()
    path = report_mod._report_json(run_dir)  # "not a run folder" said first, as for every command
    fix = "resume only from a run folder of your own that no one else can write (chmod go-w), or pass --limit"
    outputs.check_private(path.parent, "run folder", fix)
    outputs.check_private(path, "run folder's report.json", fix)
    data = report_mod.read(path)
    where = str(path)
    if data.get("command") != "up" or data.get("rollout") is None:
        raise ProvisionError("this run folder holds no rollout (a `provision up` with --drain, --undrain or --gate)",
                             where=where, fix="pass the run folder a stopped rollout printed (`resume: ...`)")
    try:
        record = RunRecord.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc, where) from None
    if not record.left:
        raise ProvisionError("nothing to resume: every host of that rollout was done", where=where,
                             fix="run provision up without --resume")
    return record


def confirm_hooks(stored: dict[str, str], where: str, confirm: Confirm | None) -> None:
    """Hooks the record holds and the command line did not give again: shown and asked at a
    terminal, refused without one. They would run on this machine, as this user."""
    words = shlex.join(w for kind, command in stored.items() for w in (HOOK_FLAGS[kind], command))
    if confirm is None:
        raise ProvisionError(f"the stopped rollout's record holds hook commands not given again: {words}; commands "
                             "from a file are not run unasked", where=where,
                             fix="pass them again on the command line, as the printed `resume:` line does, or run at a "
                                 "terminal to be shown them and asked")
    question = (f"The stopped rollout's record ({where}) holds these commands, which would run on this machine:\n  "
                + "\n  ".join(f"{HOOK_FLAGS[kind]} {shlex.quote(command)}" for kind, command in stored.items())
                + "\nRun them?")
    if not confirm(question):
        raise ProvisionError("not resumed: the stored hook commands were not confirmed", where=where,
                             fix="pass the hooks you want on the command line with --resume")
