"""Host cost per op as instruction counts: the same figure on every run, whatever else the machine is doing.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.instructions [--only x+x,g:x+x,...] [--lib jgrad,torch,jax]
                                                                  [--iters 100,300] [--mode eager|auto]

Wall-clock figures on a shared 2-core VM move 2-3x between runs (PyTorch's own included), which hides the few
percent a host-side change makes. ``valgrind --tool=callgrind`` counts the instructions the process executes
instead: the count of a loop of one case is the same from run to run. Each case runs in
a fresh process under callgrind with instrumentation off during imports and warm-up (every kernel compiled,
background compiles waited for), on for ``n`` calls, then off; two runs (``--iters`` ``n1``, ``n2``) and the
difference over ``n2 - n1`` calls gives instructions per call, free of the process's fixed costs. Instructions are
not time (a cache miss costs more than an add), but for host-bound Python they follow it closely, and they compare a
change with its baseline exactly. Only the calling thread is counted: JAX's and PyTorch's worker threads spin while
they wait for work, for as long as the host happens to take (counting them, a case that reads a value back moved
5% between runs). Needs valgrind (Debian's package); a run takes ~30-60 s per case and library, the
cases run two at a time.

Cases (tiny CPU tensors, float32; ``g:`` an input requires grad, so the op records its node):
- ``jit``: a bare call of a cached ``jax.jit`` add (jax's own per-call floor; ``--lib jax`` only)
- ``x+x``, ``g:x+x``, ``g:x+1``: one elementwise op
- ``g:linear``: ``nn.Linear(128, 2)`` on a (1, 128) input
- ``g:unsq+read``: ``x.unsqueeze(0) + 1`` (a view made and read)
- ``iter50``: ``[v + 1 for v in t]`` over a 50-element tensor (``unbind``'s rows, each read)
- ``env_step``: one step of a REINFORCE policy (``tests/_programs.py``'s: Linear, ReLU, Linear, softmax,
  ``Categorical``, ``sample``, ``log_prob``, ``item``); its log-probabilities are never read
- ``episode``: a whole REINFORCE episode of 20 such steps and its end (normalized returns, ``cat`` of
  ``-log_prob * return``, ``backward``, Adam), as the program runs it but for a fixed length (5 and 15 calls)

``--mode auto`` runs jgrad's cases in "auto" execution mode, hot: the warm-up compiles every structure that repeats
(``compile_payback = 0``, background compiles waited for) before the counted calls.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = ("jit", "x+x", "g:x+x", "g:x+1", "g:linear", "g:unsq+read", "iter50", "env_step", "episode")
#: Cases too long for the default call counts: their warm-up and (n1, n2).
LONG = {"episode": (30, (5, 15))}


def make_case(lib_name, case):
    """The callable one iteration of ``case`` runs, on ``lib_name`` ("jgrad", "torch" or "jax")."""
    import numpy as np

    if lib_name == "jax":
        import jax
        import jax.numpy as jnp
        if case != "jit":
            return None
        f = jax.jit(lambda a, b: a + b)
        a = jnp.ones((1, 4), jnp.float32)
        return lambda: f(a, a)
    if case == "jit":
        return None
    if lib_name == "torch":
        import torch as T
    else:
        import jgrad as T
    T.manual_seed(0)
    x = T.ones(1, 4)
    w = T.ones(4, requires_grad=True)
    xg = x * w
    if case == "x+x":
        return lambda: x + x
    if case == "g:x+x":
        return lambda: xg + xg
    if case == "g:x+1":
        return lambda: xg + 1
    if case == "g:linear":
        lin, h = T.nn.Linear(128, 2), T.ones(1, 128)
        return lambda: lin(h)
    if case == "g:unsq+read":
        return lambda: xg.unsqueeze(0) + 1
    if case == "iter50":
        r = T.arange(50.0)
        return lambda: [v + 1 for v in r]
    if case == "env_step":
        return _env_step(T, np)
    if case == "episode":
        return _episode(T, np)
    raise ValueError(f"unknown case {case!r}; the cases are {', '.join(CASES)}")


def _env_step(T, np):
    nn, F = T.nn, T.nn.functional
    affine1, affine2 = nn.Linear(4, 128), nn.Linear(128, 2)
    state = np.random.RandomState(0).rand(4)
    log_probs = []

    def step():
        x = T.from_numpy(state).float().unsqueeze(0)
        probs = F.softmax(affine2(F.relu(affine1(x))), dim=1)
        m = T.distributions.Categorical(probs)
        action = m.sample()
        log_probs.append(m.log_prob(action))
        if len(log_probs) > 50:  # an episode's worth of graphs held, as the program holds them
            log_probs.clear()
        return action.item()
    return step


def _episode(T, np):
    nn, F = T.nn, T.nn.functional
    affine1, affine2 = nn.Linear(4, 128), nn.Linear(128, 2)
    opt = T.optim.Adam(list(affine1.parameters()) + list(affine2.parameters()), lr=1e-2)
    state = np.random.RandomState(0).rand(4)
    rewards = [0.99 ** i for i in range(20)]

    def episode():
        log_probs = []
        for _ in range(20):
            x = T.from_numpy(state).float().unsqueeze(0)
            m = T.distributions.Categorical(F.softmax(affine2(F.relu(affine1(x))), dim=1))
            action = m.sample()
            log_probs.append(m.log_prob(action))
            action.item()
        returns = T.tensor(rewards)
        returns = (returns - returns.mean()) / (returns.std() + 1e-7)
        loss = T.cat([-lp * r for lp, r in zip(log_probs, returns)]).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()
    return episode


def _child(lib_name, case, n, mode="eager"):
    """Run under callgrind: warm up, then count ``n`` calls."""
    f = make_case(lib_name, case)
    warm = LONG.get(case, (300,))[0]
    if lib_name == "jgrad" and mode == "auto":
        import jgrad as jg
        from jgrad.runtime import _segment
        _segment.compile_payback = 0  # every structure that repeats compiles during the warm-up
        jg.set_execution_mode("auto")
    for _ in range(warm):
        f()
    if lib_name == "jgrad":
        from jgrad.runtime import _kernel_cache, _segment
        _kernel_cache.wait_compiles()
        _segment.wait_compiles()
    for _ in range(warm // 6):
        f()
    import gc
    gc.collect()
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=False)
    for _ in range(n):
        f()
    subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=False)


def _count(lib_name, case, n, out_dir, mode="eager"):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    prefix = os.path.join(out_dir, f"{lib_name}-{case}-{n}".replace(":", "_").replace("+", "p"))
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
           f"--callgrind-out-file={prefix}.%p", sys.executable, "-m", "benchmarks.diagnostics.instructions",
           "--child", lib_name, case, str(n), mode]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    # The calling thread's count only: JAX's and PyTorch's worker threads spin while they wait for work, for as
    # long as the host happens to take, which no two runs repeat.
    main = [f for f in os.listdir(out_dir) if f.startswith(os.path.basename(prefix) + ".") and f.endswith("-01")]
    for f in main:
        with open(os.path.join(out_dir, f)) as fh:
            for line in fh:
                if line.startswith("totals:"):
                    return int(line.split()[1])
    raise RuntimeError(f"callgrind gave no count for {lib_name} {case} (exit {res.returncode}):\n{res.stderr[-2000:]}")


def per_call(lib_name, case, n1, n2, out_dir, mode="eager"):
    """Instructions per call of ``case`` on ``lib_name``."""
    n1, n2 = LONG.get(case, (0, (n1, n2)))[1]
    return (_count(lib_name, case, n2, out_dir, mode) - _count(lib_name, case, n1, out_dir, mode)) / (n2 - n1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(CASES))
    p.add_argument("--lib", default="jgrad,torch,jax")
    p.add_argument("--iters", default="100,300", help="n1,n2: the two runs' call counts")
    p.add_argument("--mode", default="eager", choices=("eager", "auto"), help="jgrad's execution mode")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        lib_name, case, n, mode = args.child
        return _child(lib_name, case, int(n), mode)
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind); it counts the instructions.")
    n1, n2 = (int(v) for v in args.iters.split(","))
    libs = [lib for lib in args.lib.split(",") if lib != "torch" or _has_torch()]
    jobs = [(lib, case) for case in args.only.split(",") for lib in libs if make_case_applies(lib, case)]
    with tempfile.TemporaryDirectory() as out_dir, ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: per_call(j[0], j[1], n1, n2, out_dir, args.mode), jobs)))
    print(f"instructions per call (thousands; callgrind, jgrad in {args.mode} mode, difference of {n2} and {n1} calls"
          + "".join(f"; {c}: of {b} and {a}" for c, (_, (a, b)) in LONG.items()) + ")\n")
    print(f"| case | {' | '.join(libs)} | jgrad / torch |")
    print("|---|" + "---|" * (len(libs) + 1))
    for case in args.only.split(","):
        row = [counts.get((lib, case)) for lib in libs]
        j, t = counts.get(("jgrad", case)), counts.get(("torch", case))
        ratio = f"{j / t:.2f}x" if j and t else "-"
        print(f"| {case} | " + " | ".join("-" if v is None else f"{v / 1e3:.1f}" for v in row) + f" | {ratio} |")


def make_case_applies(lib_name, case):
    return (case == "jit") == (lib_name == "jax")


def _has_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    main()
