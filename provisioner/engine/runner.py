"""Running a playbook through ansible-runner and reading its event stream.

Nothing here parses Ansible's human output: per-host results come from the runner's
structured events (runner_on_ok, runner_on_failed, ..., playbook_on_stats). Plays hand
data to the controller through a final `debug: var=provisioner_*` task, which arrives
here as that event's result.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from provisioner import paths
from provisioner.errors import ProvisionError

EventHook = Callable[[dict[str, Any]], None]

# The prompt ansible-playbook shows for --ask-become-pass, as ansible-runner's expect sees it.
BECOME_PROMPT = r"^BECOME password.*:\s*?$"


@dataclass(frozen=True)
class Become:
    """How the plays gain root on the hosts (they all run with `become: true`).

    The password never touches disk here: a file the user keeps is named to Ansible
    (--become-password-file), and a typed one goes to ansible-runner's prompt answerer in
    memory only (never its env/passwords file)."""

    method: str = "sudo"
    password_file: Path | None = None
    password: str | None = field(default=None, repr=False)
    ask: bool = False  # prompt for the password (once, before the first playbook)

    def prompted(self) -> Become:
        """This, with the password typed in when it is to be asked for."""
        if not self.ask or self.password is not None:
            return self
        import getpass
        import warnings

        # Without a terminal getpass reads standard input (a password piped in still works)
        # and warns that it cannot hide the echo; with nothing there, say why and what to use.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", getpass.GetPassWarning)
            try:
                password = getpass.getpass(f"BECOME password ({self.method}): ")
            except EOFError:
                raise ProvisionError("--ask-become-pass found no terminal to ask on and no password on standard "
                                     "input", where="--ask-become-pass",
                                     fix="use --become-password-file FILE (the password on one line, the file "
                                         "owner-only) for cron, CI and other runs without a terminal") from None
        return replace(self, password=password)

    def cmdline(self) -> list[str]:
        args = ["--become-method", self.method]
        if self.password_file is not None:
            args += ["--become-password-file", str(self.password_file)]
        elif self.password is not None:
            args.append("--ask-become-pass")
        return args

    def expect(self) -> dict[str, str]:
        return {BECOME_PROMPT: self.password} if self.password is not None and self.password_file is None else {}


@dataclass
class HostRun:
    name: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False
    current_task: str = ""
    changed_tasks: list[str] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)  # changed task -> what it changed (check mode: would)
    failures: list[str] = field(default_factory=list)
    reported: dict[str, Any] = field(default_factory=dict)  # provisioner_* vars the play handed over
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"


@dataclass
class PlaybookRun:
    playbook: str
    status: str  # ansible-runner's: successful, failed, canceled, timeout
    rc: int
    hosts: dict[str, HostRun]
    artifacts: Path
    errors: list[str] = field(default_factory=list)  # failures not tied to a host (syntax errors, ...)


def _diff_text(diff: Any, limit: int = 30) -> str:
    """Ansible's --diff result (one dict or a list of them) as a short unified diff."""
    import difflib

    lines: list[str] = []
    for part in diff if isinstance(diff, list) else [diff]:
        if not isinstance(part, dict):
            continue
        if "prepared" in part:
            lines += str(part["prepared"]).splitlines()
            continue
        before, after = part.get("before", ""), part.get("after", "")
        if isinstance(before, dict) or isinstance(after, dict):
            lines.append(f"{before} -> {after}")
            continue
        header = str(part.get("before_header") or part.get("after_header") or "")
        lines += list(difflib.unified_diff(str(before).splitlines(), str(after).splitlines(),
                                           f"{header} (now)", f"{header} (profile)", lineterm="", n=0))
    return "\n".join(lines[:limit] + ([f"... {len(lines) - limit} more lines"] if len(lines) > limit else []))


def _message(result: dict[str, Any]) -> str:
    # Fact gathering wraps the real error of each module it ran in failed_modules.
    inner = [_message(sub) for sub in (result.get("failed_modules") or {}).values()]
    if inner:
        return "; ".join(inner)
    msg = result.get("msg") or result.get("stderr") or result.get("reason") or ""
    if result.get("module_stderr"):
        msg = f"{msg}: {result['module_stderr']}"
    if isinstance(msg, list):
        msg = " ".join(map(str, msg))
    return " ".join(str(msg).split())[:500]


class EventReader:
    """Folds the runner's events into per-host results."""

    def __init__(self, hook: EventHook | None = None):
        self.hosts: dict[str, HostRun] = {}
        self.hook = hook

    def host(self, name: str) -> HostRun:
        return self.hosts.setdefault(name, HostRun(name))

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        name = data.get("host")
        task = (data.get("task") or "").strip()
        res = data.get("res") or {}
        if kind == "runner_on_start" and name:
            self.host(name).current_task = task
        elif kind == "runner_on_ok" and name:
            host = self.host(name)
            if res.get("changed"):
                host.changed_tasks.append(task)
                detail = _diff_text(res["diff"]) if res.get("diff") else _message(res)
                if detail:
                    host.diffs[task] = detail
            host.facts.update(res.get("ansible_facts") or {})
            host.reported.update({k: v for k, v in res.items() if k.startswith("provisioner_")})
        elif kind == "runner_on_failed" and name and not data.get("ignore_errors"):
            self.host(name).failures.append(f"{task}: {_message(res)}")
        elif kind == "runner_on_unreachable" and name:
            host = self.host(name)
            host.unreachable = True
            # The task says how far the host got: lost mid-install reads differently from never reached.
            host.failures.append(f"unreachable during {task!r}: {_message(res)}" if task else f"unreachable: {_message(res)}")
        elif kind == "playbook_on_stats":
            for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"), ("skipped", "skipped")):
                for hostname, count in (data.get(key) or {}).items():
                    setattr(self.host(hostname), attr, count)
            for hostname in data.get("dark") or {}:
                self.host(hostname).unreachable = True
        if self.hook:
            self.hook(event)
        return True  # keep every event in the run record


# What of the controller's environment reaches Ansible, and with it the run folder
# (ansible-runner records the environment in artifacts/*/command): the names a run needs,
# and names an operator adds in PROVISION_PASS_ENV (comma-separated). Everything else (a
# cloud key, a token in the operator's shell) stays out.
ENV_ALLOWED = re.compile(
    r"(PATH|HOME|USER|LOGNAME|SHELL|TERM|TMPDIR|TZ|LANG|LANGUAGE|LC_\w+|SSH_AUTH_SOCK|LD_LIBRARY_PATH|VIRTUAL_ENV"
    r"|PYTHONPATH|SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE"
    r"|(?i:https?_proxy|no_proxy|all_proxy)"
    r"|ANSIBLE_\w+|AWX_\w+|RUNNER_\w+|ORIGINAL_STDOUT_CALLBACK|AD_HOC_COMMAND_ID)")


def allowed_env(env: dict[str, str]) -> dict[str, str]:
    extra = {n.strip() for n in os.environ.get("PROVISION_PASS_ENV", "").split(",") if n.strip()}
    return {k: v for k, v in env.items() if ENV_ALLOWED.fullmatch(k) or k in extra}


def redact_command_record(path: Path) -> None:
    """ansible-runner's record of the command and environment without the secrets values
    carry (a proxy's user:password@, a token): Ansible needs them while it runs, the run
    folder never does. Rewritten as soon as the run ends, owner-only like the original."""
    from provisioner.profiles import secrets

    try:
        text = path.read_text(encoding="utf-8")
    except OSError:  # the run never started: no record
        return
    redacted = secrets.redact_values(text)
    if redacted != text:
        from provisioner import outputs

        outputs.write_file(path, redacted, mode=0o600, what="run record", replace=True)


def run_playbook(
    name: str,
    inventory_dir: Path,
    record_dir: Path,
    *,
    limit: str | None = None,
    forks: int | None = None,
    check: bool = False,
    extravars: dict[str, Any] | None = None,
    hook: EventHook | None = None,
    become: Become | None = None,
    ident: str | None = None,
) -> PlaybookRun:
    """ident: the run's folder under artifacts/ (default: the playbook's name; a rollout
    runs each playbook once per batch, each in its own folder)."""
    import shlex

    import ansible_runner  # heavy; only commands that talk to hosts pay for it

    reader = EventReader(hook)
    become = become or Become()
    cmdline = shlex.join((["--check", "--diff"] if check else []) + become.cmdline())
    runner = ansible_runner.interface.init_runner(
        private_data_dir=str(record_dir),
        ident=ident or name,
        playbook=str(paths.playbook(name)),
        inventory=str(inventory_dir / "hosts.yml"),
        envvars={
            "ANSIBLE_CONFIG": str(inventory_dir / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            # ansible-runner turns host key checking off unless told otherwise; ours stays on
            # (the rendered ansible.cfg says so) unless the user's own environment says no.
            "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING", "True"),
            # ansible-playbook is installed beside this Python (a venv need not be on PATH).
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        },
        cmdline=cmdline,
        passwords=become.expect() or None,
        extravars=extravars or {},
        limit=limit,
        forks=forks,
        event_handler=reader,
        quiet=True,
        suppress_env_files=True,
    )
    runner.config.env = allowed_env(runner.config.env)  # before it runs: what Ansible and the record see
    artifacts = record_dir / "artifacts" / (ident or name)
    try:
        runner.run()
    finally:
        redact_command_record(artifacts / "command")
    errors = []
    if runner.status != "successful" and not any(h.failures for h in reader.hosts.values()):
        # No host carries the failure: Ansible itself stopped (syntax error, bad limit, ...).
        stdout = (artifacts / "stdout").read_text(errors="replace") if (artifacts / "stdout").exists() else ""
        lines = [line for line in stdout.splitlines() if "ERROR" in line or "error" in line.lower()]
        errors = lines[-5:] or [f"ansible-runner ended with status {runner.status}, rc {runner.rc}"]
    return PlaybookRun(name, runner.status, runner.rc, reader.hosts, artifacts, errors)
