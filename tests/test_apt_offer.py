"""The module apt_offer (module_utils/apt_offer.py): the host's own distribution archive is
asked which versions it offers, through a private apt run that writes nothing of the host's.

Parsing runs on real output captured from Debian 12's archive (tests/data/apt/SOURCES.md);
one test runs the real apt against a local repository and checks that nothing of this
machine's apt was written. The controller's side is tests/test_distro_archive.py."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpu_provisioner.node.plugins.module_utils import apt_offer as host

from .conftest import DATA, MODULES, load_module

APT = DATA / "apt"
MADISON = (APT / "madison__debian12-archive__private.txt").read_text().splitlines()
DEBIAN = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
SUITES = ["bookworm", "bookworm-updates", "bookworm-security"]
COMPONENTS = ["main", "contrib", "non-free", "non-free-firmware"]
INLINE_KEY = ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGPL0BUBEADmW5NdOOHwPIJlgPu6JDcKw/NZJPR8lsD9K7UgrF6nP7lLhRf0\n"
              "=tN1Q\n-----END PGP PUBLIC KEY BLOCK-----")

def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


# --------------------------------------------------------------------------- the host's sources

def test_sources_are_read_from_one_line_and_deb822_files_with_their_trust_options(tmp_path):
    etc = _tree(tmp_path, {
        "sources.list": (f"deb [ arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg lang=en ] {DEBIAN} "
                         "bookworm main  # the archive\n"
                         f"# deb {DEBIAN} bookworm-backports main\ndeb-src {DEBIAN} bookworm main\n"
                         f"deb [trusted=yes] {SECURITY}/ bookworm-security main contrib\n"),
        "sources.list.d/debian.sources": (
            f"Types: deb deb-src\nURIs: {DEBIAN}\nSuites: bookworm bookworm-updates\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            "# an old stanza\nEnabled: no\nTypes: deb\nURIs: http://old.example/debian\nSuites: bookworm\nComponents: main\n"),
        "sources.list.d/cuda.sources": (
            "Types: deb\nURIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/\nSuites: /\n"
            "Signed-By:\n" + "\n".join(" " + (line or ".") for line in INLINE_KEY.split("\n")) + "\n"),
        "sources.list.d/ignored.list.save": f"deb {DEBIAN} trixie main\n",
    })
    entries = host.read_sources(str(etc))
    got = [(Path(e["file"]).name, e["uri"], e["suite"], e["components"]) for e in entries]
    assert got == [
        ("sources.list", DEBIAN, "bookworm", ["main"]),
        ("sources.list", SECURITY + "/", "bookworm-security", ["main", "contrib"]),
        ("cuda.sources", "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/", "/", []),
        ("debian.sources", DEBIAN, "bookworm", ["main"]),
        ("debian.sources", DEBIAN, "bookworm-updates", ["main"]),
    ]
    assert entries[0]["options"] == {"Architectures": "amd64",
                                     "Signed-By": "/usr/share/keyrings/debian-archive-keyring.gpg"}
    assert entries[1]["options"] == {"Trusted": "yes"}
    assert entries[2]["options"]["Signed-By"] == INLINE_KEY


def test_only_the_distributions_suites_are_selected_with_the_components_common_enables(tmp_path):
    etc = _tree(tmp_path, {
        "sources.list": f"deb {DEBIAN} bookworm main\ndeb {DEBIAN}/ bookworm non-free\n",
        "sources.list.d/debian.sources": (f"Types: deb\nURIs: {SECURITY}\nSuites: bookworm-security\nComponents: main\n"
                                          "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"),
        # A vendor's repository with the codename as its suite: read, then left out by its Origin.
        "sources.list.d/docker.list": "deb [signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/debian bookworm stable\n",
        "sources.list.d/cuda.list": "deb https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n",
    })
    files = [str(etc / "sources.list"), str(etc / "sources.list.d/debian.sources")]
    chosen = host.select(host.read_sources(str(etc)), SUITES, COMPONENTS, files)
    got = {(e["uri"], e["suite"]): e["components"] for e in chosen}
    assert got == {
        (DEBIAN, "bookworm"): COMPONENTS,                                         # two lines, one source
        ("https://download.docker.com/linux/debian", "bookworm"): ["stable"],       # not a file common edits
        (SECURITY, "bookworm-security"): ["main", "contrib", "non-free", "non-free-firmware"],
    }
    # Without components to enable (common_manage_apt_components false) each keeps its own.
    assert {e["suite"]: e["components"] for e in host.select(host.read_sources(str(etc)), ["bookworm-security"], [], [])} \
        == {"bookworm-security": ["main"]}


def test_the_private_sources_file_keeps_each_sources_keyring_and_reads_back_the_same(tmp_path):
    entries = [{"file": "/etc/apt/sources.list.d/debian.sources", "uri": DEBIAN, "suite": "bookworm",
                "components": ["main", "non-free"], "options": {"Signed-By": INLINE_KEY, "Architectures": "amd64"}}]
    chosen = host.select(entries, SUITES, [], [])
    text = host.private_sources(chosen)
    assert "Targets: Packages" in text and "\n .\n" in text     # the key's blank line, as deb822 writes it
    back = host.read_sources(str(_tree(tmp_path, {"sources.list.d/x.sources": text})))
    assert [(e["uri"], e["suite"], e["components"], e["options"]) for e in back] == [
        (DEBIAN, "bookworm", ["main", "non-free"], {"Signed-By": INLINE_KEY, "Architectures": "amd64"})]


# --------------------------------------------------------------------------- apt's files and output

def test_list_names_are_the_files_apt_writes():
    # The captured lists (tests/data/apt/lists) are named by apt itself.
    for uri, suite in ((DEBIAN, "bookworm"), (DEBIAN + "/", "bookworm-updates"), (SECURITY, "bookworm-security")):
        assert (APT / "lists" / host.list_name(uri, f"dists/{suite}/InRelease")).is_file()
    assert host.list_name("http://user:secret@mirror.example:3142/deb_ian~x", "dists/a/InRelease") \
        == "mirror.example:3142_deb%5fian%7ex_dists_a_InRelease"
    assert host.list_name("file:/srv/my_repo", "dists/bookworm/Release") == "_srv_my%5frepo_dists_bookworm_Release"


def test_release_fields_come_from_the_signed_body():
    text = (APT / "lists" / "deb.debian.org_debian-security_dists_bookworm-security_InRelease").read_text()
    fields = host.release_fields(text + "-----BEGIN PGP SIGNATURE-----\nDate: forged\n")
    assert fields["Origin"] == "Debian" and fields["Label"] == "Debian-Security"
    assert fields["Codename"] == "bookworm-security" and fields["Date"] == "Mon, 30 Nov 2026 00:22:33 UTC"
    assert "Hash" in fields  # the armour header reads as a field too; harmless, nobody asks for it


def test_madison_is_read_with_source_and_suite_per_version():
    found = host.parse_madison(MADISON)
    assert found["nvidia-driver"] == [
        {"version": "535.309.01-0+deb12u1", "uri": SECURITY, "suite": "bookworm-security", "component": "non-free"},
        {"version": "535.261.03-1", "uri": DEBIAN, "suite": "bookworm", "component": "non-free"}]
    assert [o["version"] for o in found["libcuda1"]] == ["535.309.01-0+deb12u1", "535.261.03-1"]  # right-aligned name
    assert found["nvidia-open-kernel-dkms"] == [
        {"version": "535.261.03-1", "uri": DEBIAN, "suite": "bookworm", "component": "contrib"}]
    assert "no-such-package" not in found
    unreachable = (APT / "apt-get-update__unreachable.stderr.txt").read_text()
    assert host._messages(unreachable) == [
        "W: Failed to fetch http://127.0.0.1:9/debian/dists/bookworm/InRelease Could not connect to 127.0.0.1:9 "
        "(127.0.0.1). - connect (111: Connection refused)",
        "W: Some index files failed to download. They have been ignored, or old ones used instead."]


# --------------------------------------------------------------------------- the module's run

class FakeApt:
    """Stands in for apt: records each argv and, on update, leaves the captured Release
    files (and a vendor's) in the private lists folder as apt would."""

    def __init__(self, madison: list[str] = MADISON):
        self.calls: list[list[str]] = []
        self.madison = madison
        self.folder: Path | None = None

    def __call__(self, argv, timeout):
        self.calls.append(argv)
        opts = dict(a.split("=", 1) for a in argv if "=" in a and a.startswith("Dir::"))
        lists = Path(opts["Dir::State::Lists"])
        self.folder = lists.parent
        if argv[-1] == "update":
            for f in (APT / "lists").iterdir():
                shutil.copy(f, lists / f.name)
            (lists / host.list_name("https://download.docker.com/linux/debian", "dists/bookworm/InRelease")).write_text(
                "Origin: Docker\nLabel: Docker CE\nSuite: bookworm\nDate: Tue, 01 Dec 2026 00:00:00 UTC\n")
            return {"rc": 0, "stdout": "", "stderr": "", "timed_out": False}
        return {"rc": 0, "stdout": "\n".join(self.madison) + "\n"
                + "nvidia-driver | 999.1-1 | https://download.docker.com/linux/debian bookworm/stable amd64 Packages\n",
                "stderr": "", "timed_out": False}


def _etc(tmp_path: Path) -> Path:
    return _tree(tmp_path / "etc", {
        "sources.list": f"deb {DEBIAN} bookworm main\ndeb {DEBIAN} bookworm-updates main\n",
        "sources.list.d/debian-security.list": f"deb {SECURITY} bookworm-security main non-free\n",
        "sources.list.d/docker.list": "deb https://download.docker.com/linux/debian bookworm stable\n",
    })


def test_offer_runs_apt_privately_and_keeps_only_the_distributions_sources(tmp_path):
    etc, fake = _etc(tmp_path), FakeApt()
    result = host.offer(["nvidia-driver", "nvidia-cuda-toolkit"], SUITES, COMPONENTS, [str(etc / "sources.list")],
                        proxy="http://10.0.0.1:3142", etc_apt=str(etc), origin="Debian", run=fake, tmp=str(tmp_path))
    update, madison = fake.calls
    assert update[0] == "apt-get" and update[-1] == "update" and madison[:1] == ["apt-cache"]
    assert madison[-3:] == ["madison", "nvidia-driver", "nvidia-cuda-toolkit"]
    private = str(fake.folder)
    for option in ("Debug::NoLocking=1", f"Dir::Etc::SourceParts={private}/sources.list.d",
                   f"Dir::State::Lists={private}/lists", f"Dir::Cache={private}/cache",
                   f"Dir::Etc::SourceList={private}/sources.sources", "Acquire::http::Proxy=http://10.0.0.1:3142"):
        assert option in update and option in madison
    assert ["-c", f"{private}/apt.conf"] == update[2:4]
    assert not fake.folder.exists()                      # the private folder is gone
    assert result["error"] == "" and result["origin"] == "Debian"
    by = {(s["uri"], s["suite"]): s for s in result["sources"]}
    assert by[(DEBIAN, "bookworm")]["components"] == COMPONENTS                      # sources.list: common edits it
    assert by[(SECURITY, "bookworm-security")]["components"] == ["main", "non-free"]  # its own file: as it is
    assert by[(SECURITY, "bookworm-security")]["release"]["Date"] == "Mon, 30 Nov 2026 00:22:33 UTC"
    docker = by[("https://download.docker.com/linux/debian", "bookworm")]
    assert not docker["used"] and "'Docker', not the distribution's 'Debian'" in docker["why_not"]
    assert [o["version"] for o in result["packages"]["nvidia-driver"]] == ["535.309.01-0+deb12u1", "535.261.03-1"]


def test_offer_refuses_odd_names_and_says_when_the_host_has_no_entry_for_the_suites(tmp_path):
    fake = FakeApt()
    bad = host.offer(["-o=APT::Get::Foo", "nvidia-driver"], SUITES, [], [], etc_apt=str(_etc(tmp_path)), run=fake)
    assert "-o=APT::Get::Foo" in bad["error"] and not fake.calls
    empty = host.offer(["nvidia-driver"], ["noble"], [], [], etc_apt=str(tmp_path / "etc"), run=fake)
    assert "no `deb` entry for noble" in empty["error"] and not fake.calls


def test_the_module_is_documented_and_returns_under_a_provisioner_key():
    module = load_module("apt_offer")
    doc, ret = yaml.safe_load(module.DOCUMENTATION), yaml.safe_load(module.RETURN)
    assert doc["module"] == "apt_offer" and set(doc["options"]) == {
        "packages", "suites", "components", "component_files", "proxy", "origin", "timeout"}
    assert list(ret) == ["provisioner_apt_offer"]
    source = (MODULES / "apt_offer.py").read_text() + (MODULES.parent / "module_utils" / "apt_offer.py").read_text()
    assert "shell=True" not in source and "os.system" not in source


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is not installed")
def test_real_apt_reads_a_local_archive_and_writes_nothing_of_the_hosts(tmp_path):
    """The real apt against a local repository laid out like Debian's (an unsigned Release,
    trusted=yes) and a source that cannot be reached; this machine's apt state is unchanged."""
    repo = tmp_path / "my_repo"
    stanza = "Package: {p}\nVersion: {v}\nArchitecture: amd64\nFilename: pool/{p}_{v}.deb\nSize: 1\nDescription: x\n"
    packages = "\n".join(stanza.format(p=p, v=v) for p, v in (("nvidia-driver", "535.309.01-0+deb12u1"),
                                                                  ("nvidia-driver", "535.261.03-1")))
    (repo / "dists/bookworm/non-free/binary-amd64").mkdir(parents=True)
    (repo / "dists/bookworm/non-free/binary-amd64/Packages").write_text(packages)
    digest = hashlib.sha256(packages.encode()).hexdigest()
    (repo / "dists/bookworm/Release").write_text(
        "Origin: Debian\nLabel: Debian\nSuite: oldstable\nCodename: bookworm\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n"
        f"Architectures: amd64\nComponents: main non-free\nSHA256:\n {digest} {len(packages)} non-free/binary-amd64/Packages\n")
    etc = _tree(tmp_path / "etc", {"sources.list": f"deb [trusted=yes] file:{repo} bookworm main\n"
                                                   "deb http://127.0.0.1:9/debian bookworm-updates main\n"})
    watched = [Path("/etc/apt"), Path("/var/lib/apt/lists"), Path("/var/cache/apt")]

    def state():
        return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for d in watched if d.is_dir()
                for p in d.rglob("*") if p.is_file() and "partial" not in p.parts}

    before = state()
    result = host.offer(["nvidia-driver", "no-such-package"], ["bookworm", "bookworm-updates"], ["non-free"],
                        [str(etc / "sources.list")], etc_apt=str(etc), origin="Debian", timeout=120, tmp=str(tmp_path))
    assert state() == before
    assert not list(tmp_path.glob("provisioner-apt-offer-*"))
    assert result["error"] == "", result
    assert result["packages"] == {"no-such-package": [], "nvidia-driver": [
        {"version": "535.309.01-0+deb12u1", "uri": f"file:{repo}", "suite": "bookworm", "component": "non-free"},
        {"version": "535.261.03-1", "uri": f"file:{repo}", "suite": "bookworm", "component": "non-free"}]}
    by = {s["suite"]: s for s in result["sources"]}
    assert by["bookworm"]["used"] and by["bookworm"]["release"]["Date"] == "Sat, 11 Jul 2026 10:16:37 UTC"
    assert not by["bookworm-updates"]["fetched"] and any("127.0.0.1:9" in m for m in by["bookworm-updates"]["messages"])
