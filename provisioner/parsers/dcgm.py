"""Reading DCGM's outputs: dcgm-exporter's /metrics, `dcgmi diag` and `dcgmi discovery -l`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class Scrape:
    metrics: set[str] = field(default_factory=set)          # DCGM_FI_* names served
    gpus: set[str] = field(default_factory=set)             # the `gpu` label values
    models: set[str] = field(default_factory=set)           # modelName labels
    xid: dict[str, float] = field(default_factory=dict)     # gpu -> last Xid error (0: none)
    mig_instances: int = 0


def read_metrics(text: str) -> Scrape:
    """A Prometheus exposition from dcgm-exporter, parsed with prometheus_client's own parser."""
    # Imported here: the package's __init__ pulls its HTTP server in, which a judge of an
    # nvidia-smi capture or `profiles` never needs.
    from prometheus_client.parser import text_string_to_metric_families

    scrape = Scrape()
    mig = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith("DCGM_FI_"):
                continue
            scrape.metrics.add(sample.name)
            gpu = sample.labels.get("gpu")
            if gpu is not None:
                scrape.gpus.add(gpu)
            if sample.labels.get("modelName"):
                scrape.models.add(sample.labels["modelName"])
            if sample.labels.get("GPU_I_ID"):
                mig.add((gpu, sample.labels["GPU_I_ID"]))
            if sample.name == "DCGM_FI_DEV_XID_ERRORS" and gpu is not None:
                scrape.xid[gpu] = max(scrape.xid.get(gpu, 0.0), sample.value)
    scrape.mig_instances = len(mig)
    return scrape


@dataclass(frozen=True)
class DiagResult:
    test: str
    result: str  # Pass, Fail, Skip, Warn (the first word of dcgmi's cell)
    detail: str


def read_diag(text: str) -> list[DiagResult]:
    """`dcgmi diag -r N` table rows (the Metadata section is not a test and is left out)."""
    results = []
    section = ""
    for line in text.splitlines():
        heading = re.match(r"^[|+]-+\s+(\w+)\s+-+", line)
        if heading:
            section = heading.group(1)
            continue
        row = re.match(r"^\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|$", line)
        if not row or section in ("", "Metadata") or row.group(1) == "Diagnostic" and section == "":
            continue
        verdict = row.group(2).split()[0]
        if verdict in ("Pass", "Fail", "Skip", "Warn"):
            results.append(DiagResult(row.group(1), verdict, row.group(2)))
    return results


def read_discovery(text: str) -> list[str]:
    """`dcgmi discovery -l`: the GPU names."""
    return re.findall(r"^\|\s*\d*\s*\|\s*Name:\s*(.+?)\s*\|$", text, re.M)
