"""What `provision diagnose` found on one host: findings, the most important first, each with
the evidence lines it stands on and the fix; and what could not be collected, and why.

Pure: it reads what the diagnose play returned (provisioner_state compare + diagnose_collect)
and the profile. The readers are in parsers/ (ibstat, dmon, kernel_log, nvidia_smi).
A fix is a command a person may paste: every word in it that a host supplied (a unit, a
package, a kernel release) is shell-quoted.
"""

from __future__ import annotations

import re
from shlex import quote

from provisioner.judge import containers as containers_judge
from provisioner.judge import verify
from provisioner.profiles.models import Profile
from provisioner.parsers import dmon as dmon_mod
from provisioner.parsers import ibstat as ibstat_mod
from provisioner.parsers import containers as containers_read
from provisioner.parsers import kernel_log, nvidia_smi
from provisioner.verdicts.diagnosis import SEVERITIES, Finding, HostDiagnosis


def _out(collected: dict, name: str) -> dict:
    return (collected.get("commands") or {}).get(name) or {}


def _ok(cmd: dict) -> bool:
    return int(cmd.get("rc", -1)) == 0 and not cmd.get("skipped") and not cmd.get("missing")


def _lines(text: str, pattern: str = "", limit: int = 12) -> list[str]:
    found = [line.rstrip() for line in str(text).splitlines() if line.strip() and (not pattern or re.search(pattern, line))]
    return found[-limit:]


def _props(text: str) -> dict[str, dict[str, str]]:
    """`systemctl show -p ...` of several units: unit -> its properties."""
    units = {}
    for block in str(text).strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def _packages(text: str) -> dict[str, tuple[str, str]]:
    """dpkg-query `${db:Status-Abbrev} ${Package} ${Version}` -> name: (abbrev, version)."""
    found = {}
    for line in str(text).splitlines():
        parts = line.split()
        if len(parts) == 3:
            found[parts[1]] = (parts[0], parts[2])
    return found


# Exit codes that still mean "read": dpkg-query exits 1 when one of its patterns matches no package.
OK_RCS = {"packages": (0, 1)}
# Commands whose failure is itself the evidence a finding reads (no "could not collect" line).
READ_WHEN_FAILED = {"nvidia_container_cli", "container_engine"}


def _why_missing(name: str, cmd: dict, *, container: bool) -> str | None:
    """Why a command gave nothing to read, or None when it did."""
    argv = " ".join(cmd.get("argv") or [name])
    if int(cmd.get("rc", -1)) in OK_RCS.get(name, ()) and str(cmd.get("stdout", "")).strip():
        return None
    if name == "kernel_log" and int(cmd.get("rc", -1)) == 0 and not int(cmd.get("lines") or 0):
        return (f"{argv}: no kernel message since boot is visible here"
                + (" (a container does not see its host's kernel log)" if container else ""))
    if cmd.get("skipped"):
        return f"{argv}: not run ({cmd['skipped']})"
    if cmd.get("missing"):
        return f"{argv}: not installed on this host"
    if cmd.get("timed_out"):
        return f"{argv}: did not answer within its time-out ({cmd.get('stderr', '')})"
    if int(cmd.get("rc", -1)) != 0:
        text = " ".join(f"{cmd.get('stdout', '')} {cmd.get('stderr', '')}".split())
        failure = nvidia_smi.classify(text) if argv.startswith("nvidia-smi") else None
        if failure and "communicate with the NVIDIA driver" in text:
            where = " (a container: it has no GPU device and shares its host's kernel)" if container else ""
            return f"{argv}: no GPU to read: nvidia-smi cannot talk to a loaded driver{where}"
        return f"{argv}: exited {cmd.get('rc')}: {text[:200]}"
    return None


def diagnose(profile: Profile, name: str, status: str, state: dict, collected: dict,
             failures: list[str] | None = None) -> HostDiagnosis:
    host = HostDiagnosis(name, status, failures=list(failures or []))
    if status != "ok" or not collected:
        if status == "unreachable":
            host.findings.append(Finding("fault", "the host could not be reached", tuple(host.failures[:3]),
                                         "check that it is up and that SSH answers (ssh to it as the inventory user)"))
        elif status == "failed":
            host.findings.append(Finding("fault", "the collection failed on this host", tuple(host.failures[:3]),
                                         "read the run record's artifacts/diagnose/stdout"))
        return host
    virt = _out(collected, "virtualization")
    container = str(virt.get("stdout", "")).strip() in ("podman", "docker", "lxc", "systemd-nspawn", "container-other",
                                                        "oci", "wsl", "lxc-libvirt", "rkt", "openvz")
    files = collected.get("files") or {}
    module_version = (files.get("/sys/module/nvidia/version") or "").strip()
    packages = _packages(_out(collected, "packages").get("stdout", ""))
    holds = set(_out(collected, "holds").get("stdout", "").split())
    units = _props(_out(collected, "unit_states").get("stdout", ""))
    journal = str(_out(collected, "journal_units").get("stdout", ""))

    host.findings += _state_findings(state, packages, holds, units, journal)
    host.findings += _unit_findings(units, journal, module_version, container, state)
    host.findings += _driver_findings(profile, collected, module_version, packages, container)
    host.findings += _kernel_log_findings(profile, _out(collected, "kernel_log"))
    host.findings += _infiniband_findings(profile, _out(collected, "ibstat"))
    host.findings += _dmon_findings(_out(collected, "nvidia_smi_dmon"))
    host.findings += _container_findings(profile, collected)
    failed_units = _lines(_out(collected, "failed_units").get("stdout", ""))
    if failed_units:
        host.findings.append(Finding("warning", f"{len(failed_units)} failed systemd unit(s)", tuple(failed_units),
                                     "journalctl -u <unit> -b says why; systemctl reset-failed once fixed"))

    for cmd_name, cmd in (collected.get("commands") or {}).items():
        if cmd_name in READ_WHEN_FAILED and containers_read.known_failures(f"{cmd.get('stdout', '')}\n{cmd.get('stderr', '')}"):
            continue
        why = _why_missing(cmd_name, cmd, container=container)
        if why:
            host.not_collected.append(why)
    for path in collected.get("left_out") or []:
        host.not_collected.append(f"{path}: left out, the per-host size bound was reached")
    if not module_version:
        host.not_collected.append("/sys/module/nvidia/version: no nvidia kernel module is loaded"
                                  + (" (a container: the module would be its host's)" if container else ""))
    host.findings.sort(key=lambda f: SEVERITIES.index(f.severity))
    return host


def _state_findings(state: dict, packages: dict, holds: set, units: dict, journal: str) -> list[Finding]:
    findings = []
    if not state.get("recorded"):
        findings.append(Finding("info", "no record of a converge by provision on this host",
                                ("/etc/ansible/facts.d/provisioner.fact is missing",),
                                "provision up records one; without it diagnose cannot say what moved"))
    for diff in state.get("differences") or []:
        item, was, now = diff.get("item", ""), diff.get("recorded"), diff.get("now")
        evidence = [f"record of the last converge: {item}: {was}", f"now: {now}"]
        if item.startswith("hold removed: "):
            package = item.split(": ", 1)[1]
            abbrev, version = packages.get(package, ("", "?"))
            evidence += [f"dpkg: {abbrev} {package} {version}",
                         f"apt-mark showhold: {package} is not listed" if package not in holds else ""]
            findings.append(Finding("fault", f"driver package {package} is no longer held: apt upgrade can move it "
                                             "away from the rest of the driver", tuple(e for e in evidence if e),
                                    f"apt-mark hold {quote(package)} (or provision up --limit <host>, which re-pins and "
                                    "holds every driver package)"))
        elif item.startswith("package "):
            findings.append(Finding("fault", f"{item} moved off the version the profile pins", tuple(evidence),
                                    "provision up --limit <host> puts it back on its pinned version and holds it"))
        elif item.startswith("unit "):
            unit = item.split()[1]
            props = units.get(unit, {})
            evidence.append("systemctl: " + " ".join(f"{k}={props[k]}" for k in
                                                     ("ActiveState", "SubState", "UnitFileState", "Result") if k in props))
            evidence += _lines(journal, re.escape(unit.removesuffix(".service")), 6)
            verb = "disabled" if item.endswith(" enabled") else "stopped"
            findings.append(Finding("fault", f"unit {unit} was {verb} since the last converge", tuple(evidence),
                                    f"systemctl enable --now {quote(unit)} (or provision up --limit <host>); "
                                    f"journalctl -u {quote(unit)} -b says why it stopped"))
        elif item.startswith("file "):
            findings.append(Finding("fault", f"managed {item}", tuple(evidence),
                                    "provision up --limit <host> writes it back"))
        else:
            findings.append(Finding("warning", item, tuple(evidence), "provision up --limit <host>"))
    if state.get("dpkg_audit"):
        findings.append(Finding("fault", "dpkg left packages half-configured (an interrupted apt run)",
                                tuple(_lines(state["dpkg_audit"], limit=8)),
                                "dpkg --configure -a (provision up does it first)"))
    return findings


def _unit_findings(units: dict, journal: str, module_version: str, container: bool, state: dict) -> list[Finding]:
    """NVIDIA units that are enabled but not running (beyond what the record already said)."""
    said = {d.get("item", "").split()[1] for d in state.get("differences") or [] if d.get("item", "").startswith("unit ")}
    findings = []
    for unit, props in sorted(units.items()):
        if props.get("LoadState") != "loaded" or unit in said:
            continue
        enabled = props.get("UnitFileState") in ("enabled", "enabled-runtime", "static")
        active = props.get("ActiveState")
        if active == "failed":
            findings.append(Finding("fault", f"unit {unit} has failed", (
                f"systemctl: ActiveState=failed Result={props.get('Result', '?')}",
                *_lines(journal, re.escape(unit.removesuffix(".service")), 8)),
                f"journalctl -u {quote(unit)} -b says why; fix that, then systemctl restart {quote(unit)}"))
        elif enabled and active != "active" and unit.endswith(".service") and "nvidia" in unit:
            if not module_version:
                findings.append(Finding("info", f"unit {unit} is enabled but not running: no nvidia kernel module is "
                                                "loaded" + (" (a container shares its host's kernel)" if container else ""),
                                        (f"systemctl: ActiveState={active} UnitFileState={props.get('UnitFileState')}",
                                         *_lines(journal, re.escape(unit.removesuffix(".service")), 4)),
                                        "on a GPU host: load the driver (reboot into the kernel dkms built it for)"))
            else:
                findings.append(Finding("fault", f"unit {unit} is enabled but not running",
                                        (f"systemctl: ActiveState={active} UnitFileState={props.get('UnitFileState')}",
                                         *_lines(journal, re.escape(unit.removesuffix(".service")), 6)),
                                        f"systemctl start {quote(unit)}; journalctl -u {quote(unit)} -b says why it "
                                        "stopped"))
    return findings


def _driver_findings(profile: Profile, collected: dict, module_version: str, packages: dict,
                     container: bool) -> list[Finding]:
    findings = []
    smi = _out(collected, "nvidia_smi_q")
    if profile.expects_gpu and int(smi.get("rc", -1)) != 0:
        text = f"{smi.get('stdout', '')}\n{smi.get('stderr', '')}"
        failure = nvidia_smi.classify(text) or nvidia_smi.Failure(
            f"nvidia-smi exited {smi.get('rc')}", "run nvidia-smi on the host and read its message")
        findings.append(Finding("fault", f"nvidia-smi fails: {failure.cause}",
                                tuple(_lines(text, limit=4)) or (f"rc {smi.get('rc')}",), failure.fix))
    driver = next((v for n, (a, v) in packages.items() if a.startswith("ii") and re.fullmatch(
        r"(nvidia-driver|nvidia-kernel-dkms|nvidia-dkms-\d+|nvidia-driver-\d+(-server)?(-open)?|nvidia-open)", n)), "")
    if module_version and driver and not driver.startswith(module_version):
        findings.append(Finding("fault", f"the loaded nvidia module {module_version} is not the installed driver {driver}",
                                (f"/sys/module/nvidia/version: {module_version}", f"dpkg: driver {driver}"),
                                "reboot the host (drain it first) so the installed driver loads"))
    if profile.expects_gpu and not module_version and not container:
        findings.append(Finding("fault", "no nvidia kernel module is loaded", ("/sys/module/nvidia/version: absent",),
                                "dkms status shows whether it is built for the running kernel; modprobe nvidia, "
                                "or reboot into that kernel"))
    lspci = _out(collected, "lspci_nvidia")
    if _ok(lspci) and not str(lspci.get("stdout", "")).strip():
        if profile.expects_gpu and not container:
            findings.append(Finding("fault", "no NVIDIA device on the PCI bus", ("lspci -nn -d 10de: printed nothing",),
                                    "the host does not see its GPUs: check seating and power, the BIOS (above-4G "
                                    "decoding), or the VM's passthrough"))
        else:
            findings.append(Finding("info", "no NVIDIA device on the PCI bus" + (
                " (a container: the GPU tools had nothing to read)" if container else ""),
                ("lspci -nn -d 10de: printed nothing",), "none needed: the profile expects no GPU"
                if not profile.expects_gpu else "pass the GPUs into the container"))
    dkms = _out(collected, "dkms_status")
    kernel = str(_out(collected, "kernel").get("stdout", "")).strip()
    if _ok(dkms) and kernel:
        nvidia = [line for line in dkms.get("stdout", "").splitlines() if "nvidia" in line.lower()]
        if nvidia and not any(kernel in line and "installed" in line for line in nvidia) and not container:
            findings.append(Finding("fault" if profile.expects_gpu else "warning",
                                    f"dkms has no nvidia module installed for the running kernel {kernel}",
                                    tuple(nvidia[:6]), f"apt install {quote('linux-headers-' + kernel)}, then "
                                                       "dkms autoinstall (and reboot if the module must load)"))
    sb = _out(collected, "secure_boot")
    if _ok(sb) and "enabled" in sb.get("stdout", "").lower() and profile.driver.source == "distro":
        findings.append(Finding("warning", "Secure Boot is on: a DKMS-built module loads only when signed with an "
                                           "enrolled key (MOK)", tuple(_lines(sb.get("stdout", ""), limit=2)),
                                "enrol the DKMS signing key (mokutil --import) or use signed prebuilt modules"))
    return findings


def _kernel_log_findings(profile: Profile, log: dict) -> list[Finding]:
    if not _ok(log):
        return []
    text = str(log.get("stdout", ""))
    events = kernel_log.read_xids(text)
    if not events:
        return []
    check = verify.judge_xid(profile, events, None)[0]
    evidence = _lines(text, r"NVRM: Xid", 10)
    return [Finding("info" if check.status == "pass" else "fault", check.detail.split(":")[0], tuple(evidence),
                    check.detail)]


def _infiniband_findings(profile: Profile, cmd: dict) -> list[Finding]:
    if not _ok(cmd):
        if profile.hardware.infiniband and not cmd.get("skipped"):
            return [Finding("fault", "the profile declares InfiniBand but ibstat gave nothing to read",
                            (" ".join(f"{cmd.get('stdout', '')} {cmd.get('stderr', '')}".split())[:200] or "no output",),
                            "apt install infiniband-diags; check the HCA driver (lsmod | grep mlx5)")]
        return []
    try:
        ports = ibstat_mod.read_ibstat(str(cmd.get("stdout", "")))
    except ibstat_mod.IbstatError as exc:
        return [Finding("warning", "ibstat's output could not be read", (str(exc),), "run ibstat on the host")]
    return [Finding("fault", f"InfiniBand {p.name} is {p.state}/{p.physical_state}",
                    (f"ibstat: CA '{p.ca}' Port {p.port}: State: {p.state}, Physical state: {p.physical_state}, "
                     f"Rate: {p.rate_gbps:g}, Link layer: {p.link_layer}",),
                    "check the cable and the switch port; ibportstate / the subnet manager's log")
            for p in ports if p.link_layer.lower() == "infiniband" and not p.up]


def _dmon_findings(cmd: dict) -> list[Finding]:
    if not _ok(cmd):
        return []
    try:
        sample = dmon_mod.read_dmon(str(cmd.get("stdout", "")))
    except dmon_mod.DmonError as exc:
        return [Finding("warning", "nvidia-smi dmon's output could not be read", (str(exc),), "run it on the host")]
    evidence = []
    for gpu in sample.gpus:
        parts = [f"{col} max {sample.peak(col, gpu):g}" for col in ("pwr", "gtemp", "sm", "mem", "pclk")
                 if sample.peak(col, gpu) is not None]
        evidence.append(f"GPU {gpu}: " + ", ".join(parts))
    return [Finding("info", f"dmon: {len(sample.samples)} samples of {len(sample.gpus)} GPU(s)", tuple(evidence),
                    "nvidia-smi dmon -s pcu on the host to watch it live")]


def _container_findings(profile: Profile, collected: dict) -> list[Finding]:
    """Known failure lines of the engines and the toolkit (a fault when a command printed it now,
    a warning when only the journal since boot holds it), the engine's registration of the nvidia
    runtime, and what nvidia-container-cli sees."""
    findings = []
    said = set()
    for name, severity in (("container_engine", "fault"), ("nvidia_container_cli", "fault"),
                           ("journal_containers", "warning")):
        cmd = _out(collected, name)
        for failure in containers_read.known_failures(f"{cmd.get('stdout', '')}\n{cmd.get('stderr', '')}"):
            if failure.key in said:
                continue
            said.add(failure.key)
            cause, fix = containers_judge.failure_text(failure)
            where = "" if severity == "fault" else " (in the journal since boot)"
            findings.append(Finding(severity, cause + where, (failure.line,), fix))
    engine = _out(collected, "container_engine")
    runtime = profile.containers.runtime
    if _ok(engine) and runtime == "docker" and "unknown-runtime" not in said:
        text = str(engine.get("stdout", ""))
        for check in containers_judge.docker_runtime(containers_read.docker_info(text), profile.containers.default_runtime):
            if check.status == "fail":
                findings.append(Finding("fault", f"{check.name}: {check.detail.split(':')[0]}",
                                        tuple(_lines(text, r"(?i)runtime", 4)),
                                        "provision up --limit <host> registers it again (daemon.json), then docker "
                                        "restarts; docker info | grep -i runtime shows it"))
    elif _ok(engine) and runtime == "containerd":
        text = str(engine.get("stdout", ""))
        tables = containers_read.containerd_runtime_tables(text)
        if containers_judge.RUNTIME not in tables:
            findings.append(Finding("fault", "containerd's configuration registers no nvidia runtime",
                                    (f"runtimes: {', '.join(tables) or 'none'}",),
                                    "provision up --limit <host> registers it again (config.toml), then containerd "
                                    "restarts; containerd config dump shows it"))
    cli = _out(collected, "nvidia_container_cli")
    if _ok(cli):
        info = containers_read.nvidia_container_cli_info(str(cli.get("stdout", "")))
        findings.append(Finding("info", f"nvidia-container-cli sees driver {info.driver or 'none'} and "
                                        f"{len(info.devices)} GPU(s)",
                                tuple(f"GPU {d.index}: {d.model or '?'} {d.uuid or '?'} {d.bus or '?'}"
                                      for d in info.devices[:8]),
                                "compare with nvidia-smi -L: both must name the same GPUs and driver"))
    return findings
