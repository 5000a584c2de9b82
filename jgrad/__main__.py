"""``python -m jgrad``: train a small MLP with jg.nn and jg.optim, check a gradient against jax.grad.

Imports the public API only (``jgrad``, ``jgrad.nn``), as a user's script would.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jgrad as jg
from jgrad import nn


def _device():
    return jg.device("gpu:0") if jg.is_available("gpu") else jg.device("cpu")


def _data(batch, dev):
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, (batch, 2)).astype(np.float32)
    y = (np.sin(2 * x[:, :1]) * np.cos(x[:, 1:])).astype(np.float32)
    return jg.tensor(x, device=dev), jg.tensor(y, device=dev)


def _model(width, dev):
    jg.manual_seed(0)
    return nn.Sequential(nn.Linear(2, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                         nn.Linear(width, 1)).to(dev)


def _jax_loss(ps, xa, ya):
    """The same model and loss, written in jax.numpy (weights first, then biases, per layer)."""
    h = xa
    for i in range(0, len(ps), 2):
        h = h @ ps[i].T + ps[i + 1]
        if i + 2 < len(ps):
            h = jnp.tanh(h)
    return jnp.mean((h - ya) ** 2)


def train(model, x, y, steps, lr):
    """Adam on MSE; prints the loss every 50 steps; returns (first, last) loss."""
    opt = jg.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    first = last = None
    for step in range(steps + 1):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            last = loss.item()
            first = last if first is None else first
            print(f"step {step:4d}  loss {last:.5f}")
    return first, last


def check_grad(model, x, y) -> float:
    """Max |jgrad gradient - jax.grad| over every parameter, for the MSE loss at the current weights."""
    params = list(model.parameters())
    grads = jg.autograd.grad(nn.MSELoss()(model(x), y), params)
    with jax.default_matmul_precision("highest"):  # as jgrad's default (XLA's own is TF32 on GPU)
        ref = jax.grad(_jax_loss)([p.detach()._value for p in params], x._value, y._value)
    return max(float(jnp.max(jnp.abs(g._value - r))) for g, r in zip(grads, ref))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m jgrad", description=__doc__)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args(argv)
    dev = _device()
    kind = jax.devices(dev.type)[0].device_kind
    print(f"jgrad {jg.__version__} on {dev} ({'GPU' if dev.type == 'gpu' else 'CPU'}: {kind}; jax {jax.__version__})")
    x, y = _data(args.batch, dev)
    model = _model(args.width, dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: MLP 2-{args.width}-{args.width}-1, tanh, {n_params} parameters; Adam(lr={args.lr}), MSELoss")
    t0 = time.perf_counter()
    first, last = train(model, x, y, args.steps, args.lr)
    print(f"trained {args.steps} steps in {time.perf_counter() - t0:.1f} s; loss {first:.5f} -> {last:.5f}")
    err = check_grad(model, x, y)
    print(f"max |jgrad grad - jax.grad| over {len(list(model.parameters()))} parameters: {err:.2e}")


if __name__ == "__main__":
    main()
