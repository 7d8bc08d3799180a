"""A tiny DDP job for `provision verify --ddp`, run by torchrun on every host: a few steps of
a small model (each one a gradient all-reduce), then a timed all-reduce of a known size.
NCCL when the GPUs are there, gloo otherwise; every wait is bounded by --timeout. Each rank
prints one JSON line: backend, rank, world size, host, step times, bus bandwidth, and
whether the results were right. Shipped with the collection; no profile string is part of it."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def _nccl_version() -> str:
    version = torch.cuda.nccl.version()  # a tuple (2, 19, 3) in recent torch, an int (2708) in old ones
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tensor-mib", type=int, default=16)
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    # gloo's own default wait is 30 minutes: bounded here, as every collective after it.
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator(device="cpu").manual_seed(1000 + rank)  # different data per rank
    step_ms = []
    for _ in range(args.steps):
        x = torch.randn(64, 512, generator=generator).to(device)
        y = torch.randint(0, 10, (64,), generator=generator).to(device)
        sync()
        started = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        sync()
        step_ms.append(round((time.perf_counter() - started) * 1000, 3))

    # After the steps every rank must hold the same weights: the gradient all-reduce worked.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    total = flat.clone()
    dist.all_reduce(total)
    weights_agree = bool(torch.allclose(total / world, flat, rtol=1e-4, atol=1e-6))

    # A timed all-reduce: bus bandwidth as nccl-tests defines it, algbw * 2 (n - 1) / n.
    count = args.tensor_mib * 1024 * 1024 // 4
    tensor = torch.ones(count, device=device)
    dist.all_reduce(tensor)  # warm-up (connections, buffers)
    sync()
    started = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(tensor)
    sync()
    seconds = (time.perf_counter() - started) / args.iters
    values_right = bool(torch.all(tensor == float(world) ** (args.iters + 1)).item())
    algbw = count * 4 / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    print("DDP_RESULT " + json.dumps({
        "backend": backend, "rank": rank, "local_rank": local_rank, "world_size": world,
        "host": socket.gethostname(), "device": str(device), "torch": torch.__version__,
        "nccl": _nccl_version() if cuda else "",
        "steps": args.steps, "step_ms": step_ms, "loss": round(float(loss.item()), 4),
        "weights_agree": weights_agree, "allreduce_mib": args.tensor_mib, "allreduce_ms": round(seconds * 1000, 3),
        "algbw_GBs": round(algbw, 3), "busbw_GBs": round(busbw, 3), "values_right": values_right}), flush=True)
    # Every rank past its last collective before any tears its group down: without this, a
    # rank that finished first could tear down under its peer (gloo aborted a rank with
    # "terminate called without an active exception", and the other waited out its bound).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
