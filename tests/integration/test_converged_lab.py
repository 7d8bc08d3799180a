"""Hosts started from a converged image (provisioner.lab.converged) are hosts of their own,
in the state the converge left: each has its own machine-id and SSH host keys, none holds
the apt proxy line, login key or journal of the host the image was made from, and `check`
finds each in its recorded state."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from provisioner.engine import commands
from provisioner.lab import converged

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)


def test_hosts_from_a_converged_image_are_their_own_and_in_their_recorded_state(tmp_path_factory, tmp_path: Path):
    with labtools.lab_hosts(2, "cv", tmp_path_factory, converged=DRIVER_ONLY) as lab:
        names = [h.name for h in lab.hosts]
        assert {h.image for h in lab.hosts} == {converged.ensure(DRIVER_ONLY)}
        ids = {n: podman("exec", n, "cat", "/etc/machine-id").stdout.strip() for n in names}
        assert all(len(i) == 32 for i in ids.values()) and len(set(ids.values())) == 2, ids
        keys = {n: podman("exec", n, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1] for n in names}
        assert len(set(keys.values())) == 2, keys
        # known_hosts holds each host's own key (SSH checks it strictly).
        known = lab.known_hosts.read_text()
        assert all(keys[n] in known for n in names)
        # What lab up writes for each host is the current lab's, nothing of the image's host.
        authorized = podman("exec", names[0], "cat", "/home/provision/.ssh/authorized_keys").stdout
        assert authorized.strip() == lab.private_key.with_suffix(".pub").read_text().strip()

        report = commands.execute("check", commands.prepare(DRIVER_ONLY, lab.inventory), runs_dir=tmp_path)
        assert report.exit_code == 0, report.as_dict()
        assert {h.status for h in report.hosts} == {"ok"}

