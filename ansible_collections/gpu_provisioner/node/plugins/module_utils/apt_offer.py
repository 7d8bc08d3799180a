# -*- coding: utf-8 -*-
"""What the host's own distribution archive offers, read without changing the host (the
module apt_offer; judged on the controller by provisioner/judge/distro.py).

The host's apt sources (/etc/apt/sources.list, sources.list.d/*.list one-line and *.sources
deb822) are read; the entries for the distribution's own suites (bookworm, bookworm-updates,
bookworm-security) are written, with their Signed-By and other trust options and the
components the role common will enable, into a private sources file in a temporary folder.
apt then runs with that file, an empty SourceParts folder, and private lists and cache
folders, without locking: the host's apt.conf (its proxy), keyrings and network path apply,
and apt checks the signatures; nothing of the host's is written, and the folder is removed.

Third-party repositories that reuse the codename as their suite (Docker's `bookworm`, a
PPA's `jammy`) are fetched with the rest but left out of the offer: only sources whose
Release file's Origin is the distribution's (Debian, Ubuntu) count.

Standard library only: module_utils runs on the node.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile

# apt's one-line options (sources.list(5)) carried into the private deb822 file: what
# decides where apt fetches from and how it verifies. Languages, Targets and PDiffs are
# left out: the private run fetches Packages only.
ONE_LINE_OPTIONS = {
    "arch": "Architectures", "signed-by": "Signed-By", "trusted": "Trusted",
    "check-valid-until": "Check-Valid-Until", "valid-until-min": "Valid-Until-Min",
    "valid-until-max": "Valid-Until-Max", "check-date": "Check-Date", "date-max-future": "Date-Max-Future",
    "by-hash": "By-Hash", "allow-insecure": "Allow-Insecure", "allow-weak": "Allow-Weak",
    "allow-downgrade-to-insecure": "Allow-Downgrade-To-Insecure", "inrelease-path": "InRelease-Path",
}
CARRIED = {name.lower(): name for name in ONE_LINE_OPTIONS.values()}

# apt runs the host's update hooks (APT::Update::Pre/Post-Invoke[-Success]: PackageKit,
# appstream, update-notifier's stamp, command-not-found's database) after every update;
# the private run clears them (a `#clear` in a config file given with -c, read after the
# host's own configuration).
PRIVATE_CONF = ("#clear APT::Update::Pre-Invoke;\n#clear APT::Update::Post-Invoke;\n"
                "#clear APT::Update::Post-Invoke-Success;\n")

PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
WORD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]*$")
ORIGINS = {"debian": "Debian", "ubuntu": "Ubuntu"}
MAX_MESSAGES = 20


# --------------------------------------------------------------------------- the host's sources

def _one_line(path: str, text: str) -> list[dict]:
    """`deb [options] uri suite [component...]` lines (deb-src and comments skipped)."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb") or line.split(None, 1)[0] != "deb":
            continue
        rest = line[3:].strip()
        options: dict[str, str] = {}
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                continue  # apt refuses the line too
            for option in rest[1:end].split():
                key, sep, value = option.partition("=")
                if sep and not key.endswith(("+", "-")) and key.lower() in ONE_LINE_OPTIONS:
                    # arch=amd64,i386 is a list (deb822 separates with spaces); other values stay as written.
                    options[ONE_LINE_OPTIONS[key.lower()]] = value.replace(",", " ") if key.lower() == "arch" else value
            rest = rest[end + 1:].strip()
        words = rest.split()
        if len(words) < 2:
            continue
        out.append({"file": path, "line": number, "format": "list", "uri": words[0], "suite": words[1],
                    "components": words[2:], "options": options})
    return out


def _stanzas(text: str) -> list[dict[str, list[str]]]:
    """deb822 stanzas as {field (lower case): [its lines]}; comment lines dropped."""
    stanzas, cur, key = [], {}, None
    for raw in text.splitlines() + [""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, None
            continue
        if raw[0] in " \t":
            if key:  # " ." stands for an empty line (deb822)
                cur[key].append("" if raw.strip() == "." else raw.strip())
            continue
        name, sep, value = raw.partition(":")
        if sep:
            key = name.strip().lower()
            cur[key] = [value.strip()] if value.strip() else []
    return stanzas


def _deb822(path: str, text: str) -> list[dict]:
    """One entry per URI and suite of each enabled `Types: deb` stanza of a .sources file."""
    out = []
    for number, fields in enumerate(_stanzas(text), 1):
        def words(name: str, fields: dict[str, list[str]] = fields) -> list[str]:
            return " ".join(fields.get(name, [])).split()

        if "deb" not in words("types") or " ".join(fields.get("enabled", ["yes"])).strip().lower() in ("no", "false", "0"):
            continue
        options = {}
        for name, carried in CARRIED.items():
            if name in fields:
                lines = fields[name]
                # Signed-By may hold the key itself, one line per line of its armour.
                options[carried] = "\n".join(lines) if name == "signed-by" and len(lines) > 1 else " ".join(lines)
        for uri in words("uris"):
            for suite in words("suites"):
                out.append({"file": path, "line": number, "format": "sources", "uri": uri, "suite": suite,
                            "components": words("components"), "options": dict(options)})
    return out


def read_sources(etc_apt: str = "/etc/apt") -> list[dict]:
    """Every enabled binary (`deb`) entry of the host's apt sources, in apt's file order."""
    files = [os.path.join(etc_apt, "sources.list")]
    parts = os.path.join(etc_apt, "sources.list.d")
    files += sorted(p for p in glob.glob(os.path.join(parts, "*")) if p.endswith((".list", ".sources")))
    entries = []
    for path in files:
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        entries += (_deb822 if path.endswith(".sources") else _one_line)(path, text)
    return entries


def normalise(uri: str) -> str:
    return uri.strip().rstrip("/")


def select(entries: list[dict], suites: list[str], components: list[str], component_files: list[str]) -> list[dict]:
    """The entries for the distribution's own suites, one per URI and suite (apt merges
    duplicates the same way), with the components apt will read once the role common has
    run: an entry's own, plus `components` for entries in `component_files` (the files
    common edits)."""
    edited = {os.path.abspath(p) for p in component_files}
    merged: dict[tuple[str, str], dict] = {}
    for entry in entries:
        if entry["suite"] not in suites:
            continue
        key = (normalise(entry["uri"]), entry["suite"])
        comps = list(entry["components"])
        if os.path.abspath(entry["file"]) in edited:
            comps += [c for c in components if c not in comps]
        if key not in merged:
            merged[key] = dict(entry, uri=key[0], components=comps, files=[entry["file"]], options=dict(entry["options"]))
            continue
        have = merged[key]
        have["components"] += [c for c in comps if c not in have["components"]]
        have["files"] += [entry["file"]] if entry["file"] not in have["files"] else []
        for name, value in entry["options"].items():
            have["options"].setdefault(name, value)
    return list(merged.values())


def _field(name: str, value: str) -> str:
    lines = [line.strip() for line in value.replace("\r", "").split("\n")]
    if len(lines) == 1:
        return f"{name}: {lines[0]}"
    return f"{name}:\n" + "\n".join(f" {line}" if line else " ." for line in lines)


def private_sources(selected: list[dict]) -> str:
    """The deb822 text of the private sources file: Packages indices only."""
    stanzas = []
    for entry in selected:
        lines = ["Types: deb", f"URIs: {entry['uri']}", f"Suites: {entry['suite']}",
                 f"Components: {' '.join(entry['components'])}", "Targets: Packages"]
        lines += [_field(name, value) for name, value in sorted(entry["options"].items())]
        stanzas.append("\n".join(lines))
    return "\n\n".join(stanzas) + "\n"


# --------------------------------------------------------------------------- apt's own files

def _quote(text: str) -> str:
    """apt's QuoteString with URItoFileName's characters (apt-pkg/contrib/strutl.cc)."""
    bad = "\\|{}[]<>\"^~_=!@#$%^*"
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append(f"%{byte:02x}" if char in bad or byte <= 0x20 or byte >= 0x7F else char)
    return "".join(out)


def list_name(uri: str, path: str) -> str:
    """The file name apt gives `path` under `uri` in its lists folder (URItoFileName: the
    URI without scheme, user and password, quoted, '/' -> '_')."""
    rest = normalise(uri) + "/" + path
    if "://" in rest:
        rest = rest.split("://", 1)[1]
        host, slash, tail = rest.partition("/")
        rest = host.rsplit("@", 1)[-1] + slash + tail
    elif rest.startswith(("file:", "cdrom:", "copy:")):
        rest = rest.split(":", 1)[1]
    return _quote(rest).replace("/", "_")


def release_fields(text: str) -> dict[str, str]:
    """The single-line fields of an InRelease or Release file (Origin, Label, Suite,
    Codename, Date, Valid-Until, ...): the signed body, not the PGP armour."""
    fields = {}
    for line in text.splitlines():
        if line.startswith("-----BEGIN PGP SIGNATURE"):
            break
        m = re.match(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(\S.*)$", line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2).strip()
    return fields


def read_release(lists: str, uri: str, suite: str) -> dict[str, str]:
    """The Release fields apt verified and kept for `uri` `suite`; {} when it kept none
    (unreachable, unsigned, a bad signature: apt said why in its messages)."""
    for name in ("InRelease", "Release"):
        path = os.path.join(lists, list_name(uri, f"dists/{suite}/{name}"))
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                return release_fields(handle.read(1_000_000))
    return {}


def parse_madison(lines: list[str]) -> dict[str, list[dict]]:
    """`apt-cache madison` lines -> {package: [{version, uri, suite, component}]}, in apt's
    order (newest first). `nvidia-driver | 535.309.01-0+deb12u1 | http://deb.debian.org/
    debian-security bookworm-security/non-free amd64 Packages`."""
    out: dict[str, list[dict]] = {}
    for line in lines:
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < 3 or not cells[0] or not cells[1]:
            continue
        words = cells[2].split()
        if len(words) < 2 or words[-1] not in ("Packages", "Sources"):
            continue
        if words[-1] == "Sources":
            continue
        suite, _, component = words[1].rpartition("/")
        out.setdefault(cells[0], []).append({"version": cells[1], "uri": normalise(words[0]),
                                             "suite": suite or words[1], "component": component if suite else ""})
    return out


def host_origin(os_release: str = "/etc/os-release") -> str:
    """The Origin of the distribution's own Release files, from os-release's ID."""
    try:
        with open(os_release, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                if key == "ID":
                    ident = value.strip().strip("\"'").lower()
                    return ORIGINS.get(ident, ident.capitalize())
    except OSError:
        pass
    return ""


def apt_options(folder: str, proxy: str = "") -> list[str]:
    """The options that make apt read and write only `folder` (and read the host's
    configuration, keyrings and dpkg status)."""
    opts = ["-c", os.path.join(folder, "apt.conf"),
            "-o", f"Dir::Etc::SourceList={os.path.join(folder, 'sources.sources')}",
            "-o", f"Dir::Etc::SourceParts={os.path.join(folder, 'sources.list.d')}",
            "-o", f"Dir::State::Lists={os.path.join(folder, 'lists')}",
            "-o", f"Dir::Cache={os.path.join(folder, 'cache')}",
            "-o", "Debug::NoLocking=1",
            "-o", "Acquire::GzipIndexes=true"]
    if proxy:
        opts += ["-o", f"Acquire::http::Proxy={proxy}"]
    return opts


def _messages(text: str) -> list[str]:
    found = [" ".join(line.split())[:400] for line in text.splitlines() if line[:2] in ("W:", "E:")]
    return found[:MAX_MESSAGES]


def _run(argv: list[str], timeout: int) -> dict:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False,
                              env=dict(os.environ, LC_ALL="C", LANG="C"))
    except FileNotFoundError:
        return {"rc": 127, "stdout": "", "stderr": f"{argv[0]} is not installed", "timed_out": False}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": f"{argv[0]} did not finish within {timeout} s", "timed_out": True}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "timed_out": False}


def offer(packages: list[str], suites: list[str], components: list[str], component_files: list[str],
          proxy: str = "", timeout: int = 300, etc_apt: str = "/etc/apt", origin: str = "",
          run=_run, tmp: str | None = None) -> dict:
    """What the host's distribution archive offers of `packages`, through a private apt run.

    Returns {origin, sources: [{uri, suite, components, files, signed_by, fetched, release:
    {Origin, Label, Date, ...}, used, why_not, messages}], packages: {name: [{version, uri,
    suite, component}]}, messages: apt's W:/E: lines, error: why nothing could be read ("" if
    fine)}. Never raises for what it finds on the host: the controller judges."""
    result: dict = {"origin": origin or host_origin(), "sources": [], "packages": {}, "messages": [], "error": ""}
    bad = [p for p in packages if not PACKAGE_RE.match(p)] + [w for w in suites + components if not WORD_RE.match(w)]
    if bad:
        result["error"] = f"not a package, suite or component name: {', '.join(sorted(bad))}"
        return result
    selected = select(read_sources(etc_apt), suites, components, component_files)
    if not selected:
        result["error"] = (f"the host's apt sources ({etc_apt}/sources.list, {etc_apt}/sources.list.d) have no "
                           f"`deb` entry for {', '.join(suites)}")
        return result
    folder = tempfile.mkdtemp(prefix="provisioner-apt-offer-", dir=tmp)
    try:
        # apt fetches as its sandbox user (_apt) into lists/partial, which it makes its own: the
        # folder lets it pass, not list; the sources (a URI may carry a password) stay root's.
        os.chmod(folder, 0o711)
        for sub in ("lists/partial", "cache", "sources.list.d"):
            os.makedirs(os.path.join(folder, sub), mode=0o755)
        with open(os.path.join(folder, "apt.conf"), "w", encoding="utf-8") as handle:
            handle.write(PRIVATE_CONF)
        sources = os.open(os.path.join(folder, "sources.sources"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(sources, "w", encoding="utf-8") as handle:
            handle.write(private_sources(selected))
        opts = apt_options(folder, proxy)
        update = run(["apt-get", "-q", *opts, "update"], timeout)
        result["update_rc"] = update["rc"]
        result["messages"] = _messages(update["stderr"] + "\n" + update["stdout"])
        if update["rc"] in (124, 127):
            result["error"] = update["stderr"]
        lists = os.path.join(folder, "lists")
        used = set()
        for entry in selected:
            release = read_release(lists, entry["uri"], entry["suite"])
            is_ours = release.get("Origin", "") == result["origin"]
            why = ("" if is_ours else
                   "apt could not fetch or verify its Release file (see messages)" if not release else
                   f"its Release file's Origin is {release.get('Origin', '(none)')!r}, not the distribution's "
                   f"{result['origin']!r}")
            prefix = entry["uri"] + "/dists/" + entry["suite"] + "/"
            result["sources"].append({
                "uri": entry["uri"], "suite": entry["suite"], "components": entry["components"],
                "files": entry["files"], "signed_by": entry["options"].get("Signed-By", "").split("\n")[0],
                "fetched": bool(release), "used": is_ours, "why_not": why,
                "release": {k: release[k] for k in ("Origin", "Label", "Suite", "Codename", "Version", "Date",
                                                    "Valid-Until") if k in release},
                "messages": [m for m in result["messages"] if prefix in m or f"{entry['uri']} {entry['suite']} " in m]})
            if is_ours:
                used.add((entry["uri"], entry["suite"]))
        if packages and update["rc"] not in (124, 127):
            madison = run(["apt-cache", *opts, "madison", *packages], min(timeout, 120))
            if madison["rc"] != 0:
                result["error"] = f"apt-cache madison failed (rc {madison['rc']}): {' '.join(madison['stderr'].split())[:400]}"
            found = parse_madison(madison["stdout"].splitlines())
            result["packages"] = {name: [o for o in found.get(name, []) if (o["uri"], o["suite"]) in used]
                                  for name in packages}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result
