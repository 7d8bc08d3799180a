"""provision bundle: a deterministic tarball a node applies to itself, and its cloud-init snippet.

Applying it for real inside a lab host: tests/integration/test_bundle_lab.py.
"""

from __future__ import annotations

import gzip
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from provisioner.render import bundle
from provisioner import paths, profiles
from provisioner.render.ansible_data import load_unsafe
from provisioner.errors import ProvisionError

DATA = Path(__file__).resolve().parent / "data"
PROFILE = str(DATA / "profiles" / "lab-driver-only.yml")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return bundle.build(profiles.load(PROFILE), tmp_path_factory.mktemp("bundle") / "bundle.tar.gz")


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


def test_deterministic(built, tmp_path):
    again = bundle.build(profiles.load(PROFILE), tmp_path / "again.tar.gz")
    assert again.read_bytes() == built.read_bytes()
    with open(built, "rb") as f:
        header = f.read(10)
    assert header[4:8] == b"\0\0\0\0"  # no gzip timestamp
    assert gzip.decompress(built.read_bytes())  # a plain gzip stream


def test_different_profile_different_bundle(built, tmp_path):
    other = bundle.build(profiles.load("debian12-lab"), tmp_path / "other.tar.gz")
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
    text = bundle.cloud_init("https://boot.example/bundle.tar.gz", "A" * 64, pip_index_url="https://pypi.example/simple")
    body = yaml.safe_load(text)["write_files"][0]["content"]
    assert "sha256=" + "a" * 64 in body and "export PIP_INDEX_URL='https://pypi.example/simple'" in body


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


def test_output_path_must_be_a_file(tmp_path):
    with pytest.raises(ProvisionError, match="is a folder"):
        bundle.build(profiles.load(PROFILE), tmp_path)
