"""What a node's measured training throughput costs: the guidance's index (training samples/s
per $/hour) and dollars per million samples, per node and for the fleet. Pure arithmetic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    name: str            # a host, or "fleet"
    samples_per_s: float
    per_hour: float      # what the node (or the fleet) costs, $/hour

    @property
    def samples_per_dollar_hour(self) -> float:
        """The guidance's index: samples/s per $/hour (8x A100 at 1200 samples/s, $32/h: 37.5)."""
        return self.samples_per_s / self.per_hour

    @property
    def dollars_per_million_samples(self) -> float:
        return self.per_hour / (self.samples_per_s * 3600) * 1e6

    def as_dict(self) -> dict:
        return {"name": self.name, "samples_per_s": self.samples_per_s, "per_hour": self.per_hour,
                "samples_per_s_per_dollar_hour": round(self.samples_per_dollar_hour, 3),
                "dollars_per_million_samples": round(self.dollars_per_million_samples, 4)}


def node(name: str, samples_per_s: float, per_hour: float) -> Cost:
    if per_hour <= 0 or samples_per_s <= 0:
        raise ValueError(f"{name}: a cost needs positive samples/s and $/hour (got {samples_per_s}, {per_hour})")
    return Cost(name, samples_per_s, per_hour)


def fleet(nodes: list[Cost]) -> Cost:
    """The fleet as one machine: its samples/s and its $/hour both add up."""
    return node("fleet", sum(n.samples_per_s for n in nodes), sum(n.per_hour for n in nodes))
