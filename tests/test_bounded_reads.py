"""Bounded reads (issue 28, item 11): a capture or a profile is read only from a regular
file and only up to a size cap. `provision judge` on a FIFO used to hang, on /dev/zero to
raise MemoryError, and a 200 MB capture took 3.4 GB; each is now one clear error, exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provisioner import yamlfile
from provisioner.cli import app
from provisioner.errors import ProvisionError

PROVISION = str(Path(sys.executable).parent / "provision")


def _judge(path: str, timeout: int = 60) -> subprocess.CompletedProcess:
    # A child process with a timeout: a read that hangs fails the test instead of hanging it.
    return subprocess.run([PROVISION, "judge", "-p", "h100-train", path], capture_output=True, text=True,
                          timeout=timeout)


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path):
    fifo = tmp_path / "capture.xml"
    os.mkfifo(fifo)
    run = _judge(str(fifo))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "the capture is not a regular file (a pipe, a device or a socket)" in run.stderr
    assert "Traceback" not in run.stderr


def test_dev_zero_is_refused_without_reading_it():
    run = _judge("/dev/zero")
    assert run.returncode == 1 and "not a regular file" in run.stderr and "Traceback" not in run.stderr


def test_a_capture_over_the_cap_is_refused_before_it_is_read(tmp_path: Path):
    big = tmp_path / "nvidia-smi.xml"
    with big.open("wb") as f:  # sparse: no disk is used
        f.truncate(yamlfile.CAPTURE_CAP + 1)
    result = CliRunner().invoke(app, ["judge", "-p", "h100-train", str(big)])
    assert result.exit_code == 1
    assert f"the capture is {yamlfile.CAPTURE_CAP + 1:,} bytes, over the {yamlfile.CAPTURE_CAP:,}" in result.output


def test_a_profile_over_the_cap_or_not_a_file_is_one_error(tmp_path: Path):
    big = tmp_path / "huge.yml"
    big.write_text("name: huge\ndescription: " + "x" * yamlfile.PROFILE_CAP + "\n")
    with pytest.raises(ProvisionError, match="over the 1,048,576 a file can be"):
        yamlfile.read_yaml(big)
    fifo = tmp_path / "profile.yml"
    os.mkfifo(fifo)
    with pytest.raises(ProvisionError, match="not a regular file"):
        yamlfile.read_yaml(fifo)


def test_a_file_under_the_cap_reads_whole(tmp_path: Path):
    path = tmp_path / "small.txt"
    path.write_bytes(b"a" * 1000)
    assert yamlfile.read_bounded(path, 1000) == b"a" * 1000
    with pytest.raises(ProvisionError, match="1,001 bytes, over the 1,000"):
        path.write_bytes(b"a" * 1001)
        yamlfile.read_bounded(path, 1000, "file")
