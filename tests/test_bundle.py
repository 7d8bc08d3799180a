"""provision bundle: a deterministic tarball a node applies to itself, and its cloud-init snippet.

Applying it for real inside a lab host: tests/integration/test_bundle_lab.py.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from provisioner.render import bundle, bundle_wheels
from provisioner import paths, profiles
from provisioner.render.ansible_data import load_unsafe
from provisioner.errors import ProvisionError

DATA = Path(__file__).resolve().parent / "data"
PROFILE = str(DATA / "profiles" / "lab-driver-only.yml")


@pytest.fixture(scope="module")
def wheels(offline_wheels) -> Path:
    return offline_wheels()  # the lab profiles are Debian 12's: Python 3.11


@pytest.fixture(scope="module")
def built(tmp_path_factory, wheels) -> Path:
    return bundle.build(profiles.load(PROFILE), tmp_path_factory.mktemp("bundle") / "bundle.tar.gz", wheels=wheels)


def _read(tar: tarfile.TarFile, name: str) -> str:
    return tar.extractfile(name).read().decode()


C = "ansible_collections/gpu_provisioner/node"


def test_entries(built):
    with tarfile.open(built) as tar:
        names = tar.getnames()
        for required in ("local.yml", "ansible.cfg", "apply.sh", "README.md", "BUNDLE.json", "profile.yml",
                         "inventory/hosts.ini", "inventory/group_vars/all/provisioner.yml",
                         *(f"{C}/{f}" for f in ("playbooks/site.yml", "playbooks/verify.yml", "playbooks/preflight.yml",
                                                "roles/common/tasks/main.yml", "roles/common/defaults/main.yml",
                                                "plugins/modules/provisioner_state.py", "galaxy.yml"))):
            assert required in names, required
        # Every role and playbook file the package ships, and nothing from test scaffolding.
        shipped = {p.relative_to(paths.collections_path()).as_posix()
                   for p in paths.ansible_root().rglob("*")
                   if p.is_file() and not {"molecule", "__pycache__"} & set(p.parts) and not p.name.startswith(".")}
        assert shipped <= set(names)
        assert not [n for n in names if "/molecule" in n or "__pycache__" in n or n.endswith(".pyc")]
        assert names == sorted(names, key=lambda n: n.split("/"))
        for member in tar.getmembers():
            assert (member.uid, member.gid, member.uname, member.gname) == (0, 0, "root", "root")
            assert member.mtime == bundle.FIXED_MTIME
            assert member.isfile() or member.isdir()
            assert not member.name.startswith(("/", "..")) and ".." not in member.name.split("/")
        assert tar.getmember("apply.sh").mode == 0o755
        assert tar.getmember("local.yml").mode == 0o644

        assert "localhost ansible_connection=local" in _read(tar, "inventory/hosts.ini")
        group_vars = load_unsafe(_read(tar, "inventory/group_vars/all/provisioner.yml"))
        assert group_vars["provisioner_profile"] == "lab-driver-only"
        assert group_vars["cuda_toolkit_enabled"] is False and group_vars["python_env_enabled"] is False
        profile = yaml.safe_load(_read(tar, "profile.yml"))
        assert profile["name"] == "lab-driver-only" and "extends" not in profile
        local = yaml.safe_load(_read(tar, "local.yml"))
        assert local == [{"name": "Converge this machine to the bundled profile.",
                          "ansible.builtin.import_playbook": "gpu_provisioner.node.site"}]
        assert "collections_path = .\n" in _read(tar, "ansible.cfg")


def test_deterministic(built, tmp_path, wheels):
    again = bundle.build(profiles.load(PROFILE), tmp_path / "again.tar.gz", wheels=wheels)
    assert again.read_bytes() == built.read_bytes()
    with open(built, "rb") as f:
        header = f.read(10)
    assert header[4:8] == b"\0\0\0\0"  # no gzip timestamp
    assert gzip.decompress(built.read_bytes())  # a plain gzip stream


def test_different_profile_different_bundle(built, tmp_path, wheels):
    other = bundle.build(profiles.load("debian12-lab"), tmp_path / "other.tar.gz", wheels=wheels)
    assert bundle.sha256_of(other) != bundle.sha256_of(built)


@pytest.mark.ansible
def test_bundle_is_a_valid_ansible_project(built, tmp_path):
    """ansible-playbook --syntax-check and ansible-inventory read the unpacked bundle as they would on a node."""
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with tarfile.open(built) as tar:
        tar.extractall(unpacked, filter="data")
    bin_dir = Path(__import__("sys").executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ANSIBLE_CONFIG": str(unpacked / "ansible.cfg"),
           "HOME": str(tmp_path), "ANSIBLE_NOCOLOR": "1"}
    r = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", "inventory", "local.yml", "--syntax-check"],
                       cwd=unpacked, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(bin_dir / "ansible-inventory"), "-i", "inventory", "--host", "localhost"],
                       cwd=unpacked, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    host = yaml.safe_load(r.stdout)
    assert host["ansible_connection"] == "local" and host["provisioner_profile"] == "lab-driver-only"


def test_cloud_init_snippet(built):
    text = bundle.cloud_init(str(built))
    assert text.startswith("#cloud-config\n")
    config = yaml.safe_load(text)
    (script,) = config["write_files"]
    assert script["permissions"] == "0755"
    assert config["runcmd"] == [[script["path"]]]
    body = script["content"]
    assert f"sha256={bundle.sha256_of(built)}" in body
    assert "sha256sum -c" in body and 'exec "$base/bundle/apply.sh"' in body
    r = subprocess.run(["sh", "-n"], input=body, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_cloud_init_for_a_url_needs_the_sha256():
    with pytest.raises(ProvisionError, match="sha256 is needed"):
        bundle.cloud_init("https://boot.example/bundle.tar.gz")
    with pytest.raises(ProvisionError, match="not a sha256"):
        bundle.cloud_init("https://boot.example/bundle.tar.gz", "abc")
    text = bundle.cloud_init("https://boot.example/bundle.tar.gz", "A" * 64)
    body = yaml.safe_load(text)["write_files"][0]["content"]
    assert "sha256=" + "a" * 64 in body and "PIP_INDEX_URL" not in body  # the bundle carries its wheels


def test_apply_script_refuses_a_tarball_with_the_wrong_sha256(built, tmp_path):
    """The real script, run here: it stops at the checksum, before unpacking or installing anything."""
    script = bundle.apply_script(str(built), "0" * 64)
    base = tmp_path / "base"
    r = subprocess.run(["sh", "-c", script], env={"PATH": "/usr/bin:/bin", "PROVISIONER_BASE": str(base)},
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "does not have sha256" in r.stderr and "refusing to apply it" in r.stderr
    assert sorted(p.name for p in base.iterdir()) == []  # nothing kept, nothing unpacked


def test_warns_about_controller_paths():
    assert any("wheelhouse_source" in w for w in bundle.warnings_for(profiles.load("debian12-lab")))
    assert bundle.warnings_for(profiles.load(PROFILE)) == [] or all(
        "wheelhouse_source" in w for w in bundle.warnings_for(profiles.load(PROFILE)))


def test_output_path_must_be_a_file(tmp_path, wheels):
    with pytest.raises(ProvisionError, match="is a folder"):
        bundle.build(profiles.load(PROFILE), tmp_path, wheels=wheels)


# --- ansible-core on the node: the controller's, from the bundle's own wheels (issue 28, item 14) ---

def _requirements(tar: tarfile.TarFile) -> dict[str, tuple[str, str]]:
    """wheels/requirements.txt as name -> (version, sha256)."""
    out = {}
    for line in _read(tar, bundle_wheels.REQUIREMENTS).splitlines():
        if line and not line.startswith("#"):
            spec, hash_option = line.split(" --hash=sha256:")
            name, version = spec.split("==")
            out[name] = (version, hash_option)
    return out


def _check_pinned_to_the_packed_files(tar: tarfile.TarFile) -> dict[str, tuple[str, str]]:
    pinned = _requirements(tar)
    assert pinned["ansible-core"][0] == importlib.metadata.version("ansible-core")
    packed = {m.name: hashlib.sha256(tar.extractfile(m).read()).hexdigest()
              for m in tar.getmembers() if m.name.endswith(".whl")}
    assert sorted(packed.values()) == sorted(sha for _, sha in pinned.values())  # one file per pin, that file's hash
    (core,) = [name for name in packed if name.startswith("wheels/ansible_core-")]
    assert packed[core] == pinned["ansible-core"][1]
    return pinned


def test_the_bundle_pins_the_controllers_ansible_core_by_the_hash_of_the_packed_file(built):
    """Was: apply.sh ran `pip install 'ansible-core>=2.15,<2.20'` at boot, whatever an index offered."""
    with tarfile.open(built) as tar:
        pinned = _check_pinned_to_the_packed_files(tar)
        for name in ("Jinja2", "PyYAML", "cryptography", "packaging", "resolvelib"):
            assert pinned[name][0] == importlib.metadata.version(name)
        assert json.loads(_read(tar, "BUNDLE.json"))["wheels"] == {name: v for name, (v, _) in pinned.items()}
        apply = _read(tar, "apply.sh")
    assert ('PIP_CONFIG_FILE=/dev/null "$venv/bin/pip" install --isolated -q --disable-pip-version-check --no-index '
            '--only-binary=:all: \\\n  --find-links "$here/wheels" --require-hashes -r "$here/wheels/requirements.txt"'
            in apply)
    assert apply.count("pip\" install") == 1 and "ansible-core>=" not in apply


def test_no_wheel_for_a_pin_is_one_error_with_the_command_that_fills_the_folder(tmp_path, wheels):
    partial = tmp_path / "wheels"
    partial.mkdir()
    for wheel in wheels.iterdir():
        if not wheel.name.startswith("resolvelib-"):
            (partial / wheel.name).write_bytes(wheel.read_bytes())
    (partial / f"resolvelib-{importlib.metadata.version('resolvelib')}-cp312-cp312-win_amd64.whl").write_bytes(b"x")
    out = tmp_path / "b.tar.gz"
    with pytest.raises(ProvisionError) as err:
        bundle.build(profiles.load(PROFILE), out, wheels=partial)
    message = str(err.value)
    assert f"no wheel of resolvelib {importlib.metadata.version('resolvelib')} for the node's Python 3.11" in message
    assert "pip download --no-deps --only-binary=:all: --python-version 3.11" in message
    assert not out.exists()


def test_an_ansible_core_the_nodes_python_cannot_run_is_refused():
    """No silent fallback to another version: the controller's ansible-core or nothing."""
    with pytest.raises(ProvisionError, match=r"ansible-core .*needs Python >=3\.\d+; a ubuntu-20.04 node's python3 is 3\.8"):
        bundle_wheels.pins("3.8", "ubuntu-20.04")


def test_the_set_follows_the_nodes_markers():
    names = {p.name.lower() for p in bundle_wheels.pins("3.11", "debian-12")}
    assert {"ansible-core", "jinja2", "markupsafe", "pyyaml", "cryptography", "packaging", "resolvelib"} <= names
    assert not {"bcrypt", "babel"} & names  # extras (cryptography[ssh], jinja2[i18n]) are not installed


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="installs the lab node's wheels (Python 3.11) here")
def test_a_built_bundle_installs_exactly_its_downloaded_wheels_offline(tmp_path):
    """The real download, the real apply.sh: a venv gets the controller's ansible-core from the
    bundle alone (no index), and a wheel changed after the build stops the install."""
    built = bundle.build(profiles.load(PROFILE), tmp_path / "bundle.tar.gz")
    unpacked = tmp_path / "bundle"
    unpacked.mkdir()
    with tarfile.open(built) as tar:
        _check_pinned_to_the_packed_files(tar)
        tar.extractall(unpacked, filter="data")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (venv / "bin" / "ansible-playbook").write_text("#!/bin/sh\nexit 3\n")  # so apply.sh makes no venv (apt)
    (venv / "bin" / "ansible-playbook").chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PROVISIONER_ANSIBLE_VENV": str(venv),
           "PIP_FIND_LINKS": str(tmp_path / "elsewhere"), "PIP_INDEX_URL": "https://index.invalid/simple"}

    tampered = tmp_path / "tampered"
    subprocess.run(["cp", "-a", str(unpacked), str(tampered)], check=True)
    (wheel,) = (tampered / "wheels").glob("resolvelib-*.whl")
    with open(wheel, "ab") as f:
        f.write(b"\0")
    r = subprocess.run([str(tampered / "apply.sh"), "--syntax-check"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "DO NOT MATCH THE HASHES" in r.stderr, r.stdout + r.stderr
    assert not list((venv / "lib").glob("python3.11/site-packages/ansible_core-*"))

    r = subprocess.run([str(unpacked / "apply.sh"), "--syntax-check"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    installed = subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import importlib.metadata as m; print(m.version('ansible-core'))"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert installed == importlib.metadata.version("ansible-core")
