"""Prometheus and Grafana glue for the fleet's dcgm-exporters (`provision monitoring`).

Writes, into one folder:

- ``prometheus/dcgm-targets.json``: a ``file_sd`` targets file, one target per host
  (``<ansible_host or name>:<port>``) labelled ``host``, ``profile`` and ``gpu_model``;
- ``prometheus/scrape-dcgm.yml``: a Prometheus config whose one scrape job reads that
  file (a whole prometheus.yml, so ``promtool check config`` accepts it; copy its job
  into your own configuration);
- ``grafana/dcgm-dashboard.json``: our dashboard (provisioner/data/grafana-dcgm.json)
  cut down to the panels whose metrics the profile's exporter collects, plus panels for
  the nodes' own drift and checks (STATE_PANELS);
- ``prometheus/node-targets.json`` and ``prometheus/scrape-node.yml``: the hosts'
  node_exporters (port from ``monitoring.node_exporter.port``), whose textfile collector
  serves what provision-state.timer writes (module_utils/state_metrics.py);
- ``prometheus/gpu-provisioner-rules.yml``: alerting rules (``alert_rules``): drift present,
  a failed check, the node's check failing or stale for 3 timer intervals, node_exporter
  or dcgm-exporter down. tests/data/monitoring/rules.test.yml unit-tests them with
  ``promtool test rules``.

Every panel of the shipped dashboard queries only metrics seen in real dcgm-exporter
scrapes (tests/test_monitoring.py holds it to ../shared/fixtures/dcgm/). Nothing here
talks to a host.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner import outputs, paths
from provisioner.errors import ProvisionError
from provisioner.render.inventory import Inventory
from provisioner.profiles import Loaded

DASHBOARD = paths.DATA_DIR / "grafana-dcgm.json"
METRIC_RE = re.compile(r"\bDCGM_FI_[A-Z0-9_]+\b")
_TEMPLATE_METRIC = "__METRIC__"  # the dashboard's variables query a metric the profile collects
HEADER = "# Rendered by `provision monitoring` from profile {name} (sha256 {digest}).\n# Do not edit: re-render instead.\n"


@dataclass
class Monitoring:
    """What `render` wrote and what the user should know about it."""

    files: list[Path]
    targets: list[str]
    panels: list[str]                                         # dashboard panel titles kept
    state_panels: list[str] = field(default_factory=list)    # the drift and check panels added
    unpanelled: list[str] = field(default_factory=list)      # collected metrics no panel shows
    warnings: list[str] = field(default_factory=list)

    def __iter__(self):
        return iter(self.files)


def panel_metrics(panel: dict[str, Any]) -> set[str]:
    return {m for t in panel.get("targets", []) for m in METRIC_RE.findall(t.get("expr", ""))}


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL text the dashboard sends: panel targets and variable queries."""
    queries = [t["expr"] for p in dashboard.get("panels", []) for t in p.get("targets", []) if t.get("expr")]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and query:
            queries.append(query)
    return queries


def _address(host: str, variables: dict[str, Any]) -> str:
    address = str(variables.get("ansible_host") or host)
    try:
        if isinstance(ipaddress.ip_address(address), ipaddress.IPv6Address):
            return f"[{address}]"
    except ValueError:
        pass
    return address


def dashboard(loaded: Loaded) -> tuple[dict[str, Any], list[str]]:
    """Our dashboard cut to the profile's collectors; also the collectors no panel shows."""
    collectors = set(loaded.profile.dcgm.exporter.collectors)
    source = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    kept = [p for p in source["panels"] if panel_metrics(p) and panel_metrics(p) <= collectors]
    if not kept:
        raise ProvisionError(
            f"profile {loaded.profile.name!r} collects no DCGM metric the dashboard can show",
            where="dcgm.exporter.collectors",
            fix="collect at least DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_GPU_TEMP or DCGM_FI_DEV_POWER_USAGE")
    board = copy.deepcopy(source)
    board.pop("__comment", None)
    board["title"] = f"{source['title']}: {loaded.profile.name}"
    board["uid"] = f"{source['uid']}-{loaded.profile.name}"[:40]
    # Two panels a row, in the dashboard's own order, ids and positions renumbered.
    board["panels"] = []
    for index, panel in enumerate(kept):
        panel = copy.deepcopy(panel)
        panel["id"] = index + 1
        panel["gridPos"] = {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)}
        board["panels"].append(panel)
    # Variables list hosts and profiles from a metric every kept panel's host exports.
    template_metric = sorted(panel_metrics(kept[0]))[0]
    text = json.dumps(board["templating"]).replace(_TEMPLATE_METRIC, template_metric)
    board["templating"] = json.loads(text)
    shown = set().union(*(panel_metrics(p) for p in kept))
    unpanelled = sorted(collectors - shown)
    return board, unpanelled


# The nodes' own drift and checks (provision-state.timer's textfile, through node_exporter),
# beside the DCGM panels. Their metrics are the families state_metrics.py writes.
_SEL = '{host=~"$host", profile=~"$profile"}'
STATE_PANELS = [
    ("Drifted items (provision-state)", "none",
     f"sum by (host, kind) (gpu_provisioner_drift_items{_SEL})", "{{host}} {{kind}}",
     "Items that differ from each host's state record, by kind; provision check names them, provision up repairs."),
    ("Failed checks (provision-state)", "none",
     f"gpu_provisioner_check_status{_SEL} == 0", "{{host}} {{check}}",
     "The nvidia-smi checks that failed on each host (nvidia-smi could not run is one)."),
    ("Age of the last state check", "s",
     f"time() - gpu_provisioner_last_run_timestamp_seconds{_SEL}", "{{host}}",
     "Seconds since provision-state last ran on each host."),
]


def state_panels() -> list[dict[str, Any]]:
    source = {"type": "prometheus", "uid": "${datasource}"}
    return [{"title": title, "type": "timeseries", "datasource": source, "description": description,
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "targets": [{"refId": "A", "datasource": source, "expr": expr, "legendFormat": legend}]}
            for title, unit, expr, legend, description in STATE_PANELS]


def node_job(loaded: Loaded) -> str:
    return f"node-exporter-{loaded.profile.name}"


def dcgm_job(loaded: Loaded) -> str:
    return f"dcgm-exporter-{loaded.profile.name}"


def alert_rules(loaded: Loaded) -> dict[str, Any]:
    """Prometheus alerting rules on the nodes' textfile and the exporters' `up`."""
    profile = loaded.profile
    node = f'job="{node_job(loaded)}"'
    stale_s = 3 * profile.monitoring.state_timer.interval_s
    rules: list[dict[str, Any]] = [
        {"alert": "GpuProvisionerDrift", "expr": f"gpu_provisioner_drift_items{{{node}}} > 0",
         "labels": {"severity": "warning"},
         "annotations": {"summary": "{{ $labels.host }}: {{ $value }} {{ $labels.kind }} item(s) differ from the "
                                    "recorded state; provision check names them, provision up repairs them"}},
        {"alert": "GpuProvisionerCheckFailed", "expr": f"gpu_provisioner_check_status{{{node}}} == 0",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "{{ $labels.host }}: check {{ $labels.check }} failed "
                                    "(journalctl -u provision-state says why)"}},
        {"alert": "GpuProvisionerStateCheckFailing", "expr": f"gpu_provisioner_last_run_success{{{node}}} == 0",
         "labels": {"severity": "warning"},
         "annotations": {"summary": "{{ $labels.host }}: provision-state could not read the host's state "
                                    "(journalctl -u provision-state)"}},
        {"alert": "GpuProvisionerStateStale",
         "expr": f"time() - gpu_provisioner_last_run_timestamp_seconds{{{node}}} > {stale_s}",
         "labels": {"severity": "warning"},
         "annotations": {"summary": f"{{{{ $labels.host }}}}: provision-state has not run for 3 intervals "
                                    f"({stale_s} s): systemctl status provision-state.timer"}},
        {"alert": "GpuProvisionerStateMissing",
         "expr": f"up{{{node}}} == 1 unless on (instance) gpu_provisioner_last_run_timestamp_seconds{{{node}}}",
         "for": f"{stale_s}s", "labels": {"severity": "warning"},
         "annotations": {"summary": "{{ $labels.host }}: node_exporter serves no gpu_provisioner textfile "
                                    "(is provision-state.timer installed?)"}},
        {"alert": "GpuProvisionerNodeExporterDown", "expr": f"up{{{node}}} == 0", "for": "5m",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "{{ $labels.host }}: node_exporter is down ({{ $labels.instance }})"}},
    ]
    if profile.dcgm.enabled and profile.dcgm.exporter.enabled:
        rules.append({"alert": "GpuProvisionerDcgmExporterDown", "expr": f'up{{job="{dcgm_job(loaded)}"}} == 0',
                      "for": "5m", "labels": {"severity": "critical"},
                      "annotations": {"summary": "{{ $labels.host }}: dcgm-exporter is down ({{ $labels.instance }})"}})
    return {"groups": [{"name": f"gpu-provisioner-{profile.name}", "rules": rules}]}


def node_targets(loaded: Loaded, inventory: Inventory) -> list[dict[str, Any]]:
    return targets(loaded, inventory, port=loaded.profile.monitoring.node_exporter.port)


def node_instance(loaded: Loaded, inventory: Inventory, host: str) -> str:
    """The `instance` label Prometheus gives `host`'s node_exporter scraped from node_targets
    (the target's address): what `check --from-prometheus` requires of a host's series."""
    return f"{_address(host, inventory.hosts[host])}:{loaded.profile.monitoring.node_exporter.port}"


def dcgm_instance(loaded: Loaded, inventory: Inventory, host: str) -> str:
    """The `instance` label Prometheus gives `host`'s dcgm-exporter scraped from `targets`:
    what `verify --from-prometheus` requires of a host's dcgm-exporter series."""
    return f"{_address(host, inventory.hosts[host])}:{loaded.profile.dcgm.exporter.port}"


def node_scrape_config(loaded: Loaded, targets_file: str, rules_file: str) -> str:
    job = {"job_name": node_job(loaded), "scrape_interval": "15s", "scrape_timeout": "10s",
           "metrics_path": "/metrics", "file_sd_configs": [{"files": [targets_file], "refresh_interval": "5m"}]}
    return (HEADER.format(name=loaded.profile.name, digest=loaded.digest)
            + "# A whole prometheus.yml: the hosts' node_exporters (the provision-state textfile) and our\n"
            + "# alerting rules. Copy the job and the rule file into your own configuration.\n"
            + yaml.safe_dump({"rule_files": [rules_file], "scrape_configs": [job]}, sort_keys=False,
                             default_flow_style=False))


def targets(loaded: Loaded, inventory: Inventory, port: int | None = None) -> list[dict[str, Any]]:
    profile = loaded.profile
    port = profile.dcgm.exporter.port if port is None else port
    model = profile.hardware.gpu.model if profile.expects_gpu and profile.hardware.gpu.model else "none"
    return [
        {"targets": [f"{_address(name, inventory.hosts[name])}:{port}"],
         "labels": {"host": name, "profile": profile.name, "gpu_model": model}}
        for name in inventory.hostnames()
    ]


def scrape_config(loaded: Loaded, targets_file: str) -> str:
    job = {
        "job_name": f"dcgm-exporter-{loaded.profile.name}",
        "scrape_interval": "15s",
        "scrape_timeout": "10s",
        "metrics_path": "/metrics",
        "file_sd_configs": [{"files": [targets_file], "refresh_interval": "5m"}],
    }
    return (HEADER.format(name=loaded.profile.name, digest=loaded.digest)
            + "# A whole prometheus.yml with one job; copy the job into your own configuration and point\n"
            + "# `files` at where you keep the targets file (relative paths are relative to this file).\n"
            + yaml.safe_dump({"scrape_configs": [job]}, sort_keys=False, default_flow_style=False))


def warnings_for(loaded: Loaded, inventory: Inventory) -> list[str]:
    profile = loaded.profile
    exporter = profile.dcgm.exporter
    out: list[str] = []
    if not (profile.dcgm.enabled and exporter.enabled):
        out.append(f"profile {profile.name!r} does not run dcgm-exporter (dcgm.enabled / dcgm.exporter.enabled is "
                   "false): these targets will be down until it does")
    address = ipaddress.ip_address(str(exporter.listen_address))
    if address.is_loopback:
        out.append(f"dcgm.exporter.listen_address is {address} (loopback): a Prometheus on another machine cannot "
                   f"scrape it; set listen_address to 0.0.0.0 (or the hosts' monitoring interface) and re-run "
                   f"provision up, or run Prometheus on each host")
    elif not address.is_unspecified:
        out.append(f"dcgm.exporter.listen_address is {address}, one fixed address for every host: only a host that "
                   "owns that address serves the exporter; the targets use each host's ansible_host instead")
    node = profile.monitoring.node_exporter
    if node.manage == "install" and ipaddress.ip_address(str(node.listen_address)).is_loopback:
        out.append(f"monitoring.node_exporter.listen_address is {node.listen_address} (loopback): a Prometheus on "
                   "another machine cannot scrape the node_exporters; set it to 0.0.0.0 (or the monitoring "
                   "interface) and re-run provision up")
    return out


def render(loaded: Loaded, inventory: Inventory, out_dir: Path, *, force: bool = False) -> Monitoring:
    """Write the targets, the scrape config and the dashboard; same input, same bytes.

    The folder must be new, empty or rendered by us before (outputs.check_folder)."""
    board, unpanelled = dashboard(loaded)
    sd = targets(loaded, inventory)
    extra = state_panels()
    rows = (len(board["panels"]) + 1) // 2
    for index, panel in enumerate(extra):  # two a row, below the DCGM panels
        panel["id"] = len(board["panels"]) + 1
        panel["gridPos"] = {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (rows + index // 2)}
        board["panels"].append(panel)
    rules = HEADER.format(name=loaded.profile.name, digest=loaded.digest) + yaml.safe_dump(
        alert_rules(loaded), sort_keys=False, default_flow_style=False, width=1000)
    names = {
        "prometheus/dcgm-targets.json": json.dumps(sd, indent=2) + "\n",
        "prometheus/scrape-dcgm.yml": scrape_config(loaded, "dcgm-targets.json"),
        "prometheus/node-targets.json": json.dumps(node_targets(loaded, inventory), indent=2) + "\n",
        "prometheus/scrape-node.yml": node_scrape_config(loaded, "node-targets.json", "gpu-provisioner-rules.yml"),
        "prometheus/gpu-provisioner-rules.yml": rules,
        "grafana/dcgm-dashboard.json": json.dumps(board, indent=2) + "\n",
    }
    out_dir = outputs.check_folder(out_dir, list(names), force=force)
    old_umask = os.umask(0o022)  # folders read by the Prometheus and Grafana services' own users
    try:
        files = [outputs.write_file(out_dir / name, text, force=force, mode=0o644, what=f"output {name}",
                                     replace=True)
                 for name, text in names.items()]
    finally:
        os.umask(old_umask)
    return Monitoring(files=sorted(files), targets=[t["targets"][0] for t in sd],
                      panels=[p["title"] for p in board["panels"] if p not in extra],
                      state_panels=[p["title"] for p in extra], unpanelled=unpanelled,
                      warnings=warnings_for(loaded, inventory))
