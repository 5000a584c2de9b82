"""What new shapes cost whole programs: each run from fresh kernel caches, new shapes compiled at once or interpreted.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.new_shapes_programs [--only gan,lstm_lm,reinforce,gpt]

``tests/_programs.py``'s programs at ``benchmarks/programs.py``'s sizes, in eager and in "auto" mode (a first
run: empty structure cache), in one process with ``jgrad.runtime._dispatch.clear_kernel_caches()`` before each run (what a
fresh process pays for its kernels). Variants: every new shape compiled at once (``interpret_max_elements = 0``,
the behaviour before Note [New shapes]), interpreted with the ski-rental rule only (the default), and interpreted
with a compile at each shape's 2nd call (``compile_after = 2``). Prints whole-run seconds; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

STEPS = {"lstm_lm": 40, "gan": 40, "gpt": 30, "reinforce": 10, "mnist": 20}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="gan,lstm_lm,reinforce")
    args = p.parse_args(argv)
    import jgrad as jg
    from jgrad.runtime import _dispatch, _kernel_cache, _segment
    from tests import _programs
    from benchmarks.programs import SIZES
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc={os.cpu_count()}, load {os.getloadavg()}")
    variants = (("compile at once", 0, None), ("interpreted (default)", 1 << 18, None),
                ("interpreted, compile at 2nd call", 1 << 18, 2))
    for name in args.only.split(","):
        out = []
        for label, limit, after in variants:
            for mode in ("eager", "auto"):
                _kernel_cache.wait_compiles()
                _segment.wait_compiles()
                _dispatch.clear_kernel_caches()
                jg.graphs.segment_cache_clear()
                saved = _kernel_cache.interpret_max_elements, _kernel_cache.compile_after
                _kernel_cache.interpret_max_elements, _kernel_cache.compile_after = limit, after
                try:
                    t0 = time.perf_counter()
                    with jg.execution_mode(mode):
                        _programs.PROGRAMS[name](jg, STEPS[name], **SIZES[name])
                        jg.synchronize()
                    out.append(f"{label}, {mode}: {time.perf_counter() - t0:.1f} s")
                finally:
                    _kernel_cache.interpret_max_elements, _kernel_cache.compile_after = saved
        print(f"{name} ({STEPS[name]} steps): " + "; ".join(out), flush=True)


if __name__ == "__main__":
    main()
