"""`provision accept`: does each node deliver what its GPUs promise, what does a sample cost, and
which node of a fleet is slow. It installs and changes nothing: the verify play (with `dcgmi
diag` at the level's run), then per node the accept play (the all-reduce across the node's
GPUs and, at standard, the torch measurements, in the profile's environment as its owner,
each job bounded), then with `fleet` one all-reduce across the hosts (the ddp play) and, when
it falls short of its floor, the slow-node search (engine/bisect.py), each round one ddp play
(its host sets' all-reduces side by side). Everything is judged through judge/accept.py into the one Report.

Levels: quick (verify, `dcgmi diag -r 1`, the node all-reduce, the exporter's metric
contract), standard (adds `dcgmi diag -r 2`, GEMM per precision, memory bandwidth,
host<->device and GPU<->GPU copies), burn-in (standard's steps with `dcgmi diag -r 3`, then a
sustained GEMM load for the profile's accept.burn_in.duration_s or --duration, GPU telemetry
sampled throughout and Xid events counted before and after; judge/burn_in.py judges it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from provisioner.engine import bisect
from provisioner.engine import network as net
from provisioner.engine.runner import Become, EventHook, run_playbook
from provisioner.errors import ProvisionError
from provisioner.judge import accept as accept_judge
from provisioner.judge import burn_in as burn_in_judge
from provisioner.judge import cost as cost_mod
from provisioner.judge import ddp as ddp_judge
from provisioner.judge.verify import probed_env  # the first PyTorch environment: the one accept_run uses
from provisioner.profiles import skus
from provisioner.profiles.models import BURN_IN_S
from provisioner.reports import monitoring
from provisioner.reports.report import HostReport, Report
from provisioner.verdicts.checks import failed, passed, skipped

LEVELS = ("quick", "standard", "burn-in")
DIAG_LEVEL = {"quick": 1, "standard": 2, "burn-in": 3}
MEASURE = {"quick": [], "standard": ["gemm", "copies"], "burn-in": ["gemm", "copies"]}


@dataclass(frozen=True)
class Request:
    level: str = "quick"
    fleet: bool = False
    price_per_hour: float | None = None  # $/hour of one node: the cost table (else the profile's cost.per_hour)
    drain_hook: str | None = None        # the site's drain command ({host}); else Slurm's scontrol
    run_drain: bool = False              # run the drain of a named slow node (else it is printed only)
    timeout_s: int = 600                 # each measurement job's bound (its process group is killed)
    duration_s: int | None = None        # burn-in's sustained load, seconds (else the profile's accept.burn_in)

    def check(self, profile=None) -> None:
        """Refuse what cannot run, before any host is touched (with the profile: what needs it too)."""
        if self.level not in DIAG_LEVEL:
            raise ProvisionError(f"unknown level {self.level!r}", where="--level", fix="quick, standard or burn-in")
        if self.duration_s is not None and self.level != "burn-in":
            raise ProvisionError("--duration is the burn-in level's sustained load", where="--duration",
                                 fix="add --level burn-in, or drop --duration")
        low, high = BURN_IN_S
        if self.duration_s is not None and not low <= self.duration_s <= high:
            raise ProvisionError(f"--duration {self.duration_s} is out of range", where="--duration",
                                 fix=f"give seconds from {low} to {high}")
        if profile is not None and self.level == "burn-in" and self.burn_in_s(profile) is None:
            raise ProvisionError("--level burn-in needs a duration: set accept.burn_in.duration_s in the profile, "
                                 "or give --duration", where="accept.burn_in.duration_s",
                                 fix="e.g. accept: {burn_in: {duration_s: 3600}} (no default: no NVIDIA or provider "
                                     "source gives one duration)")
        if (self.drain_hook or self.run_drain) and not self.fleet:
            raise ProvisionError("--drain-hook and --run-drain act on the slow node --fleet names", where="--run-drain",
                                 fix="add --fleet")
        if self.price_per_hour is not None and not 0 < self.price_per_hour < 1e6:
            raise ProvisionError(f"--price-per-hour {self.price_per_hour:g} is not a price", where="--price-per-hour",
                                 fix="give what one node costs per hour, e.g. 32")

    def burn_in_s(self, profile) -> int | None:
        """The burn-in's sustained load in seconds (--duration wins over the profile); None below burn-in."""
        if self.level != "burn-in":
            return None
        return self.duration_s or profile.accept.burn_in.duration_s


# `dcgmi diag -r 3` "normally lasting approximately 15 minutes" (NVIDIA, dcgmi diag reference:
# docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html), which is
# the verify role's default bound of 900 s: at burn-in the bound is twice that, so a normal run is not cut.
DIAG_3_BOUND_S = 1800


def verify_extravars(profile, level: str) -> dict:
    """The verify play at the level's `dcgmi diag` run (where the profile installed DCGM)."""
    run = DIAG_LEVEL[level] if profile.dcgm.enabled else 0
    return {"gpu_verify_dcgm_diag_level": run} | ({"gpu_verify_timeout": DIAG_3_BOUND_S} if run == 3 else {})


def steps(request: Request) -> tuple[str, ...]:
    return ("verify", "accept") + (("fleet",) if request.fleet else ())


def _host(report: Report, name: str) -> HostReport:
    for host in report.hosts:
        if host.name == name:
            return host
    host = HostReport(name, "ok")
    report.hosts.append(host)
    report.hosts.sort(key=lambda h: h.name)
    return host


def _fold_failures(report: Report, run) -> None:
    for name, result in run.hosts.items():
        host = _host(report, name)
        host.failures.extend(result.failures)
        if result.status in ("unreachable", "failed"):
            host.status = result.status
    report.errors.extend(run.errors)


def metric_contract(loaded) -> dict[str, str]:
    """Every DCGM field the shipped dashboard (as rendered for this profile) and the alert rules
    use: metric -> where."""
    used: dict[str, str] = {}
    try:
        board, _ = monitoring.dashboard(loaded)
    except ProvisionError:  # the profile collects nothing the dashboard shows: no panel uses a field
        board = {"panels": []}
    for panel in board.get("panels", []):
        for metric in sorted(monitoring.panel_metrics(panel)):
            used.setdefault(metric, f"dashboard panel {panel.get('title', '?')!r}")
    for group in monitoring.alert_rules(loaded)["groups"]:
        for rule in group["rules"]:
            for metric in monitoring.METRIC_RE.findall(rule["expr"]):
                used.setdefault(metric, f"alert rule {rule['alert']}")
    return used


def verify_checks(loaded, reported: dict) -> list:
    """What accept adds to the verify play's answer of one host: dcgmi diag run or why not, and
    the exporter's metric contract."""
    profile = loaded.profile
    checks = []
    diag = reported.get("dcgmi_diag") or {}
    if str(diag.get("ran")).lower() != "true":
        why = ("DCGM is not installed by this profile (dcgm.enabled)" if not profile.dcgm.enabled
               else "dcgmi is not on this host, or it has no GPU")
        checks.append(skipped("accept dcgmi diag", f"not run: {why}"))
    if profile.dcgm.enabled and profile.dcgm.exporter.enabled:
        body = str((reported.get("exporter") or {}).get("body") or "")
        checks.append(accept_judge.judge_metric_contract(metric_contract(loaded), body) if body
                      else failed("accept exporter contract", "the exporter was not scraped: no metric answered"))
    else:
        checks.append(skipped("accept exporter contract", "not run: the profile installs no dcgm-exporter"))
    return checks


def run_step(step: str, request: Request, report: Report, target, inventory_dir: Path, run_dir: Path,
             limit: str | None, forks: int | None, hook: EventHook | None, become: Become | None) -> None:
    broken = {h.name for h in report.hosts if h.broken}
    hosts = [h for h in net.selected_hosts(inventory_dir / "hosts.yml", limit) if h not in broken]
    if step == "accept":
        _nodes(request, report, target, inventory_dir, run_dir, hosts, forks, hook, become)
    else:
        _fleet(request, report, target, inventory_dir, run_dir, hosts, hook, become)


def _nodes(request, report, target, inventory_dir, run_dir, hosts, forks, hook, become) -> None:
    profile = target.loaded.profile
    report.accept = dict(report.accept or {}, level=request.level)
    if not hosts:
        return
    if probed_env(profile) is None:
        for name in hosts:
            _host(report, name).checks.append(skipped("accept allreduce", "not run: the profile has no PyTorch "
                                                                          "environment (python_envs)"))
        return
    price = request.price_per_hour or profile.cost.per_hour
    workload = price is not None
    extravars = {"provisioner_accept_port": profile.network.ddp.port, "provisioner_accept_steps": profile.network.ddp.steps,
                 "provisioner_accept_tensor_mib": profile.network.ddp.tensor_mib,
                 "provisioner_accept_measure": MEASURE[request.level] + (["workload"] if workload else []),
                 "provisioner_accept_timeout": request.timeout_s,
                 "provisioner_accept_burn_in": request.burn_in_s(profile) or 0}
    run = run_playbook("accept", inventory_dir, run_dir, limit=",".join(hosts), forks=forks, extravars=extravars,
                       hook=hook, become=become)
    _fold_failures(report, run)
    costs = []
    for name in hosts:
        result = run.hosts.get(name)
        host = _host(report, name)
        if result is None or result.status in ("unreachable", "failed"):
            host.checks.append(failed("accept", f"{name}: the measurement play did not finish: "
                                                + "; ".join(host.failures[-1:])))
            continue
        measured = result.reported.get("provisioner_accept") or {}
        host.checks.extend(accept_judge.judge_allreduce(profile, name, measured.get("allreduce")))
        if "measure" in measured:
            checks, samples = accept_judge.judge_measurements(profile, measured.get("measure"))
            host.checks.extend(checks)
            if workload and samples:
                costs.append(cost_mod.node(name, samples, price))
                where = (f"; {accept_judge.CPU_NOTE}" if not int(measured.get("gpus") or 0)
                         else " (bf16 autocast on the GPU)")
                host.checks.append(passed("accept reference workload", f"{samples:g} samples/s (a small transformer, "
                                          f"synthetic data, fixed shapes){where}"))
            elif workload:
                host.checks.append(failed("accept reference workload", "no samples/s came back"))
        if "burn_in" in measured:
            checks, summary = burn_in_judge.judge_burn_in(measured.get("burn_in"))
            host.checks.extend(checks)
            report.accept.setdefault("burn_in", {})[name] = summary
    if workload:
        report.accept["cost"] = {"per_hour": price, "nodes": [c.as_dict() for c in costs],
                                 "fleet": cost_mod.fleet(costs).as_dict() if costs else None}


def _fleet_busbw(job_results: dict[str, dict | None]) -> float:
    """The fleet all-reduce's bus bandwidth: the slowest rank's; a host whose part failed: 0."""
    values = []
    for job in job_results.values():
        results = (job or {}).get("results") or []
        if not job or int(job.get("rc", -1)) != 0 or not results:
            return 0.0
        values += [float(r.get("busbw_GBs") or 0) for r in results]
    return min(values, default=0.0)


def round_plan(sets: list[list[str]], addresses: dict[str, str], port: int) -> dict[str, dict]:
    """Each host's part of one round's all-reduces (the ddp play's provisioner_ddp_plan): each
    set its own job, its rendezvous on its first host's address under test. Sets share no host,
    so their stores listen on different hosts and all use `port` (network.ddp.port, the one a
    site opens for the job); only sets whose first hosts share an address (names for one
    machine) take the ports after it, so two stores never meet on one address and port."""
    plan, taken = {}, {}
    for chosen in sets:
        master = addresses[chosen[0]]
        taken[master] = taken.get(master, -1) + 1
        plan.update({h: {"nnodes": len(chosen), "node_rank": rank, "master_addr": master,
                         "master_port": port + taken[master], "local_addr": addresses[h]}
                     for rank, h in enumerate(chosen)})
    return plan


def _fleet(request, report, target, inventory_dir, run_dir, hosts, hook, become) -> None:
    profile = target.loaded.profile
    if len(hosts) < 2:
        for name in hosts:
            _host(report, name).checks.append(skipped("accept fleet", "an all-reduce across hosts needs two or more"))
        return
    if probed_env(profile) is None:
        for name in hosts:
            _host(report, name).checks.append(skipped("accept fleet", "not run: the profile has no PyTorch environment"))
        return
    ddp = profile.network.ddp
    addresses = {h: net.test_address(target.inventory, h) for h in hosts}
    rounds: list[int] = [0]
    first: dict[str, dict | None] = {}

    def measure_round(sets: list[list[str]]) -> list[float]:
        """One round, one ddp play: each host set its own all-reduce, side by side."""
        rounds[0] += 1
        plan = round_plan(sets, addresses, ddp.port)
        extravars = {"provisioner_ddp_plan": plan, "provisioner_ddp_timeout": ddp.timeout_s,
                     "provisioner_ddp_steps": ddp.steps, "provisioner_ddp_tensor_mib": ddp.tensor_mib}
        # Every host of the round joins its rendezvous at once: as many forks as hosts.
        run = run_playbook("ddp", inventory_dir, run_dir, limit=",".join(plan), forks=len(plan),
                           extravars=extravars, hook=hook, become=become, ident=f"fleet-{rounds[0]}")
        jobs = {h: (run.hosts[h].reported.get("provisioner_ddp") if h in run.hosts else None) for h in plan}
        if not first:
            first.update(jobs)
            _fold_failures(report, run)
        return [_fleet_busbw({h: jobs[h] for h in chosen}) for chosen in sets]

    gpus = profile.hardware.gpu.count
    cut = skus.floor(profile, profile.hardware.gpu.model or "", gpus, "fleet_allreduce_busbw_gbps")
    record: dict = {"hosts": hosts, "floor_gbps": cut.value, "floor_basis": cut.basis, "drain": None, "drain_ran": False,
                    "drain_rc": None}
    report.accept = dict(report.accept or {}, fleet=record)
    if cut.value is None:  # uncalibrated: one all-reduce, reported, never a search that could drain a host
        (busbw,) = measure_round([hosts])
        record["busbw_gbps"] = busbw
        for name in hosts:
            host = _host(report, name)
            job = first.get(name)
            wrong = [c for c in ddp_judge.judge_ddp(name, job, gpus, hosts, []) if c.status == "fail"]
            host.checks.extend(wrong or [skipped("accept fleet_allreduce_busbw_gbps",
                                                 f"{busbw:g} GB/s across {len(hosts)} hosts; "
                                                 f"{accept_judge.UNCALIBRATED}: {cut.basis}")])
        return
    groups = net.switches(target.inventory, hosts)
    finding = bisect.find_slow(hosts, cut.value, measure_round, groups=groups)
    report_finding(report, record, finding, hosts, groups, f"{cut.value:g} GB/s ({cut.basis})", request, run_dir)


def report_finding(report: Report, record: dict, finding: bisect.Finding, hosts: list[str],
                   groups: dict[str, list[str]] | None, floor: str, request: Request, run_dir: Path) -> None:
    """The search's answer into the report: a named node fails with its drain command (run only
    when asked), a named switch fails on each of its hosts (no drain), a link or an inconclusive
    search fails on every host and names nobody."""
    record.update(busbw_gbps=finding.rounds[0][0].busbw_gbps if finding.rounds else None, finding=finding.as_dict())
    evidence = "; ".join(f"round {n}: " + ", ".join(f"{'+'.join(m.hosts)} {m.busbw_gbps:g} GB/s" for m in r)
                         for n, r in enumerate(finding.rounds, 1))
    if finding.verdict == "healthy":
        for name in hosts:
            _host(report, name).checks.append(passed("accept fleet", f"{finding.why}, floor {floor}"))
        return
    if finding.verdict == "group":  # its hosts are told; a switch is not drained host by host
        members = set((groups or {}).get(finding.culprit or "", ()))
        for name in hosts:
            _host(report, name).checks.append(
                failed("accept fleet", f"the slow switch of the fleet, {finding.culprit} ({len(finding.rounds)} "
                                       f"round(s), at most {bisect.bound(len(hosts))}): {finding.why}. Evidence: {evidence}")
                if name in members else passed("accept fleet", f"cleared: the slow switch is {finding.culprit}"))
        return
    if finding.verdict == "node" and finding.culprit:
        command = bisect.drain_command(finding.culprit, f"provision accept: {finding.why}", request.drain_hook)
        record["drain"] = command
        if request.run_drain:
            ran = bisect.run_drain(request.drain_hook or command, finding.culprit, run_dir)
            record.update(drain_ran=True, drain_rc=ran.rc)  # rc None: killed at its time-out
        _host(report, finding.culprit).checks.append(failed(
            "accept fleet", f"the slow node of the fleet ({len(finding.rounds)} round(s), at most "
                            f"{bisect.bound(len(hosts))}): {finding.why}. Drain: {command}. Evidence: {evidence}"))
        return
    for name in hosts:  # a link, or inconclusive: every host is told, none is named a culprit
        _host(report, name).checks.append(failed(
            "accept fleet", f"the all-reduce across {len(hosts)} hosts fell short of {floor}; "
                            f"{finding.verdict}: " + (f"{finding.culprit}: " if finding.culprit else "")
                            + f"{finding.why}. Evidence: {evidence}"))
