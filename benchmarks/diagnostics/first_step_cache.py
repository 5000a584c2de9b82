"""What JAX's persistent compilation cache saves a program's first steps in a new process (issue 32).

    python -m benchmarks.diagnostics.first_step_cache [--only gan,lstm_lm] [--steps 3] [--mode eager|auto]
        [--torch]

Each program of ``tests/_programs.py`` runs ``--steps`` steps in a fresh Python process three times: without a
persistent cache (every kernel compiles, as jgrad does by default), with an empty cache directory (compiles, and
writes each executable), and again with that directory (each executable read from disk instead of compiled).
The cache is JAX's own (``jax_compilation_cache_dir``), set by the child before it imports jgrad, with the
minimum compile time and entry size at 0: JAX's defaults keep only executables that took over a second to
compile, and jgrad's kernels take tens of milliseconds each. ``--torch`` adds PyTorch's first steps (same program,
same process kind). Prints the time to import, and each step's time.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, os, sys, time
t00 = time.perf_counter()
root, cache, lib, name, steps, mode = sys.argv[1:7]
sys.path[:0] = [root, os.path.join(root, "tests")]
if cache:
    import jax
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
if lib == "torch":
    import torch as T
    torch_threads = T.set_num_threads(2)
else:
    import jgrad as T
import _programs
marks = []
t0 = time.perf_counter()
if lib == "torch":
    _programs.PROGRAMS[name](T, int(steps), on_step=lambda *a, **k: marks.append(time.perf_counter()))
else:
    with T.execution_mode(mode):
        _programs.PROGRAMS[name](T, int(steps), on_step=lambda *a, **k: marks.append(time.perf_counter()))
print(json.dumps({"import": t0 - t00, "steps": [b - a for a, b in zip([t0] + marks, marks)]}))
"""


def _run(root, cache, lib, name, steps, mode):
    out = subprocess.run([sys.executable, "-c", _CHILD, root, cache, lib, name, str(steps), mode],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="gan,lstm_lm")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", choices=("eager", "auto"), default="eager")
    p.add_argument("--torch", action="store_true")
    args = p.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(f"- load average at start: {os.getloadavg()}")
    print("| program | run | import s | step 1 s | step 2 s | step 3 s |")
    print("|---|---|---|---|---|---|")
    for name in args.only.split(","):
        with tempfile.TemporaryDirectory() as cache:
            runs = [("jgrad, no persistent cache", "", "jgrad"), ("jgrad, empty cache (writes)", cache, "jgrad"),
                    ("jgrad, warm cache (reads)", cache, "jgrad")]
            if args.torch:
                runs.append(("PyTorch", "", "torch"))
            for label, c, lib in runs:
                r = _run(root, c, lib, name, args.steps, args.mode)
                steps = " | ".join(f"{s:.3f}" for s in r["steps"][:3])
                print(f"| {name} ({args.mode}) | {label} | {r['import']:.2f} | {steps} |", flush=True)
    print(f"- load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(main())
