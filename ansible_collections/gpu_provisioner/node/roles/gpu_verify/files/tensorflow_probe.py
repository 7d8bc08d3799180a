# The TensorFlow probe: run by gpu_probe with the environment's Python, as its owner. Prints
# exactly one JSON line; provisioner/judge/frameworks.py reads it (contract:
# tests/test_framework_probes.py, on outputs of this file run for real). Measures, never
# judges: each product reports its relative error against a float64 reference.
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter goes to stderr anyway
out = {"python": sys.version.split()[0]}
try:
    import numpy as np
    import tensorflow as tf
except Exception as exc:
    out["error"] = "import tensorflow failed: %r" % (exc,)
    print(json.dumps(out))
    sys.exit(1)
out["version"] = tf.__version__
try:
    info = tf.sysconfig.get_build_info()
    out["cuda_build"] = bool(info.get("is_cuda_build"))
    out["cuda"] = info.get("cuda_version")
    out["cudnn"] = info.get("cudnn_version")
except Exception:
    out["cuda_build"], out["cuda"], out["cudnn"] = None, None, None
gpus = tf.config.list_physical_devices("GPU")
out["device_count"] = len(gpus)
out["devices"], out["capabilities"] = [], []
for gpu in gpus:
    try:
        details = tf.config.experimental.get_device_details(gpu)
    except Exception:
        details = {}
    out["devices"].append(str(details.get("device_name", gpu.name)))
    cc = details.get("compute_capability")
    out["capabilities"].append("%d.%d" % tuple(cc) if cc else None)
# TensorFloat-32 would round fp32 operands to 10 mantissa bits on Ampere and newer: the fp32
# check measures fp32 itself.
tf.config.experimental.enable_tensor_float_32_execution(False)

N = 256
rng = np.random.default_rng(0)
a = rng.standard_normal((N, N)).astype(np.float32)
b = rng.standard_normal((N, N)).astype(np.float32)
ref = a.astype(np.float64) @ b.astype(np.float64)


def rel_err(got):
    """Frobenius-norm relative error of `got` against the float64 reference."""
    got = np.asarray(tf.cast(got, tf.float64))
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = {"error": ("%s: %s" % (type(exc).__name__, exc))[:300]}


def matmul(device):
    with tf.device(device):
        return {"fp32": rel_err(tf.matmul(tf.constant(a), tf.constant(b)))}


def mixed(device, policy):
    # A Dense layer under Keras' mixed precision policy: variables in float32, the product
    # computed in the policy's compute dtype.
    with tf.device(device):
        layer = tf.keras.layers.Dense(N, use_bias=False, dtype=tf.keras.mixed_precision.Policy(policy))
        layer.build((None, N))
        layer.kernel.assign(b)
        c = layer(tf.constant(a))
    return {"dtype": c.dtype.name, "rel_err": rel_err(c)}


attempt("cpu_matmul", lambda: matmul("/CPU:0"))
attempt("cpu_mixed_bf16", lambda: mixed("/CPU:0", "mixed_bfloat16"))
if gpus:
    attempt("gpu_matmul", lambda: matmul("/GPU:0"))
    found = {}
    for policy, dtype in (("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")):
        try:
            found[dtype] = mixed("/GPU:0", policy)
        except Exception as exc:
            found[dtype] = {"error": ("%s: %s" % (type(exc).__name__, exc))[:300]}
    out["gpu_mixed"] = found

print(json.dumps(out))
