"""Three isolated ML environments on one lab host, installed offline from a wheelhouse
(issue 30).

    sudo .venv/bin/pytest -m lab tests/integration/test_envs_lab.py -s

`provision wheelhouse` collects, on the controller, every wheel of tests/data/profiles/
lab-envs.yml's three venvs (PyTorch 2.13.0+cpu from the lab's local wheel folder /opt/wheels;
tensorflow-cpu 2.21.0 and jax 0.10.2 with their dependencies from the package index pip is
configured with) for Debian 12 (manylinux_2_36_x86_64, Python 3.11), with a lock per
environment. It is kept under /var/cache/provisioner-lab/wheelhouse-<key> (key: the
requirements and platform) so a machine downloads it once; the seconds it took are printed.
One lab host starts from the driver-only converged image; a rule in its network namespace
rejects every outbound connection but the lab's private networks (SSH, the apt cache), so an
index request would fail rather than be skipped. Proven here: `up` converges the three
environments from the copied wheelhouse (pip --no-index --require-hashes against each lock);
a second converge changes nothing; verify shows each framework's import, version and "no GPU
here", and that the probes ran as the environments' owner; a `pip uninstall` in one
environment is found by `check` for that environment only and put back by `up`; JAX moved
to another release (0.10.1, its own wheelhouse) is built at a path of its own, switched to
after its import check, the old build kept beside it (a rollback's) and the other two
untouched; dropping an
environment removes it. Not proven: GPU builds (no GPU, no CUDA wheels), conda environments
offline (no local conda channel here).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.engine import commands, wheelhouse
from provisioner.render import pip_requirements

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None or shutil.which("nsenter") is None:
    pytest.skip("lab hosts need root, podman and nsenter (scripts/setup-dev-host)", allow_module_level=True)

PROFILE = Path(__file__).parents[1] / "data" / "profiles" / "lab-envs.yml"
PLATFORM = "manylinux_2_36_x86_64"      # Debian 12: glibc 2.36
CACHE = Path("/var/cache/provisioner-lab")
ENVS = {"torch": "torch", "tf": "tensorflow", "jax": "jax"}


def _wheelhouse(profile: Path = PROFILE) -> Path:
    """A profile's wheelhouse, collected once per machine (keyed by what it holds)."""
    p = profiles.load(str(profile)).profile
    key = hashlib.sha256(json.dumps([PLATFORM, [[e.name, e.python, pip_requirements(p, e)] for e in p.python_envs]],
                                    sort_keys=True).encode()).hexdigest()[:16]
    cached = CACHE / f"wheelhouse-{key}"
    if not cached.is_dir():
        t0 = time.monotonic()
        partial = CACHE / f".wheelhouse-{key}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        got = wheelhouse.collect(profiles.load(str(profile)), partial, platform=PLATFORM, find_links=[Path("/opt/wheels")])
        partial.rename(cached)
        print(f"\nwheelhouse collected in {time.monotonic() - t0:.0f}s: "
              + ", ".join(f"{g.env} {g.wheels} wheels {g.bytes / 1e6:.0f} MB" for g in got))
    return cached


def _cut_index_access(host: str) -> None:
    """Reject every new outbound connection but to the lab's private networks, in the host's netns."""
    pid = podman("inspect", "-f", "{{.State.Pid}}", host).stdout.strip()
    rules = [["-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"],
             ["-A", "OUTPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
             *[["-A", "OUTPUT", "-d", net, "-j", "ACCEPT"] for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")],
             ["-A", "OUTPUT", "-j", "REJECT"]]
    for rule in rules:
        subprocess.run(["nsenter", "-t", pid, "-n", "iptables", *rule], check=True)
    probe = podman("exec", host, "python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 443), 5)")
    assert probe.returncode != 0 and "refused" in probe.stderr.lower(), probe.stderr


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with labtools.lab_hosts(1, "envs", tmp_path_factory, converged=DRIVER_ONLY) as result:
        yield result


JAX_NOW, JAX_NEXT = "version: 0.10.2", "version: 0.10.1"   # both on the index for Python 3.11


def _profiles(folder: Path, house: Path) -> tuple[Path, Path, Path]:
    """The three-environment profile, the same with JAX at another release (its own
    wheelhouse, collected from it), and the same without JAX."""
    shutil.copy(DRIVER_ONLY, folder / "lab-driver-only.yml")
    subprocess.run(["cp", "-al", str(house), str(folder / "wheelhouse")], check=True)   # hard links: no copy
    text = PROFILE.read_text().replace("wheelhouse_source: /opt/wheels", "wheelhouse_source: wheelhouse")
    three, moved, two = folder / "lab-envs.yml", folder / "lab-envs-jax-moved.yml", folder / "lab-envs-two.yml"
    three.write_text(text)
    assert text.count(JAX_NOW) == 1
    moved.write_text(text.replace(JAX_NOW, JAX_NEXT).replace("wheelhouse_source: wheelhouse",
                                                             "wheelhouse_source: wheelhouse-moved"))
    moved_source = folder / "moved-for-collecting.yml"   # the lab's own wheel folder, as _wheelhouse collects
    moved_source.write_text(PROFILE.read_text().replace(JAX_NOW, JAX_NEXT))
    subprocess.run(["cp", "-al", str(_wheelhouse(moved_source)), str(folder / "wheelhouse-moved")], check=True)
    start = text.index("  - name: jax")
    two.write_text(text[:start] + text[text.index("mirrors:"):])
    return three, moved, two


def _checks(result) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["detail"]) for c in result.as_dict()["hosts"][0]["checks"]}


def test_three_environments_offline_from_a_wheelhouse(lab, tmp_path: Path):
    t0 = time.monotonic()
    house = _wheelhouse()
    three, moved, two = _profiles(tmp_path, house)
    host, inventory = lab.hosts[0].name, lab.inventory
    runs = tmp_path / "runs"
    _cut_index_access(host)

    def run(command: str, profile: Path, **options):
        return commands.execute(command, commands.prepare(str(profile), inventory), runs_dir=runs, **options)

    first = run("up", three)
    assert first.exit_code == 0, json.dumps(first.as_dict())[-4000:]
    for name, module in ENVS.items():
        got = podman("exec", host, "runuser", "-u", "provision", "--", f"/opt/venvs/{name}/bin/python", "-c",
                     f"import {module}; print({module}.__version__)")
        assert got.returncode == 0, got.stderr[-2000:]
    lock = podman("exec", host, "cat", "/var/lib/provisioner/python_env/jax.lock.txt").stdout
    assert "jax==0.10.2 --hash=sha256:" in lock
    print(f"\nfirst converge: {time.monotonic() - t0:.0f}s")

    again = run("up", three, full=True)
    assert again.exit_code == 0 and again.hosts[0].changed_tasks == [], again.hosts[0].changed_tasks
    print(f"second full converge: {time.monotonic() - t0:.0f}s")

    checks = _checks(run("verify", three))
    for env, fw in (("tf", "tensorflow"), ("jax", "jax")):
        assert checks[f"{fw} import ({env})"][0] == "pass" and "as provision" in checks[f"{fw} import ({env})"][1]
        assert checks[f"{fw} version ({env})"][0] == "pass"
        assert checks[f"{fw} matmul cpu ({env})"][0] == "pass"
        assert checks[f"{fw} gpus ({env})"] == ("skip", "no GPU here, none expected")
    assert checks["torch version"][0] == "pass"
    print(f"verify: {time.monotonic() - t0:.0f}s")

    podman("exec", host, "runuser", "-u", "provision", "--", "/opt/venvs/jax/bin/python", "-m", "pip", "uninstall",
           "--yes", "opt-einsum")
    drift = run("check", three)
    text = json.dumps(drift.as_dict())
    assert drift.exit_code == 2 and "opt" in text and "/opt/venvs/jax/bin/python" in text, text[-3000:]
    assert "/opt/venvs/tf/bin/python" not in text and "/opt/venvs/torch/bin/python" not in text
    assert run("up", three).exit_code == 0
    assert run("check", three).exit_code == 0
    print(f"drift found and repaired: {time.monotonic() - t0:.0f}s")

    def builds() -> dict[str, str]:
        return {name: podman("exec", host, "readlink", f"/opt/venvs/{name}").stdout.strip() for name in ENVS}

    before = builds()
    assert run("up", moved).exit_code == 0
    after = builds()
    assert after["jax"] != before["jax"], "a changed JAX release is built at a path of its own"
    assert {n: after[n] for n in ("torch", "tf")} == {n: before[n] for n in ("torch", "tf")}, "the others untouched"
    got = podman("exec", host, "runuser", "-u", "provision", "--", "/opt/venvs/jax/bin/python", "-c",
                 "import jax; print(jax.__version__)")
    assert got.stdout.strip() == JAX_NEXT.split()[1], got.stdout + got.stderr[-2000:]
    # Beside it: the build the last converge used stays, so a rollback has somewhere to go.
    assert podman("exec", host, "test", "-x", f"{before['jax']}/bin/python").returncode == 0, "the old build is kept"
    assert run("check", moved).exit_code == 0
    print(f"JAX rebuilt beside and switched: {time.monotonic() - t0:.0f}s")

    assert run("up", two).exit_code == 0
    left = podman("exec", host, "sh", "-c", "ls -a /opt/venvs; ls /var/lib/provisioner/python_env").stdout
    assert "jax" not in left and "tf" in left, left
    print(f"environment dropped: {time.monotonic() - t0:.0f}s")
