"""Eager mode's host cost per op and per backward node, PyTorch beside (CPU; issues 28 and 32).

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.eager_per_op [--ops 100] [--reps 15] [--profile]
                                                                  [--only fwd,fwd_bwd,mlp]

Cases (each a median over ``--reps`` timed runs, divided by the number of ops; wall clock and the calling thread's
CPU time; every kernel shape compiled, as after a program's warm-up):
- ``fwd``: a chain of ``--ops`` muls (64x256 float32, values near 1, so no denormals) with no input requiring
  grad; beside it the bare ``jax.jit(lambda a, b: a * b)`` called as often (the floor of one kernel call).
- ``fwd_bwd``: the same chain with ``requires_grad`` and ``y.sum().backward()`` (forward + backward per op).
- ``mlp``: one training step of 4 Linear(256, 256) with ReLU between (batch 64, MSE, SGD with ``zero_grad``), per step.

``--profile`` runs each jgrad case under cProfile and prints its top functions by own time. Run two trees
alternately (``PYTHONPATH=<tree>``) to compare a change with its baseline in the same load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

SHAPE = (64, 256)


def _chain(x, c, n):
    y = x
    for _ in range(n):
        y = y * c
    return y


def _time(fn, reps):
    """(median wall seconds, median CPU seconds of this thread) of ``fn()``. The calling thread's CPU time is the
    host cost (jax computes on its own threads; PyTorch, at one thread, on this one): the figure that holds up
    while other work shares the cores, which stretches the wall clock."""
    fn()
    fn()  # warm: kernels compiled, caches filled
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def _cases(lib, n, torch_mode):
    """name -> (callable, ops per call) for jgrad (``torch_mode`` False) or PyTorch."""
    rng = np.random.default_rng(0)
    xa = (1 + 0.001 * rng.standard_normal(SHAPE)).astype(np.float32)
    ca = (1 + 0.001 * rng.standard_normal(SHAPE)).astype(np.float32)
    t = lib.tensor if not torch_mode else lib.tensor
    x, c = t(xa), t(ca)
    xg = t(xa, requires_grad=True)

    def fwd():
        with lib.no_grad():
            _chain(x, c, n)

    def fwd_bwd():
        _chain(xg, c, n).sum().backward()

    nn, optim = lib.nn, lib.optim
    lib.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    opt = optim.SGD(model.parameters(), lr=1e-3)
    inp = t(rng.standard_normal((64, 256)).astype(np.float32))
    tgt = t(rng.standard_normal((64, 256)).astype(np.float32))

    def mlp():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(inp), tgt)
        loss.backward()
        opt.step()

    return {"fwd": (fwd, n), "fwd_bwd": (fwd_bwd, n), "mlp": (mlp, 1)}


def _jit_floor(n):
    import jax

    f = jax.jit(lambda a, b: a * b)
    rng = np.random.default_rng(0)
    x = jax.numpy.asarray((1 + 0.001 * rng.standard_normal(SHAPE)).astype(np.float32))
    c = jax.numpy.asarray((1 + 0.001 * rng.standard_normal(SHAPE)).astype(np.float32))

    def run():
        y = x
        for _ in range(n):
            y = f(y, c)
        y.block_until_ready()

    return run


def _profile(fn, top):
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=100)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--only", default="fwd,fwd_bwd,mlp")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--no-torch", action="store_true")
    a = p.parse_args(argv)
    only = a.only.split(",")

    import jgrad as jg
    from jgrad.runtime import _kernel_cache

    # The steady state: every shape compiled (a new shape's first calls are otherwise interpreted with NumPy
    # until they have cost one compile, Note [New shapes]), as after a training program's warm-up.
    _kernel_cache.interpret_max_elements = 0
    print(f"jgrad from {os.path.dirname(jg.__file__)}; load average {os.getloadavg()}")
    jcases = _cases(jg, a.ops, False)
    tcases = None
    if not a.no_torch:
        try:
            import torch

            torch.set_num_threads(1)
            tcases = _cases(torch, a.ops, True)
        except ImportError:
            pass
    rows = []
    if "fwd" in only:
        rows.append(("jax.jit call (floor)", [x / a.ops for x in _time(_jit_floor(a.ops), a.reps)], None))
    for name in only:
        fn, k = jcases[name]
        tj = [x / k for x in _time(fn, a.reps)]
        tt = [x / k for x in _time(tcases[name][0], a.reps)] if tcases else None
        rows.append((f"{name} ({'per op' if k > 1 else 'per step'})", tj, tt))
    print("us, medians; wall clock, and CPU time of the calling thread (host cost)")
    print(f"{'case':28s} {'jgrad wall':>10s} {'torch wall':>10s} {'ratio':>6s} {'jgrad host':>10s} {'torch host':>10s} "
          f"{'ratio':>6s}")
    for name, tj, tt in rows:
        cols = []
        for i in (0, 1):
            cols.append(f"{tj[i] * 1e6:10.1f}")
            cols.append(f"{tt[i] * 1e6:10.1f} {tj[i] / tt[i]:6.2f}" if tt else f"{'':>10s} {'':>6s}")
        print(f"{name:28s} " + " ".join(cols))
    print(f"load average after: {os.getloadavg()}")
    if a.profile:
        for name in only:
            print(f"\n==== cProfile of jgrad {name} (5 calls), by own time ====")
            _profile(jcases[name][0], a.top)


if __name__ == "__main__":
    main()
