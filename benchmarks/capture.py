"""Whole-graph capture (issue 5): replay of a captured training step against eager and ``jax.jit``.

    python -m benchmarks.capture [--quick] [--device cpu|gpu] [--tf32] [--repeat N] [--json PATH]

Workloads, each a whole training step (forward, loss, backward, ``optimizer.step()``):

(a) the seed MLP: N=640, D_in=4096, H=2048, D_out=1024,
    Linear-Dropout(0.1)-Linear-Dropout(0.2), MSE, SGD(lr=0.1). On the CPU,
    ``--quick`` shrinks it to N=64, D_in=512, H=256, D_out=128 (the tables say so).
(b) the small MLP: 8 x Linear(256, 256), ReLU between, batch 64, MSE, SGD(lr=1e-3).

Variants: jgrad eager step (``jg.nn`` + ``jg.optim.SGD``); jgrad replay of the
step captured with ``jg.graph`` as in PyTorch's whole-network example (and the
same with ``copy_`` of a new batch into the static inputs first);
``jax.jit(value_and_grad + SGD update)`` in one executable with the parameters
(and the PRNG key) donated; torch eager (when torch is installed); and on CUDA
torch CUDA-graph replay (``torch.cuda.graph``, warm-up on a side stream as the
docs do). All at the same float32 matmul precision: full float32 by default
(``jg.set_float32_matmul_precision("highest")``, jax ``default_matmul_precision
"highest"``, ``torch.backends.cuda.matmul.allow_tf32=False``); ``--tf32`` sets
"high" in jgrad and torch and "tensorfloat32" in jax (the same TF32 matmuls).

One-shot figures: the first call of a fresh ``jax.jit`` of the step (trace,
compile and one run) against jgrad's capture + compile of the same step (cache
cleared first), with and without the first replay; both are taken after the
docs' warm-up of the jgrad step on a side stream, so that one-time process
costs (CUDA start-up, XLA's in-process GEMM autotuning of these shapes) land
on neither. Also a re-capture of the same step (cache hit, with
``jg.graphs.cache_info()`` before and after).

(c) GPU only (``--two-streams`` forces it elsewhere, as a check of the code
path): two independent chains of 20 128x128 matmuls captured on two streams
(fork with ``side.wait_stream(cap)``, rejoin with ``cap.wait_stream(side)``;
jgrad lowers the side-stream region with
``jax.experimental.compute_on("gpu_stream:N")``) against the same chains on one
stream, and ``jax.jit`` of both chains.

Every timing waits for the results (``block_until_ready`` on the parameters and
outputs; ``torch.cuda.synchronize()`` for torch on CUDA); figures are medians
over interleaved batches (see common.py). Goals (issue 5), reported met / not
met, never asserted: replay within 1.05x of ``jax.jit``; replay >= 10x faster
than jgrad eager on the small MLP; capture + compile <= 1.5x the first
``jax.jit`` call.

Why one file of ~760 lines: the workloads, the jgrad / jax / torch builders of each step and the
one-shot child processes form one benchmark, and the GPU diagnostics (``benchmarks/diagnostics/``)
import these builders (``jg_capture``, ``small_workload``, ...) to time exactly the same steps.
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback
import warnings

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/capture.py
    import os

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import common  # noqa: E402
else:
    from . import common

SEED_FULL = dict(N=640, D_in=4096, H=2048, D_out=1024)
SEED_QUICK_CPU = dict(N=64, D_in=512, H=256, D_out=128)
SEED_P, SEED_LR = (0.1, 0.2), 0.1
SMALL_DEPTH, SMALL_WIDTH, SMALL_BATCH, SMALL_LR = 8, 256, 64, 1e-3
CHAIN_LEN, CHAIN_N = 20, 128

JIT_NAME = "jax.jit(value_and_grad + SGD update)"


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def _np(t):
    """A jgrad tensor's value as a NumPy array (copied to the host first: works for GPU tensors too)."""
    return np.asarray(t.detach().cpu().numpy())


def _quiet_donation():
    # CPU XLA cannot always reuse donated buffers: jax warns once per executable. Harmless here.
    warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
    warnings.filterwarnings("ignore", message=".*Some donated buffers.*")


# ============================================================================ precision
def set_precision(tf32: bool, tdev: str):
    """The same float32 matmul precision in jgrad, jax and torch; returns a description."""
    import jax

    import jgrad as jg

    jg.set_float32_matmul_precision("high" if tf32 else "highest")
    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    desc = (f"jgrad {jg.get_float32_matmul_precision()!r}, jax default_matmul_precision "
            f"{jax.config.jax_default_matmul_precision!r}")
    torch = _torch()
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        desc += f", torch allow_tf32={torch.backends.cuda.matmul.allow_tf32} " \
                f"float32_matmul_precision={torch.get_float32_matmul_precision()!r}"
    return desc


# ============================================================================ models
def _init_linear(rng, fan_in, fan_out):
    bound = 1.0 / np.sqrt(fan_in)
    return (rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
            rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))


class Workload:
    """One MLP training step: initial weights, data, layer plan (('linear', i) | ('relu',) | ('dropout', p))."""

    def __init__(self, key, title, sizes, layers, lr, init, X, Y):
        self.key, self.title, self.sizes, self.layers, self.lr = key, title, sizes, layers, lr
        self.init, self.X, self.Y = init, X, Y

    @property
    def has_dropout(self):
        return any(l[0] == "dropout" for l in self.layers)


def seed_workload(dims, note):
    rng = np.random.default_rng(0)
    N, D_in, H, D_out = dims["N"], dims["D_in"], dims["H"], dims["D_out"]
    init = [_init_linear(rng, D_in, H), _init_linear(rng, H, D_out)]
    layers = [("linear", 0), ("dropout", SEED_P[0]), ("linear", 1), ("dropout", SEED_P[1])]
    X = rng.standard_normal((N, D_in), dtype=np.float32)
    Y = rng.standard_normal((N, D_out), dtype=np.float32)
    title = (f"(a) seed MLP step: N={N}, D_in={D_in}, H={H}, D_out={D_out}, Linear-Dropout({SEED_P[0]})-Linear-"
             f"Dropout({SEED_P[1]}), MSE, SGD lr={SEED_LR}, float32{note}")
    return Workload("seed", title, dims, layers, SEED_LR, init, X, Y)


def small_workload():
    rng = np.random.default_rng(2)
    init = [_init_linear(rng, SMALL_WIDTH, SMALL_WIDTH) for _ in range(SMALL_DEPTH)]
    layers = []
    for i in range(SMALL_DEPTH):
        layers.append(("linear", i))
        if i < SMALL_DEPTH - 1:
            layers.append(("relu",))
    X = rng.standard_normal((SMALL_BATCH, SMALL_WIDTH), dtype=np.float32)
    Y = rng.standard_normal((SMALL_BATCH, SMALL_WIDTH), dtype=np.float32)
    title = (f"(b) small MLP step: {SMALL_DEPTH} x Linear({SMALL_WIDTH},{SMALL_WIDTH}), ReLU, batch {SMALL_BATCH}, "
             f"MSE, SGD lr={SMALL_LR}, float32")
    return Workload("small", title, dict(depth=SMALL_DEPTH, width=SMALL_WIDTH, batch=SMALL_BATCH), layers,
                    SMALL_LR, init, X, Y)


# ---------------------------------------------------------------------------- jgrad
def jg_model(w: Workload):
    import jgrad as jg
    from jgrad import nn

    mods = []
    for l in w.layers:
        if l[0] == "linear":
            W, b = w.init[l[1]]
            lin = nn.Linear(W.shape[1], W.shape[0])
            mods.append(lin)
        elif l[0] == "relu":
            mods.append(nn.ReLU())
        else:
            mods.append(nn.Dropout(l[1]))
    model = nn.Sequential(*mods)
    jg_load(model, w)
    opt = jg.optim.SGD(model.parameters(), lr=w.lr)
    return model, opt


def jg_load(model, w: Workload):
    import jgrad as jg
    from jgrad import nn

    lins = [m for m in model if isinstance(m, nn.Linear)]
    with jg.no_grad():
        for lin, (W, b) in zip(lins, w.init):
            lin.weight.copy_(jg.tensor(W))
            lin.bias.copy_(jg.tensor(b))


def jg_step_fn(model, opt, loss_fn, x, y):
    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def jg_capture(model, opt, loss_fn, x, y, grads_to_none_inside=False):
    """The docs' whole-network capture; returns (graph, static_loss).

    ``grads_to_none_inside``: the step also sets the ``.grad``s to None at its end, so nothing outlives
    it but the parameters and the loss (as in a ``jax.jit`` step that does not return its gradients).
    """
    import jgrad as jg

    opt.zero_grad(set_to_none=True)
    g = jg.Graph()
    with jg.graph(g):
        static_loss = loss_fn(model(x), y)
        static_loss.backward()
        opt.step()
        if grads_to_none_inside:
            opt.zero_grad(set_to_none=True)
    return g, static_loss


def batch_copier(batches, x, y):
    """The docs' loop body before ``replay()``: copy_ the next of two (x, y) batches into the static inputs."""
    it = [0]

    def copy_next():
        bx, by = batches[it[0] & 1]
        it[0] += 1
        x.copy_(bx)
        y.copy_(by)
    return copy_next


# ---------------------------------------------------------------------------- jax
def jax_loss_fn(w: Workload):
    """The workload's loss as a jax function of (params, x, y, key)."""
    import jax
    import jax.numpy as jnp

    layers = w.layers

    def loss_fn(params, x, y, key):
        h = x
        for l in layers:
            if l[0] == "linear":
                W, b = params[l[1]]
                h = h @ W.T + b
            elif l[0] == "relu":
                h = jax.nn.relu(h)
            else:
                key, sub = jax.random.split(key)
                keep = jax.random.bernoulli(sub, 1.0 - l[1], h.shape)
                h = jnp.where(keep, h / (1.0 - l[1]), 0.0)
        return jnp.mean((h - y) ** 2)
    return loss_fn


def jax_step(w: Workload):
    """A fresh ``jax.jit`` of the whole step (value_and_grad + SGD update), params and key donated."""
    import jax

    loss_fn, lr = jax_loss_fn(w), w.lr

    def step(params, key, x, y):
        key, sub = jax.random.split(key)
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y, sub)
        params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
        return loss, params, key

    return jax.jit(step, donate_argnums=(0, 1))


def jax_state(w: Workload):
    import jax
    import jax.numpy as jnp

    return [(jnp.asarray(W), jnp.asarray(b)) for W, b in w.init], jax.random.PRNGKey(0)


# ---------------------------------------------------------------------------- torch
def torch_model(torch, w: Workload, tdev):
    mods = []
    for l in w.layers:
        if l[0] == "linear":
            W, b = w.init[l[1]]
            lin = torch.nn.Linear(W.shape[1], W.shape[0])
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(W))
                lin.bias.copy_(torch.from_numpy(b))
            mods.append(lin)
        elif l[0] == "relu":
            mods.append(torch.nn.ReLU())
        else:
            mods.append(torch.nn.Dropout(l[1]))
    model = torch.nn.Sequential(*mods).to(tdev)
    opt = torch.optim.SGD(model.parameters(), lr=w.lr)
    return model, opt


def torch_cuda_graph(torch, w: Workload):
    """PyTorch's whole-network capture, exactly as the CUDA Graphs docs do it; returns the replay function."""
    if not torch.cuda.is_available():
        raise RuntimeError("torch CUDA-graph replay needs torch with CUDA and a visible GPU "
                           f"(torch {torch.__version__}, torch.version.cuda={torch.version.cuda}, "
                           f"torch.cuda.is_available()={torch.cuda.is_available()})")
    model, opt = torch_model(torch, w, "cuda")
    loss_fn = torch.nn.MSELoss()
    static_input = torch.from_numpy(w.X).cuda()
    static_target = torch.from_numpy(w.Y).cuda()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(static_input), static_target).backward()  # no loss kept alive across iterations
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_fn(model(static_input), static_target)
        static_loss.backward()
        opt.step()
    torch.cuda.synchronize()

    def replay():
        g.replay()
        return None

    replay._keep = (g, model, opt, static_input, static_target, static_loss)
    return replay


# ============================================================================ one workload
def _jg_setup(w, loss_mod):
    """Two jgrad models (eager, replay) from the same weights; the docs' warm-up of the replay one on a side stream."""
    import jgrad as jg

    model_e, opt_e = jg_model(w)
    model_r, opt_r = jg_model(w)
    x_r, y_r = jg.tensor(w.X), jg.tensor(w.Y)
    x_e, y_e = jg.tensor(w.X), jg.tensor(w.Y)
    eager_step = jg_step_fn(model_e, opt_e, loss_mod, x_e, y_e)
    s = jg.Stream()
    s.wait_stream(jg.current_stream())
    with jg.stream(s):  # warm-up on a side stream, as the docs do before capturing (compiles the eager kernels)
        warm = jg_step_fn(model_r, opt_r, loss_mod, x_r, y_r)
        for _ in range(3):
            warm()
    jg.current_stream().wait_stream(s)
    jg.synchronize()
    jg_load(model_r, w)
    return model_e, opt_e, model_r, opt_r, x_r, y_r, x_e, y_e, eager_step


def _oneshot_in_child(key, which, args):
    """Run one one-shot measurement in a fresh process; its result dict, or None (reported) on failure."""
    import json
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [sys.executable, "-m", "benchmarks.capture", "--_oneshot", f"{key}:{which}", "--device", args.device]
    cmd += (["--quick"] if args.quick else []) + (["--tf32"] if args.tf32 else [])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    # This process may already hold most of the GPU's memory (XLA preallocates 75%): the child allocates on
    # demand, else instantiating its executable's CUDA graphs runs out of memory.
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("ONESHOT "):
            return json.loads(line[len("ONESHOT "):])
    print(f"- {key}: one-shot '{which}' child failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return None


def oneshot_child(spec, args):
    """In a fresh process: the same set-up and warm-up as the parent, then one one-shot measurement."""
    import json

    import jax
    import jax.numpy as jnp

    import jgrad as jg
    from jgrad import nn

    key, which = spec.split(":")
    quick_cpu = args.quick and args.device == "cpu"
    w = seed_workload(SEED_QUICK_CPU if quick_cpu else SEED_FULL, "") if key == "seed" else small_workload()
    _process_warmup()
    loss_mod = nn.MSELoss()
    model_e, opt_e, model_r, opt_r, x_r, y_r, x_e, y_e, eager_step = _jg_setup(w, loss_mod)
    params, k = jax_state(w)
    xj, yj = jnp.asarray(w.X), jnp.asarray(w.Y)
    jax.block_until_ready([params, k, xj, yj])
    res = {}
    if which == "jax":
        f = jax_step(w)
        t0 = time.perf_counter()
        jax.block_until_ready(f(params, k, xj, yj))
        res["s"] = time.perf_counter() - t0
    elif which == "aot":
        f = jax_step(w)
        t0 = time.perf_counter()
        f.lower(params, k, xj, yj).compile()
        res["s"] = time.perf_counter() - t0
    else:
        jg.graphs.cache_clear()
        t0 = time.perf_counter()
        g, static_loss = jg_capture(model_r, opt_r, loss_mod, x_r, y_r)
        t1 = time.perf_counter()
        g.replay()
        common.block(list(model_r.parameters()) + [static_loss])
        res = {"s": time.perf_counter() - t0, "capture_s": t1 - t0,
               "compile_s": jg.graphs.cache_info().compile_seconds}
    print("ONESHOT " + json.dumps(res), flush=True)


def _process_warmup():
    """One-time process costs (backend start, the capture machinery) out of the one-shot figures."""
    import jax
    import jax.numpy as jnp

    import jgrad as jg

    jax.block_until_ready(jax.jit(lambda a: a * 2)(jnp.ones(4)))
    g0, t0 = jg.Graph(), jg.ones(4)
    with jg.graph(g0):
        u0 = t0 * 2
    g0.replay()
    common.block(u0)
    jg.graphs.cache_clear()


def bench_workload(w: Workload, args, tdev, repeat, report):
    import jax
    import jax.numpy as jnp

    import jgrad as jg
    from jgrad import nn

    torch = _torch() if report["torch_rows"] else None
    loss_mod = nn.MSELoss()

    n_once = args.oneshot or (1 if args.quick else 2)
    # ---- one-shot costs, each in a fresh process (XLA keeps compiled kernels and GEMM autotuning results
    # per process: whichever of jax and jgrad compiled second would find the other's work done)
    jit_first, aot, cap_only, cap_first = [], [], [], []
    for _ in range(n_once):
        for which, dest in (("jax", jit_first), ("aot", aot), ("jgrad", cap_first)):
            r = _oneshot_in_child(w.key, which, args)
            if r is None:
                continue
            dest.append(r["s"])
            if which == "jgrad":
                cap_only.append(r["capture_s"])
                print(f"- {w.key}: capture + compile {common.fmt_time(r['capture_s'])} (of which XLA compile "
                      f"{common.fmt_time(r['compile_s'])}), + first replay {common.fmt_time(r['s'])}; "
                      f"first jax.jit call {common.fmt_time(jit_first[-1]) if jit_first else 'n/a'} "
                      "(each in a fresh process)")

    # ---- this process: models, the docs' warm-up, the jax step and the captured graph that are timed below
    model_e, opt_e, model_r, opt_r, x_r, y_r, x_e, y_e, eager_step = _jg_setup(w, loss_mod)
    params_e, params_r = list(model_e.parameters()), list(model_r.parameters())
    jit_step = jax_step(w)
    params, key = jax_state(w)
    xj, yj = jnp.asarray(w.X), jnp.asarray(w.Y)
    out = jit_step(params, key, xj, yj)
    jax.block_until_ready(out)
    jit_state = {"p": out[1], "k": out[2], "x": xj, "y": yj}
    g, static_loss = jg_capture(model_r, opt_r, loss_mod, x_r, y_r)
    g.replay()
    common.block(params_r + [static_loss])
    jg_load(model_r, w)

    # ---- re-capture of the same step: an executable-cache hit
    before = jg.graphs.cache_info()
    t0 = time.perf_counter()
    g2, static_loss2 = jg_capture(model_r, opt_r, loss_mod, x_r, y_r)
    recap = time.perf_counter() - t0
    after = jg.graphs.cache_info()
    hit = after.hits == before.hits + 1 and after.misses == before.misses
    print(f"- {w.key}: re-capture {common.fmt_time(recap)}; cache_info before {before!r}, after {after!r} -> "
          f"{'hit' if hit else 'NOT a hit'}")
    report["cache"][w.key] = {"before": before._asdict(), "after": after._asdict(), "hit": hit,
                              "recapture_s": recap}
    del g2, static_loss2
    opt_r.zero_grad(set_to_none=True)

    # ---- cross-check: 3 replays == 3 eager steps from the same weights and seed
    jg_load(model_r, w)
    jg_load(model_e, w)
    jg.manual_seed(7)
    for _ in range(3):
        eager_step()
    jg.manual_seed(7)
    for _ in range(3):
        g.replay()
    diff = max(float(np.max(np.abs(_np(a) - _np(b)))) for a, b in zip(params_e, params_r))
    report["checks"][f"{w.key}: max |replay - eager| after 3 steps"] = diff
    if not w.has_dropout:  # no RNG: jax.jit from the same weights must agree to rounding too
        jg_load(model_r, w)
        f = jax_step(w)
        p, k = jax_state(w)
        rel = 0.0
        for _ in range(3):
            g.replay()
            lj, p, k = f(p, k, jit_state["x"], jit_state["y"])
            lr_ = float(_np(static_loss))
            rel = max(rel, abs(lr_ - float(lj)) / abs(float(lj)))
        flat = [a for pair in p for a in pair]
        d2 = max(float(np.max(np.abs(np.asarray(a) - _np(b)))) for a, b in zip(flat, params_r))
        report["checks"][f"{w.key}: max |replay - jax.jit| of the parameters after 3 steps"] = d2
        report["checks"][f"{w.key}: max relative |replay loss - jax.jit loss| over 3 steps"] = rel

    # ---- timed variants
    def replay():
        g.replay()
        return params_r + [static_loss]

    copy_next = batch_copier([(jg.tensor(w.X * 0.5), jg.tensor(w.Y * 0.5)), (x_e, y_e)], x_r, y_r)

    def replay_copy():
        copy_next()
        g.replay()
        return params_r + [static_loss]

    def jit_call():
        st = jit_state
        loss, st["p"], st["k"] = jit_step(st["p"], st["k"], st["x"], st["y"])
        return [loss, st["p"]]

    variants = [
        common.Variant("jgrad eager", lambda: [eager_step()] + params_e,
                       note="zero_grad(set_to_none=True), model(x), MSELoss, backward, optim.SGD.step"),
        common.Variant("jgrad replay (jg.graph)", replay, note="g.replay() of the captured step; static inputs"),
        common.Variant("jgrad replay + copy_ batch", replay_copy,
                       note="static_x.copy_(x); static_y.copy_(y); g.replay()"),
        common.Variant(JIT_NAME, jit_call, note="one executable, params and PRNG key donated"),
    ]
    if torch is not None:
        tm, topt = torch_model(torch, w, tdev)
        tl = torch.nn.MSELoss()
        tx, ty = torch.from_numpy(w.X).to(tdev), torch.from_numpy(w.Y).to(tdev)
        sync = common.torch_sync(tdev)

        def torch_eager():
            topt.zero_grad(set_to_none=True)
            tl(tm(tx), ty).backward()
            topt.step()
            return None

        variants.append(common.Variant("torch eager", torch_eager, sync=sync,
                                       note=f"nn.Sequential + optim.SGD on {tdev}"
                                            + (f", {torch.get_num_threads()} threads" if tdev == "cpu" else "")))
        if tdev == "cuda":
            try:
                variants.append(common.Variant("torch CUDA graph replay", torch_cuda_graph(torch, w), sync=sync,
                                               note="torch.cuda.graph whole-network capture, g.replay()"))
            except Exception as e:  # noqa: BLE001 - reported, the other rows still run
                msg = f"torch CUDA-graph row skipped: {type(e).__name__}: {e}"
                print(f"- {msg}")
                report["errors"].append(f"{w.key}: {msg}")
    res = common.compare(variants, repeat=repeat, batch_s=0.15)
    tab = common.table(w.title, res, baselines=(JIT_NAME, "jgrad eager"))
    by = {r.name: r.median for r in res}

    once = [common.Result("jax.jit(step) first call", jit_first, note="fresh process, after the warm-up: trace + compile + 1 run"),
            common.Result("jax.jit(step).lower().compile()", aot, note="fresh process: AOT trace + compile, no run (reference)"),
            common.Result("jgrad capture + compile", cap_only,
                          note="fresh process, after the warm-up: the jg.graph(g) block incl. its compile"),
            common.Result("jgrad capture + compile + first replay", cap_first, note="fresh process; comparable with the jax row"),
            common.Result("jgrad re-capture (cache hit)", [recap], note="same step captured again: no compile")]
    tab2 = common.table(f"{w.key}: one-shot costs (x vs the first jax.jit call)", once,
                        baselines=("jax.jit(step) first call",))
    bo = {r.name: r.median for r in once}
    return [tab, tab2], by, bo


# ============================================================================ (c) two streams
def bench_two_streams(args, repeat, report):
    import jax
    import jax.numpy as jnp

    import jgrad as jg

    rng = np.random.default_rng(5)
    mats = [rng.standard_normal((CHAIN_N, CHAIN_N), dtype=np.float32) / np.sqrt(CHAIN_N) for _ in range(4)]
    a1, a2, w1, w2 = (jg.tensor(m) for m in mats)

    def chain(a, wt):
        for _ in range(CHAIN_LEN):
            a = jg.matmul(a, wt)
        return a

    g1 = jg.Graph()  # one stream
    with jg.graph(g1):
        c1, b1 = chain(a1, w1), chain(a2, w2)
        out1 = c1 + b1
    g2 = jg.Graph()  # two streams: the second chain on a side stream
    side = jg.Stream()
    with jg.graph(g2):
        cap = jg.current_stream()
        side.wait_stream(cap)
        with jg.stream(side):
            b2 = chain(a2, w2)
        c2 = chain(a1, w1)
        cap.wait_stream(side)
        out2 = c2 + b2

    @jax.jit
    def both(a1, a2, w1, w2):
        c, b = a1, a2
        for _ in range(CHAIN_LEN):
            c, b = c @ w1, b @ w2
        return c + b

    ja = [jnp.asarray(m) for m in mats]
    g1.replay()
    g2.replay()
    ref = np.asarray(both(*ja))
    report["checks"]["two streams: max |2-stream replay - jax.jit|"] = float(np.max(np.abs(_np(out2) - ref)))
    report["checks"]["two streams: max |1-stream replay - jax.jit|"] = float(np.max(np.abs(_np(out1) - ref)))

    on_gpu = a1.device.type != "cpu"
    res = common.compare([
        common.Variant("jgrad replay, one stream", lambda: (g1.replay(), out1)[1],
                       note=f"2 chains of {CHAIN_LEN} matmuls {CHAIN_N}x{CHAIN_N}, all on the capturing stream"),
        common.Variant("jgrad replay, two streams", lambda: (g2.replay(), out2)[1],
                       note="second chain on a side stream" + (" (compute_on gpu_stream:1)" if on_gpu else
                                                               " (CPU: no stream annotation, a code-path check)")),
        common.Variant("jax.jit(both chains)", lambda: both(*ja), note="one executable, no stream annotation"),
    ], repeat=repeat, batch_s=0.1)
    title = (f"(c) two independent chains of {CHAIN_LEN} {CHAIN_N}x{CHAIN_N} matmuls: one stream vs two streams"
             + ("" if on_gpu else " (on CPU: code-path check only, no concurrency expected)"))
    tab = common.table(title, res, baselines=("jax.jit(both chains)", "jgrad replay, one stream"))
    by = {r.name: r.median for r in res}
    return [tab], by


# ================================================================================ main
def _section(name, report, fn, *a):
    """Run a section; an exception is printed with its traceback and recorded, the others still run."""
    try:
        return fn(*a)
    except Exception as e:  # noqa: BLE001 - a benchmark reports, it does not stop at the first failure
        print(f"\n### Section {name} did not finish\n\n```\n{traceback.format_exc().rstrip()}\n```")
        report["errors"].append(f"{name}: {type(e).__name__}: {e}")
        return None


def main(argv=None):
    p = common.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--tf32", action="store_true",
                   help='TF32 matmuls everywhere: jgrad/torch "high", jax "tensorfloat32" (default: full float32)')
    p.add_argument("--only", choices=("seed", "small", "streams"), action="append", default=None,
                   help="run only these sections (repeatable)")
    p.add_argument("--two-streams", action="store_true",
                   help="run the two-stream section off the GPU too (a check of the code path; no concurrency)")
    p.add_argument("--oneshot", type=int, default=None, metavar="N",
                   help="fresh processes per one-shot figure (default: 1 with --quick, else 2; each costs a "
                        "process start, the warm-up and a compile: ~10-25 s on a GPU)")
    p.add_argument("--_oneshot", default=None, help=argparse.SUPPRESS)  # internal: one one-shot figure
    args = p.parse_args(argv)
    _quiet_donation()
    jdev, tdev = common.setup_device(args.device)
    if args._oneshot:
        set_precision(args.tf32, tdev)
        oneshot_child(args._oneshot, args)
        return 0
    torch = _torch()
    torch_rows = torch is not None
    torch_note = None
    if args.device == "gpu" and torch is not None and tdev != "cuda":
        torch_rows = False
        torch_note = (f"torch {torch.__version__} has no usable CUDA (torch.version.cuda={torch.version.cuda}, "
                      f"torch.cuda.is_available()={torch.cuda.is_available()}): the torch eager and torch "
                      "CUDA-graph rows are skipped (jax/jgrad run on the GPU; torch on the CPU would not compare)")
    elif torch is None:
        torch_note = "torch is not installed: torch rows skipped"
    env = common.environment(jdev, tdev if torch_rows else None)
    common.print_header("jgrad whole-graph capture (issue 5)", env)
    prec = set_precision(args.tf32, tdev)
    print(f"- float32 matmul precision: {prec}")
    if torch_note:
        print(f"- {torch_note}")
    quick_cpu = args.quick and args.device == "cpu"
    seed_dims = SEED_QUICK_CPU if quick_cpu else SEED_FULL
    if quick_cpu:
        print(f"- --quick on CPU: the seed MLP is SHRUNK to N={seed_dims['N']}, D_in={seed_dims['D_in']}, "
              f"H={seed_dims['H']}, D_out={seed_dims['D_out']} (full: N=640, D_in=4096, H=2048, D_out=1024)")
    repeat = args.repeat or (5 if args.quick else 15)

    _process_warmup()

    report = {"cache": {}, "checks": {}, "errors": [], "torch_rows": torch_rows}
    tables, verdicts = [], []
    sections = args.only or ["seed", "small", "streams"]
    wl = {"seed": lambda: seed_workload(seed_dims, " (SHRUNK by --quick on CPU)" if quick_cpu else ""),
          "small": small_workload}
    timed = {}
    for key in ("seed", "small"):
        if key not in sections:
            continue
        out = _section(key, report, bench_workload, wl[key](), args, tdev, repeat, report)
        if out is None:
            continue
        tabs, by, once = out
        tables += tabs
        timed[key] = (by, once)
        rep, jit = by["jgrad replay (jg.graph)"], by[JIT_NAME]
        r = rep / jit
        verdicts.append(common.verdict(f"{key}: replay / {JIT_NAME}", f"{r:.2f}x", "<= 1.05x", r <= 1.05))
        sp = by["jgrad eager"] / rep
        if key == "small":
            goal = ">= 10x" if args.device == "gpu" else ">= 10x (goal stated for the GPU machine)"
            verdicts.append(common.verdict("small: jgrad eager / replay (speed-up)", f"{sp:.1f}x", goal, sp >= 10))
        else:
            print(f"- seed: replay is {sp:.1f}x faster than jgrad eager (no goal for this workload)")
        r = once["jgrad capture + compile"] / once["jax.jit(step) first call"]
        verdicts.append(common.verdict(f"{key}: capture + compile / first jax.jit call", f"{r:.2f}x", "<= 1.5x",
                                       r <= 1.5))
        r2 = once["jgrad capture + compile + first replay"] / once["jax.jit(step) first call"]
        print(f"- {key}: capture + compile + first replay / first jax.jit call = {r2:.2f}x")
        c = report["cache"].get(key)
        if c is not None:
            verdicts.append(common.verdict(f"{key}: re-capture of the same step hits the executable cache",
                                           "hit" if c["hit"] else "miss", "hit, no compile", c["hit"]))
        if "torch CUDA graph replay" in by:
            r = rep / by["torch CUDA graph replay"]
            verdicts.append(common.verdict(f"{key}: replay / torch CUDA graph replay (same precision)", f"{r:.2f}x",
                                           "<= 1.0x", r <= 1.0))
    if "streams" in sections:
        if args.device == "gpu" or args.two_streams:
            out = _section("streams", report, bench_two_streams, args, repeat, report)
            if out is not None:
                tabs, by = out
                tables += tabs
                r = by["jgrad replay, one stream"] / by["jgrad replay, two streams"]
                print(f"- two streams: one-stream replay / two-stream replay = {r:.2f}x "
                      "(> 1: the side stream overlapped)")
        else:
            print("\n- (c) two streams: GPU only (side streams become compute_on('gpu_stream:N') there); skipped on "
                  "CPU (use --two-streams to run it anyway as a code-path check)")

    print("\n### Goals (issue 5)\n")
    for v in verdicts:
        print(f"- {v['label']}: {v['value']} (goal {v['target']}) -> {'MET' if v['met'] else 'NOT met'}")
    if report["checks"]:
        print("\n### Cross-checks\n")
        for k, v in report["checks"].items():
            print(f"- {k} = {v:.1e}")
    if report["errors"]:
        print("\n### Errors\n")
        for e in report["errors"]:
            print(f"- {e}")
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "tables": tables, "targets": verdicts, "checks": report["checks"],
                                 "cache": report["cache"], "errors": report["errors"], "precision": prec,
                                 "seed_dims": seed_dims, "quick_cpu_shrunk": quick_cpu})
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
