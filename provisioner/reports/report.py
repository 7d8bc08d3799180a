"""The run's report: one shape for people (rich tables) and machines (--json, report.json).

JSON shape (stable; new keys may be added, none removed or renamed):
{
  "command": "up", "profile": "h100-train", "profile_sha256": "...",
  "run_dir": "/abs/path", "started": "ISO-8601 UTC", "finished": "...",
  "interrupted": false, "exit_code": 0, "verdict": "one line for the fleet",
  "errors": ["failures not tied to a host"], "retry": "the command that re-runs only the hosts that are not ok, or null",
  "inventory": "the inventory path as given",
  "rollout": null, or for a rolling up: {"batch": "1", "batches": [["n1"], ["n2"]], "done": [...], "failed": [...],
              "untouched": [...], "stopped_at": 2 or null, "resume_command": "provision up ... (without --limit)",
              "hooks": {"drain": "CMD", "undrain": "CMD", "gate": "CMD"}, "hook_timeout": 600},
  "accept": null, or for `provision accept`: {"level": "quick|standard|burn-in", "burn_in": {host: {"device": "gpu|cpu",
             "seconds", "load_tflops": {label: TFLOPS}, "telemetry": "sampled" or why not, "samples", "temperature_c":
             {"min", "max"}, "sm_clock_fraction_min", "throttle_reasons": {reason: samples}, "xids": [{"xid", "pci",
             "message"}], "ecc_uncorrected_delta": {gpu: n}}} (burn-in only), "cost": {"per_hour": 32.0,
             "nodes": [{"name", "samples_per_s", "per_hour", "samples_per_s_per_dollar_hour",
             "dollars_per_million_samples"}], "fleet": {the same} or null} or null,
             "fleet": {"busbw_gbps", "floor_gbps", "finding": engine/bisect.Finding.as_dict(), "drain": CMD or null,
             "drain_ran": bool, "drain_rc": the drain's exit status, null when not run or killed} or null},
  "summary": {"hosts": 30, "ok": 27, "changed": 3, "drifted": 0, "failed": 2, "unreachable": 1, "unknown": 0},
  "source": null, or for `check --from-prometheus`: {"prometheus": "URL", "evaluated": "ISO-8601 UTC",
             "max_age_s": 900, "ignored_series": 0},
  "hosts": [{"name": "node1", "status": "ok|changed|drift|failed|unreachable|not-verified|unknown",
             "outcome": "ok|drifted|failed|unreachable|not-verified|unknown",
             "changed_tasks": [...], "diffs": {"task": "unified diff or message"}, "failures": [...],
             "checks": [{"name": "...", "status": "pass|fail|skip", "detail": "..."}]}]
}
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import ProvisionError
from provisioner.verdicts.checks import Check

EXIT_OK, EXIT_ERROR, EXIT_FAILED_CHECKS = 0, 1, 2
# unknown: `check --from-prometheus` found no fresh, whole state for the host (engine/prometheus.py).
HOST_STATUSES = ("ok", "changed", "drift", "not-verified", "failed", "unreachable", "unknown")
CHECK_STATUSES = ("pass", "fail", "skip")


@dataclass
class HostReport:
    name: str
    status: str
    changed_tasks: list[str] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        """Ansible could not finish with this host (a task failed, it was unreachable), or its
        state could not be known (no fresh data in Prometheus): never ok, exit 1."""
        return self.status in ("failed", "unreachable", "unknown")

    @property
    def falls_short(self) -> bool:
        """The host was reached but differs from the profile: drift or a failed check."""
        return self.status in ("drift", "not-verified") or any(c.status == "fail" for c in self.checks)

    @property
    def outcome(self) -> str:
        """What a person needs to know first: ok, drifted, failed or unreachable. A host with
        any failed check is failed, whatever Ansible said about its tasks (a host that ran
        every task but failed verification is never shown as ok)."""
        if self.status in ("unreachable", "unknown"):
            return self.status
        if self.status == "failed" or any(c.status == "fail" for c in self.checks):
            return "failed"
        if self.status == "not-verified":  # a rollout stopped before this host's batch
            return "not-verified"
        return "drifted" if self.status == "drift" else "ok"

    def problems(self) -> list[str]:
        """What is wrong with this host, most telling first: task failures, failed checks, drift."""
        drift = [f"{t}: {self.diffs[t]}" if self.diffs.get(t) else t for t in self.changed_tasks] \
            if self.status == "drift" else []
        untouched = ([c.detail for c in self.checks if c.status == "skip" and c.name == "rollout"]
                     if self.status == "not-verified" else [])
        return ([*self.failures, *(f"{c.name}: {c.detail}" for c in self.checks if c.status == "fail"), *drift,
                 *untouched]
                or ([f"status {self.status}"] if self.outcome != "ok" else []))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "outcome": self.outcome, "changed_tasks": self.changed_tasks,
                "diffs": self.diffs, "failures": self.failures, "checks": [c.as_dict() for c in self.checks]}


@dataclass
class Report:
    command: str
    profile: str
    profile_sha256: str
    inventory: str
    run_dir: Path
    started: str
    finished: str = ""
    interrupted: bool = False
    hosts: list[HostReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # A rolling `up` (--drain/--undrain/--gate): its batches, the hosts done, failed and
    # untouched, where it stopped (engine/rolling.py writes it; None for other runs).
    rollout: dict[str, Any] | None = None
    # Where the hosts' state came from when it was not read from them: `check --from-prometheus`
    # (engine/prometheus.py writes it; None when the hosts were asked).
    source: dict[str, Any] | None = None
    # `provision accept`: its level, the cost table and the fleet's all-reduce (engine/accept.py).
    accept: dict[str, Any] | None = None

    @property
    def stopped(self) -> bool:
        return bool(self.rollout and self.rollout.get("stopped_at"))

    @property
    def exit_code(self) -> int:
        # A stopped rollout did not finish its job (hosts left drained or untouched): 1, like an interrupted run.
        if self.errors or self.interrupted or self.stopped or any(h.broken for h in self.hosts):
            return EXIT_ERROR
        if any(h.falls_short for h in self.hosts):
            return EXIT_FAILED_CHECKS
        return EXIT_OK

    @property
    def verdict(self) -> str:
        total = len(self.hosts)
        bad = [h.name for h in self.hosts if h.broken]
        failing = [h.name for h in self.hosts if h.falls_short]
        if self.interrupted:
            return f"interrupted: the {self.command} run was stopped before it finished"
        if self.stopped:
            r = self.rollout or {}
            return (f"rollout stopped at batch {r['stopped_at']} of {len(r.get('batches', []))}: "
                    f"failed {', '.join(r.get('failed', [])) or '-'}; untouched {', '.join(r.get('untouched', [])) or '-'}")
        if self.errors:
            return f"error: Ansible stopped before reaching the hosts ({len(self.errors)} message(s) above)"
        if bad:
            what = "failed, unreachable or unknown" if any(h.status == "unknown" for h in self.hosts) \
                else "failed or unreachable"
            return f"{len(bad)} of {total} host(s) {what}: {', '.join(bad)}"
        if failing:
            what = "drifted from" if self.command == "check" else "do not meet"
            return f"{len(failing)} of {total} host(s) {what} profile {self.profile}: {', '.join(failing)}"
        done = {"check": "match", "preflight": "are ready for", "verify": "verified against",
                "accept": "accepted against"}.get(self.command, "converged to")
        return f"all {total} host(s) {done} profile {self.profile}"

    def summary(self) -> dict[str, int]:
        """Hosts per outcome (changed hosts are ok, and also counted as changed)."""
        counts = {"hosts": len(self.hosts), "ok": 0, "changed": 0, "drifted": 0, "failed": 0, "unreachable": 0,
                  "not-verified": 0, "unknown": 0}
        for host in self.hosts:
            counts[host.outcome] += 1
            counts["changed"] += host.outcome == "ok" and host.status == "changed"
        return counts

    def rollout_lines(self) -> list[str]:
        """Where a rolling `up` stopped and how to resume it (nothing for other runs)."""
        r = self.rollout
        if not r:
            return []
        batches = r.get("batches", [])
        if not self.stopped:
            return [f"rollout: {len(batches)} batch(es) of {r.get('batch')}; {len(r.get('done', []))} host(s) done, "
                    f"failed: {', '.join(r.get('failed', [])) or 'none'}"]
        left = [*r.get("failed", []), *r.get("untouched", [])]
        resume = r.get("resume_command") or ""
        return [f"rollout stopped at batch {r['stopped_at']} of {len(batches)}: {', '.join(r.get('done', [])) or 'no host'} "
                f"done; failed (left drained): {', '.join(r.get('failed', [])) or 'none'}; untouched: "
                f"{', '.join(r.get('untouched', [])) or 'none'}",
                f"resume: {resume} --resume {shlex.quote(str(self.run_dir))}   (or: {resume} --limit "
                f"{shlex.quote(','.join(left))})"]

    def accept_lines(self) -> list[str]:
        """`provision accept`: the cost table (per node and the fleet) and the fleet's all-reduce."""
        a = self.accept or {}
        lines = []
        cost = a.get("cost")
        if cost:
            lines.append(f"cost at ${cost.get('per_hour'):g}/hour per node (the reference workload; samples/s per "
                         "$/hour is the guidance's index):")
            for row in cost.get("nodes", []) + ([cost["fleet"]] if cost.get("fleet") else []):
                lines.append(f"  {row['name']}: {row['samples_per_s']:g} samples/s, ${row['per_hour']:g}/h, index "
                             f"{row['samples_per_s_per_dollar_hour']:g}, ${row['dollars_per_million_samples']:g} per "
                             "million samples")
        for host, burn in sorted((a.get("burn_in") or {}).items()):
            try:  # a report read back is untrusted: a malformed summary is said, not a traceback
                lines.append(f"burn-in {host}: " + burn_in_line(burn))
            except (AttributeError, TypeError, ValueError):
                lines.append(f"burn-in {host}: the summary is malformed")
        fleet = a.get("fleet")
        if fleet and fleet.get("busbw_gbps") is not None:
            finding = fleet.get("finding") or {}
            floor = f"floor {fleet['floor_gbps']:g} GB/s" if fleet.get("floor_gbps") else "uncalibrated: no floor"
            lines.append(f"fleet all-reduce: {fleet['busbw_gbps']:g} GB/s across {len(fleet.get('hosts', []))} hosts "
                         f"({floor})" + (f"; {finding.get('verdict')}: {finding.get('why')}" if finding else ""))
            if fleet.get("drain"):
                ran = ("not run (add --run-drain)" if not fleet.get("drain_ran") else "ran, killed at its time-out"
                       if fleet.get("drain_rc") is None else f"ran, exit {fleet['drain_rc']}")
                lines.append(f"drain: {fleet['drain']}   ({ran})")
        return lines

    def retry_command(self) -> str | None:
        """The command that re-runs just the hosts that are not ok: failed, unreachable, drifted
        or failing a check (after a fix, that is the run a person makes next)."""
        bad = [h.name for h in self.hosts if h.outcome != "ok"]
        if not bad:
            return None
        # Shell-quoted: a host or file name may hold `;` or a space, and people paste this.
        words = ["provision", self.command, "--profile", self.profile, self.inventory, "--limit", ",".join(bad)]
        return " ".join(shlex.quote(w) for w in words)

    def as_dict(self) -> dict[str, Any]:
        return {
            "command": self.command, "profile": self.profile, "profile_sha256": self.profile_sha256,
            "inventory": self.inventory, "run_dir": str(self.run_dir), "started": self.started, "finished": self.finished,
            "interrupted": self.interrupted, "exit_code": self.exit_code, "verdict": self.verdict,
            "errors": self.errors, "retry": self.retry_command(), "summary": self.summary(), "rollout": self.rollout,
            "source": self.source, "accept": self.accept, "hosts": [h.as_dict() for h in self.hosts],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], run_dir: Path | None = None) -> Report:
        """A Report again from its as_dict() shape (exit_code, verdict and retry are recomputed)."""
        where = str(run_dir) if run_dir else None
        for n, h in enumerate(data.get("hosts") or []):
            _check_host_entry(n, h, where)
        try:
            hosts = [
                HostReport(
                    name=str(h["name"]), status=str(h["status"]),
                    changed_tasks=[str(t) for t in h.get("changed_tasks", [])],
                    diffs={str(k): str(v) for k, v in (h.get("diffs") or {}).items()},
                    failures=[str(f) for f in h.get("failures", [])],
                    checks=[Check(str(c["name"]), c["status"], str(c.get("detail", ""))) for c in h.get("checks", [])],
                )
                for h in data["hosts"]
            ]
            return cls(
                command=str(data["command"]), profile=str(data.get("profile", "?")),
                profile_sha256=str(data.get("profile_sha256", "")), inventory=str(data.get("inventory", "")),
                run_dir=Path(data.get("run_dir") or run_dir or "."), started=str(data.get("started", "")),
                finished=str(data.get("finished", "")), interrupted=bool(data.get("interrupted", False)),
                hosts=hosts, errors=[str(e) for e in data.get("errors", [])],
                rollout=data.get("rollout") if isinstance(data.get("rollout"), dict) else None,
                source=data.get("source") if isinstance(data.get("source"), dict) else None,
                accept=data.get("accept") if isinstance(data.get("accept"), dict) else None,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ProvisionError(f"report.json is missing a field the report needs: {exc}",
                                 where=str(run_dir) if run_dir else None) from None

    def write(self) -> Path:
        from provisioner.outputs import write_file

        # Atomic: a run killed while writing it leaves the previous report, never half of one.
        return write_file(self.run_dir / "report.json", json.dumps(self.as_dict(), indent=2) + "\n", mode=0o600,
                          what="report", replace=True)


def _check_host_entry(n: int, h: Any, where: str | None) -> None:
    """One hosts[] entry of a report.json, refused with its index when it is not what we write."""
    fix = "this report.json was edited or written by another tool; re-run the command for a new one"
    if not isinstance(h, dict):
        raise ProvisionError(f"hosts[{n}] is a {type(h).__name__}, not a host entry", where=where, fix=fix)
    name = h.get("name")
    if not isinstance(name, str) or not name or any(ord(c) < 32 for c in name):
        raise ProvisionError(f"hosts[{n}].name {name!r} is not a host name", where=where, fix=fix)
    if h.get("status") not in HOST_STATUSES:
        raise ProvisionError(f"host {name}: unknown status {h.get('status')!r} (one of {', '.join(HOST_STATUSES)})",
                             where=where, fix=fix)
    checks = h.get("checks") or []
    if not isinstance(checks, list):
        raise ProvisionError(f"host {name}: checks is not a list", where=where, fix=fix)
    for c in checks:
        if not isinstance(c, dict) or c.get("status") not in CHECK_STATUSES or "name" not in c:
            raise ProvisionError(f"host {name}: check {c!r} is not a check (name, status "
                                 f"{'/'.join(CHECK_STATUSES)}, detail)", where=where, fix=fix)


def _report_json(run_dir: Path) -> Path:
    run_dir = Path(run_dir).expanduser()
    path = run_dir if run_dir.is_file() and run_dir.name.endswith(".json") else run_dir / "report.json"
    if not path.is_file():
        what = "no such folder" if not run_dir.exists() else "the folder holds no report.json"
        raise ProvisionError(f"not a run folder: {what}", where=str(run_dir),
                             fix="pass a folder printed as `run record:` by up/check/verify/preflight "
                                 "(they live under ./provision-runs or $PROVISION_RUNS_DIR)")
    return path


def read(run_dir: Path) -> dict[str, Any]:
    """The report.json of a run folder (or the path of a report.json) as plain data."""
    path = _report_json(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProvisionError(f"cannot read the report: {exc}", where=str(path)) from None
    except json.JSONDecodeError as exc:
        raise ProvisionError(f"the report is not valid JSON: {exc.msg}", where=f"{path}:{exc.lineno}",
                             fix="the run may have been killed while writing it; re-run the command") from None
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list) or "command" not in data:
        raise ProvisionError("this report.json is not a provision report (no command / hosts)", where=str(path))
    return data


def load(run_dir: Path) -> Report:
    """Rebuild the Report of a past run from <run_dir>/report.json.

    The run folder may have moved since: run_dir then names where it is now."""
    report = Report.from_dict(read(run_dir), run_dir)
    path = Path(run_dir).expanduser()
    report.run_dir = (path.parent if path.is_file() else path).resolve()
    return report


def burn_in_line(burn: dict) -> str:
    """One host's burn-in summary in a line (judge/burn_in.summarize's fields)."""
    head = f"{burn.get('seconds') or 0:g} s of load on the {burn.get('device') or '?'}"
    if burn.get("telemetry") != "sampled":
        return f"{head}; telemetry {burn.get('telemetry') or 'not run'}"
    temp = burn.get("temperature_c") or {"min": float("nan"), "max": float("nan")}
    frac = burn.get("sm_clock_fraction_min")
    reasons = ", ".join(f"{k} ({v})" for k, v in sorted((burn.get("throttle_reasons") or {}).items())) or "none"
    delta = sum((burn.get("ecc_uncorrected_delta") or {}).values())
    return (f"{head}; {burn.get('samples')} sample(s), temperature {temp['min']:g}-{temp['max']:g} C, "
            f"lowest SM clock {'?' if frac is None else f'{100 * frac:.0f}%'} of max, reasons {reasons}, "
            f"new Xids {len(burn.get('xids') or [])}, uncorrected ECC +{delta}")

