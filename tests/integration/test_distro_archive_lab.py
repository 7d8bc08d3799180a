"""Issue 27, the distribution's side, on a real lab host (Debian 12, its own archive through
the lab's apt proxy, signed by debian-archive-keyring): `provision preflight` resolves the
driver's upstream version to the exact revision the host's archive carries, and that is the
one apt installed on the host; a version the archive lacks is refused by `provision up`
before the converge, naming the archive's URLs, suites and Release Dates and the nearest
versions it carries, with the host's packages and /etc/apt unchanged.

The host starts from the image of a host converged with the lab's driver-only profile (which
extends debian12-lab: the same driver from the same archive), the image the other lab tests
use (provisioner.lab.converged), not from a converge of its own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from provisioner.engine import commands

from . import labtools
from .labtools import DRIVER_ONLY, podman

pytestmark = pytest.mark.lab

if os.geteuid() != 0 or shutil.which("podman") is None:
    pytest.skip("lab hosts need root and podman (scripts/setup-dev-host)", allow_module_level=True)

MISSING = "535.999.99"


def _host_state(name: str) -> dict[str, str]:
    """What must not move: every package and its version and state, every file under /etc/apt
    (with its digest), apt's own lists and cache, and any leftover private folder."""
    script = ("dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\\n'; echo ==; "
              "find /etc/apt -type f -exec sha256sum {} + | sort; echo ==; "
              "find /var/lib/apt/lists /var/cache/apt -maxdepth 1 -type f -printf '%p %s %T@\\n' | sort; echo ==; "
              "ls -d /tmp/provisioner-apt-offer-* /var/tmp/provisioner-apt-offer-* 2>/dev/null; true")
    out = podman("exec", name, "sh", "-c", script, check=True).stdout
    return dict(zip(("packages", "etc_apt", "apt_state", "leftovers"), out.split("==\n")))


def test_preflight_resolves_what_apt_installed_and_up_refuses_a_version_the_archive_lacks(tmp_path_factory,
                                                                                            tmp_path: Path):
    with labtools.lab_hosts(1, "da", tmp_path_factory, converged=DRIVER_ONLY) as lab:
        (name,) = [h.name for h in lab.hosts]
        installed = podman("exec", name, "dpkg-query", "-W", "-f=${Version}", "nvidia-driver", check=True).stdout.strip()
        before = _host_state(name)

        report = commands.execute("preflight", commands.prepare(DRIVER_ONLY, lab.inventory), runs_dir=tmp_path / "pre")
        (host,) = report.hosts
        checks = {c.name: c for c in host.checks}
        archive = {n: c for n, c in checks.items() if n.startswith("archive ")}
        assert archive and {c.status for c in archive.values()} == {"pass"}, [c.as_dict() for c in host.checks]
        detail = archive["archive nvidia-driver"].detail
        print(f"\npreflight: {detail}\non the host: nvidia-driver {installed}")
        # "nvidia-driver 535.309.01-0+deb12u1 from http://<archive> bookworm-security (Release Date: ...)"
        assert detail.split()[1] == installed and " from http" in detail and "(Release Date: " in detail
        assert "Release Date: unknown" not in detail
        assert report.exit_code == 0, report.as_dict()

        child = tmp_path / "missing.yml"
        child.write_text(f"extends: debian12-lab\nname: debian12-lab-missing\ndescription: a driver Debian lacks\n"
                         f"driver:\n  version: {MISSING}\ncuda:\n  enabled: false\npython_env:\n  enabled: false\n")
        refused = commands.execute("up", commands.prepare(str(child), lab.inventory), runs_dir=tmp_path / "up")
        (host,) = refused.hosts
        bad = {c.name: c for c in host.checks}["archive nvidia-driver"]
        print(f"up refused: {bad.detail}")
        assert bad.status == "fail" and refused.exit_code != 0
        for part in (f"nvidia-driver {MISSING} (driver.version) is not in the host's archive",
                     " bookworm (Release Date: ", " bookworm-security (Release Date: ",
                     "nearest versions it carries: ", installed, "pick a version the archive carries"):
            assert part in bad.detail, bad.detail
        # Stopped after the survey: no converge ran, and nothing on the host moved.
        assert sorted(p.name for p in (refused.run_dir / "artifacts").iterdir()) == ["survey"]
        after = _host_state(name)
        assert after == before
        assert after["leftovers"].strip() == ""
