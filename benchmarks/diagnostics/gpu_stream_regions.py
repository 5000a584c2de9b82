"""Which spellings of a ``compute_on('gpu_stream:N')`` region compile and overlap, per XLA flags.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gpu_stream_regions [--flags=VALUE ...]

Each XLA_FLAGS variant runs in a fresh process (XLA reads the flags once). In each, three ways of
putting the second of two independent chains (20 x ``tanh(a @ w)``, 128x128) on stream 1:

- ``jit-in-region``: ``compute_on(jax.jit(chain))``, the inner kernels' jits inlined (jgrad before
  this experiment: it fails to compile on jaxlib 0.11.2);
- ``flat-region``: ``compute_on(chain)`` with the kernels' jits inlined, so the region holds no call (what jgrad
  does now);
- ``jax-test``: JAX's own stream-annotation test case (one add under ``compute_on``, called from a jit).

For each: whether it compiles, whether ``call-start`` shows in the optimised HLO, and the time of
one call against the same two chains on one stream. No assertions: figures go to RESULTS.md by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_VARIANTS = ["", "--xla_gpu_enable_command_buffer=", "--xla_gpu_command_buffer_scheduling_mode=CONCURRENT"]


def _time(fn, n=200, repeat=7):
    """Median per-call time; each call's outputs are dropped before the next call.

    Holding them while the next call allocates its outputs puts those at another address, and XLA then
    re-records the executable's CUDA graphs at every call (tens of us: it hid the single-stream time).
    """
    import jax
    jax.block_until_ready(fn())
    r = []
    for _ in range(repeat):
        out = None
        t0 = time.perf_counter()
        for _ in range(n):
            out = None
            out = fn()
        jax.block_until_ready(out)
        r.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(r)


def child():
    import jax
    import jax.numpy as jnp

    from jgrad.runtime._capture import _on_stream

    jax.config.update("jax_default_matmul_precision", "highest")
    kernel = jax.jit(lambda a, b: jnp.tanh(a @ b))

    def chain(a, w):
        for _ in range(20):
            a = kernel(a, w)
        return a

    def inlined(a, w):
        with jax.disable_jit():
            return [chain(a, w)]

    a = jnp.ones((128, 128)) * 0.01
    w = jnp.eye(128) * 0.5
    one = jax.jit(lambda a1, a2, w: (chain(a1, w), chain(a2, w)))
    res = {"flags": os.environ.get("XLA_FLAGS", ""), "one stream (us)": _time(lambda: one(a, a, w))}
    regions = {"jit-in-region": lambda: _on_stream(jax.jit(inlined), 1, 1),
               "flat-region": lambda: _on_stream(inlined, 1, 1)}
    for name, make in regions.items():
        try:
            body = make()
            two = jax.jit(lambda a1, a2, w, body=body: (chain(a1, w), body(a2, w)[0]))
            text = two.lower(a, a, w).compile().as_text()
            got = two(a, a, w)
            same = bool(jnp.allclose(got[1], one(a, a, w)[1]))
            res[name] = {"compiles": True, "call-start in HLO": "call-start" in text, "same values": same,
                         "two streams (us)": _time(lambda: two(a, a, w))}
        except Exception as e:  # noqa: BLE001 - the point is to record which spellings fail
            res[name] = {"compiles": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    try:
        add = _on_stream(jax.jit(lambda x, y: [x + y]), 1, 1)
        f = jax.jit(lambda x, y: add(x, y)[0])
        x = jnp.ones((8,))
        text = f.lower(x, x).compile().as_text()
        res["jax-test"] = {"compiles": True, "call-start in HLO": "call-start" in text,
                           "value ok": bool(jnp.all(f(x, x) == 2.0))}
    except Exception as e:  # noqa: BLE001
        res["jax-test"] = {"compiles": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    print("RESULT " + json.dumps(res))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flags", action="append", default=None, help="an XLA_FLAGS variant (repeatable; --flags=VALUE)")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._child:
        child()
        return 0
    for flags in a.flags or DEFAULT_VARIANTS:
        env = dict(os.environ, XLA_FLAGS=flags)
        r = subprocess.run([sys.executable, "-m", "benchmarks.diagnostics.gpu_stream_regions", "--_child"], env=env,
                           capture_output=True, text=True)
        line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
        print(f"=== XLA_FLAGS={flags!r}")
        if not line:
            print(f"FAILED rc={r.returncode}\n{r.stderr[-2000:]}")
            continue
        for k, v in json.loads(line[0][7:]).items():
            print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
