"""The common role's extra CA certificates on a lab host: a certificate dropped from
common_extra_ca_certificates is removed and no longer trusted (this controller's own trust
store is never touched). The CAs are throwaway self-signed ones made here with openssl."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ..ansibleplay import play
from . import labtools
from .labtools import podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None or shutil.which("openssl") is None:
    pytest.skip("lab hosts need root, podman and openssl (scripts/setup-dev-host)", allow_module_level=True)

BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
OLD_LAYOUT = "/usr/local/share/ca-certificates/provisioner-old-layout.crt"


@pytest.fixture(scope="module")
def lab_host(tmp_path_factory):
    with labtools.lab_hosts(1, "ca", tmp_path_factory) as result:
        yield result


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _ca_with_leaf(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA `name` and a leaf certificate it signed: (ca.pem, leaf.pem)."""
    ca, key = folder / f"{name}.pem", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(ca), "-days", "2",
             "-subj", f"/CN=gpu-provisioner test CA {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    leaf_key, csr, leaf = folder / f"{name}-leaf.key", folder / f"{name}-leaf.csr", folder / f"{name}-leaf.pem"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(leaf_key), "-out", str(csr),
             "-subj", f"/CN=leaf of {name}")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(key), "-CAcreateserial",
             "-out", str(leaf), "-days", "1")
    return ca, leaf


def _trusted_on(host: str, leaf: Path) -> bool:
    """Whether the host's system bundle verifies a certificate the CA signed."""
    r = podman("exec", "-i", host, "openssl", "verify", "-CAfile", BUNDLE, "/dev/stdin", input=leaf.read_text())
    return r.returncode == 0


def _in_bundle(host: str, ca: Path) -> bool:
    body = "".join(ca.read_text().strip().splitlines()[1:-1])
    return body in "".join(podman("exec", host, "cat", BUNDLE, check=True).stdout.splitlines())


def test_a_ca_certificate_dropped_from_the_list_is_no_longer_trusted(lab_host, tmp_path: Path):
    host = lab_host.hosts[0].name
    (keep, keep_leaf), (drop, drop_leaf), (old, old_leaf) = (
        _ca_with_leaf(tmp_path, name) for name in ("keep", "drop", "old"))
    # A certificate beside the site's own that this role did not install (the lab image's are
    # named provisioner-extra-*.crt; an older version of the role wrote provisioner-<name>.crt):
    # the role removes only what is in its own folder, never what it cannot know it created.
    podman("cp", str(old), f"{host}:{OLD_LAYOUT}", check=True)
    podman("exec", host, "update-ca-certificates", check=True)
    assert _trusted_on(host, old_leaf)
    inventory = lab_host.inventory.read_text()

    def converge(name: str, certificates: list[Path]):
        run = play(tmp_path, name, [{
            "name": "Converge the common role with extra CA certificates.", "hosts": "all", "become": True,
            "gather_facts": True,
            "roles": [{"role": "gpu_provisioner.node.common",
                       "common_extra_ca_certificates": [str(c) for c in certificates]}]}], inventory)
        assert run.rc == 0, run.stdout[-3000:]
        return run

    converge("both", [keep, drop])
    assert _trusted_on(host, keep_leaf) and _trusted_on(host, drop_leaf)

    converge("one", [keep])
    assert _trusted_on(host, keep_leaf) and _in_bundle(host, keep)
    assert not _trusted_on(host, drop_leaf), "the dropped CA still verifies its certificates"
    assert not _in_bundle(host, drop)
    listed = podman("exec", host, "ls", "/usr/local/share/ca-certificates/provisioner", check=True).stdout.split()
    assert listed == ["provisioner-keep.crt"]
    links = podman("exec", host, "ls", "/etc/ssl/certs", check=True).stdout.split()
    assert "provisioner-keep.pem" in links and "provisioner-drop.pem" not in links
    # The one outside the role's folder is left alone, and stays trusted.
    assert _trusted_on(host, old_leaf) and podman("exec", host, "test", "-e", OLD_LAYOUT).returncode == 0

    again = converge("again", [keep])
    assert again.changed() == 0, again.changed_tasks()
