"""Functional transforms: per-sample gradients and Hessian-vector products of an MLP (issue 29's goals).

    python -m benchmarks.functional [--quick] [--device cpu|gpu] [--batch 256] [--hidden 128] [--json out.json]

The model: an MLP ``in -> hidden -> hidden -> out`` (tanh), mean-squared error, float32. Two workloads:

- per-sample gradients, ``vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)`` over a batch of
  ``--batch`` examples: jgrad's ``jgrad.func`` (``functional_call`` on a ``jg.nn`` module, as a
  ``torch.func`` user writes it), ``torch.func`` (when installed) on the same module in PyTorch,
  ``jax.jit(jax.vmap(jax.grad(loss)))`` and the same un-jitted (JAX eager);
- the Hessian-vector product of the batch loss w.r.t. the parameters, ``jvp(grad(loss), (params,), (v,))``
  (forward over reverse): jgrad, ``torch.func``, ``jax.jit`` and JAX eager.

Goals (issue 29): per-sample gradients <= 1.0x ``torch.func`` and <= 1.2x ``jax.jit``; HVP <= 1.0x
``torch.func``. Medians over interleaved batches (benchmarks/common.py); nothing asserts.
"""
from __future__ import annotations

import sys

import numpy as np

if __package__ in (None, ""):
    import os

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import common  # noqa: E402
else:
    from . import common


def _weights(args):
    rng = np.random.default_rng(0)
    sizes = [args.in_features, args.hidden, args.hidden, args.out_features]
    ws = {}
    for i, (fi, fo) in enumerate(zip(sizes[:-1], sizes[1:])):
        bound = 1.0 / np.sqrt(fi)
        ws[f"{2 * i}.weight"] = rng.uniform(-bound, bound, (fo, fi)).astype(np.float32)
        ws[f"{2 * i}.bias"] = rng.uniform(-bound, bound, (fo,)).astype(np.float32)
    x = rng.standard_normal((args.batch, args.in_features), dtype=np.float32)
    y = rng.standard_normal((args.batch, args.out_features), dtype=np.float32)
    v = {k: rng.standard_normal(w.shape).astype(np.float32) for k, w in ws.items()}
    return ws, x, y, v


def build_jgrad(args, ws, x_np, y_np, v_np):
    import jgrad as jg
    from jgrad.func import functional_call, grad, jvp, vmap

    nn = jg.nn
    model = nn.Sequential(nn.Linear(args.in_features, args.hidden), nn.Tanh(), nn.Linear(args.hidden, args.hidden),
                          nn.Tanh(), nn.Linear(args.hidden, args.out_features))
    params = {k: jg.tensor(w) for k, w in ws.items()}
    x, y = jg.tensor(x_np), jg.tensor(y_np)
    v = {k: jg.tensor(a) for k, a in v_np.items()}

    def loss(p, xb, yb):
        return ((functional_call(model, p, (xb[None],)) - yb) ** 2).mean()

    def batch_loss(p):
        return ((functional_call(model, p, (x,)) - y) ** 2).mean()

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    hvp_fn = grad(batch_loss)
    return {"per_sample": lambda: per_sample(params, x, y),
            "hvp": lambda: jvp(hvp_fn, (params,), (v,))[1]}


def build_torch(args, ws, x_np, y_np, v_np, tdev):
    import torch
    from torch.func import functional_call, grad, jvp, vmap

    nn = torch.nn
    model = nn.Sequential(nn.Linear(args.in_features, args.hidden), nn.Tanh(), nn.Linear(args.hidden, args.hidden),
                          nn.Tanh(), nn.Linear(args.hidden, args.out_features)).to(tdev)
    params = {k: torch.tensor(w, device=tdev) for k, w in ws.items()}
    x, y = torch.tensor(x_np, device=tdev), torch.tensor(y_np, device=tdev)
    v = {k: torch.tensor(a, device=tdev) for k, a in v_np.items()}

    def loss(p, xb, yb):
        return ((functional_call(model, p, (xb[None],)) - yb) ** 2).mean()

    def batch_loss(p):
        return ((functional_call(model, p, (x,)) - y) ** 2).mean()

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    hvp_fn = grad(batch_loss)
    return {"per_sample": lambda: per_sample(params, x, y),
            "hvp": lambda: jvp(hvp_fn, (params,), (v,))[1]}


def build_jax(ws, x_np, y_np, v_np):
    import jax
    import jax.numpy as jnp

    params = {k: jnp.asarray(w) for k, w in ws.items()}
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)
    v = {k: jnp.asarray(a) for k, a in v_np.items()}

    def forward(p, xb):
        h = jnp.tanh(xb @ p["0.weight"].T + p["0.bias"])
        h = jnp.tanh(h @ p["2.weight"].T + p["2.bias"])
        return h @ p["4.weight"].T + p["4.bias"]

    def loss(p, xb, yb):
        return ((forward(p, xb[None]) - yb) ** 2).mean()

    def batch_loss(p):
        return ((forward(p, x) - y) ** 2).mean()

    per_sample = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))

    def hvp(p, t):
        return jax.jvp(jax.grad(batch_loss), (p,), (t,))[1]

    jit_ps, jit_hvp = jax.jit(per_sample), jax.jit(hvp)
    return {("jit", "per_sample"): lambda: jit_ps(params, x, y),
            ("eager", "per_sample"): lambda: per_sample(params, x, y),
            ("jit", "hvp"): lambda: jit_hvp(params, v), ("eager", "hvp"): lambda: hvp(params, v)}


def breakdown(fn, calls=5):
    """Where one call of a ``jgrad.func`` transform spends its time (medians over ``calls``): building the trace
    cache's key (``_trace_cache.call_key``; a call that repeats the transform's last one builds none), the rest
    of the call (on a cache hit: re-reading the tensors the trace read and running the cached executable), and
    how many calls traced or reused a trace."""
    import statistics
    import time

    from jgrad.func import _trace_cache

    parts = {"trace-cache key": [], "total": []}
    orig = _trace_cache.call_key

    def timed_key(*a, **k):
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            parts["trace-cache key"].append(time.perf_counter() - t0)

    before = _trace_cache.trace_cache_info()
    _trace_cache.call_key = timed_key
    try:
        for _ in range(calls):
            t0 = time.perf_counter()
            common.block(fn())
            parts["total"].append(time.perf_counter() - t0)
    finally:
        _trace_cache.call_key = orig
    after = _trace_cache.trace_cache_info()
    out = {k: statistics.median(v) for k, v in parts.items() if v}
    counts = {k: after[k] - before[k] for k in ("traces", "hits", "kept", "uncached")}
    return out, counts


def _full_path_on():
    """While a batch is timed: transforms do not keep their last call (``jgrad.func._fastcall.enabled``)."""
    from jgrad.func import _fastcall
    _fastcall.enabled = False


def _full_path_off():
    from jgrad.func import _fastcall
    _fastcall.enabled = True


def _as_np(tree):
    out = {}
    for k, a in tree.items():
        a = a.detach().cpu().numpy() if hasattr(a, "detach") else a
        out[k] = np.asarray(a)
    return out


def main(argv=None):
    p = common.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=256, help="examples per batch (default 256, as in issue 29)")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--in-features", type=int, default=32)
    p.add_argument("--out-features", type=int, default=1)
    p.add_argument("--no-jax-eager", action="store_true", help="skip the (slow) un-jitted jax rows")
    p.add_argument("--full-path", action="store_true",
                   help="also time jgrad.func with every call building its trace-cache key (jgrad/func/_fastcall.py "
                        "off: the cached call before transforms kept their last call)")
    args = p.parse_args(argv)
    jdev, tdev = common.setup_device(args.device)
    env = common.environment(jdev, tdev)
    common.print_header("Functional transforms: per-sample gradients and HVP of an MLP", env)
    print(f"- model: Linear({args.in_features}, {args.hidden}) + tanh + Linear({args.hidden}, {args.hidden}) + tanh + "
          f"Linear({args.hidden}, {args.out_features}), MSE, batch {args.batch}, float32")
    repeat = args.repeat or (5 if args.quick else 15)

    ws, x, y, v = _weights(args)
    jg_runs = build_jgrad(args, ws, x, y, v)
    try:
        t_runs = build_torch(args, ws, x, y, v, tdev)
        tsync = common.torch_sync(tdev)
    except ImportError:
        t_runs, tsync = None, None
    jax_runs = build_jax(ws, x, y, v)

    checks = {}
    for work in ("per_sample", "hvp"):
        mine, ref = _as_np(jg_runs[work]()), _as_np(jax_runs[("jit", work)]())
        checks[f"{work}: max|jgrad - jax.jit|"] = max(float(np.abs(mine[k] - ref[k]).max()) for k in ref)
        if t_runs is not None:
            theirs = _as_np(t_runs[work]())
            checks[f"{work}: max|jgrad - torch.func|"] = max(float(np.abs(mine[k] - theirs[k]).max()) for k in ref)
    print("- agreement: " + ", ".join(f"{k} = {val:.3g}" for k, val in checks.items()))

    tables, verdicts = [], []
    titles = {"per_sample": f"Per-sample gradients, vmap(grad(loss)), batch {args.batch}",
              "hvp": "Hessian-vector product, jvp(grad(loss)) over the batch"}
    for work in ("per_sample", "hvp"):
        variants = [common.Variant("jgrad.func", jg_runs[work], note="cached trace, one executable")]
        if args.full_path:
            variants.append(common.Variant("jgrad.func, full path", jg_runs[work], around=(_full_path_on, _full_path_off),
                                           note="every call builds its key"))
        if t_runs is not None:
            import torch

            variants.append(common.Variant("torch.func", t_runs[work], sync=tsync,
                                           note=f"{torch.get_num_threads()} threads"))
        variants.append(common.Variant("jax.jit", jax_runs[("jit", work)], note="one XLA program"))
        if not args.no_jax_eager:
            variants.append(common.Variant("jax eager", jax_runs[("eager", work)], note="un-jitted"))
        res = common.compare(variants, repeat=repeat, warmup=2, batch_s=0.05)
        tables.append(common.table(titles[work], res, baselines=("torch.func", "jax.jit")))
        parts, counts = breakdown(jg_runs[work])
        print(f"\nWhere a jgrad.func call goes ({work}, medians of 5 calls): "
              + ", ".join(f"{k} {common.fmt_time(t)}" for k, t in parts.items())
              + f"; in those calls: {counts['traces']} traces, {counts['hits']} trace-cache hits "
              f"({counts['kept']} of them the transform's last call, run without a key)")
        tables[-1]["breakdown_s"] = parts
        tables[-1]["trace_cache"] = counts
        by = {r.name: r.median for r in res}
        if "torch.func" in by:
            r = by["jgrad.func"] / by["torch.func"]
            verdicts.append(common.verdict(f"{work}: jgrad / torch.func", f"{r:.2f}x", "<= 1.0x", r <= 1.0))
        if work == "per_sample":
            r = by["jgrad.func"] / by["jax.jit"]
            verdicts.append(common.verdict(f"{work}: jgrad / jax.jit", f"{r:.2f}x", "<= 1.2x", r <= 1.2))
    print("\n### Goals (issue 29)\n")
    for vd in verdicts:
        print(f"- {vd['label']}: {vd['value']} (target {vd['target']}) -> {'MET' if vd['met'] else 'NOT met'}")
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "args": vars(args), "checks": checks, "tables": tables,
                                 "targets": verdicts})


if __name__ == "__main__":
    main()
