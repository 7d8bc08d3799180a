"""Verification verdicts on every real captured tool output in tests/data/fixtures.

Each fixture file has one entry below: the reader that takes it, the profile it is judged
against (a built-in with the few changes that make it describe the captured machine, or
deliberately not), and the verdict with the check that decides it. A new fixture without
an entry fails test_every_fixture_has_a_verdict.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from provisioner import profiles
from provisioner.judge import verify
from provisioner.parsers import nccl_tests
from provisioner.parsers import dcgm
from provisioner.parsers import nvidia_smi
from provisioner.profiles.models import Profile
from provisioner.profiles import deep_merge


def profile(base: str, **changes) -> Profile:
    data = deep_merge(profiles.as_dict(profiles.load(base).profile), changes)
    data["fabric_manager"]["version"] = None
    if "default" not in changes.get("cuda", {}):
        data["cuda"]["default"] = None
    return Profile.model_validate(data)


def gpus(count, model, memory=None, **hardware):
    return {"gpu": {"count": count, "model": model, "memory_gib": memory, **hardware.pop("gpu", {})}, **hardware}


H100_1 = profile("h100-train", hardware=gpus(1, "H100 80GB HBM3", 80), driver={"branch": 590, "version": "590.48.01"})
H100_1_IDLE = profile("h100-train", hardware=gpus(1, "H100 80GB HBM3", 80), driver={"branch": 590, "version": "590.48.01"},
                      verify={"require_idle_gpus": True})
H200_1 = profile("h100-train", hardware=gpus(1, "H200", 141), driver={"branch": 590, "version": "590.48.01"})
L40S_1 = profile("l40s-infer", hardware=gpus(1, "L40S", 48), driver={"branch": 595, "version": "595.80"})
RTX4090 = profile("rtx4090-dev", driver={"branch": 595, "version": "595.71.05"})
B200_8 = profile("h100-train", hardware=gpus(8, "B200", 180), driver={"branch": 580, "version": "580.95.05"},
                 cuda={"toolkits": ["12.8"]})
T4 = profile("t4-infer", driver={"branch": 535, "version": "535.86.10"}, cuda={"toolkits": ["12.2"]})
A5000_2 = profile("rtx4090-dev", hardware=gpus(2, "RTX A5000", 24), driver={"branch": 590, "version": "590.44.01"})
V100S_8 = profile("h100-train", hardware=gpus(8, "V100S-PCIE-32GB", 32, interconnect="pcie"),
                  driver={"branch": 460, "version": "460.73.01"}, cuda={"toolkits": ["11.2"]})
A100_MIG = profile("a100-train", hardware=gpus(1, "A100-SXM4-80GB", 80, gpu={"mig": True}),
                   driver={"branch": 535, "version": "535.54.03"}, verify={"require_persistence_mode": False})
A10G = profile("l40s-infer", hardware=gpus(1, "A10G", 24), driver={"branch": 515, "version": "515.105.01"},
               cuda={"toolkits": ["11.7"]})
RTX3090 = profile("rtx4090-dev", hardware=gpus(1, "RTX 3090", 24), driver={"branch": 525, "version": "525.147.05"},
                  cuda={"toolkits": ["12.0"]})
QUADRO = profile("rtx4090-dev", hardware=gpus(1, "Quadro RTX 6000", 24))
A100_40_8 = profile("a100-train", hardware=gpus(8, "A100-SXM4-40GB", 40), verify={"nccl_min_busbw_gbps": 200})
RTX4090_6 = profile("rtx4090-dev", hardware=gpus(6, "RTX 4090", 24), verify={"nccl_min_busbw_gbps": 40})
H100_8_SAMPLED = profile("h100-train", dcgm={"exporter": {"collectors": [
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_POWER_USAGE"]}})
B300_8 = profile("h100-train", hardware=gpus(8, "B300", 270))
H100 = profiles.load("h100-train").profile
L40S_INFER = profiles.load("l40s-infer").profile
T4_INFER = profiles.load("t4-infer").profile
A100_TRAIN = profiles.load("a100-train").profile

GPUS, SMI_ERROR, PROCESSES, TOPO, NVLINK, NCCL, METRICS, DIAG, DISCOVERY, CMD = (
    "gpus", "smi-error", "processes", "topo", "nvlink", "nccl", "metrics", "diag", "discovery", "cmd")

# fixture path: (reader, profile, verdict of the deciding check, deciding check, text in its detail)
VERDICTS = {
    # nvidia-smi --query-gpu CSV
    "nvidia-smi/csv/query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.csv": (GPUS, H100_1, "pass", None, None),
    "nvidia-smi/csv/query-gpu__h100-80gb-hbm3__590.48.01__load__nvidia-gpu-exporter.csv": (GPUS, H100_1, "pass", None, None),
    "nvidia-smi/csv/query-gpu__h100-80gb-hbm3-mig__590.48.01__idle__nvidia-gpu-exporter.csv": (GPUS, H100_1, "fail", "mig", "differs from the profile (off)"),
    "nvidia-smi/csv/query-gpu__h100-80gb-hbm3-mig__590.48.01__load__nvidia-gpu-exporter.csv": (GPUS, H100_1, "fail", "mig", "on 1 GPU"),
    "nvidia-smi/csv/query-gpu__h200__590.48.01__idle__nvidia-gpu-exporter.csv": (GPUS, H200_1, "pass", None, None),
    "nvidia-smi/csv/query-gpu__l40s__595.80__idle__nvidia-gpu-exporter.csv": (GPUS, L40S_1, "fail", "persistence mode", "off on 1 GPU"),
    "nvidia-smi/csv/query-gpu__l40s__595.80__load__nvidia-gpu-exporter.csv": (GPUS, L40S_1, "fail", "persistence mode", "off on 1 GPU"),
    "nvidia-smi/csv/query-gpu__rtx-4080-super__595.71.05__idle__nvidia-gpu-exporter.csv": (GPUS, RTX4090, "fail", "gpu model", "RTX 4080 SUPER is not a RTX 4090"),
    "nvidia-smi/csv/query-gpu__rtx-4080-super__595.71.05__load__nvidia-gpu-exporter.csv": (GPUS, RTX4090, "fail", "gpu model", "is not a RTX 4090"),
    "nvidia-smi/csv/query-compute-apps__h100-80gb-hbm3__590.48.01__load__nvidia-gpu-exporter.csv": (PROCESSES, H100_1_IDLE, "fail", "idle", "3 compute process(es)"),
    # the command lines beside the CSVs: the reader must see exactly the columns they asked for
    **{f"nvidia-smi/csv/{stem}.cmd.txt": (CMD, None, None, None, None) for stem in (
        "query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter", "query-gpu__h100-80gb-hbm3__590.48.01__load__nvidia-gpu-exporter",
        "query-gpu__h100-80gb-hbm3-mig__590.48.01__idle__nvidia-gpu-exporter", "query-gpu__h100-80gb-hbm3-mig__590.48.01__load__nvidia-gpu-exporter",
        "query-gpu__h200__590.48.01__idle__nvidia-gpu-exporter", "query-gpu__l40s__595.80__idle__nvidia-gpu-exporter",
        "query-gpu__l40s__595.80__load__nvidia-gpu-exporter", "query-gpu__rtx-4080-super__595.71.05__idle__nvidia-gpu-exporter",
        "query-gpu__rtx-4080-super__595.71.05__load__nvidia-gpu-exporter", "query-compute-apps__h100-80gb-hbm3__590.48.01__load__nvidia-gpu-exporter")},
    # nvidia-smi failures
    "nvidia-smi/errors/nvidia-smi__no-driver__compute-gpu-installation-issue-33.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "no GPU present, or the NVIDIA driver is not loaded"),
    "nvidia-smi/errors/nvidia-smi__version-mismatch__legacy-one-line__shine-cluster-issue-30.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "version mismatch"),
    "nvidia-smi/errors/nvidia-smi__version-mismatch__nvml-550.144__intel-llvm-issue-17614.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "reboot the host"),
    "nvidia-smi/errors/nvidia-smi__version-mismatch__nvml-570.124__tinygrad-open-gpu-kernel-modules-issue-47.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "version mismatch"),
    "nvidia-smi/errors/nvidia-smi__no-devices-found__open-gpu-kernel-modules-issue-862.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "no devices found"),
    "nvidia-smi/errors/nvidia-smi__device-handle-unknown-error__nvidia-docker-issue-1553.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "GPU lost"),
    "nvidia-smi/errors/nvidia-smi__nvml-unknown-error__in-container__nvidia-container-toolkit-issue-1227.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "device-access or cgroup problem"),
    "nvidia-smi/errors/nvidia-smi__libnvidia-ml-not-found__nvidia-docker-issue-1163.txt": (SMI_ERROR, H100, "fail", "nvidia-smi", "NVML library not found"),
    # nvidia-smi -L
    "nvidia-smi/text/nvidia-smi-L__h100-80gb-hbm3-mig-7x1g.10gb__driver-unstated__cloud-native-docs.txt": (GPUS, H100_1, "fail", "mig", "7 MIG device(s)"),
    "nvidia-smi/text/nvidia-smi-L__h100-80gb-hbm3-mig-mixed__driver-unstated__cloud-native-docs.txt": (GPUS, H100_1, "fail", "mig", "4 MIG device(s)"),
    "nvidia-smi/text/nvidia-smi-L__h100-80gb-hbm3-mig__590.48.01__nvidia-gpu-exporter.txt": (GPUS, H100_1, "fail", "mig", "4 MIG device(s)"),
    "nvidia-smi/text/nvidia-smi-L__h100-80gb-hbm3__590.48.01__nvidia-gpu-exporter.txt": (GPUS, H100_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi-L__h200__590.48.01__nvidia-gpu-exporter.txt": (GPUS, H200_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi-L__l40s__595.80__nvidia-gpu-exporter.txt": (GPUS, L40S_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi-L__rtx-4080-super__595.71.05__nvidia-gpu-exporter.txt": (GPUS, RTX4090, "fail", "gpu model", "is not a RTX 4090"),
    # nvidia-smi -q and --version
    "nvidia-smi/text/nvidia-smi-q__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.txt": (GPUS, H100_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi-version__h100-80gb-hbm3__590.48.01__nvidia-gpu-exporter.txt": (GPUS, H100_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi-version__h200__590.48.01__nvidia-gpu-exporter.txt": (GPUS, H100, "fail", "driver version", "loaded 590.48.01, profile pins 580.159.04"),
    "nvidia-smi/text/nvidia-smi-version__l40s__595.80__nvidia-gpu-exporter.txt": (GPUS, L40S_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi-version__rtx-4080-super__595.71.05__nvidia-gpu-exporter.txt": (GPUS, L40S_INFER, "fail", "driver version", "loaded 595.71.05"),
    # plain nvidia-smi tables
    "nvidia-smi/text/nvidia-smi__8x-b200__580.95.05__modal-gpu-glossary.txt": (GPUS, B200_8, "pass", None, None),
    "nvidia-smi/text/nvidia-smi__8x-h100-80gb-hbm3__550.90.07__modal-gpu-glossary.txt": (GPUS, H100, "fail", "driver version", "loaded 550.90.07, profile pins 580.159.04"),
    "nvidia-smi/text/nvidia-smi__h100-80gb-hbm3-mig__590.48.01__idle__nvidia-gpu-exporter.txt": (GPUS, H100_1, "fail", "mig", "on 1 GPU"),
    "nvidia-smi/text/nvidia-smi__h100-80gb-hbm3-mig__590.48.01__load__nvidia-gpu-exporter.txt": (GPUS, H100_1, "fail", "mig", "on 1 GPU"),
    "nvidia-smi/text/nvidia-smi__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.txt": (GPUS, H100_1_IDLE, "pass", None, None),
    "nvidia-smi/text/nvidia-smi__h100-80gb-hbm3__590.48.01__load__nvidia-gpu-exporter.txt": (GPUS, H100_1_IDLE, "fail", "idle", "3 compute process(es)"),
    "nvidia-smi/text/nvidia-smi__h200__590.48.01__idle__nvidia-gpu-exporter.txt": (GPUS, H200_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi__h200__590.48.01__load__nvidia-gpu-exporter.txt": (GPUS, H200_1, "pass", None, None),
    "nvidia-smi/text/nvidia-smi__l40s__595.80__idle__nvidia-gpu-exporter.txt": (GPUS, L40S_1, "fail", "persistence mode", "off on 1 GPU"),
    "nvidia-smi/text/nvidia-smi__l40s__595.80__load__nvidia-gpu-exporter.txt": (GPUS, L40S_1, "fail", "persistence mode", "off on 1 GPU"),
    "nvidia-smi/text/nvidia-smi__rtx-4080-super__595.71.05__idle__nvidia-gpu-exporter.txt": (GPUS, RTX4090, "fail", "gpu model", "RTX 4080 ... is not a RTX 4090"),
    "nvidia-smi/text/nvidia-smi__rtx-4080-super__595.71.05__load__nvidia-gpu-exporter.txt": (GPUS, RTX4090, "fail", "gpu model", "is not a RTX 4090"),
    "nvidia-smi/text/nvidia-smi__tesla-t4__535.86.10__cloud-native-docs.txt": (GPUS, T4, "pass", None, None),
    # links
    "nvidia-smi/text/nvlink-s__h100-80gb-hbm3__590.48.01__nvidia-gpu-exporter.txt": (NVLINK, H100, "pass", "nvlink links", "18 of 18 links up"),
    "nvidia-smi/text/nvlink-s__h200__590.48.01__nvidia-gpu-exporter.txt": (NVLINK, H100, "pass", "nvlink links", "18 of 18 links up"),
    "nvidia-smi/text/topo-m__8x-b300-sxm6__590.44.01__sglang-issue-26039.txt": (TOPO, B300_8, "pass", "nvlink topology", "28 of 28 GPU pairs"),
    "nvidia-smi/text/topo-m__h100-80gb-hbm3__590.48.01__nvidia-gpu-exporter.txt": (TOPO, H100, "skip", "nvlink topology", "one GPU"),
    "nvidia-smi/text/topo-m__h200__590.48.01__nvidia-gpu-exporter.txt": (TOPO, H100, "skip", "nvlink topology", "one GPU"),
    "nvidia-smi/text/topo-m__l40s__595.80__nvidia-gpu-exporter.txt": (TOPO, L40S_INFER, "skip", "nvlink topology", "interconnect is pcie"),
    # nvidia-smi -q -x
    "nvidia-smi/xml/2x-rtx-a5000__590.44.01__telegraf.xml": (GPUS, A5000_2, "pass", None, None),
    "nvidia-smi/xml/8x-tesla-v100s-pcie-32gb__460.73.01__datakit.xml": (GPUS, V100S_8, "fail", "persistence mode", "off on 8 GPU"),
    "nvidia-smi/xml/a100-sxm4-80gb-mig__535.54.03__telegraf.xml": (GPUS, A100_MIG, "pass", None, None),
    "nvidia-smi/xml/a10g__515.105.01__telegraf.xml": (GPUS, A10G, "fail", "persistence mode", "off on 1 GPU"),
    "nvidia-smi/xml/rtx-3090__525.147.05__telegraf.xml": (GPUS, RTX3090, "pass", None, None),
    "nvidia-smi/xml/tesla-t4__515.105.01__telegraf.xml": (GPUS, T4_INFER, "fail", "driver version", "loaded 515.105.01"),
    # nccl-tests
    "nccl-tests/all_reduce_perf__8x-a100-sxm4-40gb__superbench.log": (NCCL, A100_40_8, "pass", "nccl bandwidth", "235.26 GB/s"),
    "nccl-tests/all_reduce_perf__6x-rtx-4090__tinygrad-p2p-readme.log": (NCCL, RTX4090_6, "fail", "nccl bandwidth", "24.58 GB/s bus bandwidth on 6 GPU(s), floor 40"),
    # DCGM
    "dcgm/dcgm-exporter-metrics__8x-h100-80gb-hbm3__580.105.08__sampled__aicr.prom": (METRICS, H100_8_SAMPLED, "pass", None, None),
    "dcgm/dcgm-exporter-metrics__a100-mig__excerpt__cloud-native-docs.prom": (METRICS, A100_MIG, "fail", "exporter collectors", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    "dcgm/dcgm-exporter-metrics__tesla-t4__460.106.00+470.182.03__datadog.prom": (METRICS, T4_INFER, "fail", "exporter collectors", "not served: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    "dcgm/dcgmi-diag-r1__fail__deepops-readme.txt": (DIAG, None, "fail", "dcgm diag", "Persistence Mode, Environment Variables, Page Retirement, Graphics Processes, Inforom"),
    "dcgm/dcgmi-diag-r1__pass__deepops-readme.txt": (DIAG, None, "pass", "dcgm diag", "9 passed"),
    "dcgm/dcgmi-diag-r2__8x-a100-sxm4-80gb-p4de__535.104.12__awsome-distributed-training.txt": (DIAG, None, "pass", "dcgm diag", "11 passed"),
    "dcgm/dcgmi-diag-r3__8x-h200__570.133.20__ramble.txt": (DIAG, None, "pass", "dcgm diag", "skipped: EUD Test"),
    "dcgm/dcgmi-discovery-l__quadro-rtx-6000__cloud-native-docs.txt": (DISCOVERY, QUADRO, "pass", None, None),
}


def judge(reader: str, p: Profile | None, text: str):
    if reader == GPUS:
        return verify.judge_gpus(p, nvidia_smi.read(text))
    if reader == SMI_ERROR:
        return verify.judge_smi_failure(p, text, 9)
    if reader == PROCESSES:
        report = nvidia_smi.GpuReport("csv", [], processes=nvidia_smi.read_processes_csv(text))
        return [c for c in verify.judge_gpus(p, report) if c.name == "idle"]
    if reader == TOPO:
        return verify.judge_topology(p, nvidia_smi.read_topo(text))
    if reader == NVLINK:
        return verify.judge_nvlink(p, nvidia_smi.read_nvlink_status(text))
    if reader == NCCL:
        return verify.judge_nccl(p, nccl_tests.read(text))
    if reader == METRICS:
        return verify.judge_exporter(p, dcgm.read_metrics(text))
    if reader == DIAG:
        return verify.judge_diag(dcgm.read_diag(text))
    if reader == DISCOVERY:
        return verify.judge_gpus(p, nvidia_smi.GpuReport("discovery", [nvidia_smi.Gpu(n) for n in dcgm.read_discovery(text)]))
    raise AssertionError(reader)


def test_every_fixture_has_a_verdict(fixtures: Path):
    files = {str(p.relative_to(fixtures)) for p in fixtures.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert files == set(VERDICTS)


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_fixture_verdict(fixtures: Path, name: str):
    reader, p, verdict, check, detail = VERDICTS[name]
    text = (fixtures / name).read_text()
    if reader == CMD:  # the CSV beside this command line has exactly the columns it asked for
        fields = text.split("=", 1)[1].split()[0].split(",")
        header = next(csv.reader(io.StringIO((fixtures / name.replace(".cmd.txt", ".csv")).read_text())))
        assert [h.strip().split(" [")[0] for h in header] == [f.replace("gpu_name", "gpu_name") for f in fields]
        return
    checks = judge(reader, p, text)
    assert checks, "no check came out"
    statuses = {c.status for c in checks}
    if verdict == "pass":
        assert "fail" not in statuses, checks
    if check is not None:
        deciding = [c for c in checks if c.name == check]
        assert deciding and deciding[0].status == verdict, checks
        assert detail in deciding[0].detail, deciding[0].detail
    elif verdict == "pass":
        assert "pass" in statuses


def test_gpu_less_host_says_so_and_passes_only_when_no_gpu_is_expected(fixtures: Path):
    text = (fixtures / "nvidia-smi/errors/nvidia-smi__no-driver__compute-gpu-installation-issue-33.txt").read_text()
    smi = {"rc": 9, "stdout": text, "stderr": "", "missing": False}
    lab = verify.judge(profiles.load("debian12-lab").profile, {"nvidia_smi": smi})
    assert [c.status for c in lab] == ["pass"] and "no GPU present" in lab[0].detail
    h100 = verify.judge(H100, {"nvidia_smi": smi})
    assert h100[0].status == "fail" and "no GPU present" in h100[0].detail


def test_missing_nvidia_smi():
    reported = {"nvidia_smi": {"rc": 2, "stdout": "", "stderr": "", "missing": True}}
    assert verify.judge(H100, reported)[0].status == "fail"
    assert verify.judge(profiles.load("debian12-lab").profile, reported)[0].status == "pass"


def test_h100_capture_in_full_judge_with_torch_and_exporter(fixtures: Path):
    reported = {
        "nvidia_smi": {"rc": 0, "stdout": (fixtures / "nvidia-smi/csv/query-gpu__h100-80gb-hbm3__590.48.01__idle__nvidia-gpu-exporter.csv").read_text()},
        "torch": {"rc": 0, "stdout": '{"version": "2.11.0+cu126", "cuda_available": true, "device_count": 1}'},
        "exporter": {"expected": True, "unit_state": "active", "body": ""},
        "fabric_manager": {"expected": True, "unit_state": "inactive", "installed_version": "590.48.01-1"},
    }
    checks = {c.name: c for c in verify.judge(H100_1, reported)}
    assert checks["torch version"].status == "pass" and checks["torch gpus"].status == "pass"
    assert checks["exporter metrics"].status == "fail" and "does not answer" in checks["exporter metrics"].detail
    assert checks["fabric manager"].status == "fail" and "inactive" in checks["fabric manager"].detail
    assert checks["nccl bandwidth"].status == "skip"


def test_torch_on_a_lab_host():
    lab = profiles.load("debian12-lab").profile
    ok = verify.judge_torch(lab, {"rc": 0, "stdout": '{"version": "2.13.0+cpu", "cuda_available": false, "device_count": 0}'})
    assert [c.status for c in ok] == ["pass", "pass"] and "no GPU present" in ok[1].detail
    broken = verify.judge_torch(lab, {"rc": 1, "stdout": "", "stderr": "ModuleNotFoundError: No module named 'torch'"})
    assert broken[0].status == "fail" and "No module named 'torch'" in broken[0].detail


def test_torch_without_an_environment_on_the_host():
    lab = profiles.load("debian12-lab").profile
    checks = verify.judge_torch(lab, {"ran": False, "rc": -1, "stderr": "no python_env local fact"})
    assert checks[0].status == "fail" and "run provision up" in checks[0].detail


NVCC_11_8 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2022 NVIDIA Corporation
Built on Wed_Sep_21_10:33:58_PDT_2022
Cuda compilation tools, release 11.8, V11.8.89
Build cuda_11.8.r11.8/compiler.31833905_0
"""


def test_nvcc_release_is_judged_against_the_default_toolkit():
    lab = profiles.load("debian12-lab").profile
    assert [c.status for c in verify.judge_cuda_toolkit(lab, {"rc": 0, "stdout": NVCC_11_8})] == ["pass"]
    wrong = verify.judge_cuda_toolkit(H100, {"rc": 0, "stdout": NVCC_11_8})
    assert wrong[0].status == "fail" and "release 11.8 (profile: 12.2)" in wrong[0].detail
    absent = verify.judge_cuda_toolkit(lab, {"rc": 127, "stdout": ""})
    assert absent[0].status == "fail" and "run provision up" in absent[0].detail
    driver_only = lab.model_copy(update={"cuda": lab.cuda.model_copy(update={"enabled": False})})
    assert verify.judge_cuda_toolkit(driver_only, {"rc": 127, "stdout": ""})[0].status == "skip"


def test_services_that_wait_for_the_driver_module_are_not_faults_of_their_own():
    def names(checks):
        return {c.name: c for c in checks}

    fm_inactive = {"units": {"fabric_manager": {"LoadState": "loaded", "ActiveState": "inactive", "UnitFileState": "enabled"}},
                   "fabric_manager_version": "580.95.05-1"}
    # A GPU-less host (the lab): nothing to load, so fabric manager and the exporter say why they wait.
    lab = profile("h100-train", hardware={"gpu": {"count": 0}})
    checks = names(verify.judge(lab, {"probe": {**fm_inactive, "module_version": ""},
                                      "exporter": {"expected": True, "unit_state": "inactive", "body": ""}}))
    assert checks["driver module"].status == "pass"
    assert checks["fabric manager"].status == "skip" and "no GPU here" in checks["fabric manager"].detail
    assert checks["exporter metrics"].status == "skip" and "no NVIDIA module loaded" in checks["exporter metrics"].detail
    # A GPU host before its reboot: the driver module check fails with the fix; the services wait for it.
    checks = names(verify.judge(H100, {"probe": {**fm_inactive, "module_version": ""},
                                       "exporter": {"expected": True, "unit_state": "inactive", "body": ""}}))
    assert checks["driver module"].status == "fail" and "reboot" in checks["driver module"].detail
    assert checks["fabric manager"].status == "skip" and "reboot needed" in checks["fabric manager"].detail
    # With the module loaded, an inactive fabric manager is a fault again.
    checks = names(verify.judge(H100, {"probe": {**fm_inactive, "module_version": "580.95.05"}}))
    assert checks["fabric manager"].status == "fail" and "inactive" in checks["fabric manager"].detail
