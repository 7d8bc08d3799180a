"""What the NVIDIA roles would do on Ubuntu 22.04 with NVIDIA's CUDA repository, which is
unreachable here: the package lists, versions, apt source and pin files they compute
from each built-in profile's rendered variables, run through Ansible itself (the roles'
`packages` task files and templates, connection local, changing nothing on this machine).
Also: the playbooks' syntax, and argument_specs refusing a wrongly typed variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provisioner import profiles
from provisioner.render import role_vars

from .conftest import REPO, PLAYBOOKS, ROLES

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.ansible

UBUNTU_FACTS = {
    "distribution": "Ubuntu", "distribution_major_version": "22", "distribution_version": "22.04",
    "os_family": "Debian", "architecture": "x86_64", "kernel": "5.15.0-91-generic",
    "virtualization_type": "kvm", "virtualization_role": "host",
}

PLAY = """\
- name: Compute what the NVIDIA roles would install, changing nothing.
  hosts: localhost
  gather_facts: false
  # The nccl role computes nothing beyond its defaults; cuda_repo's source file is rendered
  # from its defaults (the role itself, a dependency of the others, is switched off here).
  vars_files: [nccl-defaults.yml, cuda-repo-defaults.yml, vars.yml]
  tasks:
    - name: Pretend to be an Ubuntu 22.04 host.
      fake_facts:
        facts: "{{ fake_ubuntu_facts }}"
    - name: Run the package computations of each role.
      ansible.builtin.include_role:
        name: "{{ item }}"
        tasks_from: packages
        public: true
      loop: [nvidia_driver, cuda_toolkit]

    - name: Render the apt source and the pin files.
      ansible.builtin.template:
        src: "{{ roles_dir }}/{{ item.role }}/templates/{{ item.src }}"
        dest: "{{ out_dir }}/{{ item.dest }}"
        mode: "0644"
      loop:
        - {role: cuda_repo, src: cuda-repo.sources.j2, dest: cuda.sources}
        - {role: nvidia_driver, src: preferences.j2, dest: nvidia-driver.pref}
      vars:
        nvidia_driver_companion_versions: {}
    - name: Write the pin files the shared role pinned_packages would write.
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ item.dest }}"
        mode: "0644"
        content: "{{ item.pins | gpu_provisioner.node.apt_preferences('NVIDIA', 'NVIDIA CUDA', item.dest) }}"
      loop:
        - {pins: "{{ fabric_manager_pins }}", dest: fabric-manager.pref}
        - {pins: "{{ cudnn_pins | default({}) }}", dest: cudnn.pref}
        - {pins: "{{ nccl_pins | default({}) }}", dest: nccl.pref}
    - name: Write what was computed.
      ansible.builtin.copy:
        dest: "{{ out_dir }}/computed.json"
        mode: "0644"
        content: "{{ computed | to_json }}"
      vars:
        computed:
          driver: "{{ nvidia_driver_packages }}"
          driver_glob: "{{ nvidia_driver_version_glob }}"
          pinning_package: "{{ nvidia_driver_pinning_package }}"
          toolkit: "{{ cuda_toolkit_packages }}"
          toolkit_patterns: "{{ cuda_toolkit_version_patterns }}"
          nvcc: "{{ cuda_toolkit_nvcc }}"
          prebuilt: "{{ nvidia_driver_prebuilt_packages }}"
"""


FAKE_FACTS_MODULE = """\
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}})
module.exit_json(changed=False, ansible_facts=module.params["facts"])
"""


def _env(tmp: Path) -> dict[str, str]:
    library = tmp / "library"
    library.mkdir(exist_ok=True)
    (library / "fake_facts.py").write_text(FAKE_FACTS_MODULE)
    return dict(os.environ, ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_COLLECTIONS_PATH=str(REPO), ANSIBLE_LIBRARY=str(library),
                ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")


def _compute(profile: str, tmp: Path, **overrides) -> tuple[dict, Path]:
    values = {**role_vars(profiles.load(profile)), **overrides}
    values.update(roles_dir=str(ROLES), out_dir=str(tmp), fake_ubuntu_facts=UBUNTU_FACTS,
                  cuda_repo_enabled=False, cuda_repo_os_flavour="ubuntu2204",
                  ansible_connection="local",
                  ansible_python_interpreter=sys.executable)
    (tmp / "vars.yml").write_text(yaml.safe_dump(values))
    (tmp / "play.yml").write_text(PLAY)
    (tmp / "nccl-defaults.yml").write_text((ROLES / "nccl" / "defaults" / "main.yml").read_text())
    (tmp / "cuda-repo-defaults.yml").write_text((ROLES / "cuda_repo" / "defaults" / "main.yml").read_text())
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp / "play.yml")],
                       capture_output=True, text=True, env=_env(tmp), timeout=300, cwd=tmp)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads((tmp / "computed.json").read_text()), tmp


def test_h100_train_packages_and_files(tmp_path):
    got, out = _compute("h100-train", tmp_path)
    # The meta-packages, then the driver's exact-version siblings the index lists (pinned with it).
    assert {"cuda-drivers-580", "nvidia-driver-580", "libnvidia-compute-580"} <= set(got["driver"])
    assert all(name.startswith(("cuda-drivers-", "nvidia-", "libnvidia-", "xserver-xorg-video-nvidia-"))
               for name in got["driver"]) and "nvidia-driver-580-open" not in got["driver"]
    # Exactly the index's revision (the tests' fixture index): the Ubuntu archive's build would not match.
    assert got["driver_glob"] == "580.159.04-1ubuntu1"
    assert got["pinning_package"] == "nvidia-driver-pinning-580"
    assert got["toolkit"] == ["cuda-toolkit-12-2"]
    assert got["toolkit_patterns"] == {"cuda-toolkit-12-2": r"^12\.2\.2\-1$"}
    assert got["nvcc"] == {"12.2": "/usr/local/cuda-12.2/bin/nvcc"}
    sources = (out / "cuda.sources").read_text()
    assert "URIs: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/\n" in sources
    assert "Suites: /\n" in sources
    assert "Signed-By: /usr/share/keyrings/provisioner-cuda-archive-keyring.asc\n" in sources
    assert "Components" not in sources  # a flat repository
    driver_pref = (out / "nvidia-driver.pref").read_text()
    assert "Pin: version 580.159.04-1ubuntu1\nPin-Priority: 1001" in driver_pref
    assert "Package: nvidia-* libnvidia-* " in driver_pref and " cuda-drivers*\n" in driver_pref
    fm = (out / "fabric-manager.pref").read_text()
    assert "Package: nvidia-fabricmanager\nPin: version 580.159.04-1\nPin-Priority: 1001" in fm
    assert "Package: libnvidia-nscq\nPin: release o=NVIDIA,l=NVIDIA CUDA\nPin-Priority: 100" in fm
    assert "Package: libcudnn8\nPin: version 8.9.7.29-1+cuda12.2\n" in (out / "cudnn.pref").read_text()
    assert "Package: libnccl2\nPin: version 2.19.3-1+cuda12.2\n" in (out / "nccl.pref").read_text()


def test_l40s_infer_cuda_11_8(tmp_path):
    got, out = _compute("l40s-infer", tmp_path)
    assert got["toolkit"] == ["cuda-toolkit-11-8"]
    assert got["nvcc"] == {"11.8": "/usr/local/cuda-11.8/bin/nvcc"}
    assert "Pin: version 8.6.0.163-1+cuda11.8" in (out / "cudnn.pref").read_text()
    assert "Pin: version 2.16.5-1+cuda11.8" in (out / "nccl.pref").read_text()


def test_mirror_and_open_modules(tmp_path):
    got, out = _compute("rtx4090-dev", tmp_path, cuda_repo_base_url="http://mirror.example/cuda/repos/")
    assert "nvidia-driver-580-open" in got["driver"] and got["driver_glob"] == "580.159.04-1ubuntu1"
    assert "nvidia-dkms-580-open" in got["driver"] and "nvidia-dkms-580" not in got["driver"]
    assert "URIs: http://mirror.example/cuda/repos/ubuntu2204/x86_64/\n" in (out / "cuda.sources").read_text()


def test_secure_boot_prebuilt_takes_ubuntus_signed_modules_without_dkms(tmp_path):
    # Ubuntu's own driver (source distro) with driver.secure_boot: prebuilt: the no-DKMS driver
    # and one signed precompiled module package per kernel flavour (5.15.0-91-generic -> generic).
    got, _ = _compute("h100-train", tmp_path, nvidia_driver_source="distro", nvidia_driver_repo_pins={},
                      nvidia_driver_secure_boot="prebuilt")
    assert got["driver"] == ["nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server"]
    assert got["prebuilt"] == ["linux-modules-nvidia-580-server-generic"]
    got, _ = _compute("h100-train", tmp_path, nvidia_driver_source="distro", nvidia_driver_repo_pins={})
    assert got["driver"] == ["nvidia-driver-580-server", "nvidia-dkms-580-server"]  # sign / refuse: DKMS


def test_playbooks_pass_syntax_check():
    env = dict(os.environ, ANSIBLE_ROLES_PATH=str(ROLES), ANSIBLE_COLLECTIONS_PATH=str(REPO), ANSIBLE_NOCOLOR="1")
    for playbook in ("site.yml", "verify.yml", "preflight.yml", "check.yml"):
        r = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                            str(PLAYBOOKS / playbook)], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, playbook + r.stdout + r.stderr


def test_argument_specs_refuse_a_wrong_type(tmp_path):
    play = tmp_path / "bad.yml"
    play.write_text("""\
- name: Give the driver role a wrongly typed variable.
  hosts: localhost
  gather_facts: false
  roles:
    - role: nvidia_driver
      nvidia_driver_persistence: "maybe"
      nvidia_driver_source: ppa
""")
    r = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
                       capture_output=True, text=True, env=_env(tmp_path), timeout=120)
    assert r.returncode != 0
    text = r.stdout + r.stderr
    assert "nvidia_driver_persistence" in text and "bool" in text
    assert "nvidia_driver_source" in text and "cuda_repo, distro" in text


def test_yamllint_clean():
    yamllint = BIN / "yamllint"
    if not yamllint.exists():
        pytest.fail("yamllint is not installed: pip install -e '.[dev]'")
    r = subprocess.run([str(yamllint), "--strict", "ansible_collections", "molecule"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
