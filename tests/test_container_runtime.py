"""The nvidia runtime merged into Docker's daemon.json and containerd's config.toml, and taken
out again (issue 29, module_utils/container_runtime.py): a user's settings kept, a second merge
changes nothing, removal takes out only what the merge put in.

The inputs are hand-made, labelled as such: the daemon.json keys are the ones dockerd needs to
start in a lab host (issue 29's measurement) and double as a user's settings; the config.toml
files have the shape `containerd config default` prints (version 2 and 3 plugin names from
NVIDIA/nvidia-container-toolkit pkg/config/engine/containerd/containerd.go)."""

from __future__ import annotations

import json
import tomllib

import pytest

from ansible_collections.gpu_provisioner.node.plugins.module_utils import container_runtime as cr

LAB_DAEMON = {"iptables": False, "ip-masq": False, "bridge": "none", "storage-driver": "vfs"}
NVIDIA = {"path": "nvidia-container-runtime", "args": []}


# ------------------------------------------------------------------------------- Docker

def test_docker_merge_keeps_every_other_key_and_is_stable():
    text = json.dumps({**LAB_DAEMON, "runtimes": {"crun": {"path": "/usr/bin/crun"}}})
    merged, changed = cr.docker_merge(text)
    assert changed
    data = json.loads(merged)
    assert data == {**LAB_DAEMON, "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": NVIDIA}}
    assert list(data)[:4] == list(LAB_DAEMON)  # the user's order too
    assert merged.startswith('{\n    "iptables": false')  # written as nvidia-ctk writes it (4-space indent)
    assert cr.docker_merge(merged) == (merged, False)
    assert cr.docker_state(merged) == {"registered": True, "path": "nvidia-container-runtime", "default": False, "cdi": False}


def test_docker_unchanged_data_is_not_rewritten_whatever_its_formatting():
    text = '{"runtimes":{"nvidia":{"path":"nvidia-container-runtime","args":[]}},"bridge":"none"}'
    assert cr.docker_merge(text) == (text, False)


def test_docker_default_and_cdi_on_then_default_off():
    merged, _ = cr.docker_merge(json.dumps(LAB_DAEMON), default=True, cdi=True)
    data = json.loads(merged)
    assert data["default-runtime"] == "nvidia" and data["features"] == {"cdi": True}
    off, changed = cr.docker_merge(merged, default=False, cdi=True)
    assert changed and "default-runtime" not in json.loads(off)
    # A default the user chose that is not nvidia is theirs: kept.
    theirs, _ = cr.docker_merge(json.dumps({"default-runtime": "crun"}))
    assert json.loads(theirs)["default-runtime"] == "crun"


def test_docker_no_file_and_a_replaced_file():
    created, changed = cr.docker_merge(None)
    assert changed and json.loads(created) == {"runtimes": {"nvidia": NVIDIA}}
    # A package upgrade that replaces daemon.json with one lacking the runtime: drift, then repaired.
    replaced = json.dumps(LAB_DAEMON)
    assert cr.docker_state(replaced)["registered"] is False
    repaired, changed = cr.docker_merge(replaced)
    assert changed and cr.docker_state(repaired)["registered"]


def test_docker_a_different_nvidia_entry_is_replaced_by_ours():
    old = json.dumps({"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}})
    assert cr.docker_state(old) == {"registered": False, "path": "/usr/bin/nvidia-container-runtime",
                                    "default": False, "cdi": False}
    merged, changed = cr.docker_merge(old)
    assert changed and json.loads(merged)["runtimes"]["nvidia"] == NVIDIA


def test_docker_remove_takes_out_only_ours():
    merged, _ = cr.docker_merge(json.dumps(LAB_DAEMON), default=True, cdi=True)
    removed, changed = cr.docker_remove(merged)
    assert changed and json.loads(removed) == {**LAB_DAEMON, "features": {"cdi": True}}
    assert cr.docker_remove(removed) == (removed, False)
    keep = json.dumps({"runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": NVIDIA}})
    assert json.loads(cr.docker_remove(keep)[0]) == {"runtimes": {"crun": {"path": "/usr/bin/crun"}}}
    # A file holding only what we wrote: deleted (None), nothing of the user's was in it.
    assert cr.docker_remove(cr.docker_merge(None)[0]) == (None, True)
    assert cr.docker_remove(None) == (None, False)


@pytest.mark.parametrize("text, words", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"runtimes": ["nvidia"]}', '"runtimes" is not an object'),
    ('{"features": true}', '"features" is not an object'),
])
def test_docker_bad_files_are_refused_with_the_fix(text, words):
    with pytest.raises(cr.ConfigError, match=words):
        cr.docker_merge(text)


# --------------------------------------------------------------------------- containerd

# Hand-made in the shape of `containerd config default` (containerd 1.6/1.7, version 2), with
# a user's comment and systemd cgroups on runc: the nvidia runtime must inherit SystemdCgroup.
V2 = '''version = 2
# my comment, kept
root = "/var/lib/containerd"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.6"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          privileged_without_host_devices = false
          pod_annotations = []
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
            BinaryName = ""
'''

V3 = '''version = 3

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = false
'''


def _nvidia(text: str, plugin: str) -> dict:
    return tomllib.loads(text)["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]


def test_containerd_v2_merge_appends_one_block_copying_runcs_settings():
    merged, changed = cr.containerd_merge(V2)
    assert changed and merged.startswith(V2)  # the user's bytes, untouched
    assert _nvidia(merged, "io.containerd.grpc.v1.cri") == {
        "runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": False, "pod_annotations": [],
        "options": {"SystemdCgroup": True, "BinaryName": "/usr/bin/nvidia-container-runtime"}}
    data = tomllib.loads(merged)
    assert data["root"] == "/var/lib/containerd"
    assert data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "runc"
    assert cr.containerd_merge(merged) == (merged, False)
    assert cr.containerd_state(merged) == {"registered": True, "managed": True, "version": 2,
                                           "binary": "/usr/bin/nvidia-container-runtime"}
    assert cr.containerd_remove(merged) == (V2, True)
    assert cr.containerd_remove(V2) == (V2, False)
    assert cr.containerd_state(V2)["registered"] is False


def test_containerd_v3_uses_the_cri_runtime_plugin():
    merged, changed = cr.containerd_merge(V3)
    assert changed
    assert _nvidia(merged, "io.containerd.cri.v1.runtime")["options"] == {
        "SystemdCgroup": False, "BinaryName": "/usr/bin/nvidia-container-runtime"}
    assert cr.containerd_remove(merged)[0] == V3


def test_containerd_no_file_or_comments_only_gets_version_2_in_the_block():
    merged, changed = cr.containerd_merge(None)
    assert changed and tomllib.loads(merged)["version"] == 2
    assert _nvidia(merged, "io.containerd.grpc.v1.cri") == {
        "runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}
    assert cr.containerd_remove(merged) == ("", True)
    comments = "# disabled_plugins = []\n"
    assert cr.containerd_remove(cr.containerd_merge(comments)[0])[0] == comments


def test_containerd_a_replaced_file_loses_the_block_and_merge_puts_it_back():
    merged, _ = cr.containerd_merge(V2)
    assert cr.containerd_state(V2) == {"registered": False, "managed": False, "version": 2, "binary": None}
    assert cr.containerd_merge(V2)[0] == merged


def test_containerd_strings_are_escaped_as_toml_reads_them():
    odd = V3.replace('runtime_type = "io.containerd.runc.v2"',
                     'runtime_type = "io.containerd.runc.v2"\n    runtime_path = "a\\"b\\\\c\\u007f\\t\u00e9"')
    merged, _ = cr.containerd_merge(odd)
    assert _nvidia(merged, "io.containerd.cri.v1.runtime")["runtime_path"] == 'a"b\\c\x7f\t\u00e9'


def test_containerd_an_nvidia_runtime_of_the_users_own():
    theirs = V2 + ('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                   '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
                   '    BinaryName = "/usr/bin/nvidia-container-runtime"\n')
    assert cr.containerd_merge(theirs) == (theirs, False)  # nvidia-ctk's, in effect ours: left as it is
    assert cr.containerd_state(theirs)["managed"] is False
    assert cr.containerd_remove(theirs) == (theirs, False)  # not ours to take out
    other = theirs.replace('"/usr/bin/nvidia-container-runtime"', '"/opt/nvidia/runtime"')
    with pytest.raises(cr.ConfigError, match="already defines the nvidia runtime with BinaryName '/opt/nvidia/runtime'"):
        cr.containerd_merge(other)


@pytest.mark.parametrize("text, words", [
    ('[plugins.cri]\n  x = 1\n', "version 1 is not supported"),
    ("version = 4\n", "version 4 is not supported"),
    ("version = = 2\n", "not valid TOML"),
    (V2 + cr.BEGIN + "\n", "without its end line"),
    # The CRI plugin's containerd table as an inline table: a separate table cannot extend it.
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  containerd = {default_runtime_name = "runc"}\n',
     "not valid TOML"),
])
def test_containerd_bad_files_are_refused_with_the_fix(text, words):
    with pytest.raises(cr.ConfigError, match=words):
        cr.containerd_merge(text)
