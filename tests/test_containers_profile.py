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


SPEC_999 = Path(__file__).parent / "data" / "containers" / \
    "cdi-spec__nvidia-ctk-generate-test-default__999.88.77__nvidia-container-toolkit.yaml"


def test_containerd_and_podman_validate_where_their_host_side_can_work(tmp_path: Path):
    for runtime in ("containerd", "podman"):
        path = tmp_path / f"{runtime}.yml"
        path.write_text(f"extends: debian12-lab\nname: p\ndescription: d\n"
                        f"containers: {{runtime: {runtime}, toolkit_version: '1.17.8-1'}}\n")
        assert profiles.load(str(path)).profile.containers.runtime == runtime
    # Ubuntu 22.04's Python 3.10 has no tomllib to merge config.toml with: refused, with the fix.
    path = tmp_path / "jammy.yml"
    path.write_text("extends: h100-train\nname: p\ndescription: d\n"
                    "containers: {runtime: containerd, toolkit_version: '1.17.8-1'}\n")
    with pytest.raises(ProvisionError, match="not supported on ubuntu-22.04") as exc:
        profiles.load(str(path))
    assert "ubuntu-24.04 or debian-12" in exc.value.fix


def test_the_spec_names_its_driver_by_nvidia_ctks_hook_or_its_libcuda():
    # NVIDIA's own expected spec (a public test expectation): the hook's --host-driver-version.
    assert state.spec_driver(SPEC_999.read_text()) == "999.88.77"
    # Without the hook (older nvidia-ctk, the lab's stub): the mounted libcuda.so.<version>.
    without_hook = "\n".join(ln for ln in SPEC_999.read_text().splitlines() if "host-driver-version" not in ln)
    assert state.spec_driver(without_hook) == "999.88.77"
    assert state.spec_driver("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n") is None


def test_the_installed_driver_is_the_version_libcuda_so_1_resolves_to(tmp_path: Path):
    lib = tmp_path / "nvidia" / "current" / "libcuda.so.535.309.01"   # Debian 12's layout (a lab host's)
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    link = tmp_path / "libcuda.so.1"
    link.symlink_to(lib)
    assert state.installed_driver((str(tmp_path / "absent.so.1"), str(link))) == "535.309.01"
    lib.unlink()  # a dangling link: the driver is gone
    assert state.installed_driver((str(link),)) is None


def test_a_cdi_spec_for_another_driver_is_drift_named_with_both_versions(tmp_path: Path, monkeypatch):
    spec = tmp_path / "nvidia.yaml"
    lib = tmp_path / "libcuda.so.999.88.77"
    lib.write_bytes(b"")
    (tmp_path / "libcuda.so.1").symlink_to(lib)
    monkeypatch.setattr(state, "LIBCUDA_LINKS", (str(tmp_path / "libcuda.so.1"),))
    monkeypatch.setattr(state, "cdi_item", lambda i: str(spec) if i == f"cdi:{spec}" else None)
    item = f"cdi:{spec}"
    spec.write_text(SPEC_999.read_text())
    recorded = state.read_state({"runtimes": [item]})
    assert recorded["runtimes"] == {item: {"spec": "999.88.77", "driver": "999.88.77"}}
    assert state.differences(recorded, recorded) == []
    # The driver rolled (libcuda.so.1 now resolves to another version); the spec did not follow.
    new = tmp_path / "libcuda.so.1000.1.2"
    new.write_bytes(b"")
    (tmp_path / "libcuda.so.1").unlink()
    (tmp_path / "libcuda.so.1").symlink_to(new)
    (diff,) = state.differences(recorded, state.read_state({"runtimes": [item]}))
    assert diff["kind"] == "runtimes"
    assert diff["item"] == f"{spec} is for driver 999.88.77, the installed driver is 1000.1.2"
    # No spec (a GPU-less host) or no driver library: nothing to compare, no drift.
    spec.unlink()
    assert state.differences(recorded, state.read_state({"runtimes": [item]})) == []


def test_a_cdi_item_names_only_the_folders_engines_read_specs_from_and_is_not_retired_as_a_registration():
    assert state.cdi_item("cdi:/etc/cdi/nvidia.yaml") == "/etc/cdi/nvidia.yaml"
    for bad in ("cdi:/etc/shadow", "cdi:/etc/cdi/../shadow", "docker:/etc/cdi/nvidia.yaml", "cdi"):
        assert state.cdi_item(bad) is None
    old = {"state": {"runtimes": {"cdi:/etc/cdi/nvidia.yaml": {"spec": "1", "driver": "1"},
                                  "containerd:/etc/containerd/config.toml": True}}}
    gone = state.leftovers(old, {})
    assert gone["runtimes"] == ["containerd:/etc/containerd/config.toml"]   # the spec goes as a file
