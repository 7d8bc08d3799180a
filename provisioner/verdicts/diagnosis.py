"""What `provision diagnose` found on one host, as data: findings (severity, title, the
evidence lines each stands on, the fix) and what could not be collected. judge/diagnose.py
makes them; reports/diagnose.py writes them out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("fault", "warning", "info")


@dataclass(frozen=True)
class Finding:
    severity: str  # fault (act on it), warning (may explain trouble), info
    title: str
    evidence: tuple[str, ...]
    fix: str

    def as_dict(self) -> dict[str, Any]:
        return dict(asdict(self), evidence=list(self.evidence))


@dataclass
class HostDiagnosis:
    name: str
    status: str  # ok, failed, unreachable
    findings: list[Finding] = field(default_factory=list)
    not_collected: list[str] = field(default_factory=list)  # "what: why"
    failures: list[str] = field(default_factory=list)

    @property
    def faults(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "fault"]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "findings": [f.as_dict() for f in self.findings],
                "not_collected": self.not_collected, "failures": self.failures}
