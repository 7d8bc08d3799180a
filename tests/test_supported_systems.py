"""One statement of the supported systems, the same everywhere it is made: README and the
manual's home page say it in the same words, pyproject's description names both Ubuntu
releases, every role's meta/main.yml lists jammy, noble and bookworm, and every role that
refuses an unsupported release names that same set. It is true: each such role carries the
vars files of exactly those releases."""

from __future__ import annotations

import re
import tomllib

import yaml

from .conftest import COLLECTION, REPO

STATEMENT = ("**Supported systems.** Ubuntu 22.04 and 24.04 are the targets. The tests converge Debian 12 "
             "hosts, against stand-ins serving the Ubuntu flavours of NVIDIA's repositories and against "
             "Debian 12's own archive; no Ubuntu host is converged in the tests.")
ROLES = sorted(p for p in (COLLECTION / "roles").iterdir() if (p / "meta" / "main.yml").is_file())
PLATFORMS = {"Ubuntu": ["jammy", "noble"], "Debian": ["bookworm"]}
RELEASE_VARS = {"Ubuntu-22.yml", "Ubuntu-24.yml", "Debian-12.yml"}


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_readme_and_the_manual_say_the_same_statement():
    for page in (REPO / "README.md", REPO / "docs" / "index.md"):
        assert STATEMENT in _flat(page.read_text()), page


def test_pyproject_names_both_ubuntu_releases():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "Ubuntu 22.04 and 24.04" in project["description"]
    assert "Operating System :: POSIX :: Linux" in project["classifiers"]


def test_every_roles_platforms_are_the_supported_set():
    assert len(ROLES) >= 14
    for role in ROLES:
        platforms = yaml.safe_load((role / "meta" / "main.yml").read_text())["galaxy_info"]["platforms"]
        assert {p["name"]: p["versions"] for p in platforms} == PLATFORMS, role.name


def test_roles_that_refuse_a_release_name_the_supported_set_and_carry_its_vars():
    refusing = []
    for role in ROLES:
        for tasks in sorted((role / "tasks").glob("*.yml")):
            for said in re.findall(r"The role \w+ supports (.+?)(?:;| \(|, not|\.\s)", _flat(tasks.read_text())):
                assert said == "Ubuntu 22.04, Ubuntu 24.04 and Debian 12", (tasks, said)
                refusing.append(role)
    assert len(set(refusing)) >= 5
    for role in set(refusing):  # the claim is true: the role has each release's data
        assert {p.name for p in (role / "vars").glob("*.yml")} >= RELEASE_VARS, role.name
