"""The state record behind the fast drift check (plugins/modules/provisioner_state.py),
run for real on this machine through Ansible (its packages, a file of ours), and the
controller side that turns its findings into drift items and the `up` skip decision."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.engine import commands, drift

from .conftest import MODULES
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.ansible


def module(args: dict, check: bool = False) -> dict:
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-m", "provisioner_state", "-a", json.dumps(args),
           "-e", f"ansible_python_interpreter={sys.executable}", "-o"] + (["--check"] if check else [])
    env = dict(os.environ, ANSIBLE_LIBRARY=str(MODULES), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120).stdout
    return json.loads(out[out.index("{"):])


def test_record_then_compare_names_exactly_what_moved(tmp_path: Path):
    managed_file = tmp_path / "managed.conf"
    managed_file.write_text("setting = 1\n")
    record = tmp_path / "provisioner.fact"
    managed = {"held_packages": ["dpkg"], "packages": ["coreutils", "no-such-package-here"],
               "files": [str(managed_file), str(tmp_path / "absent.conf")]}
    args = {"action": "record", "path": str(record), "profile": "p", "profile_sha256": "abc", "managed": [managed]}

    first = module(args)
    assert first["changed"] is True
    saved = json.loads(record.read_text())
    dpkg = saved["state"]["held_packages"]["dpkg"]
    assert dpkg["version"] and dpkg["hold"] is False
    assert saved["state"]["packages"] == {"coreutils": True, "no-such-package-here": False}
    assert module(args)["changed"] is False, "recording the same state again changes nothing"
    assert module(dict(args, profile_sha256="def"), check=True)["changed"] is True  # a new profile would re-record

    clean = module({"action": "compare", "path": str(record)})["provisioner_state"]
    assert clean["recorded"] is True and clean["profile"] == "p" and clean["differences"] == []

    managed_file.write_text("setting = 2\n")
    (tmp_path / "absent.conf").write_text("new\n")
    moved = module({"action": "compare", "path": str(record)})["provisioner_state"]["differences"]
    assert [d["item"] for d in moved] == [f"file {tmp_path / 'absent.conf'} created", f"file {managed_file} changed"]

    managed_file.unlink()
    gone = module({"action": "compare", "path": str(record)})["provisioner_state"]["differences"]
    assert f"file {managed_file} deleted" in [d["item"] for d in gone]


def test_compare_without_a_record_says_so(tmp_path: Path):
    state = module({"action": "compare", "path": str(tmp_path / "none.fact")})["provisioner_state"]
    assert state["recorded"] is False and state["differences"] == []
    # The same call reads this machine's kernels, DKMS and Secure Boot (module_utils/kernels.py).
    kernels = state["kernels"]
    assert kernels["running"] == os.uname().release and isinstance(kernels["images"], list)
    assert kernels["secure_boot"]["state"] in ("enabled", "disabled", "no-efi", "unknown")


def test_package_and_unit_differences_are_named():
    # The comparison is module_utils/state.py, shared by the module and the node's own checker.
    from ansible_collections.gpu_provisioner.node.plugins.module_utils import state as mod

    recorded = {"held_packages": {"nvidia-smi": {"version": "535.309.01-0+deb12u1", "hold": True},
                                  "nvidia-legacy-check": {"version": "535.309.01-0+deb12u1", "hold": True},
                                  "firmware-nvidia-gsp": {"version": "535.309.01-0+deb12u1", "hold": True}},
                "packages": {"pciutils": True}, "files": {},
                "units": {"nvidia-persistenced.service": {"enabled": "enabled", "active": "inactive"}}}
    now = {"held_packages": {"nvidia-smi": {"version": "535.309.01-0+deb12u1", "hold": False},
                             "nvidia-legacy-check": {"version": "535.261.03-1", "hold": True},
                             "firmware-nvidia-gsp": None},
           "packages": {"pciutils": False}, "files": {},
           "units": {"nvidia-persistenced.service": {"enabled": "disabled", "active": "inactive"}}}
    found = mod.differences(recorded, now)
    got = {d["item"]: (d["recorded"], d["now"]) for d in found}
    assert {d["item"]: d["kind"] for d in found}["package pciutils"] == "packages"
    assert got == {
        "hold removed: nvidia-smi": ("held", "not held"),
        "package nvidia-legacy-check": ("535.309.01-0+deb12u1 (held)", "535.261.03-1 (held)"),
        "package firmware-nvidia-gsp": ("535.309.01-0+deb12u1 (held)", "not installed"),
        "package pciutils": ("installed", "not installed"),
        "unit nvidia-persistenced.service enabled": ("enabled", "disabled"),
    }


def test_up_skips_only_a_host_in_its_recorded_state_with_this_profile():
    loaded = profiles.load("debian12-lab")
    target = commands.Target(loaded, None)
    state = {"recorded": True, "profile": "debian12-lab", "profile_sha256": loaded.digest, "differences": [],
             "dpkg_audit": ""}
    assert drift.in_recorded_state(state, target)
    assert not drift.in_recorded_state(dict(state, profile_sha256="0" * 64), target)  # the profile changed
    assert not drift.in_recorded_state(dict(state, recorded=False), target)
    half = dict(state, dpkg_audit="The following packages are only half configured: hello")
    assert not drift.in_recorded_state(half, target)
    assert drift.state_drift(half)[0][0] == "dpkg: packages left half-configured by an interrupted run"


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A real (tiny) wheel pip installs offline: one module and its dist-info."""
    import base64
    import hashlib
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    files = {f"{name}.py": f"VERSION = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for member, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{member},sha256={digest},{len(text.encode())}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
        z.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_a_python_environments_packages_are_recorded_and_their_drift_named(tmp_path: Path):
    """A package removed by hand and one upgraded by hand, in a real venv: the compare names both."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)  # pip from ensurepip, offline
    python = str(env / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check"]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, version in (("demo_lib", "1.0"), ("demo_lib", "2.0"), ("other_tool", "3.1")):
        _wheel(wheels, name, version)
    install = pip + ["install", "-q", "--no-index", "--find-links", str(wheels)]
    subprocess.run(install + ["demo_lib==1.0", "other_tool==3.1"], check=True)

    record = tmp_path / "provisioner.fact"
    args = {"action": "record", "path": str(record), "profile": "p", "profile_sha256": "abc",
            "managed": [{"python_envs": [python]}]}
    assert module(args)["changed"] is True
    recorded = json.loads(record.read_text())["state"]["python_envs"][python]
    assert recorded["demo-lib"] == "1.0" and recorded["other-tool"] == "3.1"
    assert module({"action": "compare", "path": str(record)})["provisioner_state"]["differences"] == []

    subprocess.run(pip + ["uninstall", "-q", "-y", "other_tool"], check=True)
    subprocess.run(install + ["--upgrade", "demo_lib==2.0"], check=True)
    moved = module({"action": "compare", "path": str(record)})["provisioner_state"]["differences"]
    assert {d["item"]: (d["recorded"], d["now"]) for d in moved} == {
        f"python package other-tool removed ({python})": ("3.1", "absent"),
        f"python package demo-lib changed ({python})": ("1.0", "2.0"),
    }
