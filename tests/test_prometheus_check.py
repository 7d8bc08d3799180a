"""`provision check --from-prometheus` (issue 35, item 1): the fleet's drift read back from
Prometheus in one query, with the SSH path's verdicts.

- The slow test starts Debian's real `prometheus` binary with the scrape config `provision
  render` writes (reports/monitoring.py), scraping small HTTP servers (one per host, each on
  its own loopback address, as node_exporter's textfile collector would serve it) that serve
  textfiles written by the real timer code (module_utils/state_metrics.run) from real state
  records made with the real module_utils: a host in its recorded state, a drifted one, one
  whose timer stopped 10 minutes ago, one that is not scraped at all, and one whose textfile
  claims to be another host. The same records are then judged the SSH way: the real
  provisioner_state module (action compare, run by ansible-runner over the local connection
  instead of SSH) and the fold `provision check` uses (engine/commands._fold). The verdicts
  must be equal. (The 30-host lab comparison over real SSH is left to the lab suite.)
- The fast tests feed engine/prometheus.judge answers made by hand around textfiles the
  real timer code writes (labelled as hand-made below): series that speak for another host,
  written twice, cut short, stale or from the future are never judged ok.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from ansible_collections.gpu_provisioner.node.plugins.module_utils import state as state_utils
from ansible_collections.gpu_provisioner.node.plugins.module_utils import state_metrics as sm
from provisioner.engine import commands, prometheus
from provisioner.reports import monitoring
from provisioner.reports import report as report_mod
from provisioner.reports.report import HostReport, Report

from .conftest import DATA

PROMETHEUS = "/usr/bin/prometheus"  # Debian's prometheus package (scripts/setup-dev-host installs it)
LAB_PROFILE = DATA / "profiles" / "lab-state-timer.yml"
HOSTS = {"node-clean": "127.0.0.11", "node-drifted": "127.0.0.12", "node-stale": "127.0.0.13",
         "node-silent": "127.0.0.14", "node-evil": "127.0.0.15"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _profile(folder: Path, port: int) -> Path:
    """lab-state-timer with node_exporter on `port` (the servers below stand in for it)."""
    path = folder / "prom-check.yml"
    path.write_text(f"extends: {os.path.relpath(LAB_PROFILE, folder)}\nname: prom-check\n"
                    "description: lab-state-timer, node_exporter on a free port\n"
                    f"monitoring:\n  node_exporter:\n    port: {port}\n")
    return path


def _inventory(folder: Path) -> Path:
    path = folder / "hosts.ini"
    path.write_text("[gpu]\n" + "".join(f"{h} ansible_host={a}\n" for h, a in HOSTS.items()))
    return path


def _record(folder: Path, host: str, target) -> tuple[Path, Path]:
    """A state record as site.yml writes it (the real module_utils), managing one file."""
    managed = folder / f"{host}.conf"
    managed.write_text("setting = 1\n")
    record = folder / f"{host}.fact"
    record.write_text(json.dumps({"profile": target.loaded.profile.name, "profile_sha256": target.digest_for(host),
                                  "state": state_utils.read_state({"files": [str(managed)], "packages": ["dpkg"]})}))
    return record, managed


def _textfile(folder: Path, host: str, record: Path) -> str:
    """What the node's timer writes for this record (state_metrics.run, the real code)."""
    out = folder / f"{host}.prom"
    sm.run({"record": str(record), "textfile": str(out), "version": "test", "gpu_count": 0, "nvidia_smi": False})
    return out.read_text()


# ------------------------------------------------------------------------------ fast, hand-made answers

def _families(text: str):
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def _answer(texts: dict[str, str], target, evaluated: float, *, instance_of=None) -> prometheus.Answer:
    """HAND-MADE: the answer Prometheus would give for these textfiles, each scraped from its
    host's target (job, host and instance set from the target, as the rendered config does)."""
    job = monitoring.node_job(target.loaded)
    answer = prometheus.Answer(evaluated)
    for host, text in texts.items():
        instance = (instance_of or {}).get(host) or monitoring.node_instance(target.loaded, target.inventory, host)
        answer.series.append(prometheus.Series({"__name__": "up", "job": job, "host": host, "instance": instance}, 1))
        for name, labels, value in _families(text):
            answer.series.append(prometheus.Series({**labels, "__name__": name, "job": job, "host": host,
                                                    "instance": instance}, value))
    return answer


@pytest.fixture
def fleet(tmp_path: Path):
    target = commands.prepare(str(_profile(tmp_path, 9100)), _inventory(tmp_path))
    records = {h: _record(tmp_path, h, target) for h in ("node-clean", "node-drifted")}
    records["node-drifted"][1].write_text("setting = 2\n")
    texts = {h: _textfile(tmp_path, h, r) for h, (r, _) in records.items()}
    return target, texts


def _by_name(reports: list[HostReport]) -> dict[str, HostReport]:
    return {r.name: r for r in reports}


def test_the_textfile_kinds_are_the_ones_the_reader_knows():
    assert prometheus.DRIFT_KINDS == sm.DRIFT_KINDS


def test_fresh_whole_records_are_judged_and_a_host_without_series_is_unknown(fleet):
    target, texts = fleet
    now = time.time()
    got = _by_name(prometheus.judge(target, ["node-clean", "node-drifted", "node-silent"],
                                    _answer(texts, target, now + 5), 180)[0])
    assert got["node-clean"].outcome == "ok", got["node-clean"]
    assert got["node-drifted"].outcome == "drifted"
    assert any(t.startswith("file ") and t.endswith("node-drifted.conf changed") for t in got["node-drifted"].changed_tasks)
    assert got["node-silent"].outcome == "unknown"
    assert "holds no series of this host" in got["node-silent"].failures[0]
    age = next(c for c in got["node-clean"].checks if c.name == "data age")
    assert age.detail.startswith(("5 s", "6 s")), age


def test_a_host_cannot_speak_for_another(fleet):
    target, texts = fleet
    # node-evil serves a clean textfile and claims to be node-drifted: Prometheus keeps the
    # target's host label, so the claim could only come in through another instance.
    spoof = _answer({"node-drifted": texts["node-clean"]}, target, time.time(),
                    instance_of={"node-drifted": monitoring.node_instance(target.loaded, target.inventory, "node-evil")})
    real = _answer({"node-drifted": texts["node-drifted"]}, target, time.time())
    reports, ignored = prometheus.judge(target, ["node-drifted"], prometheus.Answer(real.evaluated,
                                                                                    spoof.series + real.series), 180)
    assert reports[0].outcome == "drifted" and ignored == len(spoof.series)
    alone, _ = prometheus.judge(target, ["node-drifted"], spoof, 180)
    assert alone[0].outcome == "unknown", "the spoofed series alone judge nothing"


def test_kernels_and_components_reach_the_controller_as_check_judges_them(fleet, tmp_path: Path):
    """A kernels reading from real `dkms status` captures (tests/data/dkms: a dkms 3 host with
    nvidia 535.86.05 installed for one kernel, the lab's 535.309.01 only added), two kernels,
    and a record whose dcgm_exporter component the profile turns off: the textfile carries
    them, and the controller's judging of them equals the SSH path's (judge/kernels.py,
    engine/drift.py on the module's result)."""
    from ansible_collections.gpu_provisioner.node.plugins.module_utils import kernels as node_kernels
    from provisioner.engine import drift
    from provisioner.judge import kernels as kernels_judge

    target, _ = fleet
    status = (DATA / "dkms" / "status-dkms3.txt").read_text() + (DATA / "dkms" / "status-lab-added.txt").read_text()
    reading = {"images": ["6.1.0-41-amd64", "6.5.0-060500rc5-generic"], "dkms_rc": 0, "in_container": False,
               "dkms": node_kernels.nvidia_modules(node_kernels.parse_dkms_status(status))}
    record, _ = _record(tmp_path, "node-clean", target)
    data = json.loads(record.read_text())
    data["components"] = {"dcgm_exporter": {"packages": ["datacenter-gpu-manager"], "units": ["nvidia-dcgm.service"]},
                          "state_timer": {"units": ["provision-state.timer"]}}
    record.write_text(json.dumps(data))
    state = state_utils.compare(str(record))
    text = sm.textfile(state, [], version="test", now=time.time(), kernels=reading)
    report = prometheus.judge(target, ["node-clean"], _answer({"node-clean": text}, target, time.time()), 180)[0][0]
    ssh_checks = kernels_judge.judge_modules(target.loaded.profile, reading)
    assert [c for c in report.checks if c.name != "data age"] == ssh_checks
    assert [c.status for c in ssh_checks] == ["fail", "fail"], "535.309.01 is only added: no kernel has it"
    assert report.changed_tasks == [item for item, _ in drift.components_off(state, target.role_vars)] \
        == ["component dcgm_exporter is off in the profile"]
    assert report.outcome == "failed"


def _without(*words: str):
    return lambda t: "\n".join(line for line in t.splitlines() if not any(w in line for w in words)) + "\n"


@pytest.mark.parametrize("edit,why", [
    # a textfile from before the kernel families (an older timer): not judged, never ok
    (_without("kernel", "dkms", "in_container"), "0 series of gpu_provisioner_kernel_images"),
    (lambda t: t + 'gpu_provisioner_info{profile="other",profile_sha256="x",version="v"} 1\n',
     "2 series of gpu_provisioner_info"),
    (lambda t: t.replace("gpu_provisioner_components 0", "gpu_provisioner_components 3"), "distinct"),
    (lambda t: t.replace("gpu_provisioner_last_run_success 1", "gpu_provisioner_last_run_success 0"),
     "could not read the host's state"),
    (_without('kind="units"'), "lacks kind(s) units"),
    (lambda t: t.replace('kind="units"} 0', 'kind="units"} NaN'), "not what provision-state writes"),
])
def test_what_provision_state_does_not_write_leaves_the_host_unknown(fleet, edit, why):
    target, texts = fleet
    answer = _answer({"node-clean": edit(texts["node-clean"])}, target, time.time())
    reports, _ = prometheus.judge(target, ["node-clean"], answer, 180)
    assert reports[0].status == "unknown" and why in reports[0].failures[0], reports[0].failures


def test_stale_and_future_data_are_unknown(fleet):
    target, texts = fleet
    ran = next(v for n, _, v in _families(texts["node-clean"]) if n == "gpu_provisioner_last_run_timestamp_seconds")
    for evaluated, why in ((ran + 181, "s old"), (ran - 181, "in Prometheus's future")):
        reports, _ = prometheus.judge(target, ["node-clean"], _answer(texts, target, evaluated), 180)
        assert reports[0].status == "unknown" and why in reports[0].failures[0]
    reports, _ = prometheus.judge(target, ["node-clean"], _answer(texts, target, ran + 179), 180)
    assert reports[0].outcome == "ok"


def test_bad_urls_and_answers_are_one_clear_error():
    from provisioner.errors import ProvisionError

    for url, message in (("ftp://x", r"not an http\(s\) URL"), ("http://u:p@x:9090", "carries a user or password"),
                         ("http://x:9090/?q=1", "query or fragment")):
        with pytest.raises(ProvisionError, match=message):
            prometheus.check_url(url)
    for body, message in ((b"<html>", "not JSON"), (b'{"status":"error","error":"parse error"}', "parse error"),
                          (b'{"status":"success","data":{"resultType":"matrix","result":[]}}', "instant-vector"),
                          (b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}',
                           "a sample is not")):
        with pytest.raises(ProvisionError, match=message):
            prometheus.parse(body)


# ------------------------------------------------------------------------------ slow: a real Prometheus

class _Serve(threading.Thread):
    """node_exporter's part: GET /metrics answers a textfile, on one address."""

    def __init__(self, address: str, port: int, text: str):
        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((address, port), Handler)
        super().__init__(target=self.server.serve_forever, daemon=True)
        self.start()


def _prometheus(config: Path, data: Path) -> tuple[subprocess.Popen, str]:
    url = f"http://127.0.0.1:{_free_port()}"
    log = (data.parent / "prometheus.log").open("w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address={url.removeprefix('http://')}"], stdout=log, stderr=subprocess.STDOUT)
    return proc, url


def _wait_scraped(url: str, job: str, hosts: set[str], timeout: float = 90) -> None:
    expr = urllib.parse.urlencode({"query": f'gpu_provisioner_last_run_timestamp_seconds{{job="{job}"}}'})
    start, seen = time.monotonic(), set()
    while time.monotonic() - start < timeout:
        try:
            with urllib.request.urlopen(f"{url}/api/v1/query?{expr}", timeout=5) as r:
                seen = {s["metric"].get("host") for s in json.load(r)["data"]["result"]}
            if hosts <= seen:
                return
        except OSError:
            pass  # not listening yet
        time.sleep(1)
    pytest.fail(f"Prometheus did not scrape {sorted(hosts - seen)} within {timeout} s")


def _ssh_path(tmp_path: Path, target, records: dict[str, Path]) -> Report:
    """`provision check`'s judging of what the real provisioner_state module returns for each
    record (ansible-runner over the local connection instead of SSH; the fold check uses)."""
    from provisioner.engine.runner import EventReader, PlaybookRun

    from .ansibleplay import play

    inventory = "".join(f'{h} ansible_connection=local ansible_python_interpreter="{sys.executable}" record={r}\n'
                        for h, r in records.items())
    run = play(tmp_path, "ssh-path", [{"hosts": "all", "gather_facts": False, "tasks": [{
        "name": "Read the managed state and compare it with the record.",
        "gpu_provisioner.node.provisioner_state": {"action": "compare", "path": "{{ record }}"}}]}], inventory)
    reader = EventReader()
    for event in run.events:
        reader(event)
    report = Report("check", target.loaded.profile.name, target.loaded.digest, "", tmp_path, started="")
    commands._fold(report, "check", PlaybookRun("check", "successful", run.rc, reader.hosts, tmp_path), target)
    return report


def _verdict(host: HostReport) -> tuple:
    return (host.outcome, host.status, sorted(host.changed_tasks),
            sorted((c.name, c.status) for c in host.checks if c.name != "data age"))


@pytest.mark.slow
@pytest.mark.ansible
def test_a_real_prometheus_gives_the_ssh_paths_verdicts(tmp_path: Path):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus; scripts/setup-dev-host)")
    port = _free_port()
    profile, inventory = _profile(tmp_path, port), _inventory(tmp_path)
    target = commands.prepare(str(profile), inventory)
    records = {h: _record(tmp_path, h, target) for h in ("node-clean", "node-drifted", "node-stale", "node-evil")}
    records["node-drifted"][1].write_text("setting = 2\n")  # changed out of band after the converge
    texts = {h: _textfile(tmp_path, h, r) for h, (r, _) in records.items()}
    # The stale host's timer stopped 10 minutes ago: the textfile it left (the real code, then).
    state = state_utils.compare(str(records["node-stale"][0]))
    texts["node-stale"] = sm.textfile(state, [], version="test", now=time.time() - 600, kernels=sm._read_kernels())
    # node-evil's textfile names itself node-drifted, in a clean state, on every series.
    texts["node-evil"] = "\n".join(line.replace("{", '{host="node-drifted",', 1) if line.startswith("gpu_") and "{" in line
                                   else line.replace(" ", '{host="node-drifted"} ', 1) if line.startswith("gpu_") else line
                                   for line in texts["node-clean"].splitlines()) + "\n"
    servers = [_Serve(HOSTS[h], port, texts[h]) for h in ("node-clean", "node-drifted", "node-stale", "node-evil")]
    out = tmp_path / "render"
    monitoring.render(target.loaded, target.inventory, out)
    proc, url = _prometheus(out / "prometheus" / "scrape-node.yml", tmp_path / "tsdb")
    try:
        _wait_scraped(url, monitoring.node_job(target.loaded), {"node-clean", "node-drifted", "node-stale", "node-evil"})
        started = time.monotonic()
        report = prometheus.check(target, url, runs_dir=tmp_path / "runs")
        took = time.monotonic() - started
        result = CliRunner().invoke(commands_app(), ["check", "-p", str(profile), str(inventory), "--from-prometheus",
                                                     url, "--json", "--limit", "node-clean,node-drifted",
                                                     "--runs-dir", str(tmp_path / "runs")])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        for server in servers:
            server.server.shutdown()
    got = {h.name: h for h in report.hosts}
    ssh = {h.name: h for h in _ssh_path(tmp_path, target, {h: records[h][0] for h in ("node-clean", "node-drifted")})
           .hosts}
    for host in ("node-clean", "node-drifted"):
        assert _verdict(got[host]) == _verdict(ssh[host]), (host, got[host], ssh[host])
        print(f"{host}: prometheus {_verdict(got[host])} / ssh path {_verdict(ssh[host])}")
    assert got["node-clean"].outcome == "ok" and got["node-drifted"].outcome == "drifted"
    assert got["node-stale"].outcome == "unknown" and "s old" in got["node-stale"].failures[0]
    assert got["node-silent"].outcome == "unknown"
    assert got["node-evil"].outcome == "ok", "its own record is clean; its claim to be node-drifted changed nothing"
    assert report.exit_code == 1 and report.source["ignored_series"] == 0
    assert (report.run_dir / "prometheus.json").is_file()
    again = report_mod.load(report.run_dir)  # `provision report RUN` reads it back whole: unknown, source and all
    assert again.as_dict() == report.as_dict()
    # The CLI, on the two hosts with fresh data: drift exits 2, the JSON report's shape.
    assert result.exit_code == 2, result.output
    data = json.loads(result.stdout)
    assert data["summary"]["drifted"] == 1 and data["summary"]["unknown"] == 0
    assert data["source"]["prometheus"] == url
    print(f"check --from-prometheus of {len(HOSTS)} hosts: {took:.3f} s")


def commands_app():
    from provisioner.cli import app

    return app
