"""`provision wheelhouse` (engine/wheelhouse.py) with pip itself, offline: a profile whose one
venv wants mpmath, collected from a local wheel folder holding the real mpmath wheel (this
machine's local package files, /opt/pypi/files; the test is skipped where it is missing) with
every index off (PIP_NO_INDEX), so nothing leaves the machine. And what `render` and the
python_env role make of the lock: the environment's item carries it, a stale lock is refused,
and the role's filters render it as hashed requirements and compare a freeze with it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from provisioner import profiles, render
from provisioner.engine import wheelhouse
from provisioner.errors import ProvisionError
from provisioner.render import wheel_lock

from .conftest import COLLECTION, REPO

MPMATH = Path("/opt/pypi/files/mpmath-1.3.0-py3-none-any.whl")
PROFILE = """extends: debian12-lab
name: wh
description: one venv with mpmath
python_env: {enabled: false}
python_envs:
  - {name: calc, manager: venv, python: "3.11", prefix: /opt/venvs, owner: root, packages: ["mpmath==1.3.0"]}
mirrors: {wheelhouse_source: HOUSE}
"""

sys.path.insert(0, str(REPO))
_spec = importlib.util.spec_from_file_location("pip_filters", COLLECTION / "plugins" / "filter" / "pip.py")
pip_filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pip_filters)


@pytest.fixture
def offline(tmp_path: Path, monkeypatch) -> Path:
    if not MPMATH.is_file():
        pytest.skip(f"{MPMATH} (this machine's local package files) is not here")
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy(MPMATH, links)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    (tmp_path / "p.yml").write_text(PROFILE.replace("HOUSE", str(tmp_path / "house")))
    return links


def test_the_wheels_and_a_lock_with_their_hashes_are_collected_and_render_hands_the_lock_to_the_role(
        tmp_path: Path, offline: Path):
    loaded = profiles.load(str(tmp_path / "p.yml"))
    got = wheelhouse.collect(loaded, tmp_path / "house", platform="manylinux_2_36_x86_64", find_links=[offline])
    assert [(g.env, g.wheels) for g in got] == [("calc", 1)]
    lock = json.loads((tmp_path / "house" / "locks" / "calc.json").read_text())
    digest = hashlib.sha256(MPMATH.read_bytes()).hexdigest()
    assert lock["wheels"] == [{"name": "mpmath", "version": "1.3.0", "file": MPMATH.name, "sha256": digest}]
    assert (lock["python"], lock["requirements"]) == ("3.11", ["mpmath==1.3.0"])
    env = render.role_vars(profiles.load(str(tmp_path / "p.yml")))["python_env_envs"][0]
    assert env["lock"] == [{"name": "mpmath", "version": "1.3.0", "sha256": digest}]
    # The environment asks for something else now: its lock is stale, refused before any host.
    (tmp_path / "p.yml").write_text(PROFILE.replace("mpmath==1.3.0", "mpmath==1.4.1").replace("HOUSE", str(tmp_path / "house")))
    with pytest.raises(ProvisionError, match="collected for mpmath==1.3.0"):
        render.role_vars(profiles.load(str(tmp_path / "p.yml")))


def test_a_package_without_a_binary_wheel_is_refused_by_name(tmp_path: Path, offline: Path):
    # HAND-MADE: a source distribution's file name is all pip looks at before refusing it.
    (offline / "onlysource-1.0.tar.gz").write_bytes(b"")
    (tmp_path / "p.yml").write_text(PROFILE.replace('"mpmath==1.3.0"', '"onlysource==1.0"'))
    with pytest.raises(ProvisionError, match=r"no binary wheel of onlysource==1.0 for Python 3.11 on manylinux_2_36"):
        wheelhouse.collect(profiles.load(str(tmp_path / "p.yml")), tmp_path / "house",
                           platform="manylinux_2_36_x86_64", find_links=[offline])


def test_the_platform_is_widened_to_every_older_manylinux_tag_as_pep_600_says():
    tags = wheelhouse.platform_tags("manylinux_2_36_x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64"} <= set(tags)
    assert "manylinux1_aarch64" not in wheelhouse.platform_tags("manylinux_2_28_aarch64")


@pytest.mark.parametrize("bad, where", [
    ({"platform": "win_amd64"}, "--platform"),
    ({"platform": "manylinux_2_36_x86_64", "python_version": "3.12"}, "--python-version"),
])
def test_bad_options_are_refused_before_anything_is_written(tmp_path: Path, bad: dict, where: str):
    (tmp_path / "p.yml").write_text(PROFILE)
    with pytest.raises(ProvisionError) as exc:
        wheelhouse.collect(profiles.load(str(tmp_path / "p.yml")), tmp_path / "house", **bad)
    assert exc.value.where == where and not (tmp_path / "house").exists()


def test_a_folder_that_is_not_a_wheelhouse_is_not_written_into(tmp_path: Path):
    (tmp_path / "p.yml").write_text(PROFILE)
    (tmp_path / "house").mkdir()
    (tmp_path / "house" / "notes.txt").write_text("mine")
    with pytest.raises(ProvisionError, match="not a wheelhouse provision made"):
        wheelhouse.collect(profiles.load(str(tmp_path / "p.yml")), tmp_path / "house", platform="manylinux_2_36_x86_64")


LOCK = [{"name": "jax", "version": "0.10.2", "sha256": "a" * 64},
        {"name": "opt_einsum", "version": "3.4.0", "sha256": "b" * 64},
        {"name": "setuptools", "version": "80.9.0", "sha256": "c" * 64}]


def test_the_role_renders_the_lock_as_hashed_requirements_and_refuses_an_option_in_it():
    assert pip_filters.lock_requirements(LOCK[:1]) == f"jax==0.10.2 --hash=sha256:{'a' * 64}\n"
    with pytest.raises(ValueError, match="version"):
        pip_filters.lock_requirements([{"name": "jax", "version": "0.10.2 --index-url=http://x", "sha256": "a" * 64}])


def test_a_freeze_is_compared_with_its_lock_by_canonical_name_leaving_out_what_freeze_hides():
    assert pip_filters.lock_differences(["jax==0.10.2", "opt-einsum==3.4.0"], LOCK) == []
    assert pip_filters.lock_differences(["jax==0.10.1", "requests==2.32.5"], LOCK) == [
        "missing opt-einsum==3.4.0", "extra requests==2.32.5", "jax: 0.10.1, lock 0.10.2"]


def test_a_lock_that_is_not_provisions_is_refused(tmp_path: Path):
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "calc.json").write_text('{"env": "calc"}')
    with pytest.raises(ProvisionError, match="not one provision wheelhouse wrote"):
        wheel_lock.read(tmp_path, "calc")
