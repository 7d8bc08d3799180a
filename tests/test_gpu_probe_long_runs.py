"""gpu_probe's long runs, in the same one call per host: the exporter's scrape against a real
HTTP server on this machine (the URL from the dcgm_exporter role's record, never through a
proxy from the environment), the record's shape the judge reads, and the survey's rule that
only a host in its recorded state runs them. nccl-tests and dcgmi diag need a GPU this
machine lacks: only that they do not run without one is checked here."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.judge import verify
from tests.test_survey import play

pytestmark = pytest.mark.ansible

METRICS = ('# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n'
           'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
           'Hostname="h"} 34\n')


class Exporter(http.server.BaseHTTPRequestHandler):
    """/metrics answers METRICS; anything else 404."""
    metrics = "/metrics"

    def do_GET(self):  # noqa: N802 - http.server's name
        found = self.path == self.metrics
        body = METRICS.encode() if found else b"not found\n"
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class StandIn(Exporter):
    """The lab's stand-in exporter: it answers on the unit's address but serves no /metrics."""
    metrics = "/nothing"


def serve(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def exporter():
    server = serve(Exporter)
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def stand_in():
    server = serve(StandIn)
    yield server.server_address[1]
    server.shutdown()


def facts(folder: Path, **exporter_fact) -> str:
    folder.mkdir()
    if exporter_fact:
        (folder / "dcgm_exporter.fact").write_text(json.dumps(exporter_fact))
    return str(folder)


def test_the_scrape_fetches_the_recorded_address_directly_and_the_judge_reads_it(tmp_path: Path, exporter: int,
                                                                                  monkeypatch):
    # A proxy in the environment must not carry the host's own exporter's scrape.
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9/")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9/")
    monkeypatch.setenv("no_proxy", "")
    results = play(tmp_path, [
        {"name": "wildcard", "gpu_provisioner.node.gpu_probe": {
            "long_runs": True, "facts_dir": facts(tmp_path / "a", enabled=True, listen_address="0.0.0.0", port=exporter)}},
        {"name": "not wanted", "gpu_provisioner.node.gpu_probe": {
            "long_runs": True, "facts_dir": facts(tmp_path / "c", enabled=False, port=exporter)}},
        {"name": "no long runs", "gpu_provisioner.node.gpu_probe": {
            "facts_dir": facts(tmp_path / "d", enabled=True, listen_address="127.0.0.1", port=exporter)}},
    ])
    got = results["wildcard"]["provisioner_verify"]
    assert got["exporter"] == {"expected": True, "unit_state": got["exporter"]["unit_state"],
                               "url": f"http://127.0.0.1:{exporter}/metrics", "rc": 0, "status": 200, "body": METRICS}
    assert got["exporter"]["unit_state"] in ("not-found", "unknown")  # no dcgm-exporter unit on this machine
    assert got["probe"]["long_runs"] is True
    # No GPU here: neither nccl-tests nor the diagnostic runs, and the record says so.
    assert got["nccl_tests"]["ran"] is False and got["nccl_tests"]["rc"] == -1
    assert got["dcgmi_diag"] == {"ran": False, "rc": -1, "stdout": ""}
    # The judge reads the scrape from the same record (the H100 profile wants the exporter).
    h100 = profiles.load("h100-train").profile
    checks = {c.name: c for c in verify.judge(h100, got)}
    assert checks["exporter metrics"].status == "pass", checks["exporter metrics"]

    assert results["not wanted"]["provisioner_verify"]["exporter"]["rc"] == -1  # not expected, unit not active
    assert results["no long runs"]["provisioner_verify"]["exporter"]["status"] == -1
    assert results["no long runs"]["provisioner_verify"]["probe"]["long_runs"] is False


def test_a_scrape_that_is_not_200_keeps_no_body_and_never_passes(tmp_path: Path, stand_in: int):
    results = play(tmp_path, [
        {"name": "404", "gpu_provisioner.node.gpu_probe": {
            "long_runs": True, "facts_dir": facts(tmp_path / "a", enabled=True, listen_address="127.0.0.1", port=stand_in)}},
        {"name": "refused", "gpu_provisioner.node.gpu_probe": {   # port 9 (discard): nothing listens here
            "long_runs": True, "facts_dir": facts(tmp_path / "b", enabled=True, listen_address="::1", port=9)}},
    ])
    missing, refused = results["404"]["provisioner_verify"], results["refused"]["provisioner_verify"]
    assert (missing["exporter"]["rc"], missing["exporter"]["status"], missing["exporter"]["body"]) == (1, 404, "")
    assert refused["exporter"]["url"] == "http://[::1]:9/metrics"
    assert (refused["exporter"]["rc"], refused["exporter"]["status"], refused["exporter"]["body"]) == (1, -1, "")
    h100 = profiles.load("h100-train").profile
    for record in (missing, refused):
        check = {c.name: c for c in verify.judge(h100, record)}["exporter metrics"]
        # No NVIDIA module here: the exporter cannot answer yet (skip); never a pass.
        assert check.status == "skip" and "does not answer" in check.detail, check


def test_the_survey_runs_the_long_runs_only_on_a_host_in_its_recorded_state(tmp_path: Path, exporter: int):
    record = tmp_path / "provisioner.fact"
    folder = facts(tmp_path / "facts", enabled=True, listen_address="127.0.0.1", port=exporter)
    results = play(tmp_path, [
        {"name": "record", "gpu_provisioner.node.provisioner_state": {
            "action": "record", "path": str(record), "profile": "lab", "profile_sha256": "a" * 64, "managed": []}},
        {"name": "same", "gpu_provisioner.node.gpu_probe": {
            "preflight": True, "long_runs": True, "state_path": str(record), "facts_dir": folder,
            "expect_profile": "lab", "expect_sha256": "a" * 64}},
        {"name": "changed", "gpu_provisioner.node.gpu_probe": {
            "preflight": True, "long_runs": True, "state_path": str(record), "facts_dir": folder,
            "expect_profile": "lab", "expect_sha256": "b" * 64}},
    ])
    same, changed = results["same"]["provisioner_verify"], results["changed"]["provisioner_verify"]
    assert (same["probe"]["long_runs"], same["exporter"]["status"]) == (True, 200)
    assert (changed["probe"]["long_runs"], changed["exporter"]["status"], changed["exporter"]["rc"]) == (False, -1, -1)
