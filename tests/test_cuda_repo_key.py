"""A refused CUDA repository key is never trusted (issue 28, item 9): roles/cuda_repo/tasks/key.yml
run for real through ansible-runner against this machine, the key served from a file:// URL,
the keyring in a temporary folder. The key is downloaded to a new temporary file and checked
there; a key with another fingerprint stops the role and leaves the keyring the source trusts
byte for byte as it was. The keys are throwaway ones made here with gpg, not NVIDIA's."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .ansibleplay import LOCAL, Run, play

pytestmark = [pytest.mark.ansible,
              pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg reads the key's fingerprint"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the keyring is written owner root, as on a host")]


def _key(home: Path, name: str, out: Path) -> str:
    """A throwaway signing key, exported ASCII-armoured to `out`; returns its fingerprint."""
    env = {**os.environ, "GNUPGHOME": str(home)}

    def gpg(*args: str) -> str:
        return subprocess.run(["gpg", "--batch", "--quiet", "--no-tty", *args], env=env, check=True,
                              capture_output=True, text=True, timeout=60).stdout

    gpg("--passphrase", "", "--quick-gen-key", f"{name} <{name}@example.invalid>", "ed25519", "sign", "never")
    fingerprint = next(line.split(":")[9] for line in gpg("--with-colons", "--list-keys", name).splitlines()
                       if line.startswith("fpr:"))
    out.write_text(gpg("--armor", "--export", fingerprint))
    return fingerprint


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    folder = tmp_path_factory.mktemp("keys")
    home = folder / "gnupg"
    home.mkdir(mode=0o700)
    try:
        return {name: (folder / f"{name}.pub", _key(home, name, folder / f"{name}.pub")) for name in ("nvidia", "evil")}
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env={**os.environ, "GNUPGHOME": str(home)}, capture_output=True)


def _install(tmp: Path, name: str, key: Path, fingerprint: str, keyring: Path, check: bool = False,
             sha256: str = "") -> Run:
    checksum = sha256 or '""'  # the role's default: no sha256 of the key file
    return play(tmp, name, [{
        "name": "Install the CUDA repository key with the role's task file.", "hosts": "gpu", "gather_facts": False,
        "tasks": [{"name": "Run the cuda_repo role's key tasks.", "ansible.builtin.include_role": {
            "name": "gpu_provisioner.node.cuda_repo", "tasks_from": "key"}}]}],
        f"[gpu]\n{LOCAL} cuda_repo_key_url=file://{key} cuda_repo_key_fingerprint={fingerprint} "
        f"cuda_repo_keyring={keyring} cuda_repo_key_sha256={checksum}\n", check=check)


def _leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("provisioner-cuda-key.*")}


def test_a_refused_key_leaves_the_trusted_keyring_as_it_was(tmp_path: Path, keys):
    (good, nvidia), (evil, wrong) = keys["nvidia"], keys["evil"]
    keyring = tmp_path / "keyrings" / "provisioner-cuda-archive-keyring.asc"
    keyring.parent.mkdir()
    before = _leftovers()

    # First converge, and the server gives another key: no keyring is written at all.
    refused = _install(tmp_path, "refused-first", evil, nvidia, keyring)
    assert refused.rc != 0 and f"gave keys ['{wrong}'], expected {nvidia}" in refused.stdout
    assert not keyring.exists()

    first = _install(tmp_path, "first", good, nvidia, keyring)
    assert first.rc == 0, first.stdout[-3000:]
    assert keyring.read_bytes() == good.read_bytes() and (keyring.stat().st_mode & 0o777) == 0o644
    again = _install(tmp_path, "again", good, nvidia, keyring)
    assert again.rc == 0 and again.changed() == 0, again.changed_tasks()

    # A mirror (or a man in the middle) serves another key, with that file's own sha256 (so it
    # is downloaded again): refused, and the keyring apt trusts is untouched.
    trusted = keyring.read_bytes()
    refused = _install(tmp_path, "refused", evil, nvidia, keyring,
                       sha256=hashlib.sha256(evil.read_bytes()).hexdigest())
    assert refused.rc != 0
    assert refused.status("Stop unless the download holds exactly the repository's key, by its full "
                          "fingerprint.") == ["failed"]
    assert f"gave keys ['{wrong}'], expected {nvidia}" in refused.stdout
    assert not refused.started("Install the checked key as the keyring the repository's source trusts.")
    assert keyring.read_bytes() == trusted
    assert _leftovers() == before  # the temporary download is removed, refused or not

    # The profile moves to another key (a mirror's own, named by its fingerprint): it replaces the keyring.
    moved = _install(tmp_path, "moved", evil, wrong, keyring)
    assert moved.rc == 0, moved.stdout[-3000:]
    assert keyring.read_bytes() == evil.read_bytes()
