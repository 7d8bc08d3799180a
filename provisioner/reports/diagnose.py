"""The diagnose run's outputs: summary.md (per host, faults first, each finding with its
evidence and fix, then what could not be collected and why) and one tarball holding it, each
host's collected output (one file per command) and findings.json.

Everything a host sent passes through `redact()` first. The tarball is written with
outputs.write_file (atomic; never over a file provision did not write without --force).
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from pathlib import Path

from provisioner import outputs
from provisioner.render import secrets
from provisioner.verdicts.diagnosis import HostDiagnosis

_ASSIGNMENT = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<sep>\s*[=:]\s*)(?P<value>\"[^\"]*\"|'[^']*'|\S+)")
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)
REDACTED = "[redacted by provision]"
# apt's pin files say `Pin: version 535.*`: the word pin is a secret's name elsewhere (a PIN), not here.
NOT_SECRET_HERE = frozenset({"pin", "pin-priority"})


def redact(text: str) -> str:
    """`text` with private keys, the values of secret-named assignments (token=..., password: ...,
    the names provisioner/render/secrets.py calls secrets) and secrets in values under any name
    (a URL's password, a token, a webhook URL: secrets.SECRET_VALUE) replaced."""
    text = secrets.redact_values(_PEM.sub(REDACTED, text), REDACTED)

    def value(match: re.Match) -> str:
        if secrets.is_secret_name(match.group("key")) and match.group("key").lower() not in NOT_SECRET_HERE:
            return f"{match.group('key')}{match.group('sep')}{REDACTED}"
        return match.group(0)

    return _ASSIGNMENT.sub(value, text)


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
                lines += ["Evidence:", "", "```", *[redact(e) for e in f.evidence], "```", ""]
            lines += [f"Fix: {f.fix}", ""]
        if host.not_collected:
            lines += ["### Not collected", ""] + [f"- {why}" for why in host.not_collected] + [""]
    return "\n".join(lines)


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8", "replace")
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
    tar.addfile(info, io.BytesIO(data))


def tarball(path: Path, hosts: list[HostDiagnosis], collected: dict[str, dict], state: dict[str, dict],
            summary: str, *, force: bool = False) -> Path:
    """diagnose/summary.md, diagnose/<host>/findings.json, diagnose/<host>/<command>.txt (argv, rc, output)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        _add(tar, "diagnose/summary.md", summary)
        for host in hosts:
            base = f"diagnose/{host.name}"
            _add(tar, f"{base}/findings.json", json.dumps(host.as_dict(), indent=2) + "\n")
            _add(tar, f"{base}/state-diff.json", redact(json.dumps(state.get(host.name) or {}, indent=2)) + "\n")
            data = collected.get(host.name) or {}
            for name, cmd in sorted((data.get("commands") or {}).items()):
                head = (f"$ {' '.join(cmd.get('argv') or [])}\n# rc {cmd.get('rc')}"
                        + (" (timed out)" if cmd.get("timed_out") else "") + (" (cut to its bound)" if cmd.get("cut") else "")
                        + (f" (not run: {cmd['skipped']})" if cmd.get("skipped") else "") + "\n")
                body = str(cmd.get("stdout", "")) + (f"\n# stderr:\n{cmd['stderr']}" if cmd.get("stderr") else "")
                _add(tar, f"{base}/{name}.txt", head + redact(body) + "\n")
            for file_path, text in sorted((data.get("files") or {}).items()):
                if text is not None:
                    _add(tar, f"{base}/files/{file_path.strip('/').replace('/', '__')}", redact(text))
    return outputs.write_file(path, buffer.getvalue(), force=force, mode=0o600, what="diagnose tarball")
