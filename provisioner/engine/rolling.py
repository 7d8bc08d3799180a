"""Rolling changes of a running fleet: `provision up --batch N|P% --drain CMD --undrain CMD
--gate CMD`.

The controller, not Ansible's `serial`, walks the batches, because the hooks run here, on
the controller, between the plays: for each batch, drain every host, converge the batch,
verify it, run the gate on each verified host, undrain each host that passed. A batch
counts only when every host in it passed; the rollout stops at the first failed batch
(unless `max_fail`, a percentage of a batch, allows more), leaves the failed hosts drained
and the hosts of later batches untouched, and records where it stopped in report.json
(`rollout`), which `--resume RUN_DIR` reads.

Hooks are the operator's own commands (Slurm's `scontrol update nodename={host}
state=drain reason=provision`, `kubectl drain {host}` / `kubectl uncordon {host}`). The one
thing substituted into them is `{host}`, shell-quoted; no other profile or inventory
string ever reaches the shell. The host is also in the environment (PROVISION_HOST, with
PROVISION_HOOK, PROVISION_BATCH and PROVISION_RUN_DIR). Each hook has a time-out (its
whole process group is killed then) and its output goes to `<run>/hooks/`.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from provisioner.errors import ProvisionError
from provisioner.verdicts.checks import failed, passed, skipped

HOOK_TIMEOUT = 600.0  # kubectl drain waits for pods to leave; Slurm's drain returns at once
HOOK_KINDS = ("drain", "gate", "undrain")


@dataclass(frozen=True)
class Hooks:
    drain: str | None = None
    undrain: str | None = None
    gate: str | None = None
    timeout: float = HOOK_TIMEOUT

    def __bool__(self) -> bool:
        return bool(self.drain or self.undrain or self.gate)

    def as_dict(self) -> dict[str, Any]:
        return {"drain": self.drain, "undrain": self.undrain, "gate": self.gate}

    def cli_words(self) -> list[str]:
        words = [w for kind in ("drain", "undrain", "gate") if getattr(self, kind)
                 for w in (f"--{kind}", getattr(self, kind))]
        return words + (["--hook-timeout", f"{self.timeout:g}"] if self.timeout != HOOK_TIMEOUT else [])


def parse_hook(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    if not value.strip() or "\x00" in value:
        raise ProvisionError(f"{flag} is empty", where=flag, fix=f"give the command, e.g. {flag} 'scontrol update "
                             "nodename={host} state=drain reason=provision'")
    return value


def command_for(template: str, host: str) -> str:
    """The hook's command line for `host`: `{host}` replaced by the shell-quoted name, nothing
    else touched (no str.format: a `{` of awk or of a JSON argument stays as written)."""
    return template.replace("{host}", shlex.quote(host))


@dataclass
class HookRun:
    kind: str
    host: str
    rc: int | None  # None: killed at the time-out
    seconds: float
    log: Path

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def detail(self, run_dir: Path) -> str:
        where = self.log.relative_to(run_dir) if self.log.is_relative_to(run_dir) else self.log
        how = "timed out, killed" if self.rc is None else f"exit {self.rc}"
        return f"{how} after {self.seconds:.1f} s, output in {where}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def run_hook(kind: str, template: str, host: str, run_dir: Path, batch: int, timeout: float) -> HookRun:
    """Run one hook for one host on the controller; its output (stdout and stderr) goes to
    <run_dir>/hooks/<batch>-<host>-<kind>.log."""
    folder = run_dir / "hooks"
    folder.mkdir(mode=0o700, exist_ok=True)
    log = folder / f"{batch:03d}-{_safe(host)}-{kind}.log"
    env = {**os.environ, "PROVISION_HOST": host, "PROVISION_HOOK": kind, "PROVISION_BATCH": str(batch),
           "PROVISION_RUN_DIR": str(run_dir)}
    start = time.monotonic()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        # Its own session: at the time-out the whole group goes (sh and what it started).
        proc = subprocess.Popen(["/bin/sh", "-c", command_for(template, host)], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        except BaseException:  # Ctrl-C: the hook goes with us
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return HookRun(kind, host, rc, time.monotonic() - start, log)


def split(hosts: list[str], batch: str) -> list[list[str]]:
    """`hosts` in batches of N, or of P% of them (at least one host), like Ansible's serial."""
    size = (max(1, len(hosts) * int(batch[:-1]) // 100) if batch.endswith("%") else int(batch))
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]


# converge(hosts, batch number) and verify(hosts, batch number) run one playbook on those
# hosts and fold the results into the report (engine/commands.py gives them).
Step = Callable[[list[str], int], None]
Emit = Callable[[dict[str, Any]], None]


def roll(report, hosts: list[str], batch: str, hooks: Hooks, max_fail: int | None, *, converge: Step, verify: Step,
         skip_converge: set[str], emit: Emit | None = None, resume_command: str = "") -> None:
    """Walk `hosts` batch by batch; the outcome is in the report's hosts and `report.rollout`."""
    for host in hosts:
        if host.startswith("-"):  # quoted or not, `kubectl drain -x` would read it as an option
            raise ProvisionError(f"host name {host!r} starts with '-': a hook would read it as an option",
                                 where=host, fix="rename the host in the inventory")
    run_dir = report.run_dir
    groups = split(hosts, batch)
    allowed = 0 if max_fail is None else max_fail
    rollout: dict[str, Any] = {"batch": batch, "batches": groups, "done": [], "failed": [], "untouched": [],
                               "stopped_at": None, "max_fail": allowed, "hooks": hooks.as_dict(),
                               "hook_timeout": hooks.timeout, "resume_command": resume_command}
    report.rollout = rollout
    by_name = {h.name: h for h in report.hosts}

    def hook(kind: str, host: str, number: int) -> HookRun | None:
        template = getattr(hooks, kind)
        if not template:
            return None
        result = run_hook(kind, template, host, run_dir, number, hooks.timeout)
        if emit:
            emit({"event": "provision_hook", "event_data": {"host": host, "hook": kind, "rc": result.rc,
                                                            "detail": result.detail(run_dir)}})
        return result

    def bad(host: str) -> bool:
        h = by_name.get(host)
        return h is None or h.broken or any(c.status == "fail" for c in h.checks)

    for number, group in enumerate(groups, 1):
        failed_here: list[str] = []
        drained: list[str] = []
        for host in group:
            result = hook("drain", host, number)
            if result and not result.ok:
                by_name[host].status = "failed"
                by_name[host].failures.append(f"drain: {result.detail(run_dir)}; the host was not converged")
                failed_here.append(host)
            else:
                drained.append(host)
        if todo := [h for h in drained if h not in skip_converge]:
            converge(todo, number)
        if todo := [h for h in drained if not bad(h)]:
            verify(todo, number)
        for host in drained:
            if bad(host):
                failed_here.append(host)
                continue
            result = hook("gate", host, number)
            if result:
                by_name[host].checks.append((passed if result.ok else failed)("gate", result.detail(run_dir)))
                if not result.ok:
                    failed_here.append(host)
                    continue
            result = hook("undrain", host, number)
            if result and not result.ok:
                by_name[host].status = "failed"
                by_name[host].failures.append(f"undrain: {result.detail(run_dir)}")
                failed_here.append(host)
                continue
            rollout["done"].append(host)
        rollout["failed"] += failed_here
        report.write()
        later = [h for g in groups[number:] for h in g]
        if failed_here and later and 100 * len(failed_here) / len(group) > allowed:
            rollout["stopped_at"] = number
            rollout["untouched"] = later
            for host in later:
                _untouched(by_name[host], number)
            return


def _untouched(host, number: int) -> None:
    host.status = "not-verified"
    host.checks.append(skipped("rollout", f"untouched: the rollout stopped at batch {number}, before this host's "
                                          "batch (not drained, converged or verified)"))


@dataclass(frozen=True)
class UpRequest:
    """What `provision up` asked for once a stopped rollout's record (--resume) filled in what
    was not given again: the hosts, batch, max-fail and hooks, and the profile digest the
    rollout ran with (the resumed run must have the same)."""

    limit: str | None
    batch: str | None
    max_fail: str | None
    hooks: Hooks
    resumed_from: Path | None = None
    resumed_sha256: str | None = None
    resumed_hosts: tuple[str, ...] = ()

    def check_target(self, target) -> None:
        """Before any host is touched: a resumed rollout runs with its own profile, on hosts of
        this inventory only (its record is read back, so its host names are not trusted)."""
        if self.resumed_from is None:
            return
        unknown = [h for h in self.resumed_hosts if h not in target.inventory.hosts]
        if unknown:
            raise ProvisionError(f"the stopped rollout's record names host(s) the inventory does not have: "
                                 f"{', '.join(unknown)}; nothing was touched", where=str(self.resumed_from),
                                 fix=f"resume with the inventory the rollout ran with "
                                     f"({target.inventory.source} is not it), or pass --limit with its hosts")
        if self.resumed_sha256 != target.loaded.digest:
            raise ProvisionError("the profile changed since the stopped rollout", where=str(self.resumed_from),
                                 fix=f"to roll the hosts it left with this profile, pass --limit {self.limit} "
                                     "instead of --resume")

    def resume_command(self, profile: str, inventory: Path, batch: str | None, max_fail: int | None) -> str:
        """The command that resumes this rollout if it stops (printed with its stop)."""
        if not self.hooks:
            return ""
        return shlex.join(["provision", "up", "--profile", profile, str(inventory), "--batch", batch or "1",
                           *(["--max-fail", f"{max_fail}"] if max_fail is not None else []), *self.hooks.cli_words()])


def up_request(*, limit: str | None, batch: str | None, max_fail: str | None, drain: str | None,
               undrain: str | None, gate: str | None, hook_timeout: float, resume: Path | None,
               rollback: bool, confirm: Callable[[str], bool] | None = None) -> UpRequest:
    """The options of `up` checked against each other and completed from --resume's record
    (engine/resume.py); refused with the fix before any host is touched. confirm: asks the
    person at the terminal (None without one) whether stored hooks not given again may run."""
    from provisioner.engine import resume as resume_mod

    given = Hooks(parse_hook(drain, "--drain"), parse_hook(undrain, "--undrain"), parse_hook(gate, "--gate"),
                  hook_timeout)
    if resume is None:
        if given and not batch:
            raise ProvisionError("--drain, --undrain and --gate roll the fleet batch by batch: --batch is missing",
                                 where="--batch", fix="add --batch 1 (one host at a time) or --batch 10%")
        return UpRequest(limit, batch, max_fail, given)
    if rollback:
        raise ProvisionError("--rollback and --resume both choose the profile", where="--rollback",
                             fix="resume a stopped rollback with the --resume it printed, without --rollback")
    record = resume_mod.read(resume)
    if limit:
        raise ProvisionError("--resume and --limit both choose the hosts", where="--resume",
                             fix="use --resume RUN_DIR, or the --limit it printed")
    rollout = record.rollout
    stored = {kind: getattr(rollout.hooks, kind) for kind in HOOK_KINDS
              if getattr(rollout.hooks, kind) and not getattr(given, kind)}
    if stored:
        resume_mod.confirm_hooks(stored, str(resume), confirm)
    hooks = Hooks(given.drain or rollout.hooks.drain, given.undrain or rollout.hooks.undrain,
                  given.gate or rollout.hooks.gate, hook_timeout if hook_timeout != HOOK_TIMEOUT else rollout.hook_timeout)
    return UpRequest(",".join(record.left), batch or rollout.batch,
                     max_fail if max_fail is not None else str(rollout.max_fail), hooks, resume, record.profile_sha256,
                     tuple(record.left))
