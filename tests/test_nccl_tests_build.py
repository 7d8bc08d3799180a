"""nccl-tests (roles/nccl/tasks/tests.yml) is built again when its source tarball, NCCL or
the CUDA it is built with changes, and only then: run for real through ansible-runner,
against this machine over the local connection, everything it writes in a temporary
folder."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from .ansibleplay import LOCAL, Run, play

pytestmark = pytest.mark.ansible


STAND_IN_MAKEFILE = """\
# A stand-in for NVIDIA's nccl-tests (tests/test_role_hygiene_runs.py): it builds nothing
# but a script that prints what it was built from.
SOURCE_ID = {source_id}
all:
\tmkdir -p build
\tprintf '#!/bin/sh\\necho "stand-in all_reduce_perf source=$(SOURCE_ID) CUDA_HOME=$(CUDA_HOME) NCCL_HOME=$(NCCL_HOME) built=%s"\\n' "$$(date +%s%N)" > build/all_reduce_perf
\tchmod 0755 build/all_reduce_perf
"""


def _stand_in_tarball(path: Path, source_id: str, extra: str) -> str:
    """A .tar.gz laid out like a release tarball (one top folder); returns its sha256."""
    with tarfile.open(path, "w:gz") as tar:
        for name, text in {"Makefile": STAND_IN_MAKEFILE.format(source_id=source_id), extra: source_id + "\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"nccl-tests-{source_id}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_nccl_tests_are_rebuilt_when_the_tarball_or_nccl_changes_and_only_then(tmp_path: Path):
    """roles/nccl/tasks/tests.yml for real, with a STAND-IN source tarball made here (a tiny
    Makefile that writes build/all_reduce_perf as a script echoing its inputs), not NVIDIA's
    nccl-tests. make and g++ are already installed here, so its apt task is skipped."""
    if shutil.which("make") is None or os.system("dpkg-query -W g++ >/dev/null 2>&1") != 0:
        pytest.skip("make and g++ must be installed already (the task would install them)")
    prefix, cuda = tmp_path / "nccl-tests", tmp_path / "cuda"
    cuda.mkdir()
    v1, v2 = tmp_path / "v1.tar.gz", tmp_path / "v2.tar.gz"
    sha1, sha2 = _stand_in_tarball(v1, "v1", "only-in-v1.txt"), _stand_in_tarball(v2, "v2", "only-in-v2.txt")

    def converge(name: str, tarball: Path, sha: str, nccl: str = "2.18.5") -> Run:
        run = play(tmp_path, name, [{
            "name": "Build nccl-tests with the role's task file.", "hosts": "gpu", "gather_facts": False,
            "tasks": [{"name": "Run the nccl role's nccl-tests tasks.", "ansible.builtin.include_role": {
                "name": "gpu_provisioner.node.nccl", "tasks_from": "tests"}}]}],
            f"[gpu]\n{LOCAL} nccl_tests_prefix={prefix} nccl_tests_cuda_home={cuda} nccl_tests_source={tarball} "
            f"nccl_tests_sha256={sha} nccl_version={nccl} nccl_pins={{'libnccl2':'{nccl}-1+cuda12.2'}}\n")
        assert run.rc == 0, run.stdout[-3000:]
        return run

    def output() -> str:
        return subprocess.run([str(prefix / "build" / "all_reduce_perf")], capture_output=True, text=True,
                              check=True).stdout

    first = converge("first", v1, sha1)
    assert "Build nccl-tests against the installed CUDA and NCCL." in first.changed_tasks()
    built = output()
    assert f"source=v1 CUDA_HOME={cuda} NCCL_HOME=/usr" in built
    assert (prefix / "only-in-v1.txt").exists()

    again = converge("again", v1, sha1)
    assert again.changed() == 0, again.changed_tasks()
    assert output() == built

    new_source = converge("new-source", v2, sha2)
    assert "Build nccl-tests against the installed CUDA and NCCL." in new_source.changed_tasks()
    assert "source=v2" in output()
    assert not (prefix / "only-in-v1.txt").exists() and (prefix / "only-in-v2.txt").exists()
    assert not (prefix / f"nccl-tests-{sha1[:12]}.tar.gz").exists()  # the old tarball went with its build
    after_v2 = output()

    new_nccl = converge("new-nccl", v2, sha2, nccl="2.19.3")
    assert "Build nccl-tests against the installed CUDA and NCCL." in new_nccl.changed_tasks()
    assert output() != after_v2 and "source=v2" in output()
    assert converge("settled", v2, sha2, nccl="2.19.3").changed() == 0
