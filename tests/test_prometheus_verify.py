"""`provision verify --from-prometheus` (issue 35, item 1): only what the nodes' timer and
dcgm-exporter publish is judged; every other verify check is listed as not judged, never passed.

The node side is the real timer code (module_utils/state_metrics.run) run on a real captured
`nvidia-smi --query-gpu` CSV (tests/data/fixtures/nvidia-smi/csv, an idle H100, driver
590.48.01; fixtures/SOURCES.md); the dcgm-exporter side is a real captured /metrics page
(tests/data/fixtures/dcgm, a Tesla T4 scrape, dcgm-exporter's own series). Prometheus's answer
around them is HAND-MADE, as in tests/test_prometheus_check.py: each series gets the job, host
and instance labels the rendered scrape config gives it. The same code path against a real
Prometheus is the CLI's: tests/integration/test_prometheus_check_lab.py drives check.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from ansible_collections.gpu_provisioner.node.plugins.module_utils import state_metrics as sm
from provisioner.engine import commands, prometheus
from provisioner.reports import monitoring

from .conftest import DATA

H100_CSV = DATA / "fixtures/nvidia-smi/csv/query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.csv"
T4_SCRAPE = DATA / "fixtures/dcgm/dcgm-exporter-metrics__tesla-t4__460.106.00+470.182.03__datadog.prom"
HOSTS = ("gpu-a", "gpu-b")


def _timer(tmp_path: Path, *, gpu_count: int, driver: str, smi: Path | None = H100_CSV) -> str:
    """The textfile the node's timer writes (state_metrics.run, the real code) when nvidia-smi
    prints the captured CSV (or cannot run: smi None)."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat '{smi}'\n" if smi else "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    script.chmod(0o755)
    out = tmp_path / f"timer-{time.monotonic_ns()}.prom"
    sm.run({"record": str(tmp_path / "no-record.fact"), "textfile": str(out), "version": "test",
            "gpu_count": gpu_count, "driver_version": driver, "require_persistence": True}, smi_binary=str(script))
    return out.read_text()


def _samples(text: str):
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def _answer(target, evaluated: float, node: dict[str, str], dcgm: dict[str, str]) -> prometheus.Answer:
    """HAND-MADE: Prometheus's answer to verify_query, each text scraped from its host's target."""
    answer = prometheus.Answer(evaluated)
    for job, texts, instance_of in ((monitoring.node_job(target.loaded), node, monitoring.node_instance),
                                    (monitoring.dcgm_job(target.loaded), dcgm, monitoring.dcgm_instance)):
        for host, text in texts.items():
            where = {"job": job, "host": host, "instance": instance_of(target.loaded, target.inventory, host)}
            answer.series.append(prometheus.Series({"__name__": "up", **where}, 1))
            for name, labels, value in _samples(text):
                answer.series.append(prometheus.Series({**labels, "__name__": name, **where}, value))
    return answer


@pytest.fixture
def target(tmp_path: Path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\n" + "".join(f"{h} ansible_host=10.0.0.{i}\n" for i, h in enumerate(HOSTS, 1)))
    return commands.prepare("h100-train", inventory)


def _checks(report) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.detail) for c in report.checks}


def test_the_timer_checks_are_the_ones_the_reader_knows():
    assert prometheus.TIMER_CHECKS == sm.CHECKS


def test_published_checks_are_judged_and_the_rest_is_listed_as_not_judged(target, tmp_path):
    # gpu-a's timer expected what the capture shows (1 GPU, 590.48.01); gpu-b's the profile (8, 580.159.04).
    node = {"gpu-a": _timer(tmp_path, gpu_count=1, driver="590.48.01"),
            "gpu-b": _timer(tmp_path, gpu_count=8, driver=target.loaded.profile.driver.version)}
    t4 = T4_SCRAPE.read_text()
    reports, ignored = prometheus.judge_verify(target, list(HOSTS), _answer(target, time.time(), node,
                                                                            dict.fromkeys(HOSTS, t4)), 900)
    assert ignored == 0
    a, b = (_checks(r) for r in reports)
    assert [a[n][0] for n in prometheus.TIMER_CHECKS] == ["pass"] * 5
    assert reports[0].outcome == "ok"
    assert (b["gpu count"][0], b["driver version"][0], b["nvidia-smi"][0]) == ("fail", "fail", "pass")
    assert reports[1].outcome == "failed"
    # dcgm-exporter: the capture's last Xid is 0 on its GPU; it has no double-bit ECC series.
    assert a["xid errors"] == ("pass", "no Xid that needs action as the last one on 1 GPU(s) (DCGM_FI_DEV_XID_ERRORS)")
    assert a["ecc double-bit"][0] == "skip" and "not judged" in a["ecc double-bit"][1]
    # Everything else verify judges is named, as skipped, never passed.
    status, detail = a["not judged from Prometheus"]
    assert status == "skip" and "gpu model" in detail and "gpu memory" in detail and "mig" in detail
    assert not {"gpu model", "gpu memory", "idle", "driver module"} & {n for n, (s, _) in a.items() if s == "pass"}


def test_an_xid_that_needs_action_fails_and_one_that_does_not_passes(target, tmp_path):
    """HAND-MADE from the T4 capture: its DCGM_FI_DEV_XID_ERRORS value changed to 79 (the GPU fell
    off the bus: reboot, by NVIDIA's catalog) and to 63 (a row remap recorded: IGNORE there)."""
    node = {h: _timer(tmp_path, gpu_count=1, driver="590.48.01") for h in HOSTS}
    t4 = T4_SCRAPE.read_text()
    line = next(line for line in t4.splitlines() if line.startswith("DCGM_FI_DEV_XID_ERRORS{"))
    dcgm = {"gpu-a": t4.replace(line, line.rsplit(" ", 1)[0] + " 79"),
            "gpu-b": t4.replace(line, line.rsplit(" ", 1)[0] + " 63")}
    reports, _ = prometheus.judge_verify(target, list(HOSTS), _answer(target, time.time(), node, dcgm), 900)
    a, b = (_checks(r) for r in reports)
    assert a["xid errors"] == ("fail", "last Xid GPU 0: Xid 79 (reboot)")
    assert b["xid errors"][0] == "pass"


def test_a_gpu_less_host_fails_nvidia_smi_and_judges_nothing_behind_it(target, tmp_path):
    node = {h: _timer(tmp_path, gpu_count=8, driver="580.159.04", smi=None) for h in HOSTS}
    reports, _ = prometheus.judge_verify(target, ["gpu-a"], _answer(target, time.time(), node, {}), 900)
    a = _checks(reports[0])
    assert a["nvidia-smi"][0] == "fail"
    assert all(a[n][0] == "skip" for n in prometheus.TIMER_CHECKS[1:])
    assert a["dcgm-exporter"][0] == "skip"  # not scraped at all: not judged


def test_a_profile_without_gpus_judges_none_of_the_timer_checks(tmp_path):
    """The lab's GPU-less profile: the timer's failed nvidia-smi is not judged (verify over SSH
    passes "no GPU present and none expected" only when it can see that is the cause)."""
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[gpu]\nlab-1 ansible_host=10.0.0.1\n")
    lab = commands.prepare(str(DATA / "profiles/lab-state-timer.yml"), inventory)
    node = {"lab-1": _timer(tmp_path, gpu_count=0, driver="", smi=None)}
    reports, _ = prometheus.judge_verify(lab, ["lab-1"], _answer(lab, time.time(), node, {}), 900)
    checks = _checks(reports[0])
    assert 'gpu_provisioner_check_status{check="nvidia-smi"} 0' in node["lab-1"]
    assert checks["gpus"][0] == "skip" and "nvidia-smi" not in checks and reports[0].outcome == "ok"


def test_stale_or_missing_timer_data_is_unknown_never_ok(target, tmp_path):
    node = {"gpu-a": _timer(tmp_path, gpu_count=1, driver="590.48.01")}
    later = time.time() + 3600
    reports, _ = prometheus.judge_verify(target, list(HOSTS), _answer(target, later, node, {}), 900)
    assert [r.status for r in reports] == ["unknown", "unknown"]
    assert "more than 900 s is not judged" in reports[0].failures[0]
    assert "no series of this host's node_exporter" in reports[1].failures[0]


def test_series_from_another_address_are_ignored(target, tmp_path):
    node = {"gpu-a": _timer(tmp_path, gpu_count=1, driver="590.48.01")}
    answer = _answer(target, time.time(), node, {})
    for s in answer.series:
        s.labels["host"] = "gpu-b"  # gpu-a's series claiming to be gpu-b's, from gpu-a's address
    reports, ignored = prometheus.judge_verify(target, list(HOSTS), answer, 900)
    assert ignored == len(answer.series) and [r.status for r in reports] == ["unknown", "unknown"]


def test_the_cli_refuses_options_that_need_the_hosts(target, tmp_path):
    from provisioner.cli import app

    inventory = str(target.inventory.source)
    for extra in (["--network"], ["--ddp"], ["--forks", "5"]):
        result = CliRunner().invoke(app, ["verify", "--profile", "h100-train", inventory, "--from-prometheus",
                                          "http://127.0.0.1:9", *extra], env={"COLUMNS": "200", **os.environ})
        assert result.exit_code == 1 and "does nothing with --from-prometheus" in result.output, result.output
