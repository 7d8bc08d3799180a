"""The diagnose run's outputs: summary.md (per host, faults first, each finding with its
evidence and fix, then what could not be collected and why) and one tarball holding it, each
host's collected output (one file per command) and findings.json.

Everything a host sent passes through `redact()`: each host's diagnosis once (redact_host),
its state comparison value by value (redact_data, so the JSON stays JSON), each command's
output and file as it is added to the tarball. Text written is cleaned of terminal controls
(reports/terminal.py), so `cat` on any of it is safe. Member names come from the product's
own lists (the command plan, the files asked for), never from what a host returned. The
tarball is written with outputs.write_file (atomic; never over a file provision did not
write without --force).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import json
import re
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

from provisioner import outputs
from provisioner.profiles import secrets
from provisioner.reports.terminal import clean
from provisioner.verdicts.diagnosis import HostDiagnosis

_ASSIGNMENT = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>\s*[=:]\s*)(?P<value>\"[^\"]*\"|'[^']*'|\S+)")
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)
REDACTED = secrets.REDACTED
# apt's pin files say `Pin: version 535.*`: the word pin is a secret's name elsewhere (a PIN), not here.
NOT_SECRET_HERE = frozenset({"pin", "pin-priority"})


def redact(text: str) -> str:
    """`text` with private keys, the values of secret-named assignments (token=..., password: ...,
    the names provisioner/profiles/secrets.py calls secrets) and secrets in values under any name
    (a URL's password, a token, a webhook URL: secrets.SECRET_VALUE) replaced."""
    text = secrets.redact_values(_PEM.sub(REDACTED, text))

    def value(match: re.Match) -> str:
        if secrets.is_secret_name(match.group("key")) and match.group("key").lower() not in NOT_SECRET_HERE:
            return f"{match.group('key')}{match.group('sep')}{REDACTED}"
        return match.group(0)

    return _ASSIGNMENT.sub(value, text)


def redact_data(value):
    """Parsed JSON with every string redacted and the values of secret-named keys replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if secrets.is_secret_name(str(k)) and str(k).lower() not in NOT_SECRET_HERE
                else redact_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_data(v) for v in value]
    return redact(value) if isinstance(value, str) else value


def redact_host(host: HostDiagnosis) -> HostDiagnosis:
    """The diagnosis with every text a host could have put in it redacted."""
    findings = [dataclasses.replace(f, title=redact(f.title), evidence=tuple(redact(e) for e in f.evidence),
                                    fix=redact(f.fix)) for f in host.findings]
    return dataclasses.replace(host, findings=findings, not_collected=[redact(w) for w in host.not_collected],
                               failures=[redact(w) for w in host.failures])


def summary_markdown(hosts: list[HostDiagnosis], *, profile: str, run_dir: Path) -> str:
    faulty = [h for h in hosts if h.faults]
    lines = [f"# provision diagnose: profile {profile}", "",
             f"{len(hosts)} host(s), {len(faulty)} with a fault" + (": " + ", ".join(h.name for h in faulty)
                                                                     if faulty else "") + ".",
             f"Run record: {run_dir}", ""]
    for host in sorted(hosts, key=lambda h: (not h.faults, h.name)):
        lines += [f"## {host.name}" + (f" ({host.status})" if host.status != "ok" else ""), ""]
        if not host.findings:
            lines += ["No finding.", ""]
        for f in host.findings:
            lines += [f"### {f.severity.upper()}: {f.title}", ""]
            if f.evidence:
                lines += ["Evidence:", "", "```", *f.evidence, "```", ""]
            lines += [f"Fix: {f.fix}", ""]
        if host.not_collected:
            lines += ["### Not collected", ""] + [f"- {why}" for why in host.not_collected] + [""]
    return clean("\n".join(lines))


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = clean(text).encode("utf-8", "replace")
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
    tar.addfile(info, io.BytesIO(data))


# A file a glob matched is named in the tarball only when its name is a plain file name (the
# folder is the one asked for): a host's `../../x` or `a/../../b` is never a member name.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def _asked_files(patterns: Sequence[str], returned: dict) -> list[str]:
    """The paths in `returned` that answer `patterns`: each exact path asked for, and for a
    glob (`/etc/apt/preferences.d/*`) plain file names in its folder that match it."""
    found = []
    for pattern in patterns:
        if not any(c in pattern for c in "*?["):
            found += [pattern] if pattern in returned else []
            continue
        folder, _, name_glob = pattern.rpartition("/")
        for path in sorted(p for p in returned if isinstance(p, str)):
            parent, _, name = path.rpartition("/")
            if parent == folder and _PLAIN_NAME.fullmatch(name) and fnmatch.fnmatchcase(name, name_glob):
                found.append(path)
    return found


def tarball(path: Path, hosts: list[HostDiagnosis], collected: dict[str, dict], state: dict[str, dict],
            summary: str, *, commands: Sequence[str], files: Sequence[str], force: bool = False) -> Path:
    """diagnose/summary.md, diagnose/<host>/findings.json, diagnose/<host>/<command>.txt (argv, rc, output)
    for each of `commands` (the plan's names) a host answered, diagnose/<host>/files/<path> for `files`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        _add(tar, "diagnose/summary.md", summary)
        for host in hosts:
            base = f"diagnose/{host.name}"  # an inventory host name: a host name or an IP address
            _add(tar, f"{base}/findings.json", json.dumps(host.as_dict(), indent=2) + "\n")
            _add(tar, f"{base}/state-diff.json", json.dumps(redact_data(state.get(host.name) or {}), indent=2) + "\n")
            data = collected.get(host.name) or {}
            answered = data.get("commands") or {}
            for name in commands:
                cmd = answered.get(name)
                if not isinstance(cmd, dict):
                    continue
                head = (f"$ {' '.join(str(a) for a in cmd.get('argv') or [])}\n# rc {cmd.get('rc')}"
                        + (" (timed out)" if cmd.get("timed_out") else "") + (" (cut to its bound)" if cmd.get("cut") else "")
                        + (f" (not run: {cmd['skipped']})" if cmd.get("skipped") else "") + "\n")
                body = str(cmd.get("stdout", "")) + (f"\n# stderr:\n{cmd['stderr']}" if cmd.get("stderr") else "")
                _add(tar, f"{base}/{name}.txt", redact(head + body) + "\n")
            read = data.get("files") or {}
            for file_path in _asked_files(files, read):
                if read[file_path] is not None:
                    _add(tar, f"{base}/files/{file_path.strip('/').replace('/', '__')}", redact(str(read[file_path])))
    return outputs.write_file(path, buffer.getvalue(), force=force, mode=0o600, what="diagnose tarball")
