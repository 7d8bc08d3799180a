"""A Python environment is its owner's code (issue 28, item 5): root reads its packages from
their metadata and never starts its Python; what must start it runs as its owner.

Real venvs built here with the system Python, a real wheel installed by their pip, and a
`.pth` file that writes a marker whenever the environment's Python starts: every path that
reads the package list (the module the python_env role runs, provision check's
provisioner_state, the node's provision-state checker) must leave no marker."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ansible_collections.gpu_provisioner.node.plugins.module_utils import owned_env

from .conftest import COLLECTION
from .test_state import _wheel
from .test_state_metrics import _install

BIN = Path(sys.executable).parent
SYSTEM_PYTHON = "/usr/bin/python3"
ROOT = os.geteuid() == 0


def ansible_module(name: str, args: dict) -> dict:
    """One module run on this machine through Ansible, as provision runs it on a host."""
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-m", f"gpu_provisioner.node.{name}", "-a",
           json.dumps(args), "-e", f"ansible_python_interpreter={sys.executable}", "-o"]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTION.parents[2]), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120).stdout
    return {**json.loads(out[out.index("{"):]), "failed": "| FAILED!" in out.split("{", 1)[0]}


@pytest.fixture
def shared_tmp():
    """A folder other users can enter (pytest's tmp_path is root's alone), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="owned-env-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _venv(folder: Path, pip: bool = True) -> str:
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"needs {SYSTEM_PYTHON}: the system Python a venv on a host is built with")
    argv = [SYSTEM_PYTHON, "-m", "venv", str(folder)] + ([] if pip else ["--without-pip"])
    if subprocess.run(argv, capture_output=True).returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} -m venv does not work here (python3-venv missing)")
    return str(folder / "bin" / "python")


def _armed(python: str, marker: Path) -> None:
    """A .pth file in the environment's site-packages that writes `marker` when its Python
    starts, checked to fire, then the marker removed."""
    (site,) = owned_env.site_packages(python)
    Path(site, "zz_owner.pth").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n")
    subprocess.run([python, "-c", "pass"], check=True)
    assert marker.exists(), "the .pth file must run when the environment's Python starts"
    marker.unlink()


@pytest.mark.ansible
def test_the_package_list_is_read_without_running_a_pth_file_the_owner_dropped(tmp_path: Path):
    env = tmp_path / "env"
    python = _venv(env)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    direct = _wheel(wheels, "direct_one", "0.5")
    _wheel(wheels, "Demo_Lib", "1.0")
    _wheel(wheels, "other.tool", "3.1+cpu")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["install", "--no-index", "--find-links", str(wheels), "Demo_Lib==1.0",
                          "other.tool==3.1+cpu", str(direct)], check=True)
    freeze = subprocess.run(pip + ["freeze"], capture_output=True, text=True, check=True).stdout.splitlines()
    marker = tmp_path / "ran-as-root"
    _armed(python, marker)

    # What pip freeze says, for a plain wheel, a local version and a direct reference (name @ url).
    read = owned_env.frozen(owned_env.site_packages(python))
    assert read == freeze and any(" @ file://" in line for line in read), (read, freeze)
    assert owned_env.installed(owned_env.site_packages(python))["demo-lib"] == "1.0"
    # The module the python_env role runs.
    listed = ansible_module("env_packages", {"python": python})
    assert listed["found"] is True and listed["frozen"] == freeze, listed
    # provision check's module: record, then compare.
    record = tmp_path / "provisioner.fact"
    ansible_module("provisioner_state", {"action": "record", "path": str(record), "profile": "p",
                                         "profile_sha256": "abc", "managed": [{"python_envs": [python]}]})
    assert json.loads(record.read_text())["state"]["python_envs"][python]["other-tool"] == "3.1+cpu"
    assert ansible_module("provisioner_state", {"action": "compare", "path": str(record)}
                          )["provisioner_state"]["differences"] == []
    # The node's own checker, as provision-state.service runs it.
    script = _install(tmp_path / "lib")
    config = tmp_path / "provision-state.json"
    config.write_text(json.dumps({"record": str(record), "textfile": str(tmp_path / "state.prom"),
                                  "nvidia_smi": False}))
    checker = subprocess.run([SYSTEM_PYTHON, "-I", "-S", str(script), "--config", str(config)],
                             capture_output=True, text=True, timeout=120)
    assert checker.returncode == 0 and "0 drifted item(s)" in checker.stdout, checker.stdout + checker.stderr
    assert not marker.exists(), "the environment's Python ran while its packages were read"
    assert ansible_module("env_packages", {"python": str(tmp_path / "gone" / "bin" / "python")})["found"] is False


def test_metadata_the_owner_points_at_a_device_or_a_pipe_is_no_package(tmp_path: Path):
    """A METADATA made a link to /dev/zero (or a FIFO) must not hang or exhaust the reader."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for name in ("zero-1.0.dist-info", "fifo-1.0.dist-info", "big-1.0.dist-info", "good-1.0.dist-info"):
        (site / name).mkdir(parents=True)
    (site / "zero-1.0.dist-info" / "METADATA").symlink_to("/dev/zero")
    os.mkfifo(site / "fifo-1.0.dist-info" / "METADATA")
    (site / "big-1.0.dist-info" / "METADATA").write_text("Name: big\nVersion: 1.0\n" + "x" * owned_env.MAX_BYTES)
    (site / "good-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: good\nVersion: 1.0\n")
    assert owned_env.frozen([str(site)]) == ["good==1.0"]


def test_the_site_packages_of_the_environments_python_version_are_read(tmp_path: Path):
    """A conda env upgraded from 3.10 keeps lib/python3.10; its bin/ has python3.11 only."""
    for version in ("3.10", "3.11"):
        (tmp_path / "lib" / f"python{version}" / "site-packages").mkdir(parents=True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3.11").touch()
    (tmp_path / "bin" / "python").symlink_to("python3.11")
    assert owned_env.site_packages(str(tmp_path / "bin" / "python")) == [
        str(tmp_path / "lib" / "python3.11" / "site-packages")]
    assert owned_env.site_packages(str(tmp_path / "nothing" / "bin" / "python")) is None


@pytest.mark.skipif(not ROOT, reason="switching to another user needs root (this test runs as an ordinary user)")
def test_run_as_owner_runs_as_the_owner_with_its_groups_home_and_nothing_of_roots_environment(monkeypatch):
    nobody = pwd.getpwnam("nobody")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "root-only")
    r = owned_env.run_as_owner([SYSTEM_PYTHON, "-c", "import os, json; print(json.dumps([os.getuid(), os.geteuid(), "
                                "os.getgid(), sorted(os.getgroups()), os.environ.get('HOME'), dict(os.environ)]))"],
                               "nobody", capture_output=True, text=True)
    uid, euid, gid, groups, home, env = json.loads(r.stdout)
    assert (uid, euid, gid) == (nobody.pw_uid, nobody.pw_uid, nobody.pw_gid), r.stderr
    assert 0 not in groups and groups == sorted(os.getgrouplist("nobody", nobody.pw_gid))
    assert home == nobody.pw_dir and "AWS_SECRET_ACCESS_KEY" not in env
    with pytest.raises(LookupError, match="not a user on this host"):
        owned_env.as_owner("no-such-user-here")


@pytest.mark.ansible
@pytest.mark.skipif(not ROOT, reason="the probe switches to the environment's owner only when it runs as root")
def test_the_torch_probe_runs_as_the_environments_owner_and_ddp_refuses_root(shared_tmp: Path):
    python = _venv(shared_tmp / "env", pip=False)
    subprocess.run(["chown", "-R", "nobody:", str(shared_tmp / "env")], check=True)
    marker = shared_tmp / "env" / "ran"  # in the owner's folder: the .pth writes it as whoever starts Python
    _armed(python, marker)  # root starting it fires the .pth: the probe must not be root
    snippet = "import json, os; print(json.dumps({'uid': os.getuid(), 'home': os.environ.get('HOME')}))"
    result = ansible_module("gpu_probe", {"python": python, "torch_snippet": snippet})
    torch = result["provisioner_verify"]["probe"]["commands"]["torch"]
    nobody = pwd.getpwnam("nobody")
    assert torch["rc"] == 0 and torch["owner"] == "nobody", torch
    assert json.loads(torch["stdout"].strip().splitlines()[-1]) == {"uid": nobody.pw_uid, "home": nobody.pw_dir}
    assert marker.exists() and marker.stat().st_uid == nobody.pw_uid, "the .pth ran as the owner, not as root"
    refused = ansible_module("ddp_run", {"script": str(shared_tmp / "ddp_smoke.py"), "python": python, "nnodes": 1,
                                         "node_rank": 0, "master_addr": "127.0.0.1", "master_port": 29500,
                                         "local_addr": "127.0.0.1"})
    assert refused.get("failed") and "refusing to run" in refused["msg"] and "nobody" in refused["msg"], refused
