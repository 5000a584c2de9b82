"""Device time vs host time of the small-MLP step, from a ``jax.profiler`` trace, per XLA scheduling mode.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gpu_replay_trace [--tf32] [--steps 100] [--trace-dir DIR]

For the ``jax.jit`` whole step (as is, with XLA's Triton GEMM fusions off, and returning its gradients
packed) and the jgrad captured step (as is, with its in-place state unpacked, with
``xla_gpu_command_buffer_scheduling_mode=CONCURRENT``, and with the ``.grad``s set to None inside the
capture, with and without Triton GEMMs), prints:

- throughput: N calls back to back, one block at the end (what ``benchmarks.capture`` reports),
  and the host time of issuing them;
- from a trace of ``--steps`` back-to-back calls: device busy time per step (the union of the
  kernels' intervals on the GPU), device span per step (first kernel start to last kernel end,
  divided by the steps), kernels per step, the kernels with the most device time per step, and the
  host events with the largest time per step.

If the device busy time per step is close to the throughput, the step is device-bound and only
fewer or shorter kernels (or overlapping them) make it faster; if it is well below, the host is
the limit. No assertions: the figures go into ``benchmarks/RESULTS.md`` by hand.
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
import tempfile
from collections import defaultdict

from benchmarks.diagnostics.gpu_replay_diag import _time as diag_time

CONCURRENT = {"xla_gpu_command_buffer_scheduling_mode": "CONCURRENT"}
# Whether XLA's own Triton GEMM fusions (a dot with its producers/consumers fused in) are what makes a step slow.
NO_TRITON_GEMM = {"xla_gpu_enable_triton_gemm": False}


def _throughput(fn, block, n, repeat):
    thr, issue = diag_time(fn, block, n, repeat)
    return thr * 1e6, issue * 1e6


def _union_ns(intervals):
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def trace_summary(path, steps):
    """Per-step device busy/span/kernel count and the heaviest host events of one xplane file."""
    from jax.profiler import ProfileData

    pd = ProfileData.from_file(path)
    kernels, host = [], defaultdict(float)
    for plane in pd.planes:
        if plane.name.startswith("/device:GPU"):
            for line in plane.lines:
                if "XLA" in line.name or "Steps" in line.name:  # derived lines, not CUPTI activity
                    continue
                kernels += [(e.start_ns, e.start_ns + e.duration_ns, e.name) for e in line.events]
        elif plane.name == "/host:CPU":
            for line in plane.lines:
                for e in line.events:
                    host[e.name] += e.duration_ns
    top = sorted(host.items(), key=lambda kv: -kv[1])[:10]
    host_top = {k[:80]: round(v / steps / 1e3, 1) for k, v in top}
    if not kernels:
        return {"kernels/step": 0, "host events us/step": host_top}
    busy = _union_ns([(s, e) for s, e, _ in kernels])
    span = max(e for _, e, _ in kernels) - min(s for s, _, _ in kernels)
    per_kernel = defaultdict(float)
    for s, e, name in kernels:
        per_kernel[name] += e - s
    kernel_top = {k[:60]: round(v / steps / 1e3, 1) for k, v in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:8]}
    return {"device busy us/step": round(busy / steps / 1e3, 1), "device span us/step": round(span / steps / 1e3, 1),
            "kernels/step": round(len(kernels) / steps, 1), "kernels with the most device time, us/step": kernel_top,
            "host events us/step": host_top}


def _traced(fn, block, steps, where):
    import jax

    block(fn())
    d = tempfile.mkdtemp(dir=where)
    jax.profiler.start_trace(d)
    for _ in range(steps):
        out = fn()
    block(out)
    jax.profiler.stop_trace()
    files = glob.glob(f"{d}/**/*.xplane.pb", recursive=True)
    return trace_summary(files[0], steps) if files else {"error": f"no xplane under {d}"}


def _programs(w):
    """(name, call, block) for jax.jit's step and jgrad's replay, each with XLA's default and CONCURRENT scheduling."""
    import jax
    import jax.numpy as jnp

    from benchmarks import capture, common
    from jgrad.runtime import _capture, _compile
    from jgrad import nn

    x, y = jnp.asarray(w.X), jnp.asarray(w.Y)
    for name, opts in (("jax.jit step", None), ("jax.jit step, Triton GEMMs off", NO_TRITON_GEMM)):
        params, key = capture.jax_state(w)
        lo = capture.jax_step(w).lower(params, key, x, y)
        exe = lo.compile(compiler_options=dict(opts)) if opts else lo.compile()
        st = {"p": params, "k": key}

        def call(exe=exe, st=st):
            loss, st["p"], st["k"] = exe(st["p"], st["k"], x, y)
            return loss
        yield name, call, jax.block_until_ready

    # The same step returning its gradients packed into one array, as jgrad's replay returns the .grads.
    mlp_loss = capture.jax_loss_fn(w)

    def step_packed(ps, x, y):
        loss, grads = jax.value_and_grad(mlp_loss)(ps, x, y, jax.random.PRNGKey(0))  # no Dropout: key unused
        ps = jax.tree_util.tree_map(lambda p_, g_: p_ - w.lr * g_, ps, grads)
        return loss, ps, jnp.concatenate([g_.ravel() for g_ in jax.tree_util.tree_leaves(grads)])
    st_p = {"p": capture.jax_state(w)[0]}
    packed = jax.jit(step_packed, donate_argnums=(0,)).lower(st_p["p"], x, y).compile()

    def call_packed():
        loss, st_p["p"], _ = packed(st_p["p"], x, y)
        return loss
    yield "jax.jit step returning its grads packed", call_packed, jax.block_until_ready

    loss_mod = nn.MSELoss()
    _, _, model, opt, x_r, y_r, *_ = capture._jg_setup(w, loss_mod)
    default = _compile.gpu_compiler_options
    # (name, compiler options, pack_state, .grads set to None at the end of the capture: nothing outlives the
    # step but the parameters and the loss, as in jax.jit's step)
    nograds = "jgrad replay, .grads set to None in the graph"
    for name, opts, state, to_none in (
            ("jgrad replay", default, True, False),
            ("jgrad replay, state unpacked (one argument/output per tensor)", default, False, False),
            ("jgrad replay, CONCURRENT", {**(default or {}), **CONCURRENT}, True, False),
            (nograds, default, True, True),
            (nograds + ", Triton GEMMs off", {**(default or {}), **NO_TRITON_GEMM}, True, True)):
        _compile.gpu_compiler_options, _capture.pack_state = opts, state
        try:
            g, static_loss = capture.jg_capture(model, opt, loss_mod, x_r, y_r, grads_to_none_inside=to_none)
        finally:
            _compile.gpu_compiler_options, _capture.pack_state = default, True

        def replay(g=g, static_loss=static_loss):
            g.replay()
            return static_loss
        yield name, replay, common.block


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tf32", action="store_true", help="TF32 matmuls (as benchmarks.capture --tf32)")
    p.add_argument("-n", type=int, default=200, help="calls per throughput batch")
    p.add_argument("--repeat", type=int, default=9, help="throughput batches per program")
    p.add_argument("--steps", type=int, default=100, help="calls in the traced run")
    p.add_argument("--trace-dir", default=None, help="keep the traces here (default: a temporary folder)")
    p.add_argument("--device", default="gpu")
    a = p.parse_args(argv)

    from benchmarks import capture, common
    capture._quiet_donation()
    common.setup_device(a.device)
    print(capture.set_precision(a.tf32, "cuda"))
    w = capture.small_workload()
    where = a.trace_dir or tempfile.mkdtemp()
    out = {}
    for name, call, block in _programs(w):
        thr, issue = _throughput(call, block, a.n, a.repeat)
        out[name] = {"throughput us/step": round(thr, 1), "host issue us/step": round(issue, 1),
                     **_traced(call, block, a.steps, where)}
        print(f"=== {name}")
        for k, v in out[name].items():
            print(f"  {k}: {v}")
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
