"""How much of a training program's run goes to Python's cyclic garbage collector, and what ``gc.freeze()`` after
warm-up saves: jgrad eager, hot "auto" and PyTorch, same process.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gc_cost [--only reinforce,gan] [--rounds 2]

Runs ``tests/_programs.py``'s programs at ``benchmarks/programs.py``'s sizes: the ops' kernels compiled and every
structure that repeats compiled first (as ``programs.py``'s hot runs warm up), then, per round, each variant once
with the collector as Python sets it and once after ``gc.freeze()`` (``gc.unfreeze()`` after it), no collection
forced between runs: a full collection falls on whichever run reaches its threshold, as in a long training loop.
Per variant: the median run's wall seconds, and the seconds the collector ran by generation (``gc.callbacks``) and
the full collections, as means over the rounds. The run's heap is mostly JAX's trace caches (jaxprs of every kernel jgrad compiled), which a full
collection walks each time; a program that keeps a graph alive across many ops (REINFORCE's episode) moves enough
objects into the oldest generation to start one or two full collections a run. Asserts nothing.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


class _GCClock:
    """Seconds the collector ran, by generation, while ``on``."""

    def __init__(self):
        self.seconds, self.count, self._t0 = [0.0] * 3, [0] * 3, 0.0
        gc.callbacks.append(self)

    def reset(self):
        self.seconds, self.count = [0.0] * 3, [0] * 3

    def __call__(self, phase, info):
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            g = info["generation"]
            self.seconds[g] += time.perf_counter() - self._t0
            self.count[g] += 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="reinforce,gan,lstm_lm")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args(argv)
    import jgrad as jg
    from jgrad.runtime import _kernel_cache, _segment
    from tests import _programs
    from benchmarks.programs import SIZES, STEPS

    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    clock = _GCClock()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc={os.cpu_count()}, load {os.getloadavg()}")
    for name in args.only.split(","):
        program, steps, sizes = _programs.PROGRAMS[name], STEPS[name], SIZES[name]
        program(jg, max(2, steps // 4), **sizes)
        _kernel_cache.wait_compiles()
        saved, _segment.compile_payback = _segment.compile_payback, 0
        try:
            with jg.execution_mode("auto"):
                for _ in range(2):
                    program(jg, steps, **sizes)
                    jg.synchronize()
                    _segment.wait_compiles()
        finally:
            _segment.compile_payback = saved
        gc.collect()

        def run(lib, mode, program=program, steps=steps, sizes=sizes):
            with jg.execution_mode(mode):
                program(lib, steps, **sizes)
                jg.synchronize()

        variants = [("jgrad eager", jg, "eager"), ("jgrad auto (hot)", jg, "auto")]
        if torch is not None:
            variants.insert(0, ("torch", torch, "eager"))
        rows = {}
        for _ in range(args.rounds):
            for frozen in (False, True):
                for label, lib, mode in variants:
                    if frozen:
                        gc.freeze()
                    clock.reset()
                    t0 = time.perf_counter()
                    run(lib, mode)
                    wall = time.perf_counter() - t0
                    if frozen:
                        gc.unfreeze()
                    rows.setdefault((label, frozen), []).append((wall, *clock.seconds, *clock.count))
        print(f"\n{name}, {steps} steps; {len(gc.get_objects())} objects tracked by the collector")
        print(f"{'variant':34s} {'run s':>7s} {'gc s':>7s} {'gc %':>6s} {'young s':>8s} {'full s':>7s} {'full n':>6s}")
        for (label, frozen), r in rows.items():
            med = [statistics.median(x[0] for x in r)] + [statistics.fmean(x[i] for x in r) for i in range(1, 7)]
            young, full = med[1] + med[2], med[3]
            total = young + full
            print(f"{label + (', gc.freeze()' if frozen else ''):34s} {med[0]:7.3f} {total:7.3f} "
                  f"{100 * total / med[0]:5.1f}% {young:8.3f} {full:7.3f} {med[6]:6.2f}")


if __name__ == "__main__":
    main()
