"""Where jgrad's eager time goes: a phase breakdown of the MLP step and profiles of the op and the step.

    python -m benchmarks.profile_overhead [--quick] [--device cpu|gpu] [--no-pyinstrument]

1. Phase breakdown (timed, interleaved, medians): the MLP step of
   ``eager_overhead.py`` split into forward-with-tape, backward, SGD update and
   the implicit seed gradient of ``loss.backward()``, for jgrad and PyTorch.
2. Single pieces of the dispatch and engine paths, each timed alone (ReadyQueue
   push+pop, validate_outputs, the needs-input-grad mask, Tensor._make, the seed
   gradient, ...), skipped one by one if jgrad's internals have moved.
3. cProfile of 20000 eager ops (``x * y`` with ``x.requires_grad``), of 2000
   backward passes through one mul node, and of 300 MLP steps: jgrad functions by own
   time, shown per op / per step. cProfile charges the C++ ``jax.jit`` dispatch to
   the Python function that calls the kernel (``_call``, ``OpNode.apply``), and its
   own overhead inflates small functions: read it for ranking, not absolute cost.
4. pyinstrument (sampling, if installed: ``pip install pyinstrument``) call tree
   of the MLP step.
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

DEPTH, WIDTH, BATCH, LR = 8, 256, 64, 1e-3


def _mlp_jgrad():
    import jgrad as jg

    rng = np.random.default_rng(2)
    bound = 1.0 / np.sqrt(WIDTH)
    W = [jg.tensor(rng.uniform(-bound, bound, (WIDTH, WIDTH)).astype(np.float32), requires_grad=True)
         for _ in range(DEPTH)]
    B = [jg.tensor(rng.uniform(-bound, bound, (WIDTH,)).astype(np.float32), requires_grad=True)
         for _ in range(DEPTH)]
    params = [p for pair in zip(W, B) for p in pair]
    x = jg.tensor(rng.standard_normal((BATCH, WIDTH), dtype=np.float32))
    y = jg.tensor(rng.standard_normal((BATCH, WIDTH), dtype=np.float32))
    f = getattr(getattr(jg.nn, "functional", None), "mse_loss", None) or jg.ops.nn_ops.mse_loss

    def forward():
        h = x
        for i in range(DEPTH):
            h = jg.linear(h, W[i], B[i])
            if i < DEPTH - 1:
                h = jg.relu(h)
        return f(h, y)

    def update():
        with jg.no_grad():
            for p in params:
                p.sub_(p.grad, alpha=LR)
                p.grad = None

    def step():
        loss = forward()
        loss.backward()
        update()
        return loss

    return jg, params, forward, update, step


def phase_breakdown(repeat, tdev):
    import jgrad as jg

    jgm, params, forward, update, step = _mlp_jgrad()
    grads = [jg.ones(*p.shape) * 1e-3 for p in params]

    def set_grads():
        for p, g in zip(params, grads):
            p.grad = g

    def jg_backward(loss):
        loss.backward()
        out = [p.grad for p in params]
        for p in params:
            p.grad = None
        return out

    def jg_update(_):
        update()
        return params

    step()
    variants = [
        common.Variant("jgrad: whole step", lambda: [step()] + params),
        common.Variant("jgrad: forward (tape)", forward, note="8 linear + 7 relu + mse_loss, recorded"),
        common.Variant("jgrad: backward", jg_backward, setup=forward, note="loss.backward(), graph built untimed"),
        common.Variant("jgrad: SGD update", jg_update, setup=set_grads,
                       note="16 x p.sub_(p.grad, alpha=lr); p.grad=None"),
    ]
    loss0 = forward()
    variants.append(common.Variant("jgrad: seed grad (loss.new_ones(()))", lambda: loss0.new_ones(loss0.shape),
                                   note="what backward() makes for an implicit scalar seed"))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        rng = np.random.default_rng(2)
        bound = 1.0 / np.sqrt(WIDTH)
        W = [torch.tensor(rng.uniform(-bound, bound, (WIDTH, WIDTH)).astype(np.float32), device=tdev,
                          requires_grad=True) for _ in range(DEPTH)]
        Bs = [torch.tensor(rng.uniform(-bound, bound, (WIDTH,)).astype(np.float32), device=tdev,
                           requires_grad=True) for _ in range(DEPTH)]
        tp = [p for pair in zip(W, Bs) for p in pair]
        x = torch.randn(BATCH, WIDTH, device=tdev)
        y = torch.randn(BATCH, WIDTH, device=tdev)
        F = torch.nn.functional
        tg = [torch.full_like(p, 1e-3) for p in tp]
        sync = common.torch_sync(tdev)

        def t_forward():
            h = x
            for i in range(DEPTH):
                h = F.linear(h, W[i], Bs[i])
                if i < DEPTH - 1:
                    h = F.relu(h)
            return F.mse_loss(h, y)

        def t_update(_=None):
            with torch.no_grad():
                for p in tp:
                    p.sub_(p.grad, alpha=LR)
                    p.grad = None

        def t_set():
            for p, g in zip(tp, tg):
                p.grad = g

        def t_backward(loss):
            loss.backward()
            for p in tp:
                p.grad = None

        def t_step():
            t_forward().backward()
            t_update()

        def t_fwd():
            t_forward()

        variants += [
            common.Variant("torch: whole step", t_step, sync=sync),
            common.Variant("torch: forward (autograd)", t_fwd, sync=sync),
            common.Variant("torch: backward", t_backward, setup=t_forward, sync=sync),
            common.Variant("torch: SGD update", t_update, setup=t_set, sync=sync),
        ]
    res = common.compare(variants, repeat=repeat, batch_s=0.1)
    return common.table("Phase breakdown of the MLP step (8 x Linear(256,256), batch 64)", res,
                        baselines=("jgrad: whole step", "torch: whole step"))


def internals(repeat):
    """Costs of single engine/dispatch pieces, each timed alone (skipped if jgrad's internals moved)."""
    import threading

    import jax.numpy as jnp

    import jgrad as jg

    variants = []

    def add(name, make, note=""):
        try:
            fn = make()
            fn()
        except Exception as e:  # noqa: BLE001 - internal API changed: skip, say so
            print(f"  (internals: '{name}' skipped: {type(e).__name__}: {e})")
            return
        variants.append(common.Variant(name, fn, note=note))

    x = jg.tensor(np.ones((64, 256), np.float32), requires_grad=True)
    y = jg.tensor(np.ones((64, 256), np.float32))
    out = x * y
    node = out.grad_fn
    kernel = common.jgrad_forward_kernel(out)
    xa, ya = x._data, y._data
    add("bare jit kernel call (mul 64x256)", lambda: (lambda: kernel(xa, ya)))
    add("jgrad x * y, no record", lambda: (lambda: y * y))
    add("jgrad x * y, tape record (leaf x)", lambda: (lambda: x * y))

    def mk_queue():
        from jgrad.autograd import engine as E

        q = E.ReadyQueue()

        class _GT:
            reentrant_depth = 0
            outstanding_tasks = 0
            mutex = threading.RLock()

        gt = _GT()
        t = E.NodeTask(gt, node, None)
        return lambda: (q.push(t), q.pop())

    add("ReadyQueue push + pop (one node)", mk_queue, "Condition + RLock + heapq, per node")
    rlock = threading.RLock()
    cond = threading.Condition(threading.Lock())

    def locks():
        with rlock:
            pass
        with cond:
            cond.notify()

    add("RLock + Condition enter/notify/exit", lambda: locks)

    def mk_validate():
        from jgrad.autograd.engine import validate_outputs

        g = [jg.tensor(np.ones((64, 256), np.float32)), None]
        return lambda: validate_outputs(node.next_edges, list(g), lambda m: m)

    add("validate_outputs (mul node, 1 grad)", mk_validate, "shape/dtype/device checks per node")

    def mk_mask():
        from jgrad.autograd.engine import task_should_compute_output

        return lambda: tuple(task_should_compute_output(e) for e in node.next_edges)

    add("needs-input-grad mask (2 edges)", mk_mask, "OpNode.apply, every node")
    add("Tensor._make", lambda: (lambda: jg.Tensor._make(xa, x._device)))
    add("seed: loss.new_ones(())", lambda: (lambda: out.new_ones(())), "backward() of a scalar, every call")
    one = jnp.ones(())
    add("seed, cached array wrapped", lambda: (lambda: jg.Tensor._make(one, x._device)),
        "what a cached seed would cost")
    add("jnp.zeros((64, 256)) eager", lambda: (lambda: jnp.zeros((64, 256), jnp.float32)),
        "OpNode.apply fills a missing grad this way")
    res = common.compare(variants, repeat=repeat, batch_s=0.03)
    return common.table("Single pieces of the dispatch and engine paths, timed alone", res,
                        baselines=("bare jit kernel call (mul 64x256)",))


def _jgrad_rows(stats, n, top=18):
    rows = []
    for (fname, line, func), (cc, nc, tt, ct, _callers) in stats.stats.items():
        if "/jgrad/" not in fname:
            continue
        rows.append((tt, ct, nc, f"{fname.split('/jgrad/')[-1]}:{line}({func})"))
    rows.sort(reverse=True)
    print("| jgrad function | calls per unit | own us per unit | cumulative us per unit |")
    print("|---|---|---|---|")
    for tt, ct, nc, name in rows[:top]:
        print(f"| {name} | {nc / n:.2f} | {tt / n * 1e6:.1f} | {ct / n * 1e6:.1f} |")


def cprofile_sections(quick):
    import cProfile
    import pstats

    import jgrad as jg

    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal((64, 256), dtype=np.float32), requires_grad=True)
    y = jg.tensor(rng.standard_normal((64, 256), dtype=np.float32))
    _, params, _, _, step = _mlp_jgrad()
    n_ops, n_bwd, n_steps = (5000, 500, 100) if quick else (20000, 2000, 300)

    def ops():
        for _ in range(n_ops):
            x * y

    def bwd():
        loss = (x * y).sum()
        for _ in range(n_bwd):
            x.grad = None
            loss.backward(retain_graph=True)
        common.block(x.grad)

    def steps():
        for _ in range(n_steps):
            step()
        common.block(params)

    for label, fn, n, unit in (("eager op x * y (x.requires_grad=True)", ops, n_ops, "op"),
                               ("backward() through mul + sum (retain_graph=True)", bwd, n_bwd, "backward"),
                               ("MLP step", steps, n_steps, "step")):
        fn()  # warm (compilation)
        pr = cProfile.Profile()
        pr.enable()
        fn()
        pr.disable()
        st = pstats.Stats(pr)
        total = sum(v[2] for v in st.stats.values())
        print(f"\n### cProfile: {label}, {n} runs (profiled total {total / n * 1e6:.0f} us per {unit}, "
              f"profiler-inflated); jgrad functions by own time\n")
        _jgrad_rows(st, n)


def pyinstrument_section(quick):
    try:
        from pyinstrument import Profiler
    except ImportError:
        print("\n(pyinstrument not installed: pip install pyinstrument for the sampled call tree)")
        return
    _, params, _, _, step = _mlp_jgrad()
    for _ in range(10):
        step()
    n = 150 if quick else 600
    prof = Profiler(interval=0.0002)
    prof.start()
    for _ in range(n):
        step()
    common.block(params)
    prof.stop()
    print(f"\n### pyinstrument: {n} MLP steps (seconds are totals over the {n} steps)\n")
    print("```")
    print(prof.output_text(unicode=False, color=False, show_all=False))
    print("```")


def main(argv=None):
    p = common.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--no-pyinstrument", action="store_true")
    args = p.parse_args(argv)
    jdev, tdev = common.setup_device(args.device)
    env = common.environment(jdev, tdev)
    common.print_header("jgrad eager overhead: profile", env)
    repeat = args.repeat or (5 if args.quick else 15)
    tab = phase_breakdown(repeat, tdev)
    tab2 = internals(repeat)
    cprofile_sections(args.quick)
    if not args.no_pyinstrument:
        pyinstrument_section(args.quick)
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "tables": [tab, tab2]})


if __name__ == "__main__":
    main()
