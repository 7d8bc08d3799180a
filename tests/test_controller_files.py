"""The files a profile names on the controller come only from the files root (issue 28,
item 3; provisioner/profiles/controller_files.py): a shared profile naming /etc/shadow, the
operator's SSH key, a link out of the root or a CA file with a private key in it is one
clear error before anything is written, and what is accepted reaches the roles as the
checked absolute path inside the root. Run through the real CLI (render, profiles
validate); the certificates are throwaway ones made here with openssl."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from provisioner import profiles
from provisioner.cli import app
from provisioner.errors import ProvisionError
from provisioner.profiles import controller_files
from provisioner.render import bundle, role_vars

from .conftest import REPO

INI = REPO / "inventories" / "example" / "hosts.ini"
HEAD = "extends: debian12-lab\nname: p\ndescription: d\n"
# A private key's PEM armour is what is judged; no real key is needed to show it is refused.
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")


def _certificate(folder: Path, name: str = "ca.pem") -> Path:
    """A throwaway self-signed CA certificate (its key is thrown away)."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / name, folder.parent / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=gpu-provisioner test CA"],
                   check=True, capture_output=True, timeout=60)
    key.unlink()
    return cert


def _profile(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "p.yml").write_text(HEAD + body)
    return folder / "p.yml"


def _render(profile: Path, out: Path, *extra: str, env: dict | None = None):
    return CliRunner().invoke(app, ["render", "-p", str(profile), str(INI), "-o", str(out), *extra],
                              env={"COLUMNS": "250", **(env or {})})


def _refused(result, out: Path, expect: str) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.output.count("error:") == 1, result.output
    assert expect in " ".join(result.output.split()), result.output
    assert not out.exists()  # nothing rendered, so nothing copied to any host
    return result.output


def test_a_shared_profile_cannot_name_the_controllers_own_files(tmp_path: Path):
    """The issue's attack: /etc/shadow, the operator's SSH key (by ~, by its absolute path,
    through a link in the profile's folder) and a CA file with a key appended."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    site, out = tmp_path / "site", tmp_path / "out"
    site.mkdir()
    (site / "ca.pem").symlink_to(home / ".ssh" / "id_ed25519")
    (site / "bundle.pem").write_text("# our CA\n" + KEY)
    cases = {
        "[/etc/shadow]": "mirrors.ca_certificates.0: '/etc/shadow' is outside the files root",
        '["~/.ssh/id_ed25519"]': "'~/.ssh/id_ed25519': ~ is not expanded here",
        f"[{home}/.ssh/id_ed25519]": f"'{home}/.ssh/id_ed25519' is outside the files root {site}",
        "[ca.pem]": "'ca.pem' leads out of the files root",
        "[bundle.pem]": "'bundle.pem' holds a private key",
    }
    for value, expect in cases.items():
        profile = _profile(site, f"mirrors:\n  ca_certificates: {value}\n")
        output = _refused(_render(profile, out, env={"HOME": str(home)}), out, expect)
        assert "p.yml:5" in output  # the file and line that names it


@needs_openssl
def test_relative_paths_are_read_in_the_profiles_folder_and_given_to_the_roles_absolute(tmp_path: Path):
    site, out = tmp_path / "site", tmp_path / "out"
    _certificate(site / "certs")
    (site / "wheels").mkdir()
    (site / "wheels" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    (site / "bin").mkdir()
    (site / "bin" / "dcgm-exporter").write_bytes(b"\x7fELF")
    profile = _profile(site, "mirrors:\n  ca_certificates: [certs/ca.pem]\n  wheelhouse_source: wheels\n"
                             f"dcgm:\n  exporter:\n    binary: bin/dcgm-exporter\n    binary_sha256: '{'a' * 64}'\n")
    result = _render(profile, out)
    assert result.exit_code == 0, result.output
    rendered = yaml.safe_load((out / "group_vars" / "all" / "provisioner.yml").read_text().replace("!unsafe ", ""))
    assert rendered["common_extra_ca_certificates"] == [str(site.resolve() / "certs" / "ca.pem")]
    assert rendered["python_env_wheelhouse_source"] == str(site.resolve() / "wheels")
    assert rendered["dcgm_exporter_binary"] == str(site.resolve() / "bin" / "dcgm-exporter")
    # The profile itself (its digest, the copy kept on each host) says what was written.
    assert "- certs/ca.pem" in rendered["provisioner_profile_yaml"]


@needs_openssl
def test_the_files_root_is_the_operators_to_name(tmp_path: Path):
    files, out = tmp_path / "files", tmp_path / "out"
    _certificate(files / "certs")
    profile = _profile(tmp_path / "profiles", "mirrors:\n  ca_certificates: [certs/ca.pem]\n")
    _refused(_render(profile, out), out, "'certs/ca.pem' does not exist in the files root")
    assert _render(profile, out, "--files-root", str(files)).exit_code == 0
    shutil.rmtree(out)
    assert _render(profile, out, env={"PROVISION_FILES_ROOT": str(files)}).exit_code == 0
    result = CliRunner().invoke(app, ["profiles", "validate", str(profile), "--files-root", str(files)])
    assert result.exit_code == 0 and "ok" in result.output, result.output


def test_no_hash_oracle_and_no_existence_oracle_outside_the_root(tmp_path: Path):
    """A path outside the root is refused on its name alone: never hashed (the roles are only
    ever given paths inside the root), and a file that is there reads like one that is not."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"the controller's own file")
    site, out = tmp_path / "site", tmp_path / "out"
    messages = []
    for target in (secret, tmp_path / "no-such-file"):
        profile = _profile(site, f"nccl:\n  enabled: false\n  tests: false\n  tests_source: {target}\n"
                                 f"  tests_sha256: '{'0' * 64}'\n")
        output = _refused(_render(profile, out), out, f"nccl.tests_source: '{target}' is outside the files root")
        assert hashlib.sha256(secret.read_bytes()).hexdigest() not in output
        messages.append(" ".join(output.replace(str(target), "PATH").split()))
    assert messages[0] == messages[1]


@needs_openssl
def test_a_ca_file_is_pem_certificates_only(tmp_path: Path):
    cert = _certificate(tmp_path).read_bytes()
    assert controller_files.pem_problem(cert) is None
    assert controller_files.pem_problem(b"subject=CN = test\n" + cert + cert) is None  # text around, two certs
    assert "private key" in controller_files.pem_problem(cert + KEY.encode())
    assert "private key" in controller_files.pem_problem(b"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n")
    assert "holds X509 CRL, not only" in controller_files.pem_problem(cert + b"-----BEGIN X509 CRL-----\nAA\n"
                                                                             b"-----END X509 CRL-----\n")
    assert "not a PEM certificate" in controller_files.pem_problem(b"root:x:0:0::/root:/bin/sh\n")
    assert "without its -----END" in controller_files.pem_problem(cert + b"-----BEGIN CERTIFICATE-----\nMIIB\n")
    broken = cert.replace(b"MII", b"MIJ", 1)
    assert "not an X.509 certificate" in controller_files.pem_problem(broken)


def test_a_built_in_profiles_own_files_are_taken_as_written_any_other_is_checked(tmp_path: Path):
    """The lab's /opt/wheels, named by debian12-lab itself: in the built-in, in a child, and in the
    flattened copy a rollback applies. Another path in the same field is checked."""
    lab = controller_files.resolve(profiles.load("debian12-lab"))
    assert lab.local_files == {}
    assert role_vars(lab)["python_env_wheelhouse_source"] == "/opt/wheels"
    (tmp_path / "flat.yml").write_text(profiles.to_yaml(lab.profile))
    for accepted in (_profile(tmp_path, "python_env:\n  name: child\n"), tmp_path / "flat.yml"):
        loaded = controller_files.resolve(profiles.load(str(accepted)))
        assert role_vars(loaded)["python_env_wheelhouse_source"] == "/opt/wheels"
    child = _profile(tmp_path, "mirrors:\n  wheelhouse_source: /opt\n")
    with pytest.raises(ProvisionError, match="'/opt' is outside the files root"):
        controller_files.resolve(profiles.load(str(child)))


def test_a_bundle_refuses_a_path_in_the_files_root(tmp_path: Path):
    """A bundle's node has no files root: it reads these from its own disk, by absolute path."""
    profile = _profile(tmp_path, "mirrors:\n  ca_certificates: [ca.pem]\n")
    with pytest.raises(ProvisionError, match="'ca.pem' is a path in the controller's files root"):
        bundle.build(profiles.load(str(profile)), tmp_path / "b.tar.gz")  # refused before any wheel is fetched
    assert not (tmp_path / "b.tar.gz").exists()


def test_a_wheel_linked_out_of_the_root_is_refused(tmp_path: Path):
    site = tmp_path / "site"
    (site / "wheels").mkdir(parents=True)
    os.symlink("/etc/passwd", site / "wheels" / "x-1.0-py3-none-any.whl")
    profile = _profile(site, "mirrors:\n  wheelhouse_source: wheels\n")
    with pytest.raises(ProvisionError, match="x-1.0-py3-none-any.whl' leads out of the files root"):
        controller_files.resolve(profiles.load(str(profile)))
