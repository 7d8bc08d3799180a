"""The acceptance measurements with PyTorch (`provision accept --level standard` and cost, run
by the accept_run module in the profile's environment as its owner; scripts/gpu-machine-check
runs this same file), written as the "accept measurements" capture `provision judge` reads
(judge/accept.py): GEMM per precision, device memory bandwidth, host<->device and GPU<->GPU
copies, a one-rank NCCL all-reduce, and the reference training workload (a small
transformer, synthetic data, fixed shapes, bf16 autocast) in samples/s. Without a GPU the
same steps run on the CPU, marked device "cpu": not judged against a GPU. The file is
written after every figure, so a run killed midway keeps what it measured.

--burn-in SECONDS (`provision accept --level burn-in`): a sustained GEMM load on every GPU (bf16,
8192x8192, launched on each device in turn) or, without one, on the CPU (fp32), for that long;
the figures so far are written every few seconds.

Usage: python accept_measure.py OUT.json [--only gemm,copies,allreduce,workload | --burn-in SECONDS]
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch


def timed(fn, iters: int, sync) -> float:
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - start) / iters


def gemm(device: str, sync, size: int) -> dict[str, float]:
    found = {}
    kinds = [("fp32", torch.float32, False), ("tf32", torch.float32, True), ("fp16", torch.float16, False),
             ("bf16", torch.bfloat16, False)]
    for name, dtype, tf32 in kinds if device != "cpu" else kinds[:1]:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        seconds = timed(lambda a=a, b=b: a @ b, 10, sync)
        found[name] = 2 * size**3 / seconds / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    if device != "cpu" and torch.cuda.get_device_capability(device) >= (8, 9) and hasattr(torch, "_scaled_mm"):
        a = torch.randn(size, size, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(size, size, device=device).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.tensor(1.0, device=device)
        seconds = timed(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), 10, sync)
        found["fp8"] = 2 * size**3 / seconds / 1e12
    return found


def copies(device: str, sync, nbytes: int) -> dict[str, float]:
    x = torch.empty(nbytes, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    found = {"memory": 2 * nbytes / timed(lambda: y.copy_(x), 20, sync) / 1e9}  # read + write
    if device != "cpu":
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        found["h2d"] = nbytes / timed(lambda: x.copy_(host, non_blocking=True), 10, sync) / 1e9
        found["d2h"] = nbytes / timed(lambda: host.copy_(x, non_blocking=True), 10, sync) / 1e9
    return found


def workload(device: str, sync) -> float:
    """Samples/s of a fixed small transformer (6 layers, d_model 512, 8 heads, batch 32, 256
    tokens) on synthetic data with AdamW and bf16 autocast: the same shapes everywhere, so the
    figure compares across nodes and GPU models."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 6), torch.nn.Linear(512, 512)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randn(32, 256, 512, device=device)
    target = torch.randn(32, 256, 512, device=device)

    def step():
        with torch.autocast(device_type="cuda" if device != "cpu" else "cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(batch), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    return 32 / timed(step, 10 if device != "cpu" else 2, sync)


def allreduce_one_rank(device: str) -> dict:
    """init_process_group and one all-reduce on this GPU alone: NCCL loads and answers (a world of
    one gives no bus bandwidth); bounded by the process group's timeout."""
    import datetime

    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl" if device != "cpu" else "gloo", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    try:
        t = torch.ones(1 << 20, device=device)
        dist.all_reduce(t)
        return {"backend": dist.get_backend(), "ok": bool(t[0].item() == 1.0),
                "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device != "cpu" else None}
    finally:
        dist.destroy_process_group()


STEPS = ("gemm", "copies", "allreduce", "workload")


def header() -> dict:
    """What every capture this script writes starts with: the device, the GPUs, the versions."""
    gpu = torch.cuda.is_available()
    return {"provision_accept": 1, "device": "gpu" if gpu else "cpu",
            "gpu": torch.cuda.get_device_name(0) if gpu else "", "gpus": torch.cuda.device_count() if gpu else 0,
            "measurements": {}, "torch": torch.__version__, "cuda": torch.version.cuda}


def burn_in(path: str, seconds: float) -> int:
    gpu = torch.cuda.is_available()
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if gpu else ["cpu"]
    size, dtype = (8192, torch.bfloat16) if gpu else (512, torch.float32)
    pairs = {d: (torch.randn(size, size, device=d, dtype=dtype), torch.randn(size, size, device=d, dtype=dtype))
             for d in devices}
    label = {d: f"GPU {d.split(':')[1]}" if gpu else "cpu" for d in devices}
    done = dict.fromkeys(devices, 0)
    out = dict(header(), burn_in={"device": "gpu" if gpu else "cpu", "seconds": 0.0, "tflops": {}, "iterations": {}})
    start = last = time.perf_counter()
    while True:
        for d in devices:  # asynchronous launches: every GPU busy at once
            a, b = pairs[d]
            for _ in range(8):
                a @ b
            done[d] += 8
        for d in devices if gpu else []:
            torch.cuda.synchronize(d)
        now = time.perf_counter()
        if now - last >= 5 or now - start >= seconds:
            last = now
            elapsed = now - start
            out["burn_in"].update(seconds=round(elapsed, 1), iterations={label[d]: n for d, n in done.items()},
                                  tflops={label[d]: round(2 * size**3 * n / elapsed / 1e12, 4) for d, n in done.items()})
            with open(path, "w") as fh:
                json.dump(out, fh, indent=1)
        if now - start >= seconds:
            break
    print(json.dumps(out))
    return 0


def main(path: str, only: tuple[str, ...] = STEPS) -> int:
    gpu = torch.cuda.is_available()
    count = torch.cuda.device_count() if gpu else 0
    out = header()
    m = out["measurements"]

    def put(measure: str, label: str, value: float) -> None:
        m.setdefault(measure, {})[label] = round(value, 2)
        with open(path, "w") as fh:  # as it goes: a later step's failure keeps what came before
            json.dump(out, fh, indent=1)

    devices = [f"cuda:{i}" for i in range(count)] if gpu else ["cpu"]
    for device in devices if {"gemm", "copies"} & set(only) else []:
        sync = (lambda d=device: torch.cuda.synchronize(d)) if gpu else (lambda: None)
        label = f"GPU {device.split(':')[1]}" if gpu else "cpu"
        for name, value in (gemm(device, sync, 8192 if gpu else 1024) if "gemm" in only else {}).items():
            put(f"gemm_{name}_tflops", label, value)
        for name, value in (copies(device, sync, 1 << 30 if gpu else 1 << 26) if "copies" in only else {}).items():
            put(f"{name}_gbps", label, value)
    for i in range(count if "copies" in only else 0):
        for j in range(count):
            if i != j:
                src = torch.empty(1 << 30, dtype=torch.uint8, device=f"cuda:{i}")
                dst = torch.empty_like(src, device=f"cuda:{j}")
                seconds = timed(lambda dst=dst, src=src: dst.copy_(src), 10,
                                lambda i=i, j=j: (torch.cuda.synchronize(i), torch.cuda.synchronize(j)))
                put("d2d_gbps", f"GPU {i} -> GPU {j}", src.numel() / seconds / 1e9)
    if "allreduce" in only:
        out["allreduce_one_rank"] = allreduce_one_rank(devices[0])
    if "workload" in only:
        out["reference_workload_samples_per_s"] = round(workload(devices[0], (lambda: torch.cuda.synchronize())
                                                                 if gpu else (lambda: None)), 2)
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = STEPS
    if len(args) == 3 and args[1] == "--burn-in" and args[2].isdigit():
        sys.exit(burn_in(args[0], int(args[2])))
    if len(args) == 3 and args[1] == "--only":
        chosen = tuple(s for s in args[2].split(",") if s in STEPS)
    elif len(args) != 1:
        sys.exit(__doc__)
    sys.exit(main(args[0], chosen))
