"""Judging `verify --ddp`: every host's ranks came back, the job ran on the backend the
hardware calls for (NCCL with GPUs, gloo without), the weights agree after the steps and
the timed all-reduce's values are right; the report gives the step time and bus bandwidth
per rank. A host that failed or went away is named. Pure."""

from __future__ import annotations

from typing import Any

from provisioner.verdicts.checks import Check, failed, passed


def why_failed(ddp: dict[str, Any]) -> str:
    if ddp.get("timed_out"):
        return f"the job did not finish within {ddp.get('job_timeout')} s and was killed"
    lines = [line.strip() for line in str(ddp.get("stderr", "")).splitlines() if line.strip()]
    # torchrun ends with the child's error; the most telling line names the exception.
    telling = [line for line in lines if any(w in line for w in ("Error", "error:", "Timeout", "timed out",
                                                                  "refused", "Connection"))]
    return " ".join((telling or lines)[-2:])[:400] or f"torchrun exited {ddp.get('rc')}"


def judge_ddp(host: str, ddp: dict[str, Any] | None, expected_gpus: int, hosts: list[str],
              lost: list[str]) -> list[Check]:
    """`lost`: the job's other hosts that failed or went unreachable during it."""
    if not ddp:
        return [failed("ddp", "no DDP result came back from this host")]
    others = f"; lost during the job: {', '.join(lost)}" if lost else ""
    results = ddp.get("results") or []
    nproc = int(ddp.get("nproc_per_node") or 1)
    if int(ddp.get("rc", -1)) != 0 or len(results) != nproc:
        return [failed("ddp", f"the job failed on {host} after {ddp.get('seconds', '?')} s "
                              f"(rc {ddp.get('rc')}): {why_failed(ddp)}{others}")]
    checks = []
    backend = {r.get("backend") for r in results}
    want = "nccl" if expected_gpus > 0 and int(ddp.get("gpus") or 0) > 0 else "gloo"
    world = results[0].get("world_size")
    per_rank = "; ".join(
        f"rank {r['rank']}: step {sum(r['step_ms']) / max(len(r['step_ms']), 1):.1f} ms, "
        f"all-reduce {r['allreduce_mib']} MiB in {r['allreduce_ms']:.1f} ms, bus bandwidth {r['busbw_GBs']:g} GB/s"
        for r in sorted(results, key=lambda r: r["rank"]))
    note = "" if world and world > 1 else " (world size 1: one rank gives no bus bandwidth)"
    nccl = sorted({r.get("nccl") for r in results if r.get("nccl")})
    where = (f"{', '.join(sorted(backend))}" + (f" {', '.join(nccl)}" if nccl else "")
             + f" over {ddp.get('interface')}, world size {world} on {len(hosts)} host(s)")
    bad = [f"rank {r['rank']}: " + ", ".join(w for w, ok in (("weights differ after the steps", r["weights_agree"]),
                                                           ("all-reduce values wrong", r["values_right"])) if not ok)
           for r in results if not (r.get("weights_agree") and r.get("values_right"))]
    if backend != {want}:
        checks.append(failed("ddp backend", f"{where}: expected {want} "
                                            f"({'GPUs present' if want == 'nccl' else 'no GPU'})"))
    else:
        checks.append(passed("ddp backend", f"{where}" + (" (NCCL: GPU host)" if want == "nccl"
                                                           else " (gloo: CPU-only host, no NCCL)")))
    checks.append((failed if bad else passed)("ddp", ("; ".join(bad) + "; " if bad else "") + per_rank + note))
    return checks
