"""The apt_sources module: every spelling of one repository's source is found, whatever file,
format and keyring it has, and `replaced` sets the others aside (renamed, never deleted)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import MODULES

_spec = importlib.util.spec_from_file_location("apt_sources", MODULES / "apt_sources.py")
apt_sources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(apt_sources)

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
# The line NVIDIA's cuda-keyring package installs as cuda-ubuntu2204-x86_64.list (see the
# research notes of the production-path issue: its dpkg -L and the line others quote).
KEYRING_LINE = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {CUDA}/ /\n"
OURS = "sources.list.d/provisioner-cuda.sources"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_normalise_treats_apts_equivalent_spellings_as_one():
    assert apt_sources.normalise(CUDA + "/") == apt_sources.normalise(CUDA.replace("https://developer", "HTTPS://Developer"))
    assert apt_sources.normalise("http://mirror.example:80/cuda/") == "http://mirror.example/cuda"
    assert apt_sources.normalise("http://mirror.example:8080/cuda") == "http://mirror.example:8080/cuda"
    assert apt_sources.normalise(CUDA) != apt_sources.normalise(CUDA.replace("ubuntu2204", "ubuntu2404"))


def test_find_reads_one_line_and_deb822_sources_and_skips_ours_comments_and_disabled(tmp_path):
    root = _tree(tmp_path, {
        "sources.list": "deb http://archive.ubuntu.com/ubuntu jammy main\n# " + KEYRING_LINE,
        "sources.list.d/cuda-ubuntu2204-x86_64.list": KEYRING_LINE,
        "sources.list.d/old.list": f"deb {CUDA} /\n",
        "sources.list.d/other.sources": f"Types: deb\nURIs: http://x.example/a {CUDA}/\nSuites: /\n"
                                        "Signed-By: /etc/apt/keyrings/nv.asc\n",
        "sources.list.d/off.sources": f"Enabled: no\nTypes: deb\nURIs: {CUDA}\nSuites: /\n",
        OURS: f"Types: deb\nURIs: {CUDA}/\nSuites: /\nSigned-By: /usr/share/keyrings/provisioner.asc\n",
    })
    found = apt_sources.find(CUDA, str(root / OURS), str(root))
    assert [(Path(e["file"]).name, e["format"], e["signed_by"]) for e in found] == [
        ("cuda-ubuntu2204-x86_64.list", "list", "/usr/share/keyrings/cuda-archive-keyring.gpg"),
        ("old.list", "list", ""),
        ("other.sources", "sources", "/etc/apt/keyrings/nv.asc"),
    ]


def _run_module(args: dict) -> dict:
    """The module as Ansible runs it: its file with the arguments on stdin."""
    payload = json.dumps({"ANSIBLE_MODULE_ARGS": args})
    r = subprocess.run([sys.executable, str(MODULES / "apt_sources.py")], input=payload, capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    return json.loads(r.stdout)


@pytest.mark.ansible
def test_replaced_renames_the_other_files_and_a_second_run_changes_nothing(tmp_path):
    root = _tree(tmp_path, {"sources.list": "deb http://deb.example/debian bookworm main\n",
                            "sources.list.d/cuda-ubuntu2204-x86_64.list": KEYRING_LINE,
                            "sources.list.d/unrelated.list": "deb http://x.example/a stable main\n"})
    args = {"url": CUDA, "keep": str(root / OURS), "state": "replaced", "sources_dir": str(root)}
    first = _run_module(args)
    assert first["changed"] is True and [Path(p).name for p in first["set_aside"]] == ["cuda-ubuntu2204-x86_64.list"]
    assert (root / "sources.list.d/cuda-ubuntu2204-x86_64.list.disabled-by-provisioner").read_text() == KEYRING_LINE
    assert (root / "sources.list.d/unrelated.list").exists()
    second = _run_module(args)
    assert second["changed"] is False and second["entries"] == []


@pytest.mark.ansible
def test_the_main_sources_list_is_never_rewritten_the_user_is_told(tmp_path):
    root = _tree(tmp_path, {"sources.list": KEYRING_LINE})
    result = _run_module({"url": CUDA, "keep": str(root / OURS), "state": "replaced", "sources_dir": str(root)})
    assert result.get("failed") is True and "sources.list itself names" in result["msg"]
    assert (root / "sources.list").read_text() == KEYRING_LINE
