"""jgrad on a GPU: gradients vs jax.grad, streams, the device thread, the sanitizer.

    python benchmarks/diagnostics/gpu_smoke.py      (prints PASS/FAIL lines; exits non-zero on failure)
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jgrad as jg  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f"  ({detail})" if detail else ""))
    if not ok:
        failures.append(name)


print("jax", jax.__version__, jax.devices())
dev = "gpu:0"
rng = np.random.default_rng(0)
xs = rng.standard_normal((64, 32)).astype(np.float32)
ws = rng.standard_normal((16, 32)).astype(np.float32)
x = jg.tensor(xs, device=dev, requires_grad=True)
w = jg.tensor(ws, device=dev, requires_grad=True)
threads = []
w.register_hook(lambda g: threads.append(threading.current_thread().name))
loss = jg.tanh(jg.linear(x, w)).pow(2).mean()
loss.backward()


def ref(xa, wa):
    return jnp.mean(jnp.tanh(xa @ wa.T) ** 2)


with jax.default_matmul_precision("highest"):
    gx, gw = jax.grad(ref, (0, 1))(jax.device_put(xs, jax.devices("gpu")[0]), jax.device_put(ws, jax.devices("gpu")[0]))
err = max(float(np.abs(np.asarray(x.grad.cpu().numpy()) - np.asarray(gx)).max()),
          float(np.abs(np.asarray(w.grad.cpu().numpy()) - np.asarray(gw)).max()))
check("grad vs jax.grad on gpu:0", err < 1e-5, f"max abs err {err:.2e}")
check("device of grads", x.grad.device == jg.device("gpu:0"), str(x.grad.device))
check("backward ran on the gpu worker thread", threads and threads[0].startswith("jgrad-autograd-gpu"), str(threads))

s = jg.Stream(dev)
with jg.streams.sanitizer():
    a = jg.randn(256, 256, device=dev, requires_grad=True)
    s.wait_stream(jg.current_stream(dev))
    with jg.stream(s):
        (a @ a).sum().backward()
    try:
        a.grad * 2
        check("weird pattern raises StreamRaceError on gpu", False)
    except jg.StreamRaceError:
        check("weird pattern raises StreamRaceError on gpu", True)
    jg.current_stream(dev).wait_stream(s)
    _ = a.grad * 2
    check("synced pattern passes the sanitizer on gpu", True)

e0, e1 = jg.Event(enable_timing=True), jg.Event(enable_timing=True)
b = jg.randn(2048, 2048, device=dev)
e0.record(jg.current_stream(dev))
for _ in range(20):
    b = (b @ b) * 1e-3
e1.record(jg.current_stream(dev))
e1.synchronize()
e0.synchronize()
check("event elapsed_time on gpu", e0.elapsed_time(e1) > 0, f"{e0.elapsed_time(e1):.3f} ms for 20 2048^2 matmuls")

jg.set_float32_matmul_precision("high")
y_high = (b @ b)
jg.set_float32_matmul_precision("highest")
check("matmul precision switch", jg.get_float32_matmul_precision() == "highest")
sys.exit(1 if failures else 0)
