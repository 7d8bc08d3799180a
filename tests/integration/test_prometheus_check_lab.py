"""`provision check --from-prometheus` and `provision check` over SSH agree on a 30-host lab
fleet with 2 drifted hosts, against Debian's real `prometheus` binary that this test starts on
the lab network with the scrape config `provision render` writes.

What it proves: on the same fleet at the same moment, both paths give every host the same
status, the same drifted items, the same exit code (2) and a report of the same shape (the
same keys at the top and per host; only `source` is filled by the Prometheus path); the
Prometheus path reads what 30 real provision-state timers published through 30 real
node_exporters. `verify --from-prometheus` runs its one query against the same Prometheus
and, for this GPU-less profile, judges no timer check and lists what it did not judge. Hosts start from the committed converged lab-state-timer image
(provisioner.lab.converged), so no converge runs here.

What it cannot prove: GPU checks (no GPU, no module in a container: nvidia-smi fails on every
host, on both paths alike), or the cost at thousands of hosts (bench/fleet.py --prometheus
times both paths at 30 and 100). Every wait is bounded."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from provisioner.engine import commands
from provisioner.reports import monitoring

from . import labtools
from .labtools import podman
from .test_state_timer_lab import PROFILE, Prom

pytestmark = pytest.mark.lab

HOSTS = 30
NOUVEAU = "/etc/modprobe.d/provisioner-blacklist-nouveau.conf"  # a file the lab-state-timer record manages


def provision(*args: str) -> tuple[int, dict, float]:
    """The real CLI with --json: exit code, report, wall seconds."""
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "provisioner.cli", *args, "--json"], capture_output=True, text=True,
                       timeout=600)
    took = time.monotonic() - start
    assert r.stdout.strip(), r.stderr[-3000:]
    return r.returncode, json.loads(r.stdout), took


def shape(report: dict) -> tuple[list[str], list[list[str]]]:
    return sorted(report), [sorted(h) for h in report["hosts"]]


def test_check_from_prometheus_gives_the_ssh_verdicts_on_a_drifted_fleet(tmp_path_factory, tmp_path):
    from provisioner.lab import podman as lab_podman

    with labtools.lab_hosts(HOSTS, "pc", tmp_path_factory, converged=PROFILE) as lab:
        inventory = lab.inventory
        names = [h.name for h in lab.hosts]
        held, edited = names[3], names[17]
        # Out of band, on two hosts: a driver package unheld; a managed file edited.
        assert podman("exec", held, "apt-mark", "unhold", "nvidia-smi").returncode == 0
        assert podman("exec", edited, "sh", "-c", f"echo '# edited by hand' >> {NOUVEAU}").returncode == 0
        # Every host's timer service runs now (its first timer run is 60 s after boot): the
        # textfiles in the image are as old as the image, which the Prometheus path must not judge.
        with ThreadPoolExecutor(8) as pool:
            ran = list(pool.map(lambda h: podman("exec", h, "systemctl", "start", "provision-state.service"), names))
        assert all(r.returncode == 0 for r in ran), [r.stderr for r in ran if r.returncode]
        after_runs = time.time()

        out = tmp_path / "mon"
        target = commands.prepare(PROFILE, inventory)
        monitoring.render(target.loaded, target.inventory, out)
        prom = Prom(out / "prometheus" / "scrape-node.yml", tmp_path / "tsdb", lab_podman.network_gateway())
        try:
            every = lambda r: set(r) == set(names)  # noqa: E731
            prom.wait('up{job="node-exporter-lab-state-timer"} == 1', every, 180, "every node_exporter scraped")
            prom.wait(f"gpu_provisioner_last_run_timestamp_seconds >= {after_runs - 5:.0f}", every, 120,
                      "every host's textfile of the runs above scraped")

            ssh_rc, ssh, ssh_s = provision("check", "--profile", PROFILE, str(inventory), "--runs-dir", str(tmp_path))
            prom_rc, from_prom, prom_s = provision("check", "--profile", PROFILE, str(inventory), "--runs-dir",
                                                   str(tmp_path), "--from-prometheus", prom.url)
            verify_rc, verified, _ = provision("verify", "--profile", PROFILE, str(inventory), "--runs-dir",
                                               str(tmp_path), "--from-prometheus", prom.url)
        finally:
            prom.stop()
        print(f"\ncheck of {HOSTS} hosts: over SSH {ssh_s:.1f} s, --from-prometheus {prom_s:.2f} s")

        status = {h["name"]: h["status"] for h in ssh["hosts"]}
        assert status == {n: "drift" if n in (held, edited) else "ok" for n in names}, ssh["hosts"]
        assert {h["name"]: h["status"] for h in from_prom["hosts"]} == status, from_prom["hosts"]
        assert ssh_rc == prom_rc == ssh["exit_code"] == from_prom["exit_code"] == 2
        assert from_prom["summary"] == ssh["summary"]
        assert shape(from_prom) == shape(ssh)
        assert ssh["source"] is None and from_prom["source"]["prometheus"] == prom.url
        assert from_prom["source"]["ignored_series"] == 0, from_prom["source"]
        # The same items named on both paths.
        items = {h["name"]: sorted(h["changed_tasks"]) for h in ssh["hosts"] if h["changed_tasks"]}
        assert {h["name"]: sorted(h["changed_tasks"]) for h in from_prom["hosts"] if h["changed_tasks"]} == items
        assert items[held] == ["hold removed: nvidia-smi"], items
        assert any(NOUVEAU in item for item in items[edited]), items
        assert prom_s < ssh_s, (prom_s, ssh_s)

        # verify from the same Prometheus (its query with `or` across both jobs, for real): the
        # GPU-less profile judges none of the timer's checks, and says what it did not judge.
        assert verify_rc == verified["exit_code"] == 0, verified["hosts"][:2]
        assert {h["status"] for h in verified["hosts"]} == {"ok"} and len(verified["hosts"]) == HOSTS
        checks = {c["name"]: c["status"] for c in verified["hosts"][0]["checks"]}
        assert checks == {"data age": "pass", "gpus": "skip", "not judged from Prometheus": "skip"}, checks
