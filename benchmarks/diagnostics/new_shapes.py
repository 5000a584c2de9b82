"""What a NEW shape costs in jgrad eager mode on this machine, against the same work repeated (issue 32).

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.new_shapes [--only ops,reinforce,generate] [--mode eager|auto]

An eager op compiles an XLA kernel the first time it meets a shape. Per case: the time of a call with a shape
never seen before (median over a few new shapes), the time of the same call repeated, their ratio (the issue's
goal: <= 10x), and how many XLA compiles and how much compile time (JAX's own monitoring events) the new
shape cost. Cases: one op (elementwise, reduction, matmul, ``cat``, an op plus its backward); the REINFORCE
pattern (``cat`` of a list of 0-d log-probs of a new length, returns normalized, multiplied, summed, backward);
minGPT-style greedy generation (the sequence grows by one token per step). PyTorch runs the same code where it
is installed. Prints; asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

_events = collections.Counter()
_seconds = collections.Counter()


def _listen(name, duration, **kw):
    _events[name] += 1
    _seconds[name] += duration


jax.monitoring.register_event_duration_secs_listener(_listen)
COMPILE = "/jax/core/compile/backend_compile_duration"
TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"


def _sync(T, x):
    if isinstance(x, (list, tuple)):
        for v in x:
            _sync(T, v)
    elif hasattr(x, "sum") and hasattr(x, "item"):
        x.sum().item() if x.dim() else x.item()


def measure(T, make, sizes, repeats=5):
    """Medians over ``sizes``: (first call at a new shape, second call, repeated call, compiles and compile seconds
    per new shape). "Repeated" is timed once the kernels' background compiles are done (the steady state)."""
    from jgrad.runtime import _kernel_cache
    new, second, rep, ncomp, csec = [], [], [], [], []
    for n in sizes:
        fn = make(T, n)
        c0, s0 = _events[COMPILE], sum(_seconds[k] for k in (COMPILE, TRACE, LOWER))
        t0 = time.perf_counter()
        _sync(T, fn())
        new.append(time.perf_counter() - t0)
        ncomp.append(_events[COMPILE] - c0)
        csec.append(sum(_seconds[k] for k in (COMPILE, TRACE, LOWER)) - s0)
        t0 = time.perf_counter()
        _sync(T, fn())
        second.append(time.perf_counter() - t0)
        for _ in range(3):
            _sync(T, fn())
            _kernel_cache.wait_compiles()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _sync(T, fn())
            times.append(time.perf_counter() - t0)
        rep.append(statistics.median(times))
    med = statistics.median
    return med(new), med(second), med(rep), med(ncomp), med(csec)


# ---- cases: make(T, n) -> a function running the work at size n -------------------------------------
def _x(T, *shape, grad=False):
    rng = np.random.RandomState(sum(shape))
    return T.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=grad)


def elementwise(T, n):
    a, b = _x(T, 64, n), _x(T, 64, n)
    return lambda: a * b + 1.0


def reduction(T, n):
    a = _x(T, 64, n)
    return lambda: a.sum(dim=1)


def matmul(T, n):
    a, b = _x(T, 32, n), _x(T, n, 32)
    return lambda: a @ b


def cat(T, n):
    parts = [_x(T, 1) for _ in range(n)]
    return lambda: T.cat(parts)


def mul_backward(T, n):
    a, b = _x(T, 64, n, grad=True), _x(T, 64, n)

    def run():
        (a * b).sum().backward()
        return a.grad
    return run


def reinforce(T, n):
    """REINFORCE's episode end: ``cat([-lp * r ...]).sum().backward()`` over n steps, returns normalized."""
    w = _x(T, 4, 2, grad=True)
    obs = _x(T, n, 4)
    rewards = [1.0] * n

    def run():
        log_probs = [T.log_softmax(obs[i:i + 1] @ w, dim=1)[0, i % 2].reshape(1) for i in range(n)]
        R, returns = 0.0, []
        for r in rewards[::-1]:
            R = r + 0.99 * R
            returns.insert(0, R)
        returns = T.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + 1e-7)
        loss = T.cat([-lp * r for lp, r in zip(log_probs, returns)]).sum()
        w.grad = None
        loss.backward()
        return loss
    return run


def generate(T, n, width=32, layers=2, vocab=65):
    """One greedy-generation step of a small GPT at sequence length n (the sequence grew by one token)."""
    nn, F = T.nn, T.nn.functional
    T.manual_seed(0)
    key = (id(T), width, layers)
    model = _MODELS.get(key)
    if model is None:
        blocks = nn.ModuleList([nn.TransformerEncoderLayer(width, 2, 4 * width, dropout=0.0, batch_first=True)
                                for _ in range(layers)]) if hasattr(nn, "TransformerEncoderLayer") else None
        model = _MODELS[key] = (nn.Embedding(vocab, width), nn.Embedding(256, width), nn.Linear(width, vocab),
                                [nn.Linear(width, 3 * width) for _ in range(layers)],
                                [nn.Linear(width, width) for _ in range(layers)], blocks)
    wte, wpe, head, qkv, proj, _ = model
    idx = T.tensor(np.arange(n)[None] % vocab)

    @T.no_grad()
    def run():
        L = idx.size(1)
        x = wte(idx) + wpe(T.arange(0, L).unsqueeze(0))
        mask = T.tril(T.ones(L, L)) == 0
        for a, p in zip(qkv, proj):
            q, k, v = a(x).split(width, dim=2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / width ** 0.5)
            att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            x = x + p(att @ v)
        nxt = head(x)[:, -1, :].argmax(dim=-1, keepdim=True)
        return T.cat((idx, nxt), dim=1)
    return run


_MODELS: dict = {}
CASES = {
    "ops": [("elementwise (a * b + 1, 64 x n)", elementwise, range(200, 205)),
            ("reduction (sum dim 1, 64 x n)", reduction, range(300, 305)),
            ("matmul (32 x n @ n x 32)", matmul, range(100, 105)),
            ("cat of n 1-element tensors", cat, range(20, 25)),
            ("mul + sum + backward (64 x n)", mul_backward, range(400, 405))],
    "reinforce": [("REINFORCE episode end, n steps", reinforce, range(30, 35))],
    "generate": [("greedy GPT step (2 layers, width 32), length n", generate, range(10, 15))],
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(CASES))
    p.add_argument("--mode", default="eager", choices=("eager", "auto"))
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--compare-compile", action="store_true",
                   help="also run jgrad with interpretation off (every new shape compiles at once, as before)")
    p.add_argument("--compare-inexact", action="store_true",
                   help="also run jgrad with NumPy's float sums and transcendentals interpreted (interpret_inexact)")
    args = p.parse_args(argv)
    import jgrad as jg
    from jgrad.runtime import _kernel_cache
    libs = [("jgrad " + args.mode, jg)]
    if args.compare_inexact:
        libs.append(("jgrad inexact", "inexact"))
    if args.compare_compile:
        libs.append(("jgrad compile", "compile"))
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(2)
            libs.append(("torch", torch))
        except ImportError:
            pass
    print(f"# New shapes: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc={os.cpu_count()}, "
          f"jax {jax.__version__}, load {os.getloadavg()}")
    print(f"{'case':48s} {'variant':13s} {'new':>10s} {'2nd call':>10s} {'repeated':>10s} {'new/rep':>7s} "
          f"{'compiles':>8s} {'compile s':>9s}")
    with jg.execution_mode(args.mode):
        for group in args.only.split(","):
            for label, make, sizes in CASES[group]:
                for k, (lib_name, T) in enumerate(libs):
                    saved = _kernel_cache.interpret_max_elements, _kernel_cache.interpret_inexact
                    if T == "compile":
                        T, _kernel_cache.interpret_max_elements = jg, 0
                    elif T == "inexact":
                        T, _kernel_cache.interpret_inexact = jg, True
                    try:
                        new, sec, rep, nc, cs = measure(T, make, [n + 40 * k for n in sizes])  # new to each
                    finally:
                        _kernel_cache.interpret_max_elements, _kernel_cache.interpret_inexact = saved
                    if T is not jg:
                        nc, cs = 0, 0.0
                    print(f"{label:48s} {lib_name:13s} {new * 1e3:8.2f}ms {sec * 1e3:8.2f}ms {rep * 1e3:8.3f}ms "
                          f"{new / rep:7.1f} {nc:8.0f} {cs:9.3f}", flush=True)


if __name__ == "__main__":
    main()
