"""`provision diagnose`: collect evidence from each host when something is wrong, judge it
on the controller, and write one tarball per run with a summary.md.

What runs on a host is fixed here, in `plan()`: read-only commands with no shell, each
with its own time-out and output bound, plus a few small files; the whole is bounded per
host (`max_host_bytes`). No profile or inventory string is part of a command. `--dry-run`
prints exactly this list. Nothing that holds secrets is read: no environment, no
configuration files other than apt's pin files, and what comes back is passed through
`redact()` (provisioner/profiles/secrets.py's names) before it is written or printed.

What a host sends back is untrusted: the bound is the host's own module's, so the controller
bounds it again (`max_host_bytes` + REPLY_ALLOWANCE) and keeps nothing of a host that sends
more; the tarball's member names come from this plan, never from the keys a host returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import outputs, profiles
from provisioner.engine.commands import new_run_dir
from provisioner.engine.target import Target
from provisioner.engine.runner import Become, EventHook, run_playbook
from provisioner.profiles.models import Profile
from provisioner.render import render

# The units whose journal diagnose reads: the driver's, fabric manager's, DCGM's, the
# exporter's and the state timer, where installed (journalctl ignores the others).
UNITS = ("nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvidia-dcgm.service", "dcgm.service",
         "dcgm-exporter.service", "provisioner-state.service", "provisioner-state.timer")
DMON_SAMPLES, DMON_INTERVAL_S = 5, 1  # `nvidia-smi dmon -s pcu`: 5 one-second samples
JOURNAL_LINES = 2000  # per journal command: the newest lines
MAX_HOST_BYTES = 2 * 1024 * 1024  # everything one host sends back
# Beyond the evidence the module bounds: the state comparison, each command's argv and flags.
REPLY_ALLOWANCE = 1024 * 1024
INFINIBAND_SYSFS = "/sys/class/infiniband"
# The container engines' units whose journal diagnose reads (issue 29; podman has no daemon).
CONTAINER_UNITS = ("docker.service", "containerd.service")
# The engine's own view, by the profile's containers.runtime; each kept to the lines that bear on
# the GPU runtime (its configuration can hold registry credentials: the rest stays on the host).
ENGINE_INFO = {
    "docker": (("docker", "info"), ("runtime", "cdi", "server version", "nvidia", "error", "warning")),
    "containerd": (("containerd", "config", "dump"), ("runtime", "nvidia", "cdi", "version")),
    "podman": (("podman", "info"), ("version", "ociruntime", "name:", "cdi")),
}
TOOLKIT_CLI = "/usr/bin/nvidia-container-cli"


@dataclass(frozen=True)
class Command:
    name: str
    argv: tuple[str, ...]
    why: str
    timeout: int = 30
    max_bytes: int = 262_144
    tail_lines: int = 0
    keep: tuple[str, ...] = ()  # only lines holding one of these (case-insensitive)
    only_if_path: str = ""  # run only where this path exists
    fallback: tuple[str, ...] = ()  # run instead when the first fails or prints nothing

    def as_module_arg(self) -> dict:
        return {"name": self.name, "argv": list(self.argv), "timeout": self.timeout, "max_bytes": self.max_bytes,
                "tail_lines": self.tail_lines, "keep": list(self.keep), "only_if_path": self.only_if_path,
                "fallback": list(self.fallback)}

    def shell(self) -> str:
        text = shlex.join(self.argv)
        if self.keep:
            text += f"  (lines with {', '.join(self.keep)})"
        if self.tail_lines:
            text += f"  (last {self.tail_lines} lines)"
        if self.fallback:
            text += f"  (else: {shlex.join(self.fallback)})"
        if self.only_if_path:
            text += f"  (only where {self.only_if_path} exists)"
        return text


FILES = ("/sys/module/nvidia/version", "/proc/driver/nvidia/version", "/etc/apt/preferences.d/*",
         "/etc/ansible/facts.d/provisioner.fact")


def plan(profile: Profile) -> list[Command]:
    """The commands diagnose runs on every host, in order."""
    journal_units = [a for unit in UNITS for a in ("-u", unit)]
    commands = [
        Command("virtualization", ("systemd-detect-virt",), "a container shares its host's kernel: no module of its own",
                timeout=10),
        Command("kernel", ("uname", "-r"), "the running kernel, for dkms", timeout=10),
        Command("journal_units", ("journalctl", "-b", "--no-pager", "-q", "-o", "short-iso", *journal_units),
                "the NVIDIA units' journal since boot", timeout=60, tail_lines=JOURNAL_LINES),
        Command("kernel_log", ("journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"),
                "kernel messages since boot with NVRM / Xid / nvidia lines", timeout=60, tail_lines=JOURNAL_LINES,
                keep=("NVRM", "Xid", "nvidia"), fallback=("dmesg", "--time-format", "iso")),
        Command("unit_states", ("systemctl", "show", "-p", "Id", "-p", "LoadState", "-p", "ActiveState", "-p", "SubState",
                                "-p", "UnitFileState", "-p", "Result", "--", *UNITS),
                "whether each NVIDIA unit is enabled and running", timeout=20),
        Command("failed_units", ("systemctl", "list-units", "--failed", "--no-legend", "--plain", "--no-pager"),
                "every failed unit", timeout=20),
        Command("nvidia_smi_q", ("nvidia-smi", "-q"), "the GPUs' full state", timeout=60, max_bytes=524_288),
        Command("nvidia_smi_dmon", ("nvidia-smi", "dmon", "-s", "pcu", "-c", str(DMON_SAMPLES), "-d",
                                    str(DMON_INTERVAL_S)),
                "power, temperature, utilisation and clocks over a few seconds",
                timeout=DMON_SAMPLES * DMON_INTERVAL_S + 20),
        Command("dkms_status", ("dkms", "status"), "whether the driver's module is built for the running kernel",
                timeout=30),
        Command("packages", ("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\\n", "*nvidia*",
                             "cuda-*", "libcuda*", "libnvidia*", "libcudnn*", "libnccl*", "datacenter-gpu-manager*"),
                "the installed NVIDIA packages and their versions", timeout=30),
        Command("holds", ("apt-mark", "showhold"), "the packages apt may not move", timeout=30),
        Command("dpkg_audit", ("dpkg", "--audit"), "packages an interrupted run left half-configured", timeout=30),
        Command("secure_boot", ("mokutil", "--sb-state"), "Secure Boot: an unsigned module does not load under it",
                timeout=10),
        Command("lspci_nvidia", ("lspci", "-nn", "-d", "10de:"), "NVIDIA devices on the PCI bus", timeout=10),
    ]
    commands += _container_commands(profile)
    infiniband = profile.hardware.infiniband
    where = "" if infiniband else INFINIBAND_SYSFS  # declared: run anyway, and say it is missing
    commands += [
        Command("ibstat", ("ibstat",), "InfiniBand ports: state, physical state, rate", timeout=30,
                only_if_path=where),
        Command("ibv_devinfo", ("ibv_devinfo",), "InfiniBand devices as the verbs library sees them", timeout=30,
                only_if_path=where),
    ]
    return commands


def _container_commands(profile: Profile) -> list[Command]:
    """The engines' journal, the profile's engine's own view, and nvidia-container-cli's view with
    its debug log. NVIDIA's bug template asks for `nvidia-container-cli -k -d /dev/tty info`: -k
    loads the kernel modules (diagnose changes nothing) and there is no terminal here, so the
    debug log goes to the captured stdout instead. Without a runtime in the profile it runs only
    where the toolkit is installed."""
    runtime = profile.containers.runtime
    units = [a for unit in CONTAINER_UNITS for a in ("-u", unit)]
    commands = [Command("journal_containers", ("journalctl", "-b", "--no-pager", "-q", "-o", "short-iso", *units),
                        "the container engines' journal since boot (a runtime refused, the hook failing)", timeout=60,
                        tail_lines=JOURNAL_LINES)]
    if runtime in ENGINE_INFO:
        argv, keep = ENGINE_INFO[runtime]
        commands.append(Command("container_engine", argv, f"{runtime}'s own view of its runtimes (the lines about "
                                                            "runtimes, CDI and versions)", timeout=30, keep=keep))
    commands.append(Command("nvidia_container_cli", ("nvidia-container-cli", "-d", "/dev/stdout", "info"),
                            "the NVIDIA Container Toolkit's view of the driver and GPUs, with its debug log",
                            timeout=30, only_if_path="" if runtime != "none" else TOOLKIT_CLI))
    return commands


def dry_run_lines(profile: Profile) -> list[str]:
    lines = ["on each host, as root, read-only (no shell; each bounded in time and output; "
             f"{MAX_HOST_BYTES // 1024} KiB in all per host):",
             "  provisioner_state compare  (the host against the record of its last converge, as provision check)"]
    for c in plan(profile):
        lines.append(f"  {c.shell()}  [{c.timeout} s]")
    lines.append("  read: " + ", ".join(FILES))
    return lines


@dataclass
class HostEvidence:
    name: str
    status: str  # ok, failed, unreachable
    failures: list[str] = field(default_factory=list)
    state: dict = field(default_factory=dict)  # provisioner_state compare
    collected: dict = field(default_factory=dict)  # diagnose_collect


@dataclass
class Collection:
    run_dir: Path
    hosts: list[HostEvidence]
    errors: list[str]


def collect(target: Target, *, runs_dir: Path, limit: str | None = None, forks: int | None = None,
            become: Become | None = None, hook: EventHook | None = None,
            max_host_bytes: int = MAX_HOST_BYTES) -> Collection:
    old_umask = os.umask(0o077)  # run records name hosts and hold what they said: owner-only
    try:
        run_dir = new_run_dir(runs_dir, "diagnose", target.loaded.profile.name)
        inventory_dir = run_dir / "inventory"
        try:
            render(target.loaded, target.inventory, inventory_dir, forks or 20, variables=target.role_vars)
            outputs.write_file(run_dir / "profile.yml", profiles.to_yaml(target.loaded.profile), mode=0o600)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        extravars = {"provisioner_diagnose_commands": [c.as_module_arg() for c in plan(target.loaded.profile)],
                     "provisioner_diagnose_files": list(FILES), "provisioner_diagnose_max_bytes": max_host_bytes,
                     # the whole call is bounded too: every command's own bound, one after the other
                     "provisioner_diagnose_timeout": sum(c.timeout for c in plan(target.loaded.profile)) + 60}
        run = run_playbook("diagnose", inventory_dir, run_dir, limit=limit, forks=forks, extravars=extravars,
                           hook=hook, become=become)
        hosts = []
        for name, result in sorted(run.hosts.items()):
            too_big = _too_big(result, max_host_bytes + REPLY_ALLOWANCE)
            if too_big:
                hosts.append(HostEvidence(name, "failed", [too_big]))
                continue
            hosts.append(HostEvidence(name, result.status if result.status in ("unreachable", "failed") else "ok",
                                      list(result.failures), _mapping(result.reported.get("provisioner_state")),
                                      _mapping(result.reported.get("provisioner_diagnose"))))
        return Collection(run_dir, hosts, list(run.errors))
    finally:
        os.umask(old_umask)


def _too_big(result, limit: int) -> str:
    """Why nothing of what this host sent is kept ("" when it kept to the bound): its module
    bounds its evidence, but a host that does not run our module unchanged is bound by nothing."""
    sent = [result.reported.get("provisioner_state"), result.reported.get("provisioner_diagnose"), result.failures]
    size = len(json.dumps(sent, ensure_ascii=False, default=str).encode("utf-8", "replace"))
    if size <= limit:
        return ""
    return (f"the host sent back {size} bytes, more than the {limit} diagnose takes from one host (its collection "
            f"is bounded to {MAX_HOST_BYTES} on the host): none of it is kept; diagnose it again, and if it sends too "
            "much again, look at the host itself (its diagnose_collect module may have been replaced)")


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


@dataclass
class Diagnosis:
    collection: Collection
    hosts: list  # judge.diagnose.HostDiagnosis
    summary: str
    tarball: Path

    @property
    def exit_code(self) -> int:
        """1: a host could not be diagnosed (or Ansible stopped); 2: a fault found; 0: none."""
        if self.collection.errors or any(h.status != "ok" for h in self.hosts):
            return 1
        return 2 if any(h.faults for h in self.hosts) else 0

    def as_dict(self) -> dict:
        return {"command": "diagnose", "run_dir": str(self.collection.run_dir), "tarball": str(self.tarball),
                "exit_code": self.exit_code, "errors": self.collection.errors,
                "hosts": [h.as_dict() for h in self.hosts]}


def diagnose(target: Target, *, runs_dir: Path, output: Path | None = None, force: bool = False,
             limit: str | None = None, forks: int | None = None, become: Become | None = None,
             hook: EventHook | None = None, max_host_bytes: int = MAX_HOST_BYTES) -> Diagnosis:
    """Collect from every host, judge, write summary.md and the tarball (default: in the run folder)."""
    from provisioner.judge import diagnose as judge
    from provisioner.reports import diagnose as report

    if output is not None:
        outputs.check_file(output, force=force, what="diagnose tarball")  # refused before any host is touched
    target = dataclasses.replace(target, resolution="recorded")   # read-only: judged, not resolved anew
    collection = collect(target, runs_dir=runs_dir, limit=limit, forks=forks, become=become, hook=hook,
                         max_host_bytes=max_host_bytes)
    profile = target.loaded.profile
    # Redacted once, as judged: the summary, findings.json, --json and the printed lines all come from these.
    hosts = [report.redact_host(judge.diagnose(profile, h.name, h.status, h.state, h.collected, h.failures))
             for h in collection.hosts]
    collection.errors = [report.redact(e) for e in collection.errors]
    summary = report.summary_markdown(hosts, profile=profile.name, run_dir=collection.run_dir)
    old_umask = os.umask(0o077)
    try:
        outputs.write_file(collection.run_dir / "summary.md", summary, mode=0o600, what="diagnose summary")
        path = report.tarball(output or collection.run_dir / "diagnose.tar.gz", hosts,
                              {h.name: h.collected for h in collection.hosts},
                              {h.name: h.state for h in collection.hosts}, summary, force=force,
                              commands=[c.name for c in plan(profile)], files=FILES)
    finally:
        os.umask(old_umask)
    return Diagnosis(collection, hosts, summary, path)
