"""Hardening, one class of the review at a time (issue 17): data stays data, output never
clobbers, YAML inventories and the files beside an inventory, profile-owned variables,
secrets, exit codes, shell-quoted commands. The bad-input corpus is tests/test_bad_inputs.py;
the real Ansible run proving templates never run is tests/test_data_stays_data.py."""

from __future__ import annotations

import json
import os
import shlex
import tarfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from provisioner.profiles import secrets
from provisioner.render import inventory, role_specs
from provisioner import outputs, profiles
from provisioner.render.ansible_data import dump_unsafe, load_unsafe
from provisioner.cli import app
from provisioner.engine import commands
from provisioner.errors import ProvisionError
from provisioner.render import PROFILE_FIELD, render, role_vars
from provisioner.reports.report import HostReport, Report

PLANTED = "planted-s3cret-77aa"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- data stays data -------------------------------------------------------------------

def test_a_string_that_could_template_is_unsafe_and_the_others_stay_plain_strings():
    loaded = profiles.load("h100-train")
    poisoned = role_vars(loaded) | {"gpu_verify_note": "{{ lookup('pipe', 'id') }}", "other": "a {% raw %} b",
                                    "comment": "x {# y #}"}
    text = dump_unsafe(poisoned)
    for line in text.splitlines():
        if any(marker in line for marker in ("{{", "{%", "{#")):
            assert ": !unsafe " in line or line.lstrip().startswith("- !unsafe "), f"an untagged template: {line}"
        else:
            assert "!unsafe" not in line, line
    back = load_unsafe(text)
    assert back["nvidia_driver_version"] == "580.159.04" and back["cuda_toolkit_versions"] == ["12.2"]


@pytest.mark.ansible
def test_ansible_reads_rendered_versions_as_strings(tmp_path: Path):
    """ansible-core 2.19 loads `!unsafe '11.8'` as a float: rendered versions must reach the roles as strings."""
    import subprocess
    import sys

    vars_file = tmp_path / "vars.yml"
    vars_file.write_text(dump_unsafe({"versions": ["11.8", "12.10"], "default": "11.8",
                                      "poison": "{{ lookup('pipe', 'touch " + str(tmp_path / "ran") + "') }}"}))
    play = tmp_path / "play.yml"
    play.write_text(f"""- hosts: localhost
  gather_facts: false
  vars_files: [{vars_file}]
  tasks:
    - ansible.builtin.assert:
        that:
          - versions == ['11.8', '12.10']
          - default == '11.8'
          - default | type_debug != 'float'
          - poison is string and poison is search('lookup')
""")
    bin_dir = Path(sys.executable).parent
    r = subprocess.run([str(bin_dir / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert not (tmp_path / "ran").exists()


def test_every_profile_owned_variable_names_its_profile_field():
    rendered = set()
    for name in profiles.builtin_names():
        rendered |= set(role_vars(profiles.load(name)))
    assert rendered <= set(PROFILE_FIELD), sorted(rendered - set(PROFILE_FIELD))


# --- output paths ------------------------------------------------------------------------

def test_write_file_is_atomic_and_leaves_no_temporary_file(tmp_path: Path):
    target = outputs.write_file(tmp_path / "a" / "b.txt", "one")
    outputs.write_file(target, "two", replace=True)  # the caller's own file (a run's report.json)
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.txt"]


def test_force_replaces_the_link_never_the_file_it_points_at(tmp_path: Path):
    precious = _write(tmp_path / "precious", "keep")
    (tmp_path / "out.html").symlink_to(precious)
    with pytest.raises(ProvisionError, match="symbolic link"):
        outputs.write_file(tmp_path / "out.html", "new")
    outputs.write_file(tmp_path / "out.html", "new", force=True)
    assert precious.read_text() == "keep"
    assert not (tmp_path / "out.html").is_symlink() and (tmp_path / "out.html").read_text() == "new"


def test_render_again_into_its_own_folder_and_force_into_a_foreign_one(tmp_path: Path, example_target):
    out = tmp_path / "out"
    render(example_target.loaded, example_target.inventory, out)
    render(example_target.loaded, example_target.inventory, out)  # ours: recognised by the header
    foreign = _write(tmp_path / "site" / "ansible.cfg", "[defaults]\n")
    with pytest.raises(ProvisionError, match="not written by provision"):
        render(example_target.loaded, example_target.inventory, foreign.parent)
    assert foreign.read_text() == "[defaults]\n"
    render(example_target.loaded, example_target.inventory, foreign.parent, force=True)
    assert foreign.read_text().startswith(outputs.SIGNATURE)


@pytest.fixture
def example_target() -> commands.Target:
    return commands.prepare("h100-train", Path(__file__).resolve().parents[1] / "inventories/example/hosts.ini")


# --- inventories ---------------------------------------------------------------------

def test_a_yaml_inventory_renders_like_the_ini_one(tmp_path: Path):
    ini = _write(tmp_path / "ini" / "hosts.ini", "[gpu]\nnode1 ansible_host=10.0.0.5 common_apt_lock_timeout=600\n")
    yml = _write(tmp_path / "yml" / "hosts.yml",
                 "all:\n  children:\n    gpu:\n      hosts:\n        node1:\n          ansible_host: 10.0.0.5\n"
                 "          common_apt_lock_timeout: 600\n")
    for source in (ini, yml):
        render(profiles.load("h100-train"), inventory.load(source), source.parent / "out")
    texts = [(p.parent / "out" / "hosts.yml").read_text() for p in (ini, yml)]
    assert texts[0] == texts[1]
    assert yaml.safe_load(texts[1])["all"]["children"]["gpu"]["hosts"]["node1"]["common_apt_lock_timeout"] == 600


def test_group_vars_and_host_vars_beside_the_inventory_are_read(tmp_path: Path):
    hosts = _write(tmp_path / "hosts.ini", "[gpu]\nnode1\nnode2\n[gpu:vars]\ncommon_apt_lock_timeout=100\n")
    _write(tmp_path / "group_vars" / "gpu.yml", "common_apt_lock_timeout: 200\nsite_rack: r7\n")
    _write(tmp_path / "host_vars" / "node2" / "main.yml", "ansible_host: 10.0.0.9\n")
    inv = inventory.load(hosts)
    assert inv.groups["gpu"].vars == {"common_apt_lock_timeout": 200, "site_rack": "r7"}  # the file wins, as in Ansible
    assert inv.hosts["node2"] == {"ansible_host": "10.0.0.9"}
    assert inv.where("group gpu", "site_rack") == f"{tmp_path}/group_vars/gpu.yml:2"


def test_an_allowed_override_is_part_of_the_hosts_recorded_digest(tmp_path: Path):
    profile = _write(tmp_path / "p.yml", "extends: debian12-lab\nname: p\ndescription: d\n"
                                         "inventory_overrides: [nvidia_driver_persistence]\n")
    hosts = _write(tmp_path / "hosts.ini", "[gpu]\nnode1\nnode2 nvidia_driver_persistence=false\n")
    target = commands.prepare(str(profile), hosts)
    assert target.digest_for("node1") == target.loaded.digest
    assert target.digest_for("node2") != target.loaded.digest
    render(target.loaded, target.inventory, tmp_path / "out")
    rendered = yaml.safe_load((tmp_path / "out" / "hosts.yml").read_text())["all"]["children"]["gpu"]["hosts"]
    assert rendered["node2"]["provisioner_profile_sha256"] == target.digest_for("node2")
    assert "provisioner_profile_sha256" not in (rendered["node1"] or {})
    # check: a host recorded with the override's old value reads as changed
    from provisioner.engine import drift

    stale = {"recorded": True, "profile": "p", "profile_sha256": target.loaded.digest}
    assert "inventory_overrides changed" in drift.recorded_profile_check(stale, target, "node2")[0].detail
    assert drift.recorded_profile_check(dict(stale, profile_sha256=target.digest_for("node2")), target, "node2") == []


def test_role_variables_no_profile_field_renders_stay_settable(tmp_path: Path):
    hosts = _write(tmp_path / "hosts.ini", "[gpu]\nnode1 common_apt_lock_timeout=900\n")
    role_specs.check_inventory(inventory.load(hosts), profiles.load("h100-train").profile)


# --- secrets ---------------------------------------------------------------------------

SECRET_NAMES = ["ansible_become_password", "ansible_ssh_pass", "ansible_password", "ansible_ssh_private_key_passphrase",
                "password", "api_key", "apikey", "aws_secret_access_key", "aws_session_token", "vault_pass",
                "vault_password", "registry_token", "azure_client_secret", "gcp_service_account_contents",
                "db_passwd", "signing_key", "client-secret", "github.token"]
NOT_SECRETS = ["ansible_host", "ansible_user", "ansible_ssh_private_key_file", "vault_password_file",
               "common_apt_lock_timeout", "aws_access_key_id", "ansible_port", "keyboard_layout"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name: str):
    assert secrets.is_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRETS)
def test_names_that_are_not_secrets(name: str):
    assert not secrets.is_secret_name(name)


SECRET_VALUES = ["https://ci:pw@git.example/x.git", "http://u:@proxy:3128", "ghp_" + "a1" * 18,
                 "github_pat_" + "B2" * 20, "hf_" + "c3" * 17, "glpat-" + "d4" * 10, "xoxb-1234-5678-" + "e5" * 12,
                 "https://hooks.slack.com/services/T0/B0/xyz", "https://discord.com/api/webhooks/1/abc"]
NOT_SECRET_VALUES = ["https://git.example/x.git", "hf_transfer", "user@host.example", "ssh://git@git.example/x",
                     "ghp_short", "http://[::1]:8080/", "https://hooks.example/services/x"]


@pytest.mark.parametrize("value", SECRET_VALUES)
def test_secrets_in_values_whatever_the_name(value: str):
    assert secrets.holds_secret({"notes": [value]})
    assert value.split("//")[-1].split("@")[0] not in secrets.redact_values(f"see {value} now")


@pytest.mark.parametrize("value", NOT_SECRET_VALUES)
def test_values_that_are_not_secrets(value: str):
    assert not secrets.holds_secret(value) and secrets.redact_values(value) == value


def test_no_role_variable_looks_like_a_secret():
    assert [n for opts in role_specs.role_options().values() for n in opts if secrets.is_secret_name(n)] == []


def _planted_inventory(tmp_path: Path) -> Path:
    plain = " ".join(f"{name}={PLANTED}-{n}" for n, name in enumerate(SECRET_NAMES[:12]))
    hosts = _write(tmp_path / "inv" / "hosts.ini",
                   "[local]\n"
                   f'localhost ansible_connection=local ansible_python_interpreter="{{{{ ansible_playbook_python }}}}" '
                   f"{plain} site_repo=https://ci:{PLANTED}-url@git.example/x.git\n")
    _write(tmp_path / "inv" / "group_vars" / "all.yml",
           f"registry:\n  url: https://r.example\n  password: {PLANTED}-nested\n"
           # secrets in values under ordinary names (issue 28, item 15)
           f"hub: hf_{PLANTED}-hf-0123456789\n"
           f"ci:\n  checkout: ghp_{PLANTED}0123456789abcdef\n  chat: xoxb-{PLANTED}-0123456789\n"
           f"alerts: [https://hooks.slack.com/services/T0/B0/{PLANTED}, "
           f"'https://discord.com/api/webhooks/1/{PLANTED}']\n"
           f"clouds:\n  - name: a\n    aws_secret_access_key: {PLANTED}-in-list\n"
           f"deploy_material: |\n  -----BEGIN OPENSSH PRIVATE KEY-----\n  {PLANTED}-pem\n"
           "  -----END OPENSSH PRIVATE KEY-----\n")
    return hosts


def _assert_nowhere(folder: Path) -> int:
    files = [p for p in folder.rglob("*") if p.is_file()]
    for path in files:
        assert PLANTED.encode() not in path.read_bytes(), f"secret leaked into {path}"
    return len(files)


def test_planted_secrets_are_never_rendered(tmp_path: Path):
    hosts = _planted_inventory(tmp_path)
    inv = inventory.load(hosts)
    assert "group all: registry.password" in inv.dropped_secrets
    assert "group all: clouds[0].aws_secret_access_key" in inv.dropped_secrets
    assert "group all: deploy_material" in inv.dropped_secrets
    assert inv.groups["all"].vars["registry"] == {"url": "https://r.example"}
    assert {"host localhost: site_repo", "group all: hub", "group all: ci.checkout", "group all: ci.chat",
            "group all: alerts[0]", "group all: alerts[1]"} <= set(inv.dropped_secrets)
    result = CliRunner().invoke(app, ["render", "-p", "debian12-lab", str(hosts), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert PLANTED not in result.output
    assert _assert_nowhere(tmp_path / "out") == 3


def test_planted_secrets_are_not_in_a_bundle(tmp_path: Path, monkeypatch, offline_wheels):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PLANTED)
    out = tmp_path / "b" / "node.tar.gz"
    result = CliRunner().invoke(app, ["bundle", "-p", "debian12-lab", "-o", str(out), "--wheels", str(offline_wheels()),
                                      "--cloud-init-url", "https://x.example/node.tar.gz"])
    assert result.exit_code == 0, result.output
    with tarfile.open(out) as tar:
        for member in tar.getmembers():
            if member.isfile():
                assert PLANTED.encode() not in tar.extractfile(member).read(), member.name
    assert _assert_nowhere(tmp_path / "b") == 2
    # the one place a profile could carry one, a URL's password, is refused
    profile = _write(tmp_path / "p.yml", "extends: debian12-lab\nname: p\ndescription: d\n"
                                         f"mirrors:\n  pip_index_url: https://ci:{PLANTED}@pypi.example/simple\n")
    result = CliRunner().invoke(app, ["bundle", "-p", str(profile), "-o", str(tmp_path / "c.tgz")])
    assert result.exit_code == 1 and "pip_index_url carries a credential" in result.output and PLANTED not in result.output


@pytest.mark.ansible
def test_planted_secrets_are_nowhere_in_the_run_folder_of_up(tmp_path: Path):
    hosts = _planted_inventory(tmp_path)
    report = commands.execute("preflight", commands.prepare("debian12-lab", hosts), runs_dir=tmp_path / "runs")
    assert report.exit_code == 0, report.as_dict()
    assert _assert_nowhere(tmp_path / "runs") > 10


# --- exit codes ------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["render", "--bogus"], ["profiles", "show"], ["converge"],
                                  ["up", "-p", "h100-train", "x.ini", "--forks", "zero"], []])
def test_usage_errors_exit_1_not_2(args: list[str]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output


def test_exit_2_still_means_verification_failed(tmp_path: Path):
    from provisioner.verdicts.checks import failed

    report = Report("verify", "p", "0" * 64, "hosts.ini", tmp_path, started="now",
                    hosts=[HostReport("n1", "ok", checks=[failed("gpu count", "0 of 8")])])
    report.write()
    assert CliRunner().invoke(app, ["report", str(tmp_path), "--json"]).exit_code == 0  # report shows, never judges
    assert report.exit_code == 2


# --- shell-quoted commands ---------------------------------------------------------------

def test_the_retry_command_is_shell_quoted(tmp_path: Path):
    report = Report("up", "h100-train", "0" * 64, "my hosts.ini", tmp_path, started="now",
                    hosts=[HostReport("n1;touch /tmp/pwned", "unreachable"), HostReport("n2", "ok")])
    words = shlex.split(report.retry_command())
    assert words == ["provision", "up", "--profile", "h100-train", "my hosts.ini", "--limit", "n1;touch /tmp/pwned"]


def test_report_json_is_written_atomically_and_owner_only(tmp_path: Path):
    report = Report("up", "p", "0" * 64, "hosts.ini", tmp_path, started="now")
    path = report.write()
    assert json.loads(path.read_text())["command"] == "up"
    assert path.stat().st_mode & 0o077 == 0
    assert sorted(os.listdir(tmp_path)) == ["report.json"]
