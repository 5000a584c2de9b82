"""Where the host time of a hot "auto"-mode training step with ``loss.item()`` every step goes, phase by phase and
in the runtime's own functions; and the step with and without recycling the gradients ``zero_grad`` lets go of,
interleaved in one process against ``jax.jit`` of the whole step.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.item_step_host [--width 256] [--steps 600] [--rounds 20]

The workload is ``benchmarks/tiered.py``'s small MLP step (8 x Linear, ReLU, batch 64, MSELoss, SGD). Phases are
wall times of the main thread with the executable call taken out (``segment_cache_info().call_seconds``); the
functions are timed by wrapping them (each wrapper adds ~0.3 us). Medians; the VM is shared, so compare within a
run. Also checks that every hot step is one compiled segment run.
"""
import argparse
import gc
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def _wrap(owner, name, samples, label):
    real = getattr(owner, name)

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            samples.setdefault(label, []).append(time.perf_counter() - t0)
    setattr(owner, name, timed)
    return lambda: setattr(owner, name, real)


def phases(jg, tiered, common, steps):
    from jgrad.runtime import _backward_plan, _segment, _tape
    model, opt, crit, x, y, step = tiered.jgrad_mlp(jg, *tiered._mlp_init())
    st, pc, S = _segment._stats, time.perf_counter, {}
    with jg.execution_mode("auto"):
        common.until_hot(step)
        undo = [_wrap(_segment.Segment, "record", S, "  Segment.record (per op)"),
                _wrap(_tape, "record", S, "  _tape.record (per op)"),
                _wrap(_backward_plan, "_walk", S, "  backward plan: walk"),
                _wrap(_backward_plan, "_structure_key", S, "  backward plan: key"),
                _wrap(_backward_plan._Plan, "arguments", S, "  backward plan: arguments"),
                _wrap(_backward_plan._Plan, "finish", S, "  backward plan: finish"),
                _wrap(_segment.Segment, "_donatable", S, "  barrier: donation checks"),
                _wrap(_segment.Segment, "_bind", S, "  barrier: binding results"),
                _wrap(_segment.Segment, "_drop", S, "  barrier: letting go of the segment"),
                _wrap(_segment.Segment, "flush", S, "  barrier: all of it, the call included"),
                _wrap(type(opt), "_step_group", S, "  optimizer: its update recorded (one foreach op)")]
        info0 = jg.graphs.segment_cache_info()
        gc.collect()
        gc.freeze()
        for _ in range(steps):
            c0 = st.call_seconds
            t = [pc()]
            opt.zero_grad(set_to_none=True)
            t.append(pc())
            loss = crit(model(x), y)
            t.append(pc())
            loss.backward()
            t.append(pc())
            opt.step()
            t.append(pc())
            loss.item()
            t.append(pc())
            call = st.call_seconds - c0
            for name, a, b in zip(("zero_grad", "forward (record)", "backward (plan + record)",
                                   "optimizer (record) + barrier, without the call"), t, t[1:]):
                S.setdefault(name, []).append(b - a)
            S["optimizer (record) + barrier, without the call"][-1] -= call
            S.setdefault("executable call", []).append(call)
            S.setdefault("item() (the wait)", []).append(t[5] - t[4])
            S.setdefault("host, all (call excluded)", []).append(t[4] - t[0] - call)
        gc.unfreeze()
        info = jg.graphs.segment_cache_info()
        for u in undo:
            u()
    print(f"## Phases of the hot step ({steps} steps, medians)\n")
    for k, v in S.items():
        per = len(v) // steps
        print(f"- {k}: {np.median(v) * 1e6:.1f} us" + (f" x {per} a step" if per > 1 else ""))
    print(f"\n- segments {info.segments - info0.segments}, compiled runs {info.compiled_runs - info0.compiled_runs}, "
          f"op by op {info.interpreted - info0.interpreted} over {steps} steps")


def recycling(jg, tiered, common, rounds):
    from jgrad.runtime import _segment
    init = tiered._mlp_init()
    steps = {"auto, recycling (default)": (tiered.jgrad_mlp(jg, *init)[-1], _segment.max_spares),
             "auto, no recycling": (tiered.jgrad_mlp(jg, *init)[-1], 0),
             "jax.jit(step)": (tiered.jax_mlp(*init), None)}
    saved = _segment.max_spares
    S = {k: [] for k in steps}
    with jg.execution_mode("auto"):
        for f, spares in steps.values():
            if spares is not None:
                _segment.max_spares = spares
                common.until_hot(f)
        gc.collect()
        gc.freeze()
        for _ in range(rounds):
            for name, (f, spares) in steps.items():
                if spares is not None:
                    _segment.max_spares = spares
                for _ in range(3):
                    f()
                for _ in range(20):
                    t0 = time.perf_counter()
                    f()
                    S[name].append(time.perf_counter() - t0)
        gc.unfreeze()
    _segment.max_spares = saved
    j = np.median(S["jax.jit(step)"])
    print(f"\n## Interleaved, {rounds} rounds of 20 steps each (per-step medians)\n")
    for k, v in S.items():
        print(f"- {k}: {np.median(v) * 1e3:.3f} ms ({np.median(v) / j:.2f}x jax.jit)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    import jgrad as jg
    from benchmarks import common, tiered
    print(f"load average at start: {os.getloadavg()}\n")
    phases(jg, tiered, common, args.steps)
    recycling(jg, tiered, common, args.rounds)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
