"""Training programs in the styles of public PyTorch examples: jgrad eager, jgrad "auto" and PyTorch, same run.

    python -m benchmarks.programs [--quick] [--only lstm_lm,gpt,...] [--steps N] [--json out.json]

The programs are ``tests/_programs.py``'s (an LSTM language model with a detached hidden state, clipping and a
manual SGD update; a GPT trainer with a cosine schedule, logging every 10 steps and sampling; REINFORCE with a
per-episode ``cat``; a GAN with two optimizers; an MNIST CNN with Adadelta and StepLR; time-sequence prediction with
LBFGS), here at larger sizes,
each written once against a ``torch``-like module and run unchanged on jgrad and PyTorch from the same weights.
Each runs ``--steps`` steps (episodes for REINFORCE) in every variant, after a short jgrad eager run that compiles
the ops' kernels (so that no variant pays them):

- ``torch``, ``jgrad eager``: the whole run;
- ``jgrad auto (first run)``: the whole run from an empty structure cache, compiles in the background as the
  program goes, each once its op-by-op runs have cost what it is expected to (``_segment.compile_payback``):
  what a user's first run costs (never more than eager mode is the goal);
- ``jgrad auto (hot)``: the same run again once every structure that repeated is compiled (two runs in between
  with ``compile_payback = 0``, then ``wait_compiles()``): the steady state a long run reaches. Two, because a
  structure that comes once a run (an epoch's shorter last batch, or its first step, in a run shorter than two
  epochs) compiles at its second barrier, which one run in between would leave to the measured run itself.

Per variant: the median time of a step over the second half of the run (the clock read at each step's end,
after the program read its values), the whole run, and for auto mode the fraction of segments that ran compiled
over the second half. Ratios compare medians of the same run.
"""
from __future__ import annotations

import os
import sys
import time

if __package__ in (None, ""):  # run as a script: python benchmarks/programs.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import common  # noqa: E402
else:
    from . import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tests import _programs  # noqa: E402

#: Sizes of the benchmark (the tests run the same programs tiny).
SIZES = {
    "lstm_lm": dict(vocab=200, emb=64, hidden=64, batch=8, bptt=20, epochs_of=20 * 10 + 3),
    "gpt": dict(vocab=65, block=32, n_embd=64, n_head=4, n_layer=2, batch=8, log_every=10, sample_every=20,
                sample_tokens=8),
    "reinforce": dict(hidden=128, horizon=50),
    "gan": dict(nz=16, hidden=64, dim=32, batch=64),
    "mnist": dict(side=28, batch=32, channels=8, batches_per_epoch=20, log_interval=10),
    "seq_lbfgs": dict(hidden=32, waves=8, length=40, future=10, max_iter=20),
}
STEPS = {"lstm_lm": 80, "gpt": 60, "reinforce": 30, "gan": 80, "mnist": 40, "seq_lbfgs": 3}


def _run(lib, name, steps, auto=None):
    """Run ``name`` for ``steps`` steps: (per-step seconds, whole-run seconds, segment counts over the 2nd half)."""
    import jgrad as jg

    stamps, info = [], {}

    def on_step(step):
        stamps.append(time.perf_counter())
        if auto and "half" not in info and step >= steps // 2:  # (a program may number its steps from 1)
            info["half"] = jg.graphs.segment_cache_info()

    if auto:
        info["start"] = jg.graphs.segment_cache_info()  # a run too short to reach its half: counted whole
    t0 = time.perf_counter()
    if auto is None:
        _programs.PROGRAMS[name](lib, steps, on_step=on_step, **SIZES[name])
    else:
        with jg.execution_mode("auto"):
            _programs.PROGRAMS[name](lib, steps, on_step=on_step, **SIZES[name])
            jg.synchronize()
    total = time.perf_counter() - t0
    per = [b - a for a, b in zip([t0] + stamps[:-1], stamps)]
    compiled = None
    if auto:
        end, half = jg.graphs.segment_cache_info(), info.get("half", info.get("start"))
        compiled = (end.compiled_runs - half.compiled_runs, end.segments - half.segments,
                    end.stretch_points - half.stretch_points)
    return per[len(per) // 2:], total, compiled


def bench(name, steps, repeat):
    import jgrad as jg
    import torch
    from jgrad.runtime import _segment

    rows, fractions = {}, {}
    from jgrad.runtime import _kernel_cache
    _programs.PROGRAMS[name](jg, max(2, steps // 4), **SIZES[name])  # the ops' kernels compile (eager mode's)
    _kernel_cache.wait_compiles()
    for _ in range(repeat):
        for label, lib, auto in (("torch", torch, None), ("jgrad eager", jg, None),
                                 ("jgrad auto (first run)", jg, "first"), ("jgrad auto (hot)", jg, "hot")):
            _kernel_cache.wait_compiles()
            _segment.wait_compiles()  # (a compile the last hot run started would run beside the next variant)
            if auto == "first":
                jg.graphs.segment_cache_clear()
            if auto == "hot":  # every structure that repeats, compiled: the steady state of a long run
                _segment.wait_compiles()
                saved, _segment.compile_payback = _segment.compile_payback, 0
                try:
                    for _ in range(2):
                        _run(lib, name, steps, "warm")
                        _segment.wait_compiles()
                finally:
                    _segment.compile_payback = saved
            per, total, compiled = _run(lib, name, steps, auto)
            rows.setdefault(label, ([], []))
            rows[label][0].extend(per)
            rows[label][1].append(total)
            if compiled:
                fractions[label] = compiled
    results = []
    for label, (per, totals) in rows.items():
        note = f"whole run {sorted(totals)[len(totals) // 2]:.2f} s"
        if label in fractions:
            c, s, p = fractions[label]
            note += f"; 2nd half: {c} of {s} segments compiled" + (f", {p} barrier points in eager stretches"
                                                                     if p else "")
        results.append(common.Result(label, per, note=note))
    return results, {label: sorted(t)[len(t) // 2] for label, (_, t) in rows.items()}, fractions


def main(argv=None):
    p = common.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(SIZES), help="comma-separated programs")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: per program)")
    p.add_argument("--compile-new-shapes", action="store_true",
                   help="every new kernel shape compiles at once (jgrad.runtime._kernel_cache.interpret_max_elements = 0)")
    args = p.parse_args(argv)
    if args.compile_new_shapes:
        from jgrad.runtime import _kernel_cache
        _kernel_cache.interpret_max_elements = 0
    jdev, tdev = common.setup_device(args.device)
    env = common.environment(jdev, tdev)
    common.print_header("Training programs: jgrad eager / auto vs PyTorch, same run", env)
    tables, verdicts = [], []
    for name in args.only.split(","):
        steps = args.steps or (STEPS[name] // 4 if args.quick else STEPS[name])
        repeat = args.repeat or 1
        results, totals, fractions = bench(name, steps, repeat)
        title = f"{name} ({steps} steps; {SIZES[name]}): time per step, median over the 2nd half"
        tables.append(common.table(title, results, baselines=("torch", "jgrad eager")))
        med = {r.name: r.median for r in results}
        hot = fractions.get("jgrad auto (hot)")
        if hot:
            verdicts.append(common.verdict(f"{name}: segments compiled after warm-up (hot run, 2nd half)",
                                           f"{hot[0]}/{hot[1]}", ">= 90%", hot[0] >= 0.9 * hot[1]))
        verdicts.append(common.verdict(f"{name}: auto first run / eager, whole run",
                                       f"{totals['jgrad auto (first run)'] / totals['jgrad eager']:.2f}x", "<= 1.0x",
                                       totals["jgrad auto (first run)"] <= totals["jgrad eager"]))
        verdicts.append(common.verdict(f"{name}: auto hot / torch, per step",
                                       f"{med['jgrad auto (hot)'] / med['torch']:.2f}x", "<= 1.0x",
                                       med["jgrad auto (hot)"] <= med["torch"]))
    print("\n### Targets\n")
    for v in verdicts:
        print(f"- {v['label']}: {v['value']} (goal {v['target']}): {'met' if v['met'] else 'NOT met'}")
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "tables": tables, "targets": verdicts})


if __name__ == "__main__":
    main()
