"""A bundle applied for real inside a lab host, over Ansible's local connection.

    sudo .venv/bin/pytest -m lab tests/integration/test_bundle_lab.py

The host gets the tarball and the script our cloud-init snippet installs; the script
checks the sha256, unpacks, makes a venv with the ansible-core the bundle carries (the
controller's, as wheels downloaded when the bundle is built, installed with --no-index
--require-hashes) and runs `ansible-playbook -i inventory local.yml`. A second run must
report changed=0.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from provisioner.render import bundle
from provisioner import profiles

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = [pytest.mark.lab, pytest.mark.extended]  # CI leaves it out for time: make test-extended

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

PROFILE = DRIVER_ONLY
RECAP = re.compile(r"^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@pytest.fixture(scope="module")
def lab_host(tmp_path_factory):
    with labtools.lab_hosts(1, "bd", tmp_path_factory) as result:
        yield result.hosts[0].name


def apply(host: str) -> tuple[subprocess.CompletedProcess, tuple[int, int, int, int]]:
    r = podman("exec", host, "/usr/local/sbin/provision-apply-bundle", timeout=1200)
    recap = RECAP.search(r.stdout)
    assert recap, f"no PLAY RECAP (rc {r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r, tuple(int(n) for n in recap.groups())


def test_bundle_converges_a_lab_host_by_itself_and_then_changes_nothing(lab_host, tmp_path):
    loaded = profiles.load(PROFILE)
    tarball = bundle.build(loaded, tmp_path / "bundle.tar.gz")
    assert podman("cp", str(tarball), f"{lab_host}:/root/bundle.tar.gz").returncode == 0

    # Exactly what the cloud-config would write, then run at first boot.
    config = yaml.safe_load(bundle.cloud_init("/root/bundle.tar.gz", bundle.sha256_of(tarball)))
    (script,) = config["write_files"]
    r = podman("exec", "-i", lab_host, "sh", "-c", f"cat > {script['path']} && chmod 0755 {script['path']}",
               input=script["content"])
    assert r.returncode == 0, r.stderr

    first, (ok, changed, unreachable, failed) = apply(lab_host)
    assert first.returncode == 0 and failed == 0 and unreachable == 0, first.stdout[-4000:]
    assert changed > 0  # a fresh host: common's packages, config files and the profile record
    assert "TASK [gpu_provisioner.node.common :" in first.stdout
    # The node runs the controller's exact ansible-core, from the bundle's own wheels.
    core = podman("exec", lab_host, "/opt/provisioner/ansible/bin/python", "-c",
                  "import importlib.metadata as m; print(m.version('ansible-core'))")
    assert core.stdout.strip() == importlib.metadata.version("ansible-core"), core.stdout + core.stderr

    # The host now carries the profile record the drift check reads.
    fact = podman("exec", lab_host, "cat", "/etc/ansible/facts.d/provisioner.fact")
    assert fact.returncode == 0, fact.stderr
    record = json.loads(fact.stdout)
    assert (record["profile"], record["profile_sha256"]) == (loaded.profile.name, loaded.digest)
    driver = record["state"]["held_packages"]["nvidia-driver"]
    assert driver["version"].startswith(loaded.profile.driver.version + "-") and driver["hold"] is True

    # The bundle always installs provision-state.timer: the node reports its own drift.
    assert podman("exec", lab_host, "systemctl", "is-active", "provision-state.timer").stdout.strip() == "active"
    textfile = podman("exec", lab_host, "cat", "/var/lib/prometheus/node-exporter/gpu_provisioner.prom").stdout
    assert 'gpu_provisioner_drift_items{kind="held_packages"} 0' in textfile, textfile
    assert f'profile="{loaded.profile.name}"' in textfile

    second, (_, changed, unreachable, failed) = apply(lab_host)
    assert second.returncode == 0 and failed == 0 and unreachable == 0
    assert changed == 0, "a second apply changed:\n" + "\n".join(changed_tasks(second.stdout))


def changed_tasks(stdout: str) -> list[str]:
    """The TASK headers whose result line says changed, from ansible-playbook's default output."""
    task, out = "", []
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip("* ")
        elif line.startswith("changed:") and task:
            out.append(task)
    return out


def test_a_tampered_bundle_is_refused_on_the_host(lab_host, tmp_path):
    tarball = bundle.build(profiles.load(PROFILE), tmp_path / "bundle.tar.gz")
    good = bundle.sha256_of(tarball)
    with open(tarball, "ab") as f:
        f.write(b"tampered")
    assert podman("cp", str(tarball), f"{lab_host}:/root/tampered.tar.gz").returncode == 0
    script = bundle.apply_script("/root/tampered.tar.gz", good)
    r = podman("exec", "-i", lab_host, "sh", "-s", input=script)
    assert r.returncode == 1
    assert "refusing to apply it" in r.stderr
    assert "PLAY" not in r.stdout
