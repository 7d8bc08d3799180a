"""`provision wheelhouse`: every wheel a profile's environments install, collected on the
controller for the hosts' platform and Python, with a lock per environment, so the hosts
install with `pip install --no-index --require-hashes` and never reach an index.

pip itself resolves and downloads (`pip download --only-binary=:all: --platform ...
--python-version ...`): binary wheels only, so nothing is built on a host; a package with no
binary wheel for that Python and platform is refused by name. Each environment is collected
on its own (its closure is its lock), into one flat folder of wheels shared by all.

Where the wheels come from, as the python_env role installs them: PyTorch from a --find-links
folder that holds its wheel (the lab's local torch wheel), else from the PyTorch index for its
variant alone (mirrors.torch_index_url, as PyTorch's instructions say); everything else from
mirrors.pip_index_url, else pip's own configuration (the operator's index or proxy), plus the
--find-links folders.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from provisioner import outputs
from provisioner.errors import ProvisionError
from provisioner.profiles import Loaded
from provisioner.profiles.models import PythonEnv
from provisioner.render import framework, pip_requirements, wheel_lock
from provisioner.render.bundle import sha256_of

# The python_env role's default (roles/python_env/defaults/main.yml python_env_torch_index_url).
TORCH_INDEX = "https://download.pytorch.org/whl"
PLATFORM = re.compile(r"^manylinux_2_(\d+)_(x86_64|aarch64)$")
# PEP 600 (https://peps.python.org/pep-0600/): a manylinux_2_Y wheel runs on glibc 2.Y and
# newer, and the legacy names are aliases: manylinux1 = manylinux_2_5, manylinux2010 =
# manylinux_2_12, manylinux2014 = manylinux_2_17. pip (23.2 here) does not widen a
# --platform manylinux_2_Y to the older tags itself, so they are listed one by one.
LEGACY = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
# How long one environment's pip download may take (TensorFlow with CUDA is several GB).
PIP_TIMEOUT_S = 3600


def platform_tags(platform: str) -> list[str]:
    """Every wheel platform tag a host of `platform` (manylinux_2_Y_ARCH) installs, newest first."""
    match = PLATFORM.fullmatch(platform)
    assert match is not None
    glibc, arch = int(match.group(1)), match.group(2)
    tags = []
    for minor in range(glibc, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in LEGACY and (arch == "x86_64" or minor == 17):   # manylinux1/2010 were never built for aarch64
            tags.append(f"{LEGACY[minor]}_{arch}")
    return tags


@dataclass(frozen=True)
class Collected:
    env: str
    wheels: int
    bytes: int
    lock: Path


def _index_args(loaded: Loaded, env: PythonEnv, find_links: list[Path]) -> list[str]:
    m, fw = loaded.profile.mirrors, framework(loaded.profile, env)
    args = [f"--find-links={folder}" for folder in find_links]
    if fw and fw["name"] == "pytorch":
        wheel = f"torch-{fw['version']}+{fw['variant']}-"
        if not any(any(f.name.startswith(wheel) for f in folder.glob("*.whl")) for folder in find_links):
            return args + ["--index-url", f"{(m.torch_index_url or TORCH_INDEX).rstrip('/')}/{fw['variant']}"]
    return args + (["--index-url", m.pip_index_url] if m.pip_index_url else [])


def _refusal(env: PythonEnv, python: str, platform: str, stderr: str) -> ProvisionError:
    missing = re.search(r"No matching distribution found for (\S+)", stderr)
    if missing:
        return ProvisionError(
            f"{env.where} ({env.name}): no binary wheel of {missing.group(1)} for Python {python} on {platform}",
            where=f"{env.where}", fix="a source-only package cannot go into a wheelhouse: build its wheel (pip wheel) "
                                      "and pass its folder with --find-links, pin a version that has a wheel, or drop "
                                      "it from the environment")
    tail = " ".join(stderr.split())[-400:]
    return ProvisionError(f"{env.where} ({env.name}): pip download failed: {tail}", where=env.where,
                          fix="see pip's message; for an index that needs a proxy or a mirror, set pip's own "
                              "configuration or mirrors.pip_index_url")


def _check_output(out: Path, force: bool) -> Path:
    out = outputs.absolute(out)
    if out.exists() and out.is_dir() and any(out.iterdir()) and not wheel_lock.is_locked(out) and not force:
        raise ProvisionError("the output folder is not empty and is not a wheelhouse provision made", where=str(out),
                             fix="pass a new or empty folder with -o (or one provision wheelhouse wrote), or --force")
    outputs.check_folder(out, [], force=True)   # system folders and links refused, whatever --force says
    return out


def collect(loaded: Loaded, out: Path, *, platform: str, python_version: str | None = None,
            find_links: list[Path] = (), force: bool = False) -> list[Collected]:
    """Collect every environment's wheels into `out` and write its lock; returns what each got."""
    if not PLATFORM.fullmatch(platform):
        raise ProvisionError(f"--platform {platform!r} is not a manylinux_2_Y_ARCH tag (x86_64 or aarch64)",
                             where="--platform", fix="give the hosts' glibc as the tag, e.g. manylinux_2_36_x86_64 "
                                                     "for glibc 2.36 (`ldd --version` on a host prints it)")
    envs = loaded.profile.python_envs
    if not envs:
        raise ProvisionError("the profile has no Python environment to collect wheels for", where="python_envs",
                             fix="add one to python_envs (or python_env)")
    for env in envs:
        if env.manager != "venv":
            raise ProvisionError(f"{env.where} ({env.name}) is a conda environment: offline installs cover venv "
                                 "environments (conda's packages come from a channel, not a wheelhouse)",
                                 where=f"{env.where}.manager", fix="use manager: venv, or a local conda channel "
                                                                   "(mirrors.conda_channels) for that environment")
        if python_version and env.python != python_version:
            raise ProvisionError(f"--python-version {python_version}, but {env.where} ({env.name}) runs Python "
                                 f"{env.python}", where="--python-version",
                                 fix=f"leave --python-version out (each environment's own is used) or set "
                                     f"{env.where}.python")
    for folder in find_links:
        if not Path(folder).is_dir():
            raise ProvisionError(f"--find-links {folder} is not a folder", where="--find-links",
                                 fix="pass a folder of wheels")
    out = _check_output(out, force)
    (out / wheel_lock.LOCKS).mkdir(parents=True, exist_ok=True)
    return [_collect_env(loaded, env, out, platform, [Path(f) for f in find_links]) for env in envs]


def _collect_env(loaded: Loaded, env: PythonEnv, out: Path, platform: str, find_links: list[Path]) -> Collected:
    reqs = pip_requirements(loaded.profile, env)
    with tempfile.TemporaryDirectory(prefix=f".{env.name}-", dir=out) as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-input", "--disable-pip-version-check",
                "--progress-bar", "off", "--only-binary=:all:",
                *[arg for tag in platform_tags(platform) for arg in ("--platform", tag)],
                "--python-version", env.python, "--implementation", "cp", "--dest", tmp,
                *_index_args(loaded, env, find_links), *reqs]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False,
                                  env={**os.environ, "PIP_NO_INPUT": "1"})
        except FileNotFoundError:
            raise ProvisionError("no Python to run pip with", fix="install pip beside provision") from None
        except subprocess.TimeoutExpired:
            raise ProvisionError(f"{env.where} ({env.name}): pip download ran past {PIP_TIMEOUT_S} s",
                                 where=env.where, fix="check the index or proxy, or collect from --find-links") from None
        if proc.returncode != 0:
            raise _refusal(env, env.python, platform, proc.stderr + proc.stdout)
        wheels = []
        for file in sorted(Path(tmp).iterdir()):
            try:
                name, version, _, _ = parse_wheel_filename(file.name)
            except InvalidWheelFilename:
                raise ProvisionError(f"{env.where} ({env.name}): pip downloaded {file.name}, which is not a wheel",
                                     where=env.where, fix="report this; only binary wheels go into a wheelhouse") from None
            digest = sha256_of(file)
            final = out / file.name
            if final.exists() and sha256_of(final) != digest:
                raise ProvisionError(f"{file.name} in the wheelhouse differs from the one just downloaded "
                                     "(another build of the same file name)", where=str(final),
                                     fix="collect into a new folder")
            if final.exists():
                file.unlink()   # the same wheel another environment already brought
            else:
                os.replace(file, final)
            wheels.append(wheel_lock.Wheel(name=str(name), version=str(version), file=file.name, sha256=digest))
    lock = wheel_lock.Lock(env=env.name, python=env.python, platform=platform, requirements=reqs, wheels=wheels)
    where = outputs.write_file(wheel_lock.path(out, env.name), wheel_lock.dump(lock), force=True)
    return Collected(env.name, len(wheels), sum((out / w.file).stat().st_size for w in wheels), where)

