#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Find the apt sources that name a repository URL, whatever file and keyring they use,
and set aside the ones that would make apt refuse every source list."""

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_sources
short_description: Find (and set aside) apt sources for one repository URL.
description:
  - Reads /etc/apt/sources.list and every *.list (one-line) and *.sources (deb822) file in
    /etc/apt/sources.list.d, and returns the entries whose URI is O(url) after
    normalisation (scheme and host case, default port, trailing slashes).
  - Two entries for one repository with different C(Signed-By) make apt refuse every
    source list ("Conflicting values set for option Signed-By"). With O(state=replaced),
    files other than O(keep) that hold such an entry are renamed to
    C(<file>.disabled-by-provisioner), which apt does not read; nothing is deleted.
  - GPU cloud images often ship NVIDIA's C(cuda-keyring) source; the role decides from
    the returned entries whether to reuse it or to set it aside.
options:
  url:
    description: The repository's URI (a flat repository such as NVIDIA's CUDA one).
    type: str
    required: true
  keep:
    description: Our own sources file; never set aside, and left out of the result.
    type: path
    required: true
  state:
    description: C(present) only reports; C(replaced) sets aside every other file with an entry for O(url).
    type: str
    choices: [present, replaced]
    default: present
  sources_dir:
    description: Where apt's source files live (for tests).
    type: path
    default: /etc/apt
"""

EXAMPLES = r"""
- name: List the apt sources that already name NVIDIA's CUDA repository, changing nothing.
  gpu_provisioner.node.apt_sources:
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/
    keep: /etc/apt/sources.list.d/cuda-repo.sources
  register: cuda_sources

- name: Set aside every other source for it (renamed .disabled-by-provisioner), so apt keeps working.
  gpu_provisioner.node.apt_sources:
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/
    keep: /etc/apt/sources.list.d/cuda-repo.sources
    state: replaced
"""

RETURN = r"""
entries:
  description: Other files' entries for the URL, each with file, format (list or sources), signed_by ("" when none).
  type: list
  elements: dict
set_aside:
  description: Files renamed to <file>.disabled-by-provisioner (state=replaced).
  type: list
  elements: str
"""

import glob
import os
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

SUFFIX = ".disabled-by-provisioner"


def normalise(url: str) -> str:
    """One spelling per repository: lower-case scheme and host, no default port, no
    trailing slashes (apt treats http://H/p and http://h:80/p/ as the same source)."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    port = f":{parts.port}" if parts.port and parts.port != default else ""
    return f"{parts.scheme.lower()}://{host}{port}{parts.path.rstrip('/')}"


def _one_line_entries(text: str):
    """(uri, signed_by) of each `deb [options] uri suite ...` line."""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] not in ("deb", "deb-src"):
            continue
        options, rest = {}, words[1:]
        if rest and rest[0].startswith("["):
            opts = []
            while rest:
                word = rest.pop(0)
                opts.append(word)
                if word.endswith("]"):
                    break
            for option in " ".join(opts).strip("[] ").split():
                key, _, value = option.partition("=")
                options[key] = value
        if rest:
            yield rest[0], options.get("signed-by", "")


def _deb822_entries(text: str):
    """(uri, signed_by) of each URI in each stanza of a .sources file (Enabled: no skipped)."""
    for stanza in text.split("\n\n"):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and key:
                fields[key] += "\n" + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        signed_by = fields.get("signed-by", "")
        for uri in fields.get("uris", "").split():
            yield uri, signed_by if "\n" not in signed_by else "(inline key)"


def _main_list(sources_dir: str) -> str:
    return os.path.join(sources_dir, "sources.list")


def find(url: str, keep: str, sources_dir: str) -> list[dict]:
    wanted = normalise(url)
    files = [_main_list(sources_dir)]
    files += sorted(glob.glob(os.path.join(sources_dir, "sources.list.d", "*.list")))
    files += sorted(glob.glob(os.path.join(sources_dir, "sources.list.d", "*.sources")))
    found = []
    for path in files:
        if os.path.abspath(path) == os.path.abspath(keep) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        reader = _deb822_entries if path.endswith(".sources") else _one_line_entries
        for uri, signed_by in reader(text):
            if normalise(uri) == wanted:
                found.append({"file": path, "format": "sources" if path.endswith(".sources") else "list",
                              "signed_by": signed_by})
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={"url": {"type": "str", "required": True}, "keep": {"type": "path", "required": True},
                       "state": {"type": "str", "choices": ["present", "replaced"], "default": "present"},
                       "sources_dir": {"type": "path", "default": "/etc/apt"}},
        supports_check_mode=True,
    )
    p = module.params
    entries = find(p["url"], p["keep"], p["sources_dir"])
    set_aside = []
    if p["state"] == "replaced":
        main_list = _main_list(p["sources_dir"])
        if any(e["file"] == main_list for e in entries):
            module.fail_json(msg=f"{main_list} itself names {p['url']}: remove that line (it clashes with our "
                                 "signed-by source for the same repository) and re-run", entries=entries)
        for path in sorted({e["file"] for e in entries}):
            set_aside.append(path)
            if not module.check_mode:
                os.replace(path, path + SUFFIX)
    module.exit_json(changed=bool(set_aside), entries=entries, set_aside=set_aside)


if __name__ == "__main__":
    main()
