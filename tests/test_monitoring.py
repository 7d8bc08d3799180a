"""provision monitoring: file_sd targets, scrape config and the Grafana dashboard.

The targets and the config are checked by the real `promtool` (Debian's `prometheus`
package) when it is installed; the dashboard's metrics are held to the real
dcgm-exporter scrapes in tests/data/fixtures/dcgm/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from provisioner.render import inventory as inventory_mod
from provisioner import profiles
from provisioner.reports import monitoring
from provisioner.errors import ProvisionError

PROMTOOL_MISSING = ("promtool is not installed (Debian: apt-get install --no-install-recommends prometheus; "
                    "scripts/setup-dev-host installs it)")
RULES_TEST = Path(__file__).parent / "data" / "monitoring" / "rules.test.yml"


def _promtool() -> str:
    """promtool, or a skip where this run cannot have it: CI runs as root and installs it
    (scripts/ci-stages unit, scripts/setup-dev-host), so as root its absence fails."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.geteuid() == 0:
            pytest.fail(PROMTOOL_MISSING)
        pytest.skip(PROMTOOL_MISSING)
    return promtool


def _profile(tmp_path: Path, listen: str = "0.0.0.0", collectors: list[str] | None = None,
             base: str = "h100-train") -> profiles.Loaded:
    exporter: dict = {"listen_address": listen, "port": 9500}
    if collectors is not None:
        exporter["collectors"] = collectors
    path = tmp_path / "mon.yml"
    path.write_text(yaml.safe_dump({"extends": base, "name": "mon-test", "description": "monitoring test",
                                    "dcgm": {"exporter": exporter}}))
    return profiles.load(str(path))


def _inventory(tmp_path: Path) -> inventory_mod.Inventory:
    path = tmp_path / "hosts.ini"
    path.write_text("[gpu]\nnode1 ansible_host=10.0.0.5\nnode2\nnode3 ansible_host=fd00::7\n")
    return inventory_mod.load(path)


@pytest.fixture(scope="module")
def scraped_metrics(fixtures: Path) -> set[str]:
    names: set[str] = set()
    scrapes = sorted((fixtures / "dcgm").glob("*.prom"))
    assert scrapes, "no dcgm-exporter scrapes in the fixtures"
    for scrape in scrapes:
        for family in text_string_to_metric_families(scrape.read_text(encoding="utf-8")):
            names.update(sample.name for sample in family.samples)
    return names


def test_targets_one_per_host_with_labels(tmp_path):
    result = monitoring.render(_profile(tmp_path), _inventory(tmp_path), tmp_path / "out")
    sd = json.loads((tmp_path / "out" / "prometheus" / "dcgm-targets.json").read_text())
    assert sd == [
        {"targets": ["10.0.0.5:9500"], "labels": {"host": "node1", "profile": "mon-test", "gpu_model": "H100 80GB HBM3"}},
        {"targets": ["node2:9500"], "labels": {"host": "node2", "profile": "mon-test", "gpu_model": "H100 80GB HBM3"}},
        {"targets": ["[fd00::7]:9500"], "labels": {"host": "node3", "profile": "mon-test", "gpu_model": "H100 80GB HBM3"}},
    ]
    assert result.targets == ["10.0.0.5:9500", "node2:9500", "[fd00::7]:9500"]
    assert [p.name for p in result] == ["dcgm-dashboard.json", "dcgm-targets.json", "gpu-provisioner-rules.yml",
                                        "node-targets.json", "scrape-dcgm.yml", "scrape-node.yml"]
    assert result.warnings == []


def test_scrape_config_names_the_targets_file(tmp_path):
    monitoring.render(_profile(tmp_path), _inventory(tmp_path), tmp_path / "out")
    config = yaml.safe_load((tmp_path / "out" / "prometheus" / "scrape-dcgm.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "dcgm-exporter-mon-test"
    assert job["file_sd_configs"] == [{"files": ["dcgm-targets.json"], "refresh_interval": "5m"}]


def test_promtool_accepts_config_and_targets(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(PROMTOOL_MISSING)
    monitoring.render(_profile(tmp_path), _inventory(tmp_path), tmp_path / "out")
    config = tmp_path / "out" / "prometheus" / "scrape-dcgm.yml"
    r = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True)
    output = r.stdout + r.stderr
    assert r.returncode == 0, output
    assert "SUCCESS" in output and "WARNING" not in output, output  # the targets file was found and read

    # promtool really reads the targets: a malformed one fails the same check.
    (config.parent / "dcgm-targets.json").write_text('[{"targets": "node1:9400"}]')
    r = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True)
    assert r.returncode != 0 and "dcgm-targets.json" in r.stdout + r.stderr


def test_promtool_parses_every_dashboard_query(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(PROMTOOL_MISSING)
    board = json.loads(monitoring.DASHBOARD.read_text())
    queries = [q.replace("__METRIC__", "DCGM_FI_DEV_GPU_TEMP") for q in monitoring.dashboard_queries(board)]
    rules = []
    for n, query in enumerate(queries):
        if query.startswith("label_values("):  # Grafana's own function: check the series selector inside it
            query = re.fullmatch(r"label_values\((.+),\s*\w+\)", query).group(1)
        # Grafana's variables, as Grafana substitutes them.
        query = query.replace("$__rate_interval", "1m").replace("$host", ".*").replace("$profile", ".*")
        rules.append({"record": f"dashboard:query_{n}", "expr": query})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout


def test_shipped_dashboard_queries_only_metrics_in_real_scrapes(scraped_metrics):
    board = json.loads(monitoring.DASHBOARD.read_text())
    queried = {m for q in monitoring.dashboard_queries(board) for m in monitoring.METRIC_RE.findall(q)}
    assert queried, "the dashboard queries nothing"
    missing = sorted(queried - scraped_metrics)
    assert not missing, f"the dashboard queries metrics no real scrape carries: {missing}"
    for panel in board["panels"]:
        assert monitoring.panel_metrics(panel), f"panel {panel['title']!r} queries no DCGM metric"
    # What the issue asks for, wherever a real scrape shows it.
    titles = " ".join(p["title"] for p in board["panels"]).lower()
    for topic in ("utilisation", "memory", "temperature", "power", "xid", "nvlink"):
        assert topic in titles


def test_rendered_dashboard_keeps_only_collected_metrics(tmp_path, scraped_metrics):
    collectors = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED",
                  "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
    result = monitoring.render(_profile(tmp_path, collectors=collectors), _inventory(tmp_path), tmp_path / "out")
    board = json.loads((tmp_path / "out" / "grafana" / "dcgm-dashboard.json").read_text())
    queried = {m for q in monitoring.dashboard_queries(board) for m in monitoring.METRIC_RE.findall(q)}
    assert queried <= set(collectors) & scraped_metrics
    assert result.panels == ["GPU utilisation", "Framebuffer memory used", "GPU temperature"]
    # FB share needs FB_FREE too, which this profile does not collect; ECC has no panel.
    assert "Framebuffer memory used (share)" not in result.panels
    assert result.unpanelled == ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
    # the DCGM panels, then the three drift and check panels (provision-state) below them
    assert [p["id"] for p in board["panels"]] == [1, 2, 3, 4, 5, 6]
    assert [p["gridPos"]["x"] for p in board["panels"]] == [0, 12, 0, 0, 12, 0]
    assert [p["gridPos"]["y"] for p in board["panels"]] == [0, 0, 8, 16, 16, 24]
    assert "__METRIC__" not in json.dumps(board)
    assert board["uid"] == "provision-dcgm-mon-test"


def test_default_collectors_get_the_full_story(tmp_path):
    loaded = profiles.load("h100-train")
    result = monitoring.render(loaded, _inventory(tmp_path), tmp_path / "out")
    titles = " ".join(result.panels).lower()
    for topic in ("utilisation", "memory", "temperature", "power", "xid", "nvlink"):
        assert topic in titles


def test_loopback_exporter_warns(tmp_path):
    result = monitoring.render(_profile(tmp_path, listen="127.0.0.1"), _inventory(tmp_path), tmp_path / "out")
    assert len(result.warnings) == 1
    assert "127.0.0.1 (loopback)" in result.warnings[0]
    assert "cannot scrape" in result.warnings[0] and "0.0.0.0" in result.warnings[0]


def test_profile_without_exporter_warns(tmp_path):
    result = monitoring.render(profiles.load("debian12-lab"), _inventory(tmp_path), tmp_path / "out")
    assert any("does not run dcgm-exporter" in w for w in result.warnings)
    sd = json.loads((tmp_path / "out" / "prometheus" / "dcgm-targets.json").read_text())
    assert sd[0]["labels"]["gpu_model"] == "none"


def test_no_panel_for_the_collectors_is_an_error(tmp_path):
    loaded = _profile(tmp_path, collectors=["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"])
    with pytest.raises(ProvisionError, match="collects no DCGM metric the dashboard can show"):
        monitoring.render(loaded, _inventory(tmp_path), tmp_path / "out")


def test_rendering_is_deterministic(tmp_path):
    loaded, inv = _profile(tmp_path), _inventory(tmp_path)
    first = {p.name: p.read_bytes() for p in monitoring.render(loaded, inv, tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in monitoring.render(loaded, inv, tmp_path / "b")}
    assert first == second


def test_node_targets_and_scrape_config_load_the_alerting_rules(tmp_path):
    monitoring.render(_profile(tmp_path), _inventory(tmp_path), tmp_path / "out")
    prom = tmp_path / "out" / "prometheus"
    sd = json.loads((prom / "node-targets.json").read_text())
    assert [t["targets"] for t in sd] == [["10.0.0.5:9100"], ["node2:9100"], ["[fd00::7]:9100"]]
    config = yaml.safe_load((prom / "scrape-node.yml").read_text())
    assert config["rule_files"] == ["gpu-provisioner-rules.yml"]
    assert [j["job_name"] for j in config["scrape_configs"]] == ["node-exporter-mon-test"]
    r = subprocess.run([_promtool(), "check", "config", str(prom / "scrape-node.yml")], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS: 7 rules found" in r.stdout, r.stdout + r.stderr


def test_alert_rules_pass_their_unit_tests_and_a_broken_rule_fails_them(tmp_path):
    """promtool test rules on synthetic series (tests/data/monitoring/rules.test.yml): drift
    for one host only, a failed check, a failing run, stale after 3 intervals, no textfile,
    node_exporter and dcgm-exporter down."""
    promtool = _promtool()
    monitoring.render(_profile(tmp_path), _inventory(tmp_path), tmp_path / "out")
    prom = tmp_path / "out" / "prometheus"
    shutil.copy(RULES_TEST, prom / "rules.test.yml")
    r = subprocess.run([promtool, "check", "rules", str(prom / "gpu-provisioner-rules.yml")], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "SUCCESS: 7 rules found" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([promtool, "test", "rules", str(prom / "rules.test.yml")], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    # The tests see the rules: stale after 30 intervals instead of 3 fails them.
    rules = prom / "gpu-provisioner-rules.yml"
    rules.write_text(rules.read_text().replace("> 900", "> 9000"))
    r = subprocess.run([promtool, "test", "rules", str(prom / "rules.test.yml")], capture_output=True, text=True)
    assert r.returncode != 0 and "GpuProvisionerStateStale" in r.stdout + r.stderr


def test_the_stale_threshold_follows_the_profiles_interval(tmp_path):
    path = tmp_path / "timer.yml"
    path.write_text(yaml.safe_dump({"extends": "debian12-lab", "name": "timer", "description": "t",
                                    "monitoring": {"state_timer": {"enabled": True, "interval_s": 120}}}))
    rules = {r["alert"]: r for r in monitoring.alert_rules(profiles.load(str(path)))["groups"][0]["rules"]}
    assert rules["GpuProvisionerStateStale"]["expr"].endswith("> 360")
    assert "GpuProvisionerDcgmExporterDown" not in rules, "debian12-lab runs no dcgm-exporter"


def test_state_panels_query_only_what_the_node_checker_writes(tmp_path):
    from ansible_collections.gpu_provisioner.node.plugins.module_utils import state_metrics

    written = {f.name for f in text_string_to_metric_families(state_metrics.textfile(
        {"recorded": True, "differences": [], "dpkg_audit": ""}, [], version="v", now=1))}
    result = monitoring.render(_profile(tmp_path), _inventory(tmp_path), tmp_path / "out")
    board = json.loads((tmp_path / "out" / "grafana" / "dcgm-dashboard.json").read_text())
    ours = [p for p in board["panels"] if p["title"] in result.state_panels]
    assert [p["title"] for p in ours] == ["Drifted items (provision-state)", "Failed checks (provision-state)",
                                          "Age of the last state check"]
    queried = {m for p in ours for t in p["targets"] for m in re.findall(r"\bgpu_provisioner_\w+", t["expr"])}
    assert queried and queried <= written
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    rules = [{"record": f"panel:q{n}", "expr": t["expr"].replace("$host", ".*").replace("$profile", ".*")}
             for n, p in enumerate(ours) for t in p["targets"]]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    r = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
