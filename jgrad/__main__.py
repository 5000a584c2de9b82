"""``python -m jgrad``: train a small MLP with jgrad, check a gradient against jax.grad."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import jgrad as jg


def _device():
    return jg.device("gpu:0") if jg.is_available("gpu") else jg.device("cpu")


def main(steps: int = 300, width: int = 64, batch: int = 128, lr: float = 0.05) -> None:
    dev = _device()
    print(f"jgrad {jg.__version__} on {dev} (jax {jax.__version__}, {jax.devices(dev.type)[0].device_kind})")
    rng = np.random.default_rng(0)
    x_np = rng.uniform(-2, 2, (batch, 2)).astype(np.float32)
    y_np = (np.sin(x_np[:, :1] * 2) * np.cos(x_np[:, 1:])).astype(np.float32)
    x, y = jg.tensor(x_np, device=dev), jg.tensor(y_np, device=dev)

    sizes = [2, width, width, 1]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1 / np.sqrt(fan_in)
        params.append(jg.tensor(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32), device=dev,
                                requires_grad=True))
        params.append(jg.tensor(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32), device=dev,
                                requires_grad=True))

    def model(inp):
        h = inp
        for i in range(0, len(params), 2):
            h = jg.linear(h, params[i], params[i + 1])
            if i + 2 < len(params):
                h = jg.tanh(h)
        return h

    t0 = time.perf_counter()
    first = None
    for step in range(steps + 1):
        loss = jg.ops.mse_loss(model(x), y)
        loss.backward()
        with jg.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=lr)
                p.grad = None
        if step % 50 == 0:
            value = loss.item()
            first = value if first is None else first
            print(f"step {step:4d}  loss {value:.5f}")
    print(f"trained {steps} steps in {time.perf_counter() - t0:.1f} s; loss {first:.4f} -> {value:.4f}")

    # One gradient against jax.grad of the same function written in jax.numpy.
    loss = jg.ops.mse_loss(model(x), y)
    grads = jg.autograd.grad(loss, params)

    def jax_loss(ps, xa, ya):
        h = xa
        for i in range(0, len(ps), 2):
            h = h @ ps[i].T + ps[i + 1]
            if i + 2 < len(ps):
                h = jnp.tanh(h)
        return jnp.mean((h - ya) ** 2)

    ref = jax.grad(jax_loss)([p._value for p in params], x._value, y._value)
    err = max(float(jnp.max(jnp.abs(g._value - r))) for g, r in zip(grads, ref))
    print(f"max |jgrad grad - jax.grad| over {len(params)} parameters: {err:.2e}")


if __name__ == "__main__":
    main()
