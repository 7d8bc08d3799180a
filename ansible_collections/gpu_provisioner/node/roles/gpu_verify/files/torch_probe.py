# The torch probe: run by gpu_probe with the environment's Python, as its owner. Prints
# exactly one JSON line; provisioner/judge/verify.py judge_torch reads it (contract:
# tests/test_torch_probe.py, on outputs of this file run for real). Measures, never judges:
# each computation reports its relative error against a float64 reference and the judge
# holds it to a stated tolerance.
import json
import sys

out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as exc:
    out["error"] = "import torch failed: %r" % (exc,)
    print(json.dumps(out))
    sys.exit(1)
out["version"] = torch.__version__
out["cuda"] = torch.version.cuda
out["cuda_available"] = bool(torch.cuda.is_available())
out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
out["devices"] = [torch.cuda.get_device_name(i) for i in range(out["device_count"])]
try:
    out["cudnn"] = torch.backends.cudnn.version()
except Exception:
    out["cudnn"] = None
try:
    nccl = torch.cuda.nccl.version()
    out["nccl"] = ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)
except Exception:
    out["nccl"] = None
try:
    out["arch_list"] = list(torch.cuda.get_arch_list())
except Exception:
    out["arch_list"] = []


def rel_err(got, ref):
    """Frobenius-norm relative error of `got` against the float64 reference."""
    got = got.detach().to("cpu", torch.float64)
    return float((got - ref).norm() / ref.norm())


def attempt(name, fn):
    """Run one computation; its result, or the error it raised (as text), under `name`."""
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = {"error": ("%s: %s" % (type(exc).__name__, exc))[:300]}


N = 256  # a multiple of 16, as torch._scaled_mm wants
gen = torch.Generator().manual_seed(0)
a = torch.randn(N, N, generator=gen)
b = torch.randn(N, N, generator=gen)
ref = a.double() @ b.double()


def cpu_matmul():
    return {"fp32": rel_err(a @ b, ref)}


def cpu_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        c = a @ b
    return {"dtype": str(c.dtype).replace("torch.", ""), "rel_err": rel_err(c, ref)}


attempt("cpu_matmul", cpu_matmul)
attempt("cpu_autocast_bf16", cpu_autocast)

if out["cuda_available"]:
    dev = torch.device("cuda", 0)
    ag, bg = a.to(dev), b.to(dev)
    out["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)

    def gpu_matmul():
        return {"fp32": rel_err(ag @ bg, ref)}

    def gpu_autocast():
        found = {}
        for dtype in (torch.float16, torch.bfloat16):
            if dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
                continue
            with torch.autocast("cuda", dtype=dtype):
                c = ag @ bg
            found[str(dtype).replace("torch.", "")] = {"dtype": str(c.dtype).replace("torch.", ""),
                                                      "rel_err": rel_err(c, ref)}
        return found

    def grad_scaler():
        # One training step under autocast with a GradScaler: the loss is finite, the scaler
        # steps (no inf/NaN gradients skipped it) and the weights moved.
        model = torch.nn.Linear(N, N).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        before = model.weight.detach().clone()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(ag).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        return {"loss": float(loss), "finite": bool(torch.isfinite(loss)), "scale": float(scaler.get_scale()),
                "weights_moved": bool((model.weight.detach() != before).any())}

    def fp8():
        # Per-tensor scaled float8 (e4m3): each operand scaled into the format's range, the
        # product in bfloat16; the second operand column-major, as torch._scaled_mm wants.
        top = torch.finfo(torch.float8_e4m3fn).max
        sa, sb = ag.abs().max() / top, bg.abs().max() / top
        a8 = (ag / sa).to(torch.float8_e4m3fn)
        b8 = (bg / sb).to(torch.float8_e4m3fn).t().contiguous().t()
        c = torch._scaled_mm(a8, b8, scale_a=sa.float(), scale_b=sb.float(), out_dtype=torch.bfloat16)
        return {"dtype": "float8_e4m3fn", "rel_err": rel_err(c, ref)}

    attempt("gpu_matmul", gpu_matmul)
    attempt("gpu_autocast", gpu_autocast)
    attempt("grad_scaler", grad_scaler)
    major, minor = torch.cuda.get_device_capability(0)
    if (major, minor) >= (8, 9):
        attempt("fp8", fp8)

print(json.dumps(out))
