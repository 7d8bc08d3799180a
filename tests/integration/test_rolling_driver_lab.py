"""Day two on two converged lab hosts, from the stand-in for NVIDIA's CUDA repository
(which serves two 580 builds, 580.65.06 and 580.95.05), in one module that reuses the
same two hosts for each step:

1. converge both at 580.65.06; `up --rollback` is refused then, by host name, with
   nothing touched (each host ran one profile only);
2. `up --batch 1` to 580.95.05 with drain/gate/undrain hooks that log to a file: each
   host's gate records which driver build both hosts have at that moment, so the log
   proves the change went node by node; the driver role said, before it moved the held
   driver packages, which GPU holders it stops (none run in a container);
3. `up --rollback --batch 2` with drain/undrain hooks: both hosts back at 580.65.06,
   held, in the state record as the old profile;
4. a profile with DCGM (and so its exporter) off: `check` reports the component before
   (exit 2); `up` stops and disables its units, releases its holds, purges its packages
   and removes its apt preferences, unit and mask; `check` is 0 afterwards.

The profile is h100-train's (NVSwitch kept, so fabric manager and nscq are installed)
with the CUDA libraries off, so each converge is short.

What this proves: the rollout's hook order per host, the held driver, fabric-manager and
DCGM packages moving together (up, back down) and staying held, the state record's
previous profile and package set, what turning a component off removes. What it cannot
prove: stopping a running GPU holder (nothing runs without a loaded module), a module
rebuild or a reboot (the packages are empty stand-ins, containers share the controller's
kernel and cannot reboot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.render import plan_for
from provisioner import profiles

from . import labtools
from .labtools import podman
from .test_production_path_lab import PROFILE, installed, sh

pytestmark = [pytest.mark.lab, pytest.mark.extended]  # CI leaves it out for time: make test-extended

PROVISION = str(Path(sys.executable).parent / "provision")
OLD, NEW = "580.65.06", "580.95.05"
DRIVER = "nvidia-driver-580"
FACT = "/etc/ansible/facts.d/provisioner.fact"
# The CUDA libraries are not what a driver change or DCGM's removal is about: off, for speed.
LIGHT = "cuda:\n  enabled: false\ncudnn:\n  enabled: false\nnccl:\n  enabled: false\ntensorrt:\n  enabled: false\n"


@pytest.fixture(scope="module")
def lab(standin, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """Two fresh hosts, not hosts from a converged image (provisioner.lab.converged): this
    profile enables fabric manager, nv-hostengine and the exporter without starting them (no
    driver module is loaded), and a host booted from an image starts its enabled units, which
    fail without a GPU; on fresh hosts the units stay as the converge left them."""
    with labtools.lab_hosts(2, "rolldrv", tmp_path_factory) as result:
        yield result


@pytest.fixture(scope="module")
def profile_files(standin, tmp_path_factory) -> dict[str, Path]:  # noqa: F811
    repo, url = standin
    text = PROFILE.format(url=url, key_url=f"{url}{repo.key_path}", fingerprint=repo.fingerprint, driver=NEW,
                          toolkit="12.2")
    text = text.replace("tensorrt:\n  version: 8.6.1.6\n", "").replace('cuda:\n  toolkits: ["12.2"]\n', "") + LIGHT
    folder = tmp_path_factory.mktemp("profiles")
    old_text = (text.replace("name: h100-train-lab", "name: h100-train-lab-old")
                .replace(f"driver:\n  version: {NEW}\n", f"driver:\n  version: {OLD}\n")
                .replace(f"fabric_manager:\n  version: {NEW}\n", f"fabric_manager:\n  version: {OLD}\n"))
    files = {"new": text, "old": old_text,
             "off": old_text.replace("name: h100-train-lab-old", "name: h100-train-lab-nodcgm")
             + "dcgm:\n  enabled: false\n"}
    for name, body in files.items():
        (folder / f"{name}.yml").write_text(body)
    return {name: folder / f"{name}.yml" for name in files}


def _provision(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROVISION, *args], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "COLUMNS": "200"})


def _held(host: str) -> set[str]:
    return set(podman("exec", host, "apt-mark", "showhold").stdout.split())


def _record(host: str) -> dict:
    return json.loads(sh(host, f"cat {FACT}").stdout)


def _site_events(runs: Path, host: str) -> list[dict]:
    """This host's converge events (every site play of every run under `runs`), in order."""
    events = []
    for path in runs.glob("*/artifacts/site*/job_events/*.json"):
        data = json.loads(path.read_text())
        if data.get("event_data", {}).get("host") == host:
            events.append(data)
    return sorted(events, key=lambda e: (e.get("created", ""), e.get("counter", 0)))


def test_a_driver_change_rolls_node_by_node_rolls_back_and_a_component_turned_off_goes(lab, profile_files,
                                                                                       tmp_path):
    one, two = (h.name for h in lab.hosts)
    runs = tmp_path / "runs"
    inv = str(lab.inventory)
    first = _provision("up", "--profile", str(profile_files["old"]), inv, "--runs-dir", str(runs))
    assert first.returncode == 0, first.stdout + first.stderr
    for host in (one, two):
        assert installed(host, [DRIVER])[DRIVER].startswith(OLD)

    # 1. Nothing to roll back to yet: refused by name, the records untouched.
    before = {h: sh(h, f"sha256sum {FACT}").stdout for h in (one, two)}
    refused = _provision("up", "--rollback", "--profile", str(profile_files["old"]), inv, "--runs-dir", str(runs))
    out = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "nothing to roll back to on 2 host(s)" in out, out
    assert one in out and two in out and "Traceback" not in out, out
    assert {h: sh(h, f"sha256sum {FACT}").stdout for h in (one, two)} == before

    # 2. Roll to the new driver, one host at a time.
    log = tmp_path / "hooks.log"
    versions = " ".join(f"{h}=$(podman exec {h} dpkg-query -W -f='${{Version}}' {DRIVER})" for h in (one, two))
    hook = f'echo "%s {{host}} {versions}" >> {log}'
    roll = _provision("up", "--profile", str(profile_files["new"]), inv, "--runs-dir", str(runs), "--batch", "1",
                      "--drain", hook % "drain", "--gate", hook % "gate", "--undrain", hook % "undrain")
    out = roll.stdout + roll.stderr
    assert roll.returncode == 0, out
    lines = log.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["drain", one], ["gate", one], ["undrain", one],
                                                    ["drain", two], ["gate", two], ["undrain", two]], lines
    gate_one = lines[1].split()[2:]
    assert gate_one[0].startswith(f"{one}={NEW}") and gate_one[1].startswith(f"{two}={OLD}"), lines  # node by node
    for host in (one, two):
        have = installed(host, [DRIVER, "nvidia-fabricmanager"])
        assert have[DRIVER].startswith(NEW) and have["nvidia-fabricmanager"].startswith(NEW), (host, have)
        assert {DRIVER, "nvidia-fabricmanager"} <= _held(host), host
        # The driver role looked for GPU holders before it moved the held packages.
        tasks = [e["event_data"].get("task", "") for e in _site_events(runs, host) if e["event"] == "runner_on_ok"]
        said = [e["event_data"]["res"].get("msg", "") for e in _site_events(runs, host) if e["event"] == "runner_on_ok"
                and e["event_data"].get("task", "").startswith("Say which GPU holders stop")]
        assert said and DRIVER in said[-1] and "stopping nothing" in said[-1], said
        last_say = len(tasks) - 1 - tasks[::-1].index("Say which GPU holders stop before the driver packages move.")
        assert "Install the driver packages at their exact versions, without recommends." in tasks[last_say:]
        assert _record(host)["previous"]["profile"] == "h100-train-lab-old"
    assert "2 host(s): 2 ok (2 changed), 0 drifted, 0 failed, 0 unreachable" in out, out

    # 3. Roll back, both hosts in one batch, with drain/undrain hooks.
    log.write_text("")
    back = _provision("up", "--rollback", "--profile", str(profile_files["new"]), inv, "--runs-dir", str(runs),
                      "--batch", "2", "--drain", hook % "drain", "--undrain", hook % "undrain")
    out = back.stdout + back.stderr
    assert back.returncode == 0, out
    assert "rollback: 2 host(s) back to profile 'h100-train-lab-old'" in out, out
    lines = log.read_text().splitlines()
    assert [line.split()[:2] for line in lines] == [["drain", one], ["drain", two], ["undrain", one],
                                                    ["undrain", two]], lines
    for host in (one, two):
        have = installed(host, [DRIVER, "nvidia-fabricmanager"])
        assert have[DRIVER].startswith(OLD) and have["nvidia-fabricmanager"].startswith(OLD), (host, have)
        assert {DRIVER, "nvidia-fabricmanager"} <= _held(host), host
        record = _record(host)
        assert record["profile"] == "h100-train-lab-old" and record["previous"]["profile"] == "h100-train-lab"
        assert record["previous"]["held_packages"][DRIVER].startswith(NEW)

    # 4. DCGM (and its exporter) off: check reports it, up removes it, check is clean after.
    plan = plan_for(profiles.load(str(profile_files["old"]))).pins
    dcgm = sorted(plan["dcgm"]) + sorted(plan["dcgm_exporter"])
    assert not plan_for(profiles.load(str(profile_files["off"]))).pins.get("dcgm")
    for host in (one, two):
        assert set(installed(host, dcgm)) == set(dcgm) and set(dcgm) <= _held(host)
    check = _provision("check", "--profile", str(profile_files["off"]), inv, "--runs-dir", str(runs), "--verbose")
    out = check.stdout + check.stderr
    assert check.returncode == 2 and "component dcgm_exporter is off in the profile" in out, out
    gone = _provision("up", "--profile", str(profile_files["off"]), inv, "--runs-dir", str(runs))
    out = gone.stdout + gone.stderr
    assert gone.returncode == 0, out
    for host in (one, two):
        assert installed(host, dcgm) == {}, host  # purged: they were ours
        assert not set(dcgm) & _held(host) and DRIVER in _held(host), host
        for path in ("/etc/apt/preferences.d/provisioner-dcgm", "/etc/apt/preferences.d/provisioner-dcgm-exporter",
                     "/etc/systemd/system/dcgm-exporter.service", "/etc/systemd/system/nvidia-dcgm-exporter.service"):
            assert sh(host, f"test -e {path} || test -L {path}").returncode != 0, (host, path)
        for unit in ("nvidia-dcgm.service", "dcgm-exporter.service"):
            assert sh(host, f"systemctl show -p LoadState --value {unit}").stdout.strip() == "not-found", (host, unit)
        left = _record(host)["components"]["dcgm_exporter"]
        assert not left["held_packages"] and not left["units"], (host, left)
    again = _provision("check", "--profile", str(profile_files["off"]), inv, "--runs-dir", str(runs))
    assert again.returncode == 0, again.stdout + again.stderr
