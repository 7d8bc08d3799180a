"""The containers section: the toolkit's versions resolved from an index (not from the data
file), pinned by the repository's host, and the registration as a drift item (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.gpu_provisioner.node.plugins.filter.apt import apt_preferences
from ansible_collections.gpu_provisioner.node.plugins.module_utils import state
from provisioner import profiles
from provisioner.errors import ProvisionError
from provisioner.lab import toolkitrepo
from provisioner.profiles import aptindex, toolkit


def _profile(tmp_path: Path, version: str, extra: str = "") -> profiles.Profile:
    path = tmp_path / "p.yml"
    path.write_text(f"extends: debian12-lab\nname: p\ndescription: d\n"
                    f"containers: {{runtime: docker, toolkit_version: '{version}'}}\n{extra}")
    return profiles.load(str(path)).profile


def _standin_index() -> aptindex.Index:
    """What the lab's stand-in serves (its own manifest, which differs from the product's data)."""
    man = toolkitrepo.load()
    return aptindex.Index(url="http://standin/stable/deb/amd64/", release_date="Thu, 01 Jan 2026 00:00:00 UTC",
                          packages_sha256="", packages={n: [{"Version": v} for v in man.versions(n)]
                                                        for n in toolkit.data().names})


def test_a_version_only_the_index_carries_resolves_and_one_it_lacks_is_refused_naming_it(tmp_path: Path):
    assert "1.17.9-1" not in toolkit.data().versions          # the stand-in serves it; the data does not cite it
    pins = toolkit.index_pins(_profile(tmp_path, "1.17.9-1"), _standin_index())
    assert pins == dict.fromkeys(toolkit.data().names, "1.17.9-1")
    with pytest.raises(ProvisionError) as err:
        toolkit.index_pins(_profile(tmp_path, "1.20.0-1"), _standin_index())   # cited in the data, not served
    assert "http://standin/stable/deb/amd64/" in err.value.message and "1.17.9-1" in err.value.message
    assert err.value.where == "containers.toolkit_version"


def test_offline_only_a_cited_version_passes(tmp_path: Path):
    assert toolkit.snapshot_pins(_profile(tmp_path, "1.17.8-1"))["libnvidia-container1"] == "1.17.8-1"
    with pytest.raises(ProvisionError):
        toolkit.snapshot_pins(_profile(tmp_path, "1.17.9-1"))


def test_the_repository_is_nvidias_or_the_mirror_with_its_key(tmp_path: Path):
    nvidia = toolkit.repository(_profile(tmp_path, "1.17.8-1"))
    assert nvidia.url == "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"
    assert nvidia.key_url == "https://nvidia.github.io/libnvidia-container/gpgkey"
    assert nvidia.fingerprint == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    fpr = "A" * 40
    mirror = toolkit.repository(_profile(tmp_path, "1.17.8-1", "mirrors: {container_toolkit_url: 'http://m.example/lnc', "
                                                               f"container_toolkit_key_fingerprint: {fpr}}}\n"))
    assert (mirror.url, mirror.key_url, mirror.fingerprint) == ("http://m.example/lnc/stable/deb/amd64/",
                                                                "http://m.example/lnc/gpgkey", fpr)


def test_preferences_pin_other_versions_by_host_when_asked_and_by_release_otherwise():
    by_host = apt_preferences({"libnvidia-container1": "1.17.8-1"}, "NVIDIA", "NVIDIA CUDA", "toolkit", "nvidia.github.io")
    assert "Pin: origin nvidia.github.io\nPin-Priority: 100" in by_host and "o=NVIDIA" not in by_host
    assert "Pin: version 1.17.8-1\nPin-Priority: 1001" in by_host
    assert "Pin: release o=NVIDIA,l=NVIDIA CUDA" in apt_preferences({"x": "1"}, "NVIDIA", "NVIDIA CUDA", "x")
    with pytest.raises(ValueError):
        apt_preferences({"x": "1"}, "NVIDIA", "NVIDIA CUDA", "x", "evil\nPin: version *")


def test_a_daemon_json_that_lost_the_runtime_is_drift_and_the_users_own_edits_are_not(tmp_path: Path, monkeypatch):
    config = tmp_path / "etc" / "docker" / "daemon.json"
    config.parent.mkdir(parents=True)
    item = f"docker:{config}"
    monkeypatch.setattr(state, "runtime_item", lambda i: ("docker", str(config)) if i == item else None)
    config.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}))
    recorded = state.read_state({"runtimes": [item]})
    assert recorded["runtimes"] == {item: True}
    config.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
                                  "log-level": "warn"}))
    assert state.differences(recorded, state.read_state({"runtimes": [item]})) == []
    config.write_text(json.dumps({"bridge": "none"}))
    (diff,) = state.differences(recorded, state.read_state({"runtimes": [item]}))
    assert diff["kind"] == "runtimes" and f"{config} lost the nvidia runtime" in diff["item"]


def test_a_runtimes_item_from_the_record_names_only_an_engines_own_folder():
    assert state.runtime_item("docker:/etc/docker/daemon.json") == ("docker", "/etc/docker/daemon.json")
    for bad in ("docker:/etc/shadow", "docker:/etc/docker/../shadow", "rkt:/etc/rkt/x", "nonsense"):
        assert state.runtime_item(bad) is None
