# The JAX probe: run by gpu_probe with the environment's Python, as its owner. Prints exactly
# one JSON line; provisioner/judge/frameworks.py reads it (contract:
# tests/test_framework_probes.py, on outputs of this file run for real). Measures, never
# judges: each product reports its relative error against a float64 reference.
import json
import sys

out = {"python": sys.version.split()[0]}
try:
    import jax
    import jax.numpy as jnp
    import numpy as np
except Exception as exc:
    out["error"] = "import jax failed: %r" % (exc,)
    print(json.dumps(out))
    sys.exit(1)
out["version"] = jax.__version__
try:
    import jaxlib
    out["jaxlib"] = jaxlib.__version__
except Exception:
    out["jaxlib"] = None
# The CUDA and cuDNN a CUDA plugin was built with (jax._src.lib.cuda_versions: None without one).
try:
    from jax._src.lib import cuda_versions
    out["cuda"] = cuda_versions.cuda_runtime_build_version() if cuda_versions else None
    out["cudnn"] = cuda_versions.cudnn_build_version() if cuda_versions else None
except Exception:
    out["cuda"], out["cudnn"] = None, None
try:
    gpus = jax.devices("gpu")
except RuntimeError:  # "Unknown backend gpu" / no CUDA device: no GPU to JAX
    gpus = []
out["device_count"] = len(gpus)
out["devices"] = [str(d.device_kind) for d in gpus]
out["capabilities"] = [str(getattr(d, "compute_capability", "")) or None for d in gpus]

N = 256
rng = np.random.default_rng(0)
a = rng.standard_normal((N, N)).astype(np.float32)
b = rng.standard_normal((N, N)).astype(np.float32)
ref = a.astype(np.float64) @ b.astype(np.float64)


def rel_err(got):
    got = np.asarray(jnp.asarray(got, jnp.float32), dtype=np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = {"error": ("%s: %s" % (type(exc).__name__, exc))[:300]}


def matmul(device):
    # Precision.HIGHEST: on a GPU JAX's default float32 product may use TensorFloat-32.
    x, y = jax.device_put(a, device), jax.device_put(b, device)
    return {"fp32": rel_err(jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST))}


def reduced(device, dtype):
    # Explicit dtypes, as JAX does mixed precision: operands and product in `dtype`.
    x, y = jax.device_put(a.astype(dtype), device), jax.device_put(b.astype(dtype), device)
    c = jnp.matmul(x, y)
    return {"dtype": str(c.dtype), "rel_err": rel_err(c)}


cpu = jax.devices("cpu")[0]
attempt("cpu_matmul", lambda: matmul(cpu))
attempt("cpu_bf16", lambda: reduced(cpu, jnp.bfloat16))
if gpus:
    attempt("gpu_matmul", lambda: matmul(gpus[0]))
    found = {}
    for dtype in (jnp.float16, jnp.bfloat16):
        try:
            found[jnp.dtype(dtype).name] = reduced(gpus[0], dtype)
        except Exception as exc:
            found[jnp.dtype(dtype).name] = {"error": ("%s: %s" % (type(exc).__name__, exc))[:300]}
    out["gpu_reduced"] = found

print(json.dumps(out))
