"""The verify steps that span hosts: `--network` (iperf3 between pairs) and `--ddp` (one
torchrun job across the hosts). Each runs one playbook with a per-host plan the controller
computed (engine/network.py) and folds the results into the report as checks."""

from __future__ import annotations

from pathlib import Path

from provisioner.engine import network as net
from provisioner.engine.runner import Become, EventHook, run_playbook
from provisioner.judge import ddp as ddp_judge
from provisioner.judge import network as net_judge
from provisioner.verdicts.checks import failed, skipped
from provisioner.reports.report import HostReport, Report


def _host(report: Report, name: str) -> HostReport:
    for host in report.hosts:
        if host.name == name:
            return host
    host = HostReport(name, "ok")
    report.hosts.append(host)
    report.hosts.sort(key=lambda h: h.name)
    return host


def run_step(step: str, report: Report, target, inventory_dir: Path, run_dir: Path, limit: str | None,
             forks: int | None, hook: EventHook | None, become: Become | None) -> None:
    broken = {h.name for h in report.hosts if h.broken}
    hosts = [h for h in net.selected_hosts(inventory_dir / "hosts.yml", limit) if h not in broken]
    (_network if step == "network" else _ddp)(report, target, inventory_dir, run_dir, hosts, forks, hook, become)


def _fold_failures(report: Report, run) -> None:
    for name, result in run.hosts.items():
        host = _host(report, name)
        host.failures.extend(result.failures)
        if result.status in ("unreachable", "failed"):
            host.status = result.status
    report.errors.extend(run.errors)


def _network(report, target, inventory_dir, run_dir, hosts, forks, hook, become) -> None:
    profile = target.loaded.profile
    if len(hosts) < 2:
        for name in hosts:
            _host(report, name).checks.append(skipped("network", "needs two hosts or more (iperf3 between pairs)"))
        return
    plan, pairs = net.network_plan(profile, target.inventory, hosts)
    duration = profile.network.duration_s
    extravars = {"provisioner_network_plan": plan, "provisioner_network_duration": duration,
                 "provisioner_network_lifetime": net.server_lifetime(duration),
                 "provisioner_network_ibstat": "yes" if profile.hardware.infiniband else "present"}
    run = run_playbook("network", inventory_dir, run_dir, limit=",".join(hosts), forks=forks, extravars=extravars,
                       hook=hook, become=become)
    _fold_failures(report, run)
    for pair in pairs:
        result = run.hosts.get(pair.client)
        if result is None or result.status in ("unreachable", "failed"):
            continue
        _host(report, pair.client).checks.append(
            net_judge.judge_pair(profile, pair.client, pair.server, result.reported.get("provisioner_network")))
    for name in hosts:
        result = run.hosts.get(name)
        if result is not None and result.status not in ("unreachable", "failed") and any(p.client == name for p in pairs):
            _host(report, name).checks.extend(
                net_judge.judge_infiniband(profile, (result.reported.get("provisioner_network") or {}).get("ibstat")))


def _ddp(report, target, inventory_dir, run_dir, hosts, forks, hook, become) -> None:
    profile = target.loaded.profile
    if not hosts:
        return
    if not any(env.pytorch for env in profile.python_envs):
        for name in hosts:
            _host(report, name).checks.append(skipped("ddp", "the profile installs no PyTorch (python_envs[].framework)"))
        return
    ddp = profile.network.ddp
    addresses = {h: net.test_address(target.inventory, h) for h in hosts}
    plan = {h: {"nnodes": len(hosts), "node_rank": rank, "master_addr": addresses[hosts[0]],
                "master_port": ddp.port, "local_addr": addresses[h]} for rank, h in enumerate(hosts)}
    extravars = {"provisioner_ddp_plan": plan, "provisioner_ddp_timeout": ddp.timeout_s,
                 "provisioner_ddp_steps": ddp.steps, "provisioner_ddp_tensor_mib": ddp.tensor_mib}
    # Every node must join the rendezvous at once: never fewer forks than hosts.
    run = run_playbook("ddp", inventory_dir, run_dir, limit=",".join(hosts), forks=max(forks or 0, len(hosts)),
                       extravars=extravars, hook=hook, become=become)
    _fold_failures(report, run)
    lost = sorted(n for n, r in run.hosts.items() if r.status in ("unreachable", "failed"))
    for name in hosts:
        result = run.hosts.get(name)
        host = _host(report, name)
        if result is None or result.status in ("unreachable", "failed"):
            why = "unreachable" if result is not None and result.status == "unreachable" else "failed"
            host.checks.append(failed("ddp", f"{name} {why} during the DDP job: " + "; ".join(host.failures[-1:])))
            continue
        host.checks.extend(ddp_judge.judge_ddp(name, result.reported.get("provisioner_ddp"),
                                               profile.hardware.gpu.count, hosts, [n for n in lost if n != name]))
