"""Where a small-MLP step's time goes on a GPU: host issue vs device, jax.jit vs jgrad replay, per XLA flags.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gpu_replay_diag [--flags "--xla_gpu_enable_command_buffer=" ...] [--tf32]

For each XLA_FLAGS variant (each in a fresh process: XLA reads the flags once) and for both the
``jax.jit`` whole step and the jgrad captured step, prints:

- throughput: N calls back to back, one block at the end (what ``benchmarks.capture`` reports);
- host issue: the same N calls' Python time before the block (if it is close to the throughput,
  the step is host-bound);
- kernels: fusions, GEMM custom calls and command-buffer regions in the optimised HLO.

No assertions: the figures go into ``benchmarks/RESULTS.md`` by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

DEFAULT_VARIANTS = [
    "",
    "--xla_gpu_enable_command_buffer=",
    "--xla_gpu_graph_min_graph_size=1",
]


def _hlo_counts(text: str) -> dict:
    return {"fusions": len(re.findall(r"= \S+ fusion\(", text)),
            "gemm custom-calls": len(re.findall(r'custom_call_target="__cublas', text)),
            "command buffers": len(re.findall(r"command_buffer", text)) // 2}


def _time(fn, block, n, repeat):
    thr, issue = [], []
    for _ in range(repeat):
        block(fn())
        t0 = time.perf_counter()
        for _ in range(n):
            out = fn()
        t1 = time.perf_counter()
        block(out)
        t2 = time.perf_counter()
        issue.append((t1 - t0) / n)
        thr.append((t2 - t0) / n)
    return statistics.median(thr), statistics.median(issue)


def _dump_hlo(name, compiled):
    """Write an executable's optimised HLO under $DIAG_HLO_DIR (when set), to diff jgrad's against jax's."""
    where = os.environ.get("DIAG_HLO_DIR")
    if where:
        os.makedirs(where, exist_ok=True)
        flags = os.environ.get("XLA_FLAGS", "").replace("-", "").replace("=", "_") or "default"
        fname = re.sub(r"[^A-Za-z0-9]+", "_", f"{flags}_{name}").strip("_")[:120] + ".hlo.txt"
        with open(os.path.join(where, fname), "w") as f:
            f.write(compiled.as_text())


def _replay_segments(g, block, n):
    """Median time per replay of each part of ``_Plan.run``: reading arguments, the executable, rebinding."""
    from jgrad.streams import _current_for

    plan = g._plan
    s = _current_for(plan.cap.origin.device)
    seg = {"read inputs, release outputs": [], "executable call": [], "bind outputs (incl. packed, keys)": []}
    for _ in range(n):
        t0 = time.perf_counter_ns()
        args = plan._arguments()
        plan._release()  # as run() does: without it every call re-records XLA's CUDA graphs
        t1 = time.perf_counter_ns()
        outs = plan.compiled(*args)
        t2 = time.perf_counter_ns()
        plan._bind(outs, s)
        t3 = time.perf_counter_ns()
        for name, a, b_ in zip(seg, (t0, t1, t2), (t1, t2, t3)):
            seg[name].append((b_ - a) / 1e3)
    block(outs[-1])
    return {k: round(statistics.median(v), 2) for k, v in seg.items()}


def child(n, repeat):
    import jax
    import jax.numpy as jnp

    from benchmarks import capture, common

    capture._quiet_donation()
    common.setup_device(os.environ.get("DIAG_DEVICE", "gpu"))
    import jgrad as jg
    from jgrad import nn

    capture.set_precision(os.environ.get("DIAG_TF32") == "1", "cuda")
    w = capture.small_workload()
    out = {"flags": os.environ.get("XLA_FLAGS", "")}

    # jax.jit whole step
    step = capture.jax_step(w)
    params, key = capture.jax_state(w)
    x, y = jnp.asarray(w.X), jnp.asarray(w.Y)
    st = {"p": params, "k": key}

    def jit_call():
        loss, st["p"], st["k"] = step(st["p"], st["k"], x, y)
        return loss

    out["jax.jit"] = _time(jit_call, jax.block_until_ready, n, repeat)
    out["jax.jit hlo"] = _hlo_counts(step.lower(st["p"], st["k"], x, y).compile().as_text())

    inner = step.__wrapped__

    # jax.jit without the PRNG key (the small MLP has no Dropout), with and without jgrad's compiler options
    def step_nokey(ps, x, y):
        l2, p2, _ = inner(ps, jax.random.PRNGKey(0), x, y)
        return l2, p2
    from jgrad.runtime import _compile
    for name, opts in (("jax.jit, no key", None), ("jax.jit, no key, jgrad's compiler options",
                                                   _compile.gpu_compiler_options)):
        lo = jax.jit(step_nokey, donate_argnums=(0,)).lower(st["p"], x, y)
        exe = lo.compile(compiler_options=dict(opts)) if opts else lo.compile()
        st2 = {"p": jax.tree_util.tree_map(jnp.copy, st["p"])}

        def call(exe=exe, st2=st2):
            loss, st2["p"] = exe(st2["p"], x, y)
            return loss
        out[name] = _time(call, jax.block_until_ready, n, repeat)

    # the same math returning its gradients packed into one array (what jgrad's replay returns)
    mlp_loss = capture.jax_loss_fn(w)

    def step_packed(ps, x, y):
        l2, grads = jax.value_and_grad(mlp_loss)(ps, x, y, jax.random.PRNGKey(0))  # no Dropout: key unused
        p2 = jax.tree_util.tree_map(lambda p_, g_: p_ - w.lr * g_, ps, grads)
        return l2, p2, jnp.concatenate([g_.ravel() for g_ in jax.tree_util.tree_leaves(grads)])
    for name, opts in (("jax.jit, grads packed", None), ("jax.jit, grads packed, jgrad's compiler options",
                                                         _compile.gpu_compiler_options)):
        lo = jax.jit(step_packed, donate_argnums=(0,)).lower(st["p"], x, y)
        exe = lo.compile(compiler_options=dict(opts)) if opts else lo.compile()
        _dump_hlo(name, exe)
        st2 = {"p": jax.tree_util.tree_map(jnp.copy, st["p"])}

        def call(exe=exe, st2=st2):
            loss, st2["p"], _ = exe(st2["p"], x, y)
            return loss
        out[name] = _time(call, jax.block_until_ready, n, repeat)

    # jgrad replay, with XLA's default options and with jgrad's
    loss_mod = nn.MSELoss()
    model_e, opt_e, model_r, opt_r, x_r, y_r, *_ = capture._jg_setup(w, loss_mod)
    params_r = list(model_r.parameters())
    mine = _compile.gpu_compiler_options
    for name, opts, pack in (("jgrad replay, outputs not packed, XLA default options", None, False),
                             ("jgrad replay, outputs not packed, min_graph_size=1", {"xla_gpu_graph_min_graph_size": 1},
                              False),
                             ("jgrad replay, min_graph_size=1", {"xla_gpu_graph_min_graph_size": 1}, True),
                             ("jgrad replay", mine, True)):
        _compile.gpu_compiler_options = opts
        opt_r.zero_grad(set_to_none=True)
        g = jg.Graph()
        g._pack_outputs = pack
        with jg.graph(g):
            static_loss = loss_mod(model_r(x_r), y_r)
            static_loss.backward()
            opt_r.step()

        def replay(g=g, static_loss=static_loss):
            g.replay()
            return static_loss

        out[name] = _time(replay, common.block, n, repeat)
        _dump_hlo(name, g._plan.compiled)
    plan = g._plan
    out["jgrad outputs"] = f"{len(plan.outputs)} + {len(plan.packed)} packed"
    out["jgrad inputs"] = len(plan.donated) + len(plan.kept)
    out["jgrad consts"] = len(plan.consts)
    try:
        out["jgrad hlo"] = _hlo_counts(plan.compiled.as_text())
    except Exception as e:  # noqa: BLE001
        out["jgrad hlo"] = repr(e)

    out["replay segments (us per replay)"] = _replay_segments(g, common.block, n)

    # host cost of the replay's Python around the executable call
    import cProfile
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        g.replay()
    pr.disable()
    common.block(params_r)
    s = pstats.Stats(pr)
    rows = sorted(s.stats.items(), key=lambda kv: -kv[1][3])[:8]
    out["replay profile (cumtime per call, us)"] = {f"{k[2]} ({os.path.basename(k[0])}:{k[1]})": v[3] / 200 * 1e6
                                                    for k, v in rows}
    print("RESULT " + json.dumps(out))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flags", action="append", default=None, help="an XLA_FLAGS variant (repeatable)")
    p.add_argument("-n", type=int, default=200)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--tf32", action="store_true", help="TF32 matmuls (as benchmarks.capture --tf32); default full float32")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._child:
        child(a.n, a.repeat)
        return 0
    for flags in a.flags or DEFAULT_VARIANTS:  # pass as --flags=VALUE
        env = dict(os.environ, XLA_FLAGS=flags, DIAG_TF32="1" if a.tf32 else "0")
        r = subprocess.run([sys.executable, "-m", "benchmarks.diagnostics.gpu_replay_diag", "--_child", "-n", str(a.n),
                            "--repeat", str(a.repeat)], env=env, capture_output=True, text=True)
        line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
        print(f"=== XLA_FLAGS={flags!r}")
        if not line:
            print(f"FAILED rc={r.returncode}\n{r.stderr[-3000:]}")
            continue
        res = json.loads(line[0][7:])
        for k, v in res.items():
            if isinstance(v, list):
                print(f"  {k}: throughput {v[0] * 1e6:.1f} us/step, host issue {v[1] * 1e6:.1f} us/step")
            elif isinstance(v, float):
                print(f"  {k}: {v * 1e6:.1f} us/step")
            else:
                print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
