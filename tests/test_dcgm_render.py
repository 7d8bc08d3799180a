"""dcgm_exporter: unit file, collectors CSV and package choice a profile renders, without a host.

molecule/python_env checks the same files on a lab host (systemd-analyze verify, the
unit's effective settings, the user); DCGM itself and the real exporter binary cannot
run here (no NVIDIA repository, no GPU).
"""

from __future__ import annotations

import configparser

from .rolerender import RoleRender, profile_vars

BINARY = {"dcgm_exporter_binary": "/srv/mirror/dcgm-exporter", "dcgm_exporter_binary_sha256": "b" * 64}


def _unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#",))
    parser.optionxform = str
    parser.read_string(text)
    return parser


def test_h100_runs_nvidias_packaged_exporter_under_a_hardened_unit_on_loopback():
    r = RoleRender("dcgm_exporter", profile_vars("h100-train"))
    assert r.var("dcgm_exporter_packaged") is True
    assert r.var("dcgm_exporter_package_pins") == {"datacenter-gpu-manager-exporter": "4.8.1-1"}
    unit = _unit(r.template("dcgm-exporter.service.j2"))
    service = unit["Service"]
    assert service["ExecStart"] == (
        "/usr/bin/dcgm-exporter --address 127.0.0.1:9400 --collectors /etc/dcgm-exporter/collectors.csv"
        " --remote-hostengine-info localhost:5555")
    assert service["User"] == service["Group"] == "dcgm-exporter"
    assert service["NoNewPrivileges"] == "yes" and service["Restart"] == "on-failure"
    assert service["ProtectSystem"] == "strict" and service["CapabilityBoundingSet"] == ""
    assert unit["Unit"]["Requires"] == "nvidia-dcgm.service"
    assert "nvidia-dcgm.service" in unit["Unit"]["After"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_a_binary_is_the_fallback_where_there_is_no_package():
    r = RoleRender("dcgm_exporter", {**profile_vars("h100-train"), **BINARY, "dcgm_exporter_package_pins": {}})
    assert r.var("dcgm_exporter_packaged") is False
    assert r.var("dcgm_exporter_exec_start").startswith("/usr/local/bin/dcgm-exporter --address 127.0.0.1:9400 ")


def test_collectors_csv_lists_the_profiles_fields_with_types():
    r = RoleRender("dcgm_exporter", {**profile_vars("h100-train"), **BINARY})
    rows = [line.split(", ", 2) for line in r.template("collectors.csv.j2").splitlines()
            if line and not line.startswith("#")]
    assert [row[0] for row in rows] == profile_vars("h100-train")["dcgm_exporter_collectors"]
    types = {row[0]: row[1] for row in rows}
    assert types["DCGM_FI_DEV_GPU_UTIL"] == "gauge"
    assert types["DCGM_FI_DEV_XID_ERRORS"] == "gauge"
    assert types["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == "counter"
    assert types["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "counter"
    assert all(len(row) == 3 and row[2] for row in rows)


def test_listen_address_is_what_the_profile_says():
    base = {**profile_vars("h100-train"), **BINARY}
    assert "--address 0.0.0.0:9500" in RoleRender(
        "dcgm_exporter", {**base, "dcgm_exporter_listen_address": "0.0.0.0", "dcgm_exporter_port": 9500}
    ).var("dcgm_exporter_exec_start")
    assert "--address '[fd00::5]:9400'" in RoleRender(
        "dcgm_exporter", {**base, "dcgm_exporter_listen_address": "fd00::5"}).var("dcgm_exporter_exec_start")


def test_dcgm_follows_the_drivers_cuda_not_the_cuda_11_toolkit():
    # l40s-infer installs the 11.8 toolkit on R580, whose driver brings CUDA 13: DCGM's
    # -cudaNN build must match the driver (its libcuda), not the toolkit. The proprietary pair
    # carries the profiling module the DCGM_FI_PROF_* metrics need (issue 27).
    assert set(RoleRender("dcgm_exporter", profile_vars("l40s-infer")).var("dcgm_exporter_dcgm_pins")) == {
        "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13",
        "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda13"}


def test_debian12_lab_installs_no_dcgm_and_no_exporter():
    rendered = profile_vars("debian12-lab")
    assert rendered["dcgm_exporter_install_dcgm"] is False
    assert rendered["dcgm_exporter_enabled"] is False
    assert rendered["gpu_verify_dcgm_diag_level"] == 0
