"""Fleet drift in Prometheus, for real: two lab hosts converged with provision-state.timer
and Debian's prometheus-node-exporter, scraped by Debian's real `prometheus` binary that
this test starts on the lab network (the packaged service stays stopped). An out-of-band
change on one host shows up as gpu_provisioner_drift_items > 0 for that host only; `up`
repairs it and the series returns to 0. Every wait is bounded."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from provisioner.engine import commands
from provisioner.reports import monitoring

from . import labtools
from .labtools import podman

pytestmark = pytest.mark.lab

PROMETHEUS = "/usr/bin/prometheus"  # Debian's prometheus package (scripts/setup-dev-host installs it)
if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)
if not os.access(PROMETHEUS, os.X_OK):
    pytest.skip("Debian's prometheus is not installed (scripts/setup-dev-host installs it)", allow_module_level=True)

PROFILE = str(Path(__file__).resolve().parents[1] / "data" / "profiles" / "lab-state-timer.yml")


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


class Prom:
    """Debian's prometheus binary, started with the rendered config, on the lab bridge only."""

    def __init__(self, config: Path, data: Path, address: str):
        self.url = f"http://{address}:{_free_port(address)}"
        self.log = (data.parent / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address={self.url.removeprefix('http://')}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expr: str) -> dict[str, float]:
        """host -> value of an instant query."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return {s["metric"].get("host", ""): float(s["value"][1]) for s in body["data"]["result"]}

    def wait(self, expr: str, until, timeout: float, what: str) -> tuple[dict[str, float], float]:
        """Poll until `until(result)`; the result and how long it took. Fails after `timeout` s."""
        start, last = time.monotonic(), None
        while time.monotonic() - start < timeout:
            try:
                last = self.query(expr)
                if until(last):
                    return last, time.monotonic() - start
            except OSError:
                pass  # not listening yet
            time.sleep(1)
        pytest.fail(f"{what}: not within {timeout} s; last answer to {expr!r}: {last}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def run(command: str, inventory: Path, runs: Path, **options):
    return commands.execute(command, commands.prepare(PROFILE, inventory), runs_dir=runs, **options)


def test_drift_on_one_host_reaches_prometheus_for_that_host_only_and_up_clears_it(tmp_path_factory, tmp_path):
    from provisioner.lab import podman as lab_podman

    # Started from the image of a host `up` converged with PROFILE (its second converge
    # changed nothing: provisioner.lab.converged).
    with labtools.lab_hosts(2, "st", tmp_path_factory, converged=PROFILE) as lab:
        inventory = lab.inventory
        victim, other = (h.name for h in lab.hosts)
        first = run("check", inventory, tmp_path)
        assert first.exit_code == 0, first.as_dict()

        # What the role left on each host.
        for host in (victim, other):
            assert podman("exec", host, "systemctl", "is-active", "provision-state.timer").stdout.strip() == "active"
            assert podman("exec", host, "systemctl", "is-active", "prometheus-node-exporter").stdout.strip() == "active"
            listening = podman("exec", host, "ss", "-Hltn", "sport", "= :9100").stdout
            assert "0.0.0.0:9100" in listening or "*:9100" in listening, listening  # as the profile says
            # Installed without its recommends: none of the collector timers.
            status = podman("exec", host, "dpkg-query", "-W", "-f=${db:Status-Abbrev}",
                            "prometheus-node-exporter-collectors").stdout
            assert not status.startswith("ii"), status
            textfile = podman("exec", host, "cat", "/var/lib/prometheus/node-exporter/gpu_provisioner.prom").stdout
            assert 'gpu_provisioner_drift_items{kind="held_packages"} 0' in textfile, textfile
            # No GPU here: nvidia-smi could not run, and that is what the textfile says.
            assert 'gpu_provisioner_check_status{check="nvidia-smi"} 0' in textfile, textfile
            unit = podman("exec", host, "systemctl", "show", "-p", "PrivateNetwork", "-p", "ProtectSystem",
                          "-p", "NoNewPrivileges", "provision-state.service").stdout.split()
            assert sorted(unit) == ["NoNewPrivileges=yes", "PrivateNetwork=yes", "ProtectSystem=strict"], unit

        # The check-mode converge finds nothing to do (one host: both are the image's).
        deep = run("check", inventory, tmp_path, deep=True, limit=victim)
        assert deep.exit_code == 0, deep.as_dict()

        out = tmp_path / "mon"
        target = commands.prepare(PROFILE, inventory)
        monitoring.render(target.loaded, target.inventory, out)
        data = tmp_path / "tsdb"
        prom = Prom(out / "prometheus" / "scrape-node.yml", data, lab_podman.network_gateway())
        try:
            both = lambda r: set(r) == {victim, other}  # noqa: E731
            prom.wait('up{job="node-exporter-lab-state-timer"} == 1', both, 120, "both node_exporters scraped")
            clean, _ = prom.wait('sum by (host) (gpu_provisioner_drift_items)', both, 60, "both textfiles scraped")
            assert clean == {victim: 0, other: 0}
            checks = prom.query('gpu_provisioner_check_status{check="nvidia-smi"}')
            assert checks == {victim: 0, other: 0}, "a GPU-less host must not pass nvidia-smi"

            # Out of band on one host: a driver package unheld; then its timer's service runs.
            start = time.monotonic()
            assert podman("exec", victim, "apt-mark", "unhold", "nvidia-smi").returncode == 0
            assert podman("exec", victim, "systemctl", "start", "provision-state.service").returncode == 0
            drifted, _ = prom.wait('gpu_provisioner_drift_items{kind="held_packages"} > 0', lambda r: bool(r), 90,
                                   "the drift in Prometheus")
            took = time.monotonic() - start
            assert drifted == {victim: 1}, f"only {victim} drifted: {drifted}"
            assert prom.query('gpu_provisioner_drift_items{kind="held_packages"}')[other] == 0
            detail = prom.query('gpu_provisioner_drift_items_detail{item="hold removed: nvidia-smi"}')
            assert detail == {victim: 1}, detail
            print(f"\nout-of-band change -> drift series in Prometheus: {took:.1f} s "
                  "(timer's service run + up to one 15 s scrape)")
            (tmp_path_factory.getbasetemp() / "drift-latency.txt").write_text(f"{took:.1f}\n")

            # `up` repairs it; site.yml refreshes the textfile after the new record, so the
            # series returns to 0 without waiting for the next timer run.
            repaired = run("up", inventory, tmp_path, limit=victim)
            assert repaired.exit_code == 0, repaired.as_dict()
            assert "nvidia-smi" in podman("exec", victim, "apt-mark", "showhold").stdout.split()
            back, _ = prom.wait('gpu_provisioner_drift_items{kind="held_packages"}',
                                lambda r: r.get(victim) == 0, 60, "the drift series back to 0")
            assert back == {victim: 0, other: 0}
        finally:
            prom.stop()
