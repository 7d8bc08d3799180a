from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from provisioner.cli import app
from provisioner.errors import ProvisionError

from .conftest import REPO

runner = CliRunner()
EXAMPLE = str(REPO / "inventories" / "example" / "hosts.ini")


def test_profiles_lists_every_builtin_with_gpus_cuda_and_driver():
    result = runner.invoke(app, ["profiles"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for row in ("h100-train", "8x H100 80GB HBM3", "debian12-lab", "rtx4090-dev", "12.4", "h200-train",
                "8x H200", "b200-train", "8x B200", "rtx5090-cv", "2x RTX 5090", "a10-infer", "1x A10",
                "580.159.04"):
        assert row in result.output


def test_validate_warns_on_an_end_of_life_branch_and_strict_refuses_it():
    lax = runner.invoke(app, ["profiles", "validate", "debian12-lab"])
    assert lax.exit_code == 0 and "[driver-eol]" in lax.output and "2026-06" in lax.output
    assert "move to R580" in lax.output
    strict = runner.invoke(app, ["profiles", "validate", "--strict", "debian12-lab", "l40s-infer"])
    assert strict.exit_code == 1 and "--strict refuses" in strict.output and "Traceback" not in strict.output
    assert "ok    l40s-infer" in strict.output  # a supported branch passes --strict


def test_every_builtin_on_a_supported_branch_passes_strict():
    from provisioner import profiles

    # debian12-lab keeps Debian's R535 on purpose; h100-train moves to R580 in the lead's branch.
    names = [n for n in profiles.builtin_names() if n not in ("debian12-lab", "h100-train")]
    result = runner.invoke(app, ["profiles", "validate", "--strict", *names])
    assert result.exit_code == 0 and result.output.count("ok ") == len(names) and "warn" not in result.output


def test_up_strict_refuses_an_end_of_life_profile_before_touching_hosts(tmp_path: Path):
    runs = tmp_path / "runs"
    result = runner.invoke(app, ["up", "--strict", "-p", "debian12-lab", EXAMPLE, "--runs-dir", str(runs)])
    assert result.exit_code == 1 and "--strict refuses" in result.output and "[driver-eol]" in result.output
    assert not runs.exists()  # refused before a run folder (or a host) was touched


def test_profiles_show_prints_the_resolved_yaml():
    result = runner.invoke(app, ["profiles", "show", "t4-infer"])
    assert result.exit_code == 0
    data = yaml.safe_load(result.output)
    assert data["name"] == "t4-infer"
    assert data["tensorrt"]["version"] == "8.5.3"  # inherited from l40s-infer
    assert data["hardware"]["gpu"]["architecture"] == "turing"
    assert "extends" not in data


def test_profiles_validate_exit_codes(tmp_path: Path):
    good = runner.invoke(app, ["profiles", "validate", "h100-train", "debian12-lab"])
    assert good.exit_code == 0 and good.output.count("ok") == 2
    bad_file = REPO / "tests/data/bad/profiles/torch-cu122.yml"
    bad = runner.invoke(app, ["profiles", "validate", "h100-train", str(bad_file)])
    assert bad.exit_code == 1
    assert "[torch-index]" in bad.output and "use cu121" in bad.output and "Traceback" not in bad.output


def test_render_writes_the_folder(tmp_path: Path):
    result = runner.invoke(app, ["render", "--profile", "h100-train", EXAMPLE, "-o", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x/hosts.yml").is_file() and (tmp_path / "x/group_vars/all/provisioner.yml").is_file()


def test_render_warns_about_dropped_secrets(tmp_path: Path):
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[gpu]\nn1 ansible_host=10.1.1.1 ansible_become_password=s3cr3t\n")
    result = runner.invoke(app, ["render", "-p", "h100-train", str(hosts), "-o", str(tmp_path / "x")])
    assert result.exit_code == 0
    assert "left out secret host n1: ansible_become_password" in result.output
    assert "s3cr3t" not in result.output


def test_unknown_profile_is_one_clear_line_and_debug_shows_the_traceback():
    result = runner.invoke(app, ["render", "-p", "nope", EXAMPLE, "-o", "/tmp/never"])
    assert result.exit_code == 1
    assert "error: unknown profile 'nope'" in result.output and "fix: use one of" in result.output
    debug = runner.invoke(app, ["--debug", "render", "-p", "nope", EXAMPLE, "-o", "/tmp/never"])
    # Raised (for a traceback), not turned into the one-line message.
    assert debug.exit_code == 1 and isinstance(debug.exception, ProvisionError), repr(debug.exception)
    assert "error: unknown profile" not in debug.output


def test_missing_inventory_file(tmp_path: Path):
    result = runner.invoke(app, ["check", "-p", "h100-train", str(tmp_path / "hosts.ini"),
                                 "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1 and "inventory file not found" in result.output
    assert not (tmp_path / "runs").exists()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("provision ")


def test_every_host_command_has_the_fleet_options():
    for command in ("preflight", "up", "check", "verify", "plan"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        for option in ("--limit", "--forks", "--json", "--profile", "--runs-dir"):
            assert option in result.output, (command, option)


def test_bad_batch_and_max_fail_are_refused_before_any_host(tmp_path: Path):
    for args, text in ((["--batch", "0"], "--batch '0' is not a host count"),
                       (["--batch", "150%"], "--batch '150%'"),
                       (["--max-fail", "lots"], "--max-fail 'lots' is not a percentage")):
        result = runner.invoke(app, ["up", "-p", "h100-train", EXAMPLE, "--runs-dir", str(tmp_path / "runs"), *args])
        assert result.exit_code == 1 and text in result.output
        assert not (tmp_path / "runs").exists()


def test_python_dash_m_provisioner_cli_is_the_provision_command():
    """The Molecule nvidia scenario's dependency step runs `python -m provisioner.cli render`."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "provisioner.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("provision "), r.stderr


def test_every_fleet_command_takes_verbose():
    for command in ("preflight", "up", "check", "verify", "plan"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "--verbose" in result.output, command


def test_plan_refuses_bad_input_before_any_host(tmp_path: Path):
    result = runner.invoke(app, ["plan", "-p", "h100-train", str(tmp_path / "hosts.ini"),
                                 "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 1 and "inventory file not found" in result.output
    assert not (tmp_path / "runs").exists()
    result = runner.invoke(app, ["plan", "-p", "h100-train", EXAMPLE, "--batch", "1"])
    assert result.exit_code == 1 and "--batch" in result.output  # plan surveys every host at once


def test_up_asks_only_where_a_person_answers(monkeypatch):
    """up shows the plan and asks only with a terminal on stdin and stdout, without --yes or --json:
    CI, cron and the lab tests (no terminal) never wait on a question."""
    import sys

    from provisioner.cli import hosts

    for stdin, stdout, yes, as_json, asks in ((True, True, False, False, True), (False, True, False, False, False),
                                             (True, False, False, False, False), (True, True, True, False, False),
                                             (True, True, False, True, False)):
        monkeypatch.setattr(sys.stdin, "isatty", lambda s=stdin: s, raising=False)
        monkeypatch.setattr(sys.stdout, "isatty", lambda s=stdout: s, raising=False)
        assert hosts._asks(yes, as_json) is asks
