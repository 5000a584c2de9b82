"""Views: reading a slice, and writing through a slice, a transpose and ``view(-1)``, against PyTorch.

    python -m benchmarks.views [--quick] [--device cpu|gpu] [--json out.json]

Each case (64x256 float32, as ``eager_overhead``) is timed, interleaved in one run, as:

- jgrad eager: the view and the op it feeds or the in-place op through it (a view runs no kernel
  when made; a read is one gather kernel, a write one gather+op+scatter kernel);
- jgrad eager, no view: the same op on the tensor itself (the per-op floor of eager mode);
- jgrad auto: the same line in a loop of 20 with one read at the end, per line, after the loop's
  structure has compiled (the views' gathers and scatters fused into one executable);
- ``jax.jit`` of the functional equivalent (``x.at[8:24].add(1)``...) and PyTorch eager.

Goals (issue 25): eager <= 2x PyTorch eager per line; auto fuses the view away (a line costs what the
same line without a view costs in the compiled loop).
"""
from __future__ import annotations

import sys

import numpy as np

if __package__ in (None, ""):  # run as a script
    import os

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import common  # noqa: E402
else:
    from . import common

LOOP = 20


def _cases(jg, jnp):
    """(title, jgrad line, jgrad line without a view, jax function of the array, torch line)."""
    return [
        ("slice read: x[8:24] * 2", lambda x: x[8:24] * 2, lambda x: x * 2,
         lambda a: a[8:24] * 2, lambda x: x[8:24] * 2),
        ("write through a slice: x[8:24].add_(1)", lambda x: x[8:24].add_(1), lambda x: x.add_(1),
         lambda a: a.at[8:24].add(1), lambda x: x[8:24].add_(1)),
        ("write through a transpose: x.t().mul_(1)", lambda x: x.t().mul_(1.0), lambda x: x.mul_(1.0),
         lambda a: (a.T * 1.0).T, lambda x: x.t().mul_(1.0)),
        ("write through view(-1): x.view(-1)[:512].fill_(0)", lambda x: x.view(-1)[:512].fill_(0.0),
         lambda x: x.fill_(0.0), lambda a: a.reshape(-1).at[:512].set(0.0).reshape(a.shape),
         lambda x: x.view(-1)[:512].fill_(0.0)),
    ]


def _auto_loop(jg, line, x):
    """LOOP lines in auto mode, then one read of x (the barrier); the loop's time per line."""
    def run():
        with jg.execution_mode("auto"):
            for _ in range(LOOP):
                line(x)
            return x.sum().item()
    return run


def main(argv=None):
    args = common.base_parser(__doc__.splitlines()[0]).parse_args(argv)
    jdev, tdev = common.setup_device(args.device)
    env = common.environment(jdev, tdev)
    common.print_header("views", env)
    import jax
    import jax.numpy as jnp

    import jgrad as jg

    try:
        import torch
    except ImportError:
        torch = None
    repeat = args.repeat or (5 if args.quick else 15)
    a_np = np.random.default_rng(0).standard_normal((64, 256), dtype=np.float32)
    tables, verdicts = [], []
    for title, line, plain, jax_fn, torch_line in _cases(jg, jnp):
        x, xp = jg.tensor(a_np), jg.tensor(a_np)
        xa = jnp.asarray(a_np)
        fn = jax.jit(jax_fn)
        xs = [jg.tensor(a_np), jg.tensor(a_np)]
        auto, auto_plain = _auto_loop(jg, line, xs[0]), _auto_loop(jg, plain, xs[1])
        for f in (auto, auto_plain):
            common.until_hot(f, calls=2, limit_s=120)
        variants = [
            common.Variant("jgrad eager", lambda: line(x)),
            common.Variant("jgrad eager, no view", lambda: plain(xp)),
            common.Variant("jgrad auto (per line)", auto, number=1, note=f"{LOOP} lines + one read, / {LOOP}"),
            common.Variant("jgrad auto, no view (per line)", auto_plain, number=1,
                           note=f"{LOOP} lines + one read, / {LOOP}"),
            common.Variant("jax.jit", lambda: fn(xa)),
        ]
        if torch is not None:
            tx = torch.tensor(a_np, device=tdev)
            variants.append(common.Variant("torch eager", lambda: torch_line(tx), sync=common.torch_sync(tdev)))
        res = common.compare(variants, repeat=repeat)
        for r in res:  # the auto rows time LOOP lines per call
            if r.name.startswith("jgrad auto"):
                r.samples = [s / LOOP for s in r.samples]
        tables.append(common.table(title, res, baselines=("torch eager", "jgrad eager, no view", "jax.jit")))
        by = {r.name: r.median for r in res}
        if "torch eager" in by:
            ratio = by["jgrad eager"] / by["torch eager"]
            verdicts.append(common.verdict(f"{title}: jgrad eager / torch eager", f"{ratio:.2f}x", "<= 2x",
                                           ratio <= 2.0))
        ratio = by["jgrad auto (per line)"] / by["jgrad auto, no view (per line)"]
        verdicts.append(common.verdict(f"{title}: auto with the view / without", f"{ratio:.2f}x", "<= 1.2x",
                                       ratio <= 1.2))
    print("\n### Goals\n")
    for v in verdicts:
        print(f"- {v['label']}: {v['value']} (goal {v['target']}: {'met' if v['met'] else 'NOT met'})")
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "args": vars(args), "tables": tables, "targets": verdicts})


if __name__ == "__main__":
    main()
