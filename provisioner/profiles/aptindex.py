"""An apt repository's signed index, read from the controller: what the repository carries now.

`read(repo)` fetches the repository's ``InRelease`` and verifies its signature with
``gpgv`` against a keyring holding only the key whose fingerprint the caller pinned; only
the text gpgv vouches for is used. It then fetches the ``Packages`` file that Release
names, checks its size and SHA256 against Release, and reads it with python-debian. Two
layouts: a flat repository (NVIDIA's CUDA repositories: ``<url>/InRelease``, ``Packages``
beside it) and a Debian archive (``<url>/dists/<suite>/InRelease``,
``<component>/binary-<arch>/Packages.xz``).

A profile is untrusted, and it names these URLs, so the fetch is narrow: http(s) only, no
user or password in the URL, no redirect to another host, a size cap per file and a time
cap per fetch. Nothing is cached or used before its signature is checked. The cache
(``~/.cache/gpu-provisioner/aptindex/``) is keyed by the URL and holds the packages read
from the Packages file whose SHA256 the signed Release names, so a repository that has
not moved costs one InRelease fetch; `cached()` returns the last index read for a URL
without the network (what `check` and `verify` judge against).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from debian import deb822

from provisioner import paths
from provisioner.errors import ProvisionError

MAX_KEY = 256 * 1024              # NVIDIA's 3bf863cc.pub is 1.7 KiB; Debian's keyring ~100 KiB
MAX_RELEASE = 4 * 1024 * 1024     # Debian's InRelease is ~150 KiB
MAX_PACKAGES = 128 * 1024 * 1024  # compressed; NVIDIA's Packages.gz is a few MiB
MAX_UNPACKED = 1024 * 1024 * 1024
TIMEOUT_S = 60.0                  # per file, the whole transfer
KEPT_FIELDS = ("Package", "Version", "Architecture", "Depends", "Pre-Depends", "Provides")
FORMAT = 1                        # of the cache entries


def cache_dir() -> Path:
    return Path(os.environ.get("PROVISION_APTINDEX_CACHE") or paths.cache_dir("aptindex"))


@dataclass(frozen=True)
class Repository:
    """Where an index is and whom to trust for it."""
    url: str                          # flat: the folder holding InRelease; archive: holding dists/
    key_url: str                      # the signing key (ASCII-armoured or binary), or
    fingerprint: str                  # 40 hex digits: the only primary key accepted
    suite: str | None = None          # archive layout only (bookworm); None: flat
    components: tuple[str, ...] = ()
    arch: str = "amd64"
    keyring: Path | None = None       # a local keyring file instead of key_url (debian-archive-keyring)

    @property
    def release_url(self) -> str:
        base = self.url.rstrip("/") + "/"
        return base + (f"dists/{self.suite}/InRelease" if self.suite else "InRelease")

    @property
    def described(self) -> str:
        return f"{self.url.rstrip('/')}/" + (f" {self.suite} {' '.join(self.components)}" if self.suite else "")


@dataclass(frozen=True)
class Index:
    """The packages a repository's signed index lists, and which index that was."""
    url: str
    release_date: str                 # Release's Date, as written
    packages_sha256: str              # of the (first) Packages file read
    packages: dict[str, list[dict[str, str]]] = field(repr=False)  # name -> stanzas (KEPT_FIELDS)

    def versions(self, name: str) -> list[str]:
        return [s["Version"] for s in self.packages.get(name, [])]

    @property
    def provenance(self) -> dict[str, str]:
        """What a host's state record keeps of the index its pins came from."""
        return {"url": self.url, "release_date": self.release_date, "packages_sha256": self.packages_sha256}


# ----------------------------------------------------------------------------- fetching

class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: PLR0913 (urllib's signature)
        old, new = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if (new.scheme, new.netloc) != (old.scheme, old.netloc):
            raise ProvisionError(f"{req.full_url} redirects to another host ({new.scheme}://{new.netloc})",
                                 where="mirrors", fix="name the final URL in the profile's mirrors")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameHostRedirects)


def check_url(url: str, where: str = "mirrors") -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProvisionError(f"{url!r} is not an http(s) URL", where=where, fix="give the repository's http(s) URL")
    if parts.username or parts.password:
        raise ProvisionError(f"{parts.scheme}://{parts.hostname}/...: the URL carries a user or password", where=where,
                             fix="give credentials to apt on the hosts (auth.conf.d), not in the profile")
    return url


def fetch(url: str, limit: int, timeout: float = TIMEOUT_S) -> bytes:
    """GET `url`: at most `limit` bytes within `timeout` seconds, redirects on the same host only."""
    check_url(url)
    deadline = time.monotonic() + timeout
    try:
        with _OPENER.open(urllib.request.Request(url, headers={"User-Agent": "gpu-provisioner"}), timeout=timeout) as r:
            chunks, size = [], 0
            while chunk := r.read(65536):
                size += len(chunk)
                if size > limit:
                    raise ProvisionError(f"{url} is larger than {limit} bytes", where="mirrors",
                                         fix="check that the URL names the repository's file")
                if time.monotonic() > deadline:
                    raise ProvisionError(f"{url} took longer than {timeout:.0f}s", where="mirrors",
                                         fix="check the network path to the repository, or use a nearer mirror")
                chunks.append(chunk)
            return b"".join(chunks)
    except urllib.error.HTTPError as exc:
        raise ProvisionError(f"{url}: HTTP {exc.code} {exc.reason}", where="mirrors",
                             fix="check the repository URL and flavour in the profile's mirrors") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProvisionError(f"cannot fetch {url}: {reason}", where="mirrors",
                             fix="check the controller's network path to the repository (or its proxy)") from None


# ----------------------------------------------------------------------------- verifying

def _primary_fingerprints(key: bytes, home: Path) -> list[str]:
    r = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--with-colons", "--show-keys"], input=key,
                       capture_output=True)
    fprs, last = [], ""
    for line in r.stdout.decode(errors="replace").splitlines():
        kind = line.split(":", 1)[0]
        if kind in ("pub", "sub"):
            last = kind
        elif kind == "fpr" and last == "pub":
            fprs.append(line.split(":")[9].upper())
            last = ""
    return fprs


def keyring(key: bytes, fingerprint: str, where: str, home: Path) -> Path:
    """A keyring file holding `key`, refused unless it is exactly one primary key with `fingerprint`."""
    fprs = _primary_fingerprints(key, home)
    if fprs != [fingerprint.upper()]:
        raise ProvisionError(f"the signing key at {where} is not the one the profile pins "
                             f"(found {', '.join(fprs) or 'no OpenPGP key'}; expected {fingerprint.upper()})",
                             where="mirrors.cuda_repo_key_fingerprint",
                             fix="check mirrors.cuda_repo_key_url and mirrors.cuda_repo_key_fingerprint")
    path = home / "keyring.gpg"
    r = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--dearmor", "-o", str(path)], input=key,
                       capture_output=True)
    if r.returncode or not path.stat().st_size:       # --dearmor refuses binary input: it is a keyring already
        path.write_bytes(key)
    return path


def verified_release(signed: bytes, ring: Path, fingerprint: str | None, url: str, home: Path) -> str:
    """The Release text of an InRelease, as gpgv verified it with `ring`."""
    if not shutil.which("gpgv"):
        raise ProvisionError("gpgv is not installed (it checks the repository's signature)", where="controller",
                             fix="install gpgv (Debian/Ubuntu: apt install gpgv)")
    src, out = home / "InRelease", home / "Release"
    src.write_bytes(signed)
    r = subprocess.run(["gpgv", "--homedir", str(home), "--status-fd", "1", "--keyring", str(ring), "--output", str(out),
                        str(src)], capture_output=True)
    status = r.stdout.decode(errors="replace").splitlines()
    # VALIDSIG's last field is the primary key's fingerprint (a subkey may have signed).
    primaries = {line.split()[-1].upper() for line in status if line.startswith("[GNUPG:] VALIDSIG")}
    if r.returncode or not primaries or (fingerprint and fingerprint.upper() not in primaries):
        detail = r.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no valid signature"]
        raise ProvisionError(f"{url}: the signature does not verify with the pinned key ({detail[0]})",
                             where="mirrors", fix="the repository or its key is not the one the profile names; "
                             "nothing was used from it")
    return out.read_text(errors="replace")


# ----------------------------------------------------------------------------- reading

def _packages_file(release: deb822.Release, repo: Repository) -> list[tuple[str, int, str]]:
    """(path, size, sha256) of the Packages files to read, best compression first per folder."""
    listed = {f["name"]: (int(f["size"]), f["sha256"]) for f in release.get("SHA256", [])}
    folders = [f"{c}/binary-{repo.arch}/" for c in repo.components] if repo.suite else [""]
    out = []
    for folder in folders:
        for name in ("Packages.xz", "Packages.gz", "Packages"):
            if folder + name in listed:
                out.append((folder + name, *listed[folder + name]))
                break
        else:
            raise ProvisionError(f"{repo.release_url}: the signed Release lists no {folder}Packages file",
                                 where="mirrors", fix="check the repository URL (and suite/components)")
    return out


def _unpack(name: str, data: bytes) -> bytes:
    if name.endswith(".xz"):
        out = lzma.LZMADecompressor().decompress(data, max_length=MAX_UNPACKED)
    elif name.endswith(".gz"):
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(MAX_UNPACKED + 1)
    else:
        out = data
    if len(out) > MAX_UNPACKED:
        raise ProvisionError(f"{name} unpacks to more than {MAX_UNPACKED} bytes", where="mirrors")
    return out


def _stanzas(text: bytes) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for para in deb822.Packages.iter_paragraphs(text.decode("utf-8", errors="replace"), use_apt_pkg=False):
        if "Package" in para and "Version" in para:
            out.setdefault(para["Package"], []).append({k: para[k] for k in KEPT_FIELDS if k in para})
    return out


def _cache_path(repo: Repository) -> Path:
    return cache_dir() / (hashlib.sha256(repo.described.encode()).hexdigest()[:32] + ".json")


def read(repo: Repository, use_cache: bool = True) -> Index:
    """The repository's signed index now: verified, then cached by URL and Packages hash."""
    with tempfile.TemporaryDirectory(prefix="aptindex-") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        if repo.keyring is not None:
            ring = repo.keyring
        else:
            ring = keyring(fetch(check_url(repo.key_url, "mirrors.cuda_repo_key_url"), MAX_KEY), repo.fingerprint,
                           repo.key_url, home)
        text = verified_release(fetch(repo.release_url, MAX_RELEASE), ring, repo.fingerprint or None,
                                repo.release_url, home)
    release = deb822.Release(text)
    date = release.get("Date", "")
    files = _packages_file(release, repo)
    digest = "+".join(sha for _, _, sha in files)
    path = _cache_path(repo)
    if use_cache:
        try:
            cached_entry = json.loads(path.read_text())
            if cached_entry.get("format") == FORMAT and cached_entry.get("digest") == digest:
                return Index(repo.described, date, files[0][2], cached_entry["packages"])
        except (OSError, ValueError, KeyError):
            pass
    packages: dict[str, list[dict[str, str]]] = {}
    base = repo.url.rstrip("/") + "/" + (f"dists/{repo.suite}/" if repo.suite else "")
    for name, size, sha in files:
        if size > MAX_PACKAGES:
            raise ProvisionError(f"{base}{name} is {size} bytes, over the {MAX_PACKAGES} cap", where="mirrors")
        data = fetch(base + name, size)
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
            raise ProvisionError(f"{base}{name} does not match the SHA256 its signed Release names", where="mirrors",
                                 fix="the mirror is tampered with or mid-update: nothing was used from it; try again")
        for pkg, stanzas in _stanzas(_unpack(name, data)).items():
            packages.setdefault(pkg, []).extend(stanzas)
    index = Index(repo.described, date, files[0][2], packages)
    _store(path, {"format": FORMAT, "url": repo.described, "release_date": date, "digest": digest,
                  "packages_sha256": files[0][2], "packages": packages})
    return index


def cached(repo: Repository) -> Index | None:
    """The index last read for `repo` (no network), or None."""
    try:
        entry = json.loads(_cache_path(repo).read_text())
        if entry.get("format") != FORMAT:
            return None
        return Index(entry["url"], entry["release_date"], entry["packages_sha256"], entry["packages"])
    except (OSError, ValueError, KeyError):
        return None


def _store(path: Path, entry: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass                      # a cache that cannot be written only costs a fetch next time
