"""The node's own check (module_utils/state_metrics.py, run by provision-state.timer): its
nvidia-smi judging on real captures, the textfile it writes (read back with
prometheus_client's parser), and the installed layout running under `python3 -I -S`
(no site-packages, so no Ansible) on a real state record."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpu_provisioner.node.plugins.module_utils import state_metrics as sm

from .conftest import COLLECTION, ROLES

UTILS = COLLECTION / "plugins" / "module_utils"
H200 = "nvidia-smi/csv/query-gpu__h200__590.48.01__idle__nvidia-gpu-exporter.csv"
RTX = "nvidia-smi/csv/query-gpu__rtx-4080-super__595.71.05__idle__nvidia-gpu-exporter.csv"
NO_DRIVER = "nvidia-smi/errors/nvidia-smi__no-driver__compute-gpu-installation-issue-33.txt"


def _checks(found: list[dict]) -> dict[str, tuple[bool, str]]:
    return {c["check"]: (c["ok"], c["detail"]) for c in found}


def test_a_real_h200_capture_passes_the_checks_the_profile_expects(fixtures: Path):
    smi = {"rc": 0, "stdout": (fixtures / H200).read_text(), "stderr": ""}
    got = _checks(sm.gpu_checks(smi, {"gpu_count": 1, "driver_version": "590.48.01", "require_persistence": True,
                                      "ecc_uncorrectable_max": 0}))
    assert set(got) == {"nvidia-smi", "gpu count", "driver version", "persistence mode", "ecc errors"}
    assert all(ok for ok, _ in got.values()), got
    wrong = _checks(sm.gpu_checks(smi, {"gpu_count": 8, "driver_version": "580.95.05", "require_persistence": True}))
    assert wrong["gpu count"] == (False, "1 GPU(s), profile expects 8")
    assert wrong["driver version"] == (False, "loaded 590.48.01, profile pins 580.95.05")


def test_a_consumer_gpu_without_ecc_and_persistence_is_judged_for_what_it_reports(fixtures: Path):
    smi = {"rc": 0, "stdout": (fixtures / RTX).read_text(), "stderr": ""}
    got = _checks(sm.gpu_checks(smi, {"gpu_count": 1, "driver_version": "595.71.05", "require_persistence": True}))
    assert got["persistence mode"] == (False, "off on GPU(s) 0")
    assert "ecc errors" not in got, "[N/A] ECC counters are not judged, never passed"


def test_a_host_without_a_gpu_says_nvidia_smi_could_not_run_and_passes_nothing(fixtures: Path):
    # nvidia-smi on a GPU-less host: the message on stdout, exit 9 (measured on the lab hosts).
    smi = {"rc": 9, "stdout": (fixtures / NO_DRIVER).read_text(), "stderr": ""}
    got = sm.gpu_checks(smi, {"gpu_count": 0})
    assert [c["check"] for c in got] == ["nvidia-smi"]
    assert got[0]["ok"] is False
    assert got[0]["detail"].startswith("nvidia-smi could not run (exit 9): NVIDIA-SMI has failed because it couldn't")
    assert sm.gpu_checks({"missing": True, "rc": 127}, {})[0]["detail"] == "nvidia-smi could not run: it is not installed"
    assert not sm.gpu_checks({"rc": 0, "stdout": "garbage\n"}, {})[0]["ok"]


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_the_textfile_has_the_documented_families_and_bounded_cardinality():
    diffs = [{"kind": "files", "item": f'file /etc/x{i} "changed"', "recorded": "a", "now": "b"} for i in range(60)]
    diffs.append({"kind": "held_packages", "item": "hold removed: nvidia-smi", "recorded": "held", "now": "not held"})
    state = {"recorded": True, "profile": "p", "profile_sha256": "ab" * 32, "differences": diffs, "dpkg_audit": ""}
    checks = [{"check": "nvidia-smi", "ok": False, "detail": "could not run"}]
    text = sm.textfile(state, checks, version="0.1.0", now=1700000000.5)
    fam = _families(text)
    assert {s.labels["kind"]: s.value for s in fam["gpu_provisioner_drift_items"]} == {
        "held_packages": 1, "packages": 0, "files": 60, "units": 0, "python_envs": 0, "runtimes": 0, "dpkg": 0,
        "record": 0}
    detail = fam["gpu_provisioner_drift_items_detail"]
    assert len(detail) == sm.MAX_DETAIL
    assert detail[0].labels == {"kind": "files", "item": 'file /etc/x0 "changed"'}  # quotes escaped and read back
    assert fam["gpu_provisioner_drift_items_detail_dropped"][0].value == 61 - sm.MAX_DETAIL
    assert [(s.labels, s.value) for s in fam["gpu_provisioner_check_status"]] == [({"check": "nvidia-smi"}, 0)]
    assert fam["gpu_provisioner_info"][0].labels == {"profile": "p", "profile_sha256": "ab" * 32, "version": "0.1.0"}
    assert fam["gpu_provisioner_last_run_timestamp_seconds"][0].value == 1700000000.5
    assert fam["gpu_provisioner_last_run_success"][0].value == 1

    never = _families(sm.textfile({"recorded": False, "differences": [], "dpkg_audit": ""}, [], version="v", now=1))
    assert {s.labels["kind"]: s.value for s in never["gpu_provisioner_drift_items"]}["record"] == 1
    failed = _families(sm.textfile(None, [], version="v", now=1))
    assert failed["gpu_provisioner_last_run_success"][0].value == 0
    assert "gpu_provisioner_drift_items" not in failed, "no drift count is claimed when the state was not read"


def _role_vars() -> dict:
    return yaml.safe_load((ROLES / "state_timer" / "vars" / "main.yml").read_text())


def _install(root: Path) -> Path:
    """The layout the role installs: the command, and the module_utils it copies, under
    the same import path."""
    code = root / "ansible_collections" / "gpu_provisioner" / "node" / "plugins" / "module_utils"
    code.mkdir(parents=True)
    for name in _role_vars()["state_timer_code_files"]:
        shutil.copy(UTILS / name, code / name)
    script = root / "provision-state"
    shutil.copy(ROLES / "state_timer" / "files" / "provision-state", script)
    return script


def test_the_role_installs_every_module_util_the_checker_imports():
    import ast

    def optional(tree: ast.AST) -> set[int]:
        """Imports in a try whose except catches ImportError: a fallback the checker runs without."""
        return {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                and any(ast.unparse(h.type or ast.Name("")) == "ImportError" for h in t.handlers)
                for n in ast.walk(t) if isinstance(n, (ast.Import, ast.ImportFrom))}

    needed, todo = set(), ["state_metrics.py"]
    while todo:
        name = todo.pop()
        needed.add(name)
        tree = ast.parse((UTILS / name).read_text())
        guarded = optional(tree)
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible_collections."):
                todo.append(node.module.rsplit(".", 1)[1] + ".py")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] not in sys.stdlib_module_names \
                    and node.module != "__future__":
                pytest.fail(f"{name} imports {node.module}, which is not in the standard library")
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names), (name, node.names)
    assert needed <= set(_role_vars()["state_timer_code_files"])
    # and the module provision check runs uses the same comparison
    module = (COLLECTION / "plugins" / "modules" / "provisioner_state.py").read_text()
    assert "from ansible_collections.gpu_provisioner.node.plugins.module_utils.state import" in module
    assert "def differences" not in module


def test_the_installed_checker_runs_without_ansible_on_a_real_record(tmp_path: Path):
    script = _install(tmp_path / "lib")
    managed = tmp_path / "managed.conf"
    managed.write_text("setting = 1\n")
    # A record as site.yml writes it, made with the same module_utils.
    from ansible_collections.gpu_provisioner.node.plugins.module_utils import state

    record = tmp_path / "provisioner.fact"
    record.write_text(json.dumps({"profile": "lab", "profile_sha256": "0" * 64, "state": state.read_state(
        {"files": [str(managed)], "packages": ["dpkg"]})}))
    textfile_dir = tmp_path / "textfile"
    textfile_dir.mkdir()
    config = tmp_path / "provision-state.json"
    config.write_text(json.dumps({"record": str(record), "textfile": str(textfile_dir / "gpu_provisioner.prom"),
                                  "status": str(tmp_path / "status.json"), "version": "0.1.0", "gpu_count": 0}))

    def run() -> dict:
        r = subprocess.run(["/usr/bin/python3", "-I", "-S", str(script), "--config", str(config)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return _families((textfile_dir / "gpu_provisioner.prom").read_text())

    # -S: no site-packages, so Ansible cannot be what runs here
    assert subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", "import ansible"], capture_output=True).returncode != 0
    clean = run()
    assert sum(s.value for s in clean["gpu_provisioner_drift_items"]) == 0
    managed.write_text("setting = 2\n")
    moved = run()
    assert {s.labels["kind"]: s.value for s in moved["gpu_provisioner_drift_items"]}["files"] == 1
    assert moved["gpu_provisioner_drift_items_detail"][0].labels["item"] == f"file {managed} changed"
    assert moved["gpu_provisioner_info"][0].labels["profile"] == "lab"
    if shutil.which("nvidia-smi") is None:  # this machine: no GPU, no driver
        assert [(s.labels["check"], s.value) for s in moved["gpu_provisioner_check_status"]] == [("nvidia-smi", 0)]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["drift"] == [{"kind": "files", "item": f"file {managed} changed"}]
    assert list(textfile_dir.iterdir()) == [textfile_dir / "gpu_provisioner.prom"], "no temporary file left behind"
