"""The result of judging one thing on one host: pass, fail or skip, always with a reason."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def passed(name: str, detail: str) -> Check:
    return Check(name, "pass", detail)


def failed(name: str, detail: str) -> Check:
    return Check(name, "fail", detail)


def skipped(name: str, detail: str) -> Check:
    return Check(name, "skip", detail)


def not_in_capture(name: str, what: str) -> Check:
    """A check whose reading the input does not carry (a CSV without the column, nvidia-smi -L, a
    paste cut short): not checked, never a failure."""
    return Check(name, "skip", f"not in this capture: {what}")


def at_least(name: str, have: float, want: float, unit: str, slack: float = 1.0) -> Check:
    """have >= want, where `slack` forgives a reading that is known to come out a little low."""
    text = f"{have:g} {unit} (profile needs >= {want:g})"
    return passed(name, text) if have >= want * slack else failed(name, text)
