"""How long each call of a hot "auto" program's compiled segment executables takes, as a distribution.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.executable_calls [--program reinforce] [--runs 30]

Runs ``tests/_programs.py``'s program at ``benchmarks/programs.py``'s sizes twice in "auto" mode with every
structure that repeats compiled (``compile_payback = 0``, as ``programs.py``'s hot runs warm up), then again with
every call of a compiled executable (``jax.stages.Compiled``) timed: until the call returns (dispatch) and until
its outputs are ready. Prints, for the most called executable, the median, mean and 90th percentile, how many
calls took over 1 ms, and what the structure cache did meanwhile. A mean far above the median means some calls
stall (the 2026-11-27 REINFORCE finding in RESULTS.md). ``--default-warmup`` warms up with the default
``compile_payback`` instead, so that structures may still compile in the background during the timed run.
Also prints the threads that used the most CPU during the timed run (Linux: ``/proc/self/task/*/schedstat``), with
their nice values: XLA's unnamed compile threads at 10 once ``_compile_priority`` found them (Note [Compile
priority]). Asserts nothing.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--program", default="reinforce")
    p.add_argument("--runs", type=int, default=None, help="steps (episodes) per run; default: programs.py's")
    p.add_argument("--default-warmup", action="store_true",
                   help="warm up once with the default compile_payback (background compiles may run while timed)")
    args = p.parse_args(argv)
    import jax
    import jax.stages
    import numpy as np
    import jgrad as jg
    from jgrad.runtime import _compile_priority, _kernel_cache, _segment
    from tests import _programs
    from benchmarks.programs import SIZES, STEPS

    steps = args.runs or STEPS[args.program]
    calls, timing = collections.defaultdict(list), [False]
    call = jax.stages.Compiled.__call__

    def timed(self, *a, **kw):
        if not timing[0]:
            return call(self, *a, **kw)
        t0 = time.perf_counter()
        out = call(self, *a, **kw)
        t1 = time.perf_counter()
        jax.block_until_ready(out)
        calls[id(self)].append((t1 - t0, time.perf_counter() - t0))
        return out

    jax.stages.Compiled.__call__ = timed
    try:
        with jg.execution_mode("auto"):
            saved = _segment.compile_payback
            if not args.default_warmup:  # as programs.py's hot runs warm up: every structure that repeats compiles
                _segment.compile_payback = 0
            try:
                for _ in range(1 if args.default_warmup else 2):
                    _programs.PROGRAMS[args.program](jg, steps, **SIZES[args.program])
                    _segment.wait_compiles()
            finally:
                _segment.compile_payback = saved
            _kernel_cache.wait_compiles()
            before, timing[0] = jg.graphs.segment_cache_info(), True
            ran0 = _compile_priority._run_seconds()
            t0 = time.perf_counter()
            _programs.PROGRAMS[args.program](jg, steps, **SIZES[args.program])
            jg.synchronize()
            seconds, after = time.perf_counter() - t0, jg.graphs.segment_cache_info()
            ran1 = _compile_priority._run_seconds()
    finally:
        jax.stages.Compiled.__call__ = call
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc={os.cpu_count()}, jax {jax.__version__}, "
          f"load {os.getloadavg()}")
    print(f"{args.program}, {steps} steps hot in auto mode: {seconds:.2f} s; "
          f"{after.compiled_runs - before.compiled_runs} compiled runs, {after.interpreted - before.interpreted} op by "
          f"op, {after.compiles - before.compiles} background compiles "
          f"({after.compile_seconds - before.compile_seconds:.2f} s)")
    python = {t.native_id: t.name for t in threading.enumerate()}
    busy = sorted(((v - ran0.get(tid, (0.0, n))[0], tid, python.get(tid, n)) for tid, (v, n) in ran1.items()),
                  reverse=True)[:6]
    print("threads by CPU seconds in the timed run: " + ", ".join(
        f"{name} ({tid}, nice {_nice(tid)}): {cpu:.2f}" for cpu, tid, name in busy if cpu > 0.005))
    if not calls:
        print("no compiled executable ran")
        return
    top = max(calls, key=lambda k: len(calls[k]))
    t = np.asarray(calls[top]) * 1e6
    ready = t[:, 1]
    print(f"most called executable: {len(t)} calls; us per call: dispatch median {np.median(t[:, 0]):.0f}, ready "
          f"median {np.median(ready):.0f}, mean {ready.mean():.0f}, p90 {np.percentile(ready, 90):.0f}; "
          f"{int((ready > 1000).sum())} calls over 1 ms (their total {ready[ready > 1000].sum() / 1e3:.0f} ms)")


def _nice(tid):
    try:
        return os.getpriority(os.PRIO_PROCESS, tid)
    except (OSError, AttributeError):
        return "?"


if __name__ == "__main__":
    main()
