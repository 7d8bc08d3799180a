"""gpu-provisioner: take bare GPU servers to a verified, ready-to-train state."""

__version__ = "0.1.0"
