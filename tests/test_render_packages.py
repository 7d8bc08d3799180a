"""Package choices render makes from the profile and the matrix, checked per built-in."""

from __future__ import annotations

import pytest

from provisioner.profiles import compat
from provisioner import profiles
from provisioner.render import role_vars


@pytest.mark.parametrize(("driver", "major"), [("535.129.03", 12), ("550.54.15", 12), ("580.95.05", 13),
                                               ("525.60.13", 12), ("520.61.05", 11)])
def test_the_driver_decides_its_cuda_major(driver, major):
    assert compat.driver_cuda_major(driver) == major


@pytest.mark.parametrize("name", ["l40s-infer", "t4-infer", "h100-train", "debian12-lab"])
def test_dcgm_follows_the_drivers_cuda_not_the_toolkits(name):
    loaded = profiles.load(name)
    want = compat.driver_cuda_major(loaded.profile.driver.version)
    pins = role_vars(loaded)["dcgm_exporter_dcgm_pins"]
    if loaded.profile.dcgm.enabled:
        assert f"datacenter-gpu-manager-4-cuda{want}" in pins
    else:
        assert pins == {}
    # l40s-infer and t4-infer install the 11.8 toolkit on R580, a driver that brings CUDA 13
    # (debian12-lab: on R535, CUDA 12).
    if loaded.profile.cuda.default.startswith("11."):
        assert want == (13 if loaded.profile.driver.branch >= 580 else 12)
