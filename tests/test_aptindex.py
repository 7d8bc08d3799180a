"""Resolving against a live signed index (provisioner/profiles/aptindex.py, packages.resolve).

Each test serves a real flat apt repository on 127.0.0.1: a Packages file and a Release
signed (InRelease) with a throwaway GnuPG key made here. Its versions differ from the
committed snapshot on purpose (580.95.05 at -0ubuntu1, a newer R580 and CUDA 12.8 the
snapshot lacks), so a pin that came from the snapshot instead of the index shows.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.errors import ProvisionError
from provisioner.profiles import aptindex, catalogue, packages
from provisioner.render import plan_for, role_vars

pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and shutil.which("gpgv")), reason="needs gpg and gpgv")

DATE = "Tue, 19 May 2026 10:00:00 +0000"
# name -> versions the test repository lists (the driver family, fabric manager, CUDA, libraries, DCGM).
LISTED = {
    "cuda-drivers-580": ["580.95.05-0ubuntu1", "580.126.20-1ubuntu1", "580.159.04-1ubuntu1"],
    "nvidia-driver-580": ["580.95.05-0ubuntu1", "580.126.20-1ubuntu1", "580.159.04-1ubuntu1"],
    "nvidia-driver-pinning-580": ["580-2ubuntu1"],
    "nvidia-fabricmanager": ["580.95.05-1", "580.126.20-1", "580.159.04-1"],
    "libnvidia-nscq": ["580.95.05-1", "580.126.20-1", "580.159.04-1"],
    "cuda-toolkit-12-2": ["12.2.2-1"],
    "cuda-toolkit-12-8": ["12.8.1-1"],
    "libcudnn8": ["8.9.7.29-1+cuda12.2"],
    "libcudnn8-dev": ["8.9.7.29-1+cuda12.2"],
    "libnccl2": ["2.19.3-1+cuda12.2", "2.25.1-1+cuda12.8"],
    "libnccl-dev": ["2.19.3-1+cuda12.2", "2.25.1-1+cuda12.8"],
    "datacenter-gpu-manager-4-core": ["1:4.5.2-1"],
    "datacenter-gpu-manager-4-cuda13": ["1:4.5.2-1"],
    "datacenter-gpu-manager-4-proprietary": ["1:4.5.2-1"],
    "datacenter-gpu-manager-4-proprietary-cuda13": ["1:4.5.2-1"],
    "datacenter-gpu-manager-exporter": ["4.6.0-1", "4.8.1-1"],
}


def _gpg(home: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", "--quiet", "--no-tty", *args], check=True,
                          capture_output=True, **kw)


def _key(home: Path, name: str) -> str:
    home.mkdir(mode=0o700)
    _gpg(home, "--passphrase", "", "--quick-gen-key", f"{name} <test@gpu-provisioner.invalid>", "ed25519", "sign", "never")
    colons = _gpg(home, "--with-colons", "--list-secret-keys").stdout.decode()
    return next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))


def _packages(listed: dict[str, list[str]]) -> bytes:
    return "\n".join(f"Package: {name}\nVersion: {v}\nArchitecture: amd64\nFilename: ./{name}_{v}_amd64.deb\n"
                     for name, versions in listed.items() for v in versions).encode()


def _release(files: dict[str, bytes]) -> str:
    lines = ["Origin: NVIDIA", "Label: NVIDIA CUDA", "Architecture: x86_64", f"Date: {DATE}", "SHA256:"]
    lines += [f" {hashlib.sha256(d).hexdigest()} {len(d):>16} {n}" for n, d in files.items()]
    return "\n".join(lines) + "\n"


class Repo:
    """A signed flat repository on disk, served over HTTP on 127.0.0.1, with its request log."""

    def __init__(self, root: Path, home: Path, fingerprint: str):
        self.root, self.requests = root, []
        self.dir = root / "ubuntu2204" / "x86_64"
        self.dir.mkdir(parents=True)
        self.home, self.fingerprint = home, fingerprint
        self.publish(LISTED)
        (self.dir / "key.asc").write_bytes(_gpg(self.home, "--armor", "--export", self.fingerprint).stdout)
        log = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(root), **kw)

            def log_message(self, *args):
                pass

            def do_GET(self):
                log.append(self.path)
                if self.path.startswith("/elsewhere"):
                    self.send_response(302)
                    self.send_header("Location", "http://127.0.0.2:9/ubuntu2204/x86_64/InRelease")
                    self.end_headers()
                    return
                super().do_GET()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def publish(self, listed: dict[str, list[str]]) -> None:
        plain = _packages(listed)
        files = {"Packages": plain, "Packages.gz": gzip.compress(plain, mtime=0)}
        for name, data in files.items():
            (self.dir / name).write_bytes(data)
        (self.dir / "Release").write_text(_release(files))
        (self.dir / "InRelease").unlink(missing_ok=True)
        _gpg(self.home, "--local-user", self.fingerprint, "--clearsign", "-o", str(self.dir / "InRelease"),
             str(self.dir / "Release"))

    @property
    def url(self) -> str:
        return f"{self.base}ubuntu2204/x86_64/"

    def repository(self, **kw) -> aptindex.Repository:
        return aptindex.Repository(**{"url": self.url, "key_url": f"{self.url}key.asc",
                                      "fingerprint": self.fingerprint, **kw})


@pytest.fixture(scope="module")
def signer(tmp_path_factory):
    """The test repository's throwaway signing key (one per module: key generation is slow)."""
    home = tmp_path_factory.mktemp("signer") / "gnupg"
    fingerprint = _key(home, "test repository")
    yield home, fingerprint
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch, signer):
    monkeypatch.setenv("PROVISION_APTINDEX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PROVISION_PACKAGE_INDEX", raising=False)       # live, not the snapshot
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
    r = Repo(tmp_path / "www", *signer)
    yield r
    r.server.shutdown()


def _profile(tmp_path: Path, repo: Repo, extra: str = ""):
    f = tmp_path / "live.yml"
    f.write_text(f"""extends: h100-train
name: live
description: h100-train from a mirror
mirrors:
  cuda_repo_url: {repo.base}
  cuda_repo_key_url: {repo.url}key.asc
  cuda_repo_key_fingerprint: {repo.fingerprint}
{extra}""")
    return profiles.load(str(f))


def test_the_index_is_read_verified_and_cached(repo):
    index = aptindex.read(repo.repository())
    assert index.release_date == DATE and index.url == repo.url
    assert index.versions("cuda-drivers-580") == LISTED["cuda-drivers-580"]
    assert index.packages_sha256 == hashlib.sha256((repo.dir / "Packages.gz").read_bytes()).hexdigest()
    fetched = [p for p in repo.requests if "Packages" in p]
    assert fetched == ["/ubuntu2204/x86_64/Packages.gz"]
    # Unchanged repository: the signed InRelease is fetched again, the Packages file is not.
    repo.requests.clear()
    assert aptindex.read(repo.repository()).packages == index.packages
    assert repo.requests == ["/ubuntu2204/x86_64/key.asc", "/ubuntu2204/x86_64/InRelease"]
    # check/verify read the last index without the network.
    repo.server.shutdown()
    assert aptindex.cached(repo.repository()).provenance == index.provenance


def test_pins_come_from_the_index_not_the_snapshot(repo, tmp_path):
    loaded = _profile(tmp_path, repo)
    plan = plan_for(loaded)
    # The revision is the index's (the committed snapshot lists none for the driver).
    assert plan.pins["driver"]["cuda-drivers-580"] == "580.159.04-1ubuntu1"
    assert plan.pins["driver"]["nvidia-driver-pinning-580"] == "580-2ubuntu1"
    exporter = loaded.profile.dcgm.exporter.version
    assert plan.pins["dcgm_exporter"]["datacenter-gpu-manager-exporter"] in LISTED["datacenter-gpu-manager-exporter"]
    assert plan.pins["dcgm_exporter"]["datacenter-gpu-manager-exporter"].startswith(exporter)
    assert plan.index == {"url": repo.url, "release_date": DATE,
                          "packages_sha256": hashlib.sha256((repo.dir / "Packages.gz").read_bytes()).hexdigest()}
    assert f"the index at {repo.url}" in plan.origin
    v = role_vars(loaded, plan)
    assert v["provisioner_package_index"] == plan.index
    assert v["nvidia_driver_repo_pins"]["nvidia-driver-580"] == "580.159.04-1ubuntu1"


def test_a_release_the_snapshot_lacks_resolves_from_the_index(repo, tmp_path):
    loaded = _profile(tmp_path, repo, 'driver:\n  version: 580.126.20\ncuda:\n  toolkits: ["12.8"]\nnccl:\n  version: 2.25.1\n'
                                      'cudnn:\n  enabled: false\n')
    assert "580.126.20" in loaded.advisory       # profiles validate: the snapshot does not have it, and says so
    plan = plan_for(loaded)
    assert plan.pins["driver"]["nvidia-driver-580"] == "580.126.20-1ubuntu1"
    assert plan.pins["fabric_manager"]["nvidia-fabricmanager"] == "580.126.20-1"
    assert plan.pins["cuda_toolkit"] == {"cuda-toolkit-12-8": "12.8.1-1"}
    assert plan.pins["nccl"]["libnccl2"] == "2.25.1-1+cuda12.8"


def test_a_version_the_index_lacks_is_refused_naming_url_date_and_neighbours(repo, tmp_path):
    loaded = _profile(tmp_path, repo, "driver:\n  version: 580.105.08\n")
    with pytest.raises(ProvisionError) as err:
        plan_for(loaded)
    msg = str(err.value)
    assert "driver.version" in msg and "cuda-drivers-580 580.105.08" in msg and "live.yml" in msg
    assert f"the index at {repo.url} (Release Date: {DATE})" in msg
    assert "nearest it carries: 580.95.05-0ubuntu1, 580.126.20-1ubuntu1, 580.159.04-1ubuntu1" in msg


def test_a_tampered_packages_file_is_refused(repo):
    served = bytearray((repo.dir / "Packages.gz").read_bytes())
    served[len(served) // 2] ^= 1                  # one bit, same size: only the signed SHA256 tells
    (repo.dir / "Packages.gz").write_bytes(bytes(served))
    with pytest.raises(ProvisionError, match="does not match the SHA256 its signed Release names"):
        aptindex.read(repo.repository())
    assert aptindex.cached(repo.repository()) is None            # nothing unverified is cached


def test_a_tampered_release_is_refused(repo):
    signed = (repo.dir / "InRelease").read_text()
    (repo.dir / "InRelease").write_text(signed.replace("Label: NVIDIA CUDA", "Label: NVIDIA CUDX"))
    with pytest.raises(ProvisionError, match="signature does not verify"):
        aptindex.read(repo.repository())


def test_a_wrong_key_is_refused(repo, tmp_path):
    other = _key(tmp_path / "other", "someone else")
    (repo.dir / "other.asc").write_bytes(_gpg(tmp_path / "other", "--armor", "--export", other).stdout)
    # The key file is not the pinned one.
    with pytest.raises(ProvisionError, match="is not the one the profile pins"):
        aptindex.read(repo.repository(key_url=f"{repo.url}other.asc"))
    # The pinned key is someone else's: the repository's own key is refused for it, and so
    # is a repository signed by another key than the one pinned.
    with pytest.raises(ProvisionError, match="is not the one the profile pins"):
        aptindex.read(repo.repository(fingerprint=other))
    _gpg(tmp_path / "other", "--local-user", other, "--yes", "--clearsign", "-o", str(repo.dir / "InRelease"),
         str(repo.dir / "Release"))
    with pytest.raises(ProvisionError, match="signature does not verify"):
        aptindex.read(repo.repository())


def test_the_fetch_is_narrow(repo):
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/x/", "http://user:secret@127.0.0.1/x/"):
        with pytest.raises(ProvisionError) as err:
            aptindex.read(repo.repository(url=url))
        assert "secret" not in str(err.value)
    with pytest.raises(ProvisionError, match="redirects to another host"):
        aptindex.fetch(f"{repo.base}elsewhere", 1024)
    with pytest.raises(ProvisionError, match="larger than 100 bytes"):
        aptindex.fetch(f"{repo.url}Packages", 100)


def test_snapshot_mode_says_so(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_PACKAGE_INDEX", "snapshot")
    plan = plan_for(_profile(tmp_path, repo))
    assert plan.index is None and "offline" in plan.origin
    assert catalogue.load("ubuntu2204").origin == plan.origin
    assert not repo.requests                                      # no network at all


def test_check_and_verify_judge_against_the_index_last_read(repo, tmp_path):
    loaded = _profile(tmp_path, repo)
    first = plan_for(loaded)
    repo.publish({**LISTED, "cuda-drivers-580": ["580.159.04-2ubuntu1"], "nvidia-driver-580": ["580.159.04-2ubuntu1"]})
    assert plan_for(loaded, "recorded") == first                   # the archive moved on: not drift
    assert plan_for(loaded).pins["driver"]["cuda-drivers-580"] == "580.159.04-2ubuntu1"   # up resolves anew
    assert os.environ.get("PROVISION_PACKAGE_INDEX") is None
    assert packages.resolve(loaded.profile, "recorded").pins["driver"]["cuda-drivers-580"] == "580.159.04-2ubuntu1"


def test_catalogue_refresh_writes_a_dated_snapshot_of_the_index(repo, tmp_path):
    from typer.testing import CliRunner

    from provisioner.cli import app

    out = tmp_path / "ubuntu2204.yml"
    args = ["catalogue", "refresh", "--flavour", "ubuntu2204", "--mirror", repo.base, "--key-url", f"{repo.url}key.asc",
            "--fingerprint", repo.fingerprint, "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"(Release Date: {DATE})" in result.output
    snap = catalogue.load(path=out)
    assert snap.snapshot.method == "refresh" and snap.snapshot.release_date == DATE
    assert snap.snapshot.packages_sha256 == hashlib.sha256((repo.dir / "Packages.gz").read_bytes()).hexdigest()
    assert {name: snap.versions(name) for name in LISTED} == LISTED       # every family the naming rules name
    assert all(repo.url in v.source for vs in snap.packages.values() for v in vs)
    assert snap.naming == catalogue.load("ubuntu2204").naming
    # An index that does not verify writes nothing, even with --force; without it, a file
    # already there is not replaced at all.
    out.write_text("before\n")
    kept = CliRunner().invoke(app, [*args[:-4], "-o", str(out)])
    assert kept.exit_code == 1 and "holds a file already; it is replaced only with --force" in kept.output
    wrong = CliRunner().invoke(app, [*args[:-4], "--fingerprint", "A" * 40, "-o", str(out), "--force"])
    assert wrong.exit_code == 1 and "is not the one the profile pins" in wrong.output
    assert out.read_text() == "before\n"
