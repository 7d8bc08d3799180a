"""`provision check --from-prometheus URL`: the fleet's drift read back from Prometheus in one
query, at a cost that does not grow with the fleet, judged by the same functions as the
SSH path (engine/drift.py, judge/kernels.py), into the same report.

Each node's provision-state.timer writes what `check` judges into node_exporter's textfile
(module_utils/state_metrics.py says which families); Prometheus scrapes it with the job
`provision render` writes (reports/monitoring.py). One instant query asks for every
gpu_provisioner_* series and `up` of that job. What comes back is untrusted:

- A series speaks for a host only if its `host` label names a host of the inventory AND its
  `instance` label is that host's own node_exporter address (the target the rendered
  config scrapes). Prometheus sets both from the target, not from the scraped text (a
  textfile's own `host` becomes `exported_host`, honor_labels being off), so a node cannot
  speak for another; any other series is ignored and counted.
- A host is judged only from a whole, fresh record: exactly one of each single series, every
  count matching its list, and provision-state's last run at most STALE_INTERVALS timer
  intervals old by Prometheus's clock. Anything else makes the host `unknown` (exit 1),
  never ok, with the reason.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import outputs
from provisioner.errors import ProvisionError
from provisioner.engine import drift
from provisioner.engine.target import Target
from provisioner.judge import kernels as kernels_mod
from provisioner.reports import monitoring
from provisioner.reports.report import HostReport, Report
from provisioner.verdicts.checks import Check, failed, passed, skipped

# Bounds on what we ask and what we accept: a hung Prometheus or a huge answer is one error.
TIMEOUT_S = 30
# About 40 series per clean host (fewer than 100 with its drift items listed), ~250 bytes
# each in the JSON: 128 MiB carries more than ten thousand hosts.
MAX_RESPONSE = 128 << 20
# A host whose provision-state last ran longer ago than this many timer intervals is unknown
# (the same bound as the GpuProvisionerStateStale alert, reports/monitoring.alert_rules).
STALE_INTERVALS = 3
# What state_metrics.DRIFT_KINDS writes (tests/test_prometheus_check.py holds the two equal).
DRIFT_KINDS = ("held_packages", "packages", "files", "units", "python_envs", "runtimes", "dpkg", "record")
LABEL_MAX = 300  # a label value longer than provision-state writes is cut before it is shown
# What provision-state's GPU half judges (state_metrics.CHECKS; tests/test_prometheus_verify.py
# holds the two equal): each published as gpu_provisioner_check_status{check} 1|0, or absent
# where it could not run.
TIMER_CHECKS = ("nvidia-smi", "gpu count", "driver version", "persistence mode", "ecc errors")
# dcgm-exporter's series `verify --from-prometheus` reads, by NVIDIA's names
# (github.com/NVIDIA/dcgm-exporter, etc/default-counters.csv): DCGM_FI_DEV_XID_ERRORS, "Value
# of the last XID error encountered" (on by default), and DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, "Total
# number of double-bit volatile ECC errors" (a commented-out line there; the profile's
# dcgm.exporter.collectors turns it on). A GPU's series are told apart by the `gpu` label.
XID, ECC_DBE = "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
# What `provision verify` over SSH judges that neither provision-state nor dcgm-exporter
# publishes: listed per host as not judged, never passed.
NOT_PUBLISHED = ("gpu model", "gpu memory", "ecc mode", "mig", "idle", "driver cuda", "driver module", "xid events "
                 "in the kernel log", "row remapping", "retired pages", "pcie link", "clocks", "gpu fabric",
                 "nvlink", "dcgm diag", "the CUDA toolkits, cuDNN, NCCL and TensorRT", "python environments",
                 "containers", "scratch", "infiniband")


def query(loaded) -> str:
    """Every series check judges, and `up`, of the profile's node_exporter job: one query."""
    return f'{{__name__=~"gpu_provisioner_.+|up",job="{monitoring.node_job(loaded)}"}}'


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        raise ProvisionError(f"Prometheus answered with a redirect ({code}) to {newurl}", where="--from-prometheus",
                             fix="give the URL it redirects to (the base URL of Prometheus, before /api/v1)")


def check_url(url: str) -> str:
    """The base URL of Prometheus: http(s), a host, no credentials, no query."""
    parts = urllib.parse.urlsplit(url)
    fix = "give Prometheus's base URL, e.g. https://prometheus.example.org:9090"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProvisionError(f"{url!r} is not an http(s) URL with a host", where="--from-prometheus", fix=fix)
    if parts.username or parts.password:
        raise ProvisionError("the Prometheus URL carries a user or password; it would be printed and kept in the "
                             "run record", where="--from-prometheus", fix=fix + " (reach it through a local proxy "
                                                                                "that adds the credentials)")
    if parts.query or parts.fragment:
        raise ProvisionError("the Prometheus URL has a query or fragment", where="--from-prometheus", fix=fix)
    return url.rstrip("/")


def fetch(base_url: str, expr: str, *, timeout: float = TIMEOUT_S, cap: int = MAX_RESPONSE) -> bytes:
    """One instant query (GET /api/v1/query): the raw answer, at most `cap` bytes. TLS is
    verified against the system's CAs; redirects are refused."""
    url = f"{check_url(base_url)}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ssl.create_default_context()),
                                         _NoRedirect())
    where = "--from-prometheus"
    try:
        with opener.open(urllib.request.Request(url, headers={"Accept": "application/json"}), timeout=timeout) as r:
            body = r.read(cap + 1)
    except urllib.error.HTTPError as exc:
        detail = exc.read(2000).decode("utf-8", "replace")
        raise ProvisionError(f"Prometheus refused the query: HTTP {exc.code}: {' '.join(detail.split())[:300]}",
                             where=where, fix="check the URL and that it is Prometheus's HTTP API") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProvisionError(f"cannot reach Prometheus at {base_url}: {reason}", where=where,
                             fix=f"check the URL and the network (waited at most {timeout:g} s)") from None
    if len(body) > cap:
        raise ProvisionError(f"Prometheus's answer is over {cap:,} bytes", where=where,
                             fix="check a smaller inventory at a time (--limit), or the job's series")
    return body


@dataclass
class Series:
    """One instant-vector sample: its labels and value."""

    labels: dict[str, str]
    value: float


@dataclass
class Answer:
    evaluated: float                      # Prometheus's clock at the query
    series: list[Series] = field(default_factory=list)


def parse(body: bytes) -> Answer:
    """Prometheus's JSON answer to an instant query, checked field by field."""
    bad = "Prometheus's answer is not an instant-vector result"
    fix = "check that the URL is Prometheus's HTTP API (/api/v1/query)"
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ProvisionError(f"{bad}: not JSON", where="--from-prometheus", fix=fix) from None
    if not isinstance(data, dict) or data.get("status") != "success":
        error = data.get("error") if isinstance(data, dict) else None
        raise ProvisionError(f"Prometheus answered with an error: {str(error)[:300]}" if error else bad,
                             where="--from-prometheus", fix=fix)
    result = (data.get("data") or {}) if isinstance(data.get("data"), dict) else {}
    if result.get("resultType") != "vector" or not isinstance(result.get("result"), list):
        raise ProvisionError(bad, where="--from-prometheus", fix=fix)
    answer, when = Answer(0.0), []
    for item in result["result"]:
        try:
            metric, (at, text) = item["metric"], item["value"]
            labels = {str(k): str(v) for k, v in metric.items()}
            answer.series.append(Series(labels, float(text)))
            when.append(float(at))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ProvisionError(f"{bad}: a sample is not {{metric, value: [time, number]}}", where="--from-prometheus",
                                 fix=fix) from None
    # Every sample of an instant query carries the evaluation time; none: the query's own time.
    answer.evaluated = max(when) if when else dt.datetime.now(dt.timezone.utc).timestamp()
    return answer


def _clean(text: str) -> str:
    """A label value as shown: no control characters, bounded."""
    return "".join(c if c.isprintable() else "?" for c in text)[:LABEL_MAX]


class Unknown(Exception):
    """Why a host's state cannot be judged from what Prometheus holds."""


def _one(found: dict[str, list[Series]], name: str) -> Series:
    got = found.get(name, [])
    if len(got) != 1:
        raise Unknown(f"{len(got)} series of {name} (provision-state writes exactly one)"
                      + ("; is provision-state on this host older than this provision? provision up updates it"
                         if not got else ""))
    if not math.isfinite(got[0].value):
        raise Unknown(f"{name} is {got[0].value}")
    return got[0]


def _count(found: dict[str, list[Series]], name: str) -> int:
    value = _one(found, name).value
    if value < 0 or value != int(value):
        raise Unknown(f"{name} is {value:g}, not a count")
    return int(value)


def _listed(found: dict[str, list[Series]], count: str, name: str, *labels: str) -> list[Series]:
    """The series of `name`, refused unless there are exactly as many distinct ones (by
    `labels`) as `count` says (provision-state cuts a long list: then it cannot be judged)."""
    total, got = _count(found, count), found.get(name, [])
    if len(got) != total or len({tuple(s.labels.get(k, "") for k in labels) for s in got}) != len(got):
        raise Unknown(f"{count} is {total} but {len(got)} distinct {name} series are listed "
                      "(more than provision-state publishes, or not its textfile)")
    return got


def host_state(found: dict[str, list[Series]], evaluated: float, max_age: float) -> tuple[dict, dict, float]:
    """(state, kernels, age): one host's series as the SSH path's provisioner_state result
    (recorded, profile, profile_sha256, drift items) and kernels reading; Unknown otherwise."""
    up = found.get("up", [])
    if up and all(s.value == 0 for s in up):
        raise Unknown("node_exporter does not answer Prometheus (up == 0)")
    if not any(name.startswith("gpu_provisioner_") for name in found):
        raise Unknown("node_exporter serves no gpu_provisioner textfile (is provision-state.timer installed? "
                      "monitoring.state_timer.enabled)" if up else
                      "Prometheus holds no series of this host (is its node_exporter a target of the job?)")
    ran = _one(found, "gpu_provisioner_last_run_timestamp_seconds").value
    age = evaluated - ran
    if age > max_age:
        raise Unknown(f"data {age:.0f} s old (provision-state last ran at {_iso(ran)}; older than {max_age:g} s "
                      "is not judged): systemctl status provision-state.timer")
    if age < -max_age:
        raise Unknown(f"provision-state's last run is {-age:.0f} s in Prometheus's future: the host's clock is wrong")
    if _one(found, "gpu_provisioner_last_run_success").value != 1:
        raise Unknown("provision-state could not read the host's state at its last run (journalctl -u provision-state)")
    info = _one(found, "gpu_provisioner_info").labels
    counts: dict[str, int] = {}
    for s in found.get("gpu_provisioner_drift_items", []):
        kind = s.labels.get("kind", "")
        if kind in counts or kind not in DRIFT_KINDS or not math.isfinite(s.value) or s.value < 0:
            raise Unknown(f"gpu_provisioner_drift_items{{kind={_clean(kind)!r}}} is not what provision-state writes")
        counts[kind] = int(s.value)
    if set(counts) != set(DRIFT_KINDS):
        raise Unknown(f"gpu_provisioner_drift_items lacks kind(s) {', '.join(sorted(set(DRIFT_KINDS) - set(counts)))}")
    items = [_clean(s.labels.get("item", "")) if s.labels.get("kind") != "dpkg" else drift.DPKG_ITEM
             for s in found.get("gpu_provisioner_drift_items_detail", []) if s.labels.get("kind") != "record"]
    left_out = _count(found, "gpu_provisioner_drift_items_detail_dropped")
    drifted = sum(n for kind, n in counts.items() if kind != "record")
    if drifted and not items:  # counted, but the detail series are missing: still drift, named by kind
        items = [f"{n} {kind.replace('_', ' ')} item(s)" for kind, n in counts.items() if n and kind != "record"]
    elif left_out:
        items.append(f"{left_out} more drifted item(s) Prometheus does not list (provision check over SSH names them)")
    components = {_clean(s.labels.get("component", "")): int(s.value) for s in
                  _listed(found, "gpu_provisioner_components", "gpu_provisioner_component_items", "component")}
    state = {"recorded": counts["record"] == 0, "profile": info.get("profile", ""),
             "profile_sha256": info.get("profile_sha256", ""), "drift": items, "drifted": drifted,
             "components": {role: f"{n} held package(s), package(s) and unit(s) in its record"
                            for role, n in components.items() if n > 0}}
    images = sorted(s.labels.get("kernel", "") for s in
                    _listed(found, "gpu_provisioner_kernel_images", "gpu_provisioner_kernel_image", "kernel"))
    dkms: dict[str, dict] = {}
    modules = _listed(found, "gpu_provisioner_dkms_modules", "gpu_provisioner_dkms_module", "version", "kernel")
    for s in modules:
        mod = dkms.setdefault(s.labels.get("version", ""), {"module": s.labels.get("module", ""), "kernels": {}})
        if s.labels.get("kernel"):
            mod["kernels"][s.labels["kernel"]] = s.labels.get("state", "")
    kernels = {"images": images, "dkms": dkms,
               "dkms_rc": 0 if _one(found, "gpu_provisioner_dkms_available").value == 1 else 127,
               "in_container": _one(found, "gpu_provisioner_in_container").value == 1}
    return state, kernels, age


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def judge(target: Target, hosts: list[str], answer: Answer, max_age: float) -> tuple[list[HostReport], int]:
    """One HostReport per host of `hosts`, judged as engine/commands._fold judges a `check`
    step; also how many series were ignored (no host of `hosts` at its own address)."""
    loaded, inventory = target.loaded, target.inventory
    instance = {h: monitoring.node_instance(loaded, inventory, h) for h in hosts}
    by_host: dict[str, dict[str, list[Series]]] = {h: defaultdict(list) for h in hosts}
    ignored = 0
    for s in answer.series:
        host = s.labels.get("host", "")
        if host not in instance or s.labels.get("instance") != instance[host]:
            ignored += 1
            continue
        by_host[host][s.labels.get("__name__", "")].append(s)
    reports = []
    for name in hosts:
        report = HostReport(name, "ok")
        reports.append(report)
        try:
            state, kernels, age = host_state(by_host[name], answer.evaluated, max_age)
        except Unknown as why:
            report.status = "unknown"
            report.failures.append(f"no state to judge from Prometheus: {why}")
            continue
        report.checks.append(passed("data age", f"{max(age, 0):.0f} s: provision-state ran at {_iso(answer.evaluated - age)}"
                                                f" (at most {max_age:g} s is judged)"))
        report.checks.extend(drift.recorded_profile_check(state if state["recorded"] else {}, target, name))
        report.checks.extend(kernels_mod.judge_modules(loaded.profile, kernels))
        found = [(item, "moved since the last converge (read from Prometheus, which carries the item only; "
                        "provision check over SSH shows the recorded and current values)") for item in state["drift"]]
        for item, detail in found + drift.off_components(state["components"], target.role_vars):
            report.changed_tasks.append(item)
            report.diffs[item] = detail
        if report.changed_tasks:
            report.status = "drift"
    return reports, ignored


def verify_query(loaded) -> str:
    """What verify --from-prometheus judges: the timer's checks and run time, dcgm-exporter's
    Xid and ECC series, and `up` of both jobs; one query."""
    node = f'{{__name__=~"gpu_provisioner_check_status|gpu_provisioner_last_run_timestamp_seconds|up",' \
           f'job="{monitoring.node_job(loaded)}"}}'
    dcgm = f'{{__name__=~"{XID}|{ECC_DBE}|up",job="{monitoring.dcgm_job(loaded)}"}}'
    return f"{node} or {dcgm}"


def _timer_checks(found: dict[str, list[Series]]) -> list[Check]:
    by_check: dict[str, list[Series]] = defaultdict(list)
    for s in found.get("gpu_provisioner_check_status", []):
        by_check[s.labels.get("check", "")].append(s)
    unknown = sorted(set(by_check) - set(TIMER_CHECKS))
    if unknown:
        raise Unknown(f"gpu_provisioner_check_status{{check={_clean(unknown[0])!r}}} is not what provision-state writes")
    checks = []
    for name in TIMER_CHECKS:
        got = by_check.get(name, [])
        if len(got) > 1:
            raise Unknown(f"{len(got)} series of gpu_provisioner_check_status{{check={name!r}}} (provision-state "
                          "writes at most one)")
        if not got:
            checks.append(skipped(name, "not judged: provision-state did not publish it (nvidia-smi could not run, "
                                        "or the profile does not ask for it)"))
        elif got[0].value == 1:
            checks.append(passed(name, "passed at provision-state's last run (journalctl -u provision-state has "
                                       "its detail)"))
        else:
            checks.append(failed(name, "failed at provision-state's last run: journalctl -u provision-state says "
                                       "why"))
    return checks


def _xid_action(xid: int) -> str:
    """What NVIDIA's Xid catalog says an Xid needs (provisioner/data/xid.yml), as verify's
    kernel-log check classifies it alone (judge/verify.judge_xid)."""
    from provisioner.profiles import skus

    catalog = skus.xid_catalog()
    entry = catalog["xids"].get(xid)
    return catalog["buckets"].get(entry["immediate"], "rma") if entry else catalog["unknown_action"]


def _dcgm_checks(profile, found: dict[str, list[Series]]) -> list[Check]:
    """dcgm-exporter's last Xid and double-bit ECC count per GPU; not judged where its series are absent."""
    up = found.get("up", [])
    if not up:
        return [skipped("dcgm-exporter", "not judged: Prometheus holds no series of this host's dcgm-exporter "
                                         "(is it a target of the job?)")]
    if all(s.value == 0 for s in up):
        return [failed("dcgm-exporter", "dcgm-exporter does not answer Prometheus (up == 0): systemctl status "
                                        "dcgm-exporter")]
    checks = []
    xids = {_clean(s.labels.get("gpu", "?")): s.value for s in found.get(XID, []) if math.isfinite(s.value)}
    if not xids:
        checks.append(skipped("xid errors", f"not judged: dcgm-exporter publishes no {XID}"))
    else:
        bad = {gpu: int(v) for gpu, v in xids.items() if v and _xid_action(int(v)) != "informational"}
        checks.append(failed("xid errors", "last Xid " + "; ".join(f"GPU {g}: Xid {x} ({_xid_action(x).replace('_', ' ')})"
                                                                   for g, x in sorted(bad.items())))
                      if bad else passed("xid errors", f"no Xid that needs action as the last one on {len(xids)} GPU(s) "
                                                       f"({XID})"))
    dbe = {_clean(s.labels.get("gpu", "?")): s.value for s in found.get(ECC_DBE, []) if math.isfinite(s.value)}
    limit = profile.verify.ecc_uncorrectable_max or 0
    if not dbe:
        checks.append(skipped("ecc double-bit", f"not judged: dcgm-exporter publishes no {ECC_DBE} (ECC off, or the "
                                                "counter is not among its collectors)"))
    else:
        over = {g: int(v) for g, v in dbe.items() if v > limit}
        checks.append(failed("ecc double-bit", "; ".join(f"GPU {g}: {n}" for g, n in sorted(over.items()))
                             + f" volatile double-bit ECC error(s), over {limit}") if over
                      else passed("ecc double-bit", f"within {limit} on {len(dbe)} GPU(s) ({ECC_DBE})"))
    return checks


def judge_verify(target: Target, hosts: list[str], answer: Answer, max_age: float) -> tuple[list[HostReport], int]:
    """verify from Prometheus: one HostReport per host, with what the timer and dcgm-exporter
    published judged, and everything else listed as not judged; also how many series were ignored."""
    loaded, inventory = target.loaded, target.inventory
    profile = loaded.profile
    node_job, dcgm_job = monitoring.node_job(loaded), monitoring.dcgm_job(loaded)
    dcgm_on = profile.dcgm.enabled and profile.dcgm.exporter.enabled
    instance = {h: {node_job: monitoring.node_instance(loaded, inventory, h),
                    dcgm_job: monitoring.dcgm_instance(loaded, inventory, h)} for h in hosts}
    by_host = {h: {node_job: defaultdict(list), dcgm_job: defaultdict(list)} for h in hosts}
    ignored = 0
    for s in answer.series:
        host, job = s.labels.get("host", ""), s.labels.get("job", "")
        if host not in instance or job not in by_host[host] or s.labels.get("instance") != instance[host][job]:
            ignored += 1
            continue
        by_host[host][job][s.labels.get("__name__", "")].append(s)
    reports = []
    for name in hosts:
        report = HostReport(name, "ok")
        reports.append(report)
        node = by_host[name][node_job]
        try:
            if not node:
                raise Unknown("Prometheus holds no series of this host's node_exporter (is it a target of the job?)")
            if all(s.value == 0 for s in node.get("up", [])) and node.get("up"):
                raise Unknown("node_exporter does not answer Prometheus (up == 0)")
            ran = _one(node, "gpu_provisioner_last_run_timestamp_seconds").value
            age = answer.evaluated - ran
            if abs(age) > max_age:
                raise Unknown(f"provision-state last ran at {_iso(ran)}, {age:.0f} s from Prometheus's clock "
                              f"(more than {max_age:g} s is not judged)")
            report.checks.append(passed("data age", f"{max(age, 0):.0f} s: provision-state ran at {_iso(ran)} "
                                                    f"(at most {max_age:g} s is judged)"))
            if profile.expects_gpu:
                report.checks.extend(_timer_checks(node))
            else:  # the timer's nvidia-smi fails on a GPU-less host for any cause; verify over SSH tells them apart
                report.checks.append(skipped("gpus", "not judged: the profile expects no GPU, and provision-state "
                                                     "publishes whether nvidia-smi ran, not why it did not"))
        except Unknown as why:
            report.status = "unknown"
            report.failures.append(f"no GPU checks to judge from Prometheus: {why}")
            continue
        if dcgm_on:
            report.checks.extend(_dcgm_checks(profile, by_host[name][dcgm_job]))
        report.checks.append(skipped("not judged from Prometheus", ", ".join(NOT_PUBLISHED)
                                     + ": nothing in Prometheus carries them; provision verify asks the hosts"))
    return reports, ignored


def selected(target: Target, limit: str | None) -> list[str]:
    """The inventory's hosts, or those --limit names (host names, comma-separated: no
    Ansible patterns, since no Ansible runs here)."""
    names = target.inventory.hostnames()
    if not limit:
        return names
    wanted = [part.strip() for part in limit.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise ProvisionError(f"--limit names {', '.join(unknown)}, not host(s) of the inventory", where="--limit",
                             fix="with --from-prometheus, --limit takes host names separated by commas "
                                 "(no groups or patterns)")
    return sorted(set(wanted))


def check(target: Target, url: str, *, runs_dir: Path, limit: str | None = None) -> Report:
    """`provision check --from-prometheus URL`: the report, written to a new run folder
    (report.json, and Prometheus's answer as prometheus.json)."""
    # What a plain check judges against: the index the last live resolution read (commands.execute).
    target = dataclasses.replace(target, resolution="recorded")
    target.role_vars  # noqa: B018 - resolved before the query: a profile that cannot render is refused first
    return _run("check", target, url, runs_dir, limit, query(target.loaded), judge)


def verify(target: Target, url: str, *, runs_dir: Path, limit: str | None = None) -> Report:
    """`provision verify --from-prometheus URL`: what the nodes' timers and dcgm-exporters
    published, judged; every other verify check listed as not judged. The same run folder."""
    return _run("verify", target, url, runs_dir, limit, verify_query(target.loaded), judge_verify)


def _run(command: str, target: Target, url: str, runs_dir: Path, limit: str | None, expr: str, judge_fn) -> Report:
    from provisioner.engine.commands import new_run_dir

    loaded = target.loaded
    base = check_url(url)
    hosts = selected(target, limit)
    max_age = STALE_INTERVALS * loaded.profile.monitoring.state_timer.interval_s
    body = fetch(base, expr)
    answer = parse(body)
    old_umask = os.umask(0o077)  # run records name hosts: owner-only, as commands.execute makes them
    try:
        run_dir = new_run_dir(runs_dir, command, loaded.profile.name)
        outputs.write_file(run_dir / "prometheus.json", body, mode=0o600, what="Prometheus's answer")
        started = _iso(answer.evaluated)
        report = Report(command, loaded.profile.name, loaded.digest, str(target.inventory.source), run_dir,
                        started=started, finished=_iso(dt.datetime.now(dt.timezone.utc).timestamp()))
        report.hosts, ignored = judge_fn(target, hosts, answer, max_age)
        report.source = {"prometheus": base, "evaluated": started, "max_age_s": max_age, "ignored_series": ignored}
        report.write()
    finally:
        os.umask(old_umask)
    return report
