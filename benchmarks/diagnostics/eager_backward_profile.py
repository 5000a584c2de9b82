"""Where an eager backward pass spends its host time: the engine node by node against its backward plan (Note
[Backward plans]), on GPT-2-small's step (``--tiny``: the smoke size), cProfile of the timed passes.

    python -m benchmarks.diagnostics.eager_backward_profile [--device cpu|gpu] [--tiny] [--steps N]
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--whole-steps", action="store_true",
                   help="time whole training steps instead, plans on and off interleaved (medians)")
    args = p.parse_args(argv)
    import numpy as np
    import jax
    import jgrad as jg
    from benchmarks import gpt2_small
    from jgrad.runtime import _backward_plan

    cfg = gpt2_small.TINY if args.tiny else gpt2_small.REAL
    x, y, state = gpt2_small.batch_and_weights(cfg)
    device = args.device
    model, opt = gpt2_small._jgrad_model(cfg, state, device)
    jx, jy = jg.tensor(x, device=device), jg.tensor(y, device=device)
    if args.whole_steps:
        return _whole_steps(jg, model, opt, jx, jy, _backward_plan, args.steps)
    for plans in (False, True, False, True):
        _backward_plan.eager_plans = plans
        times, prof = [], cProfile.Profile()
        for i in range(args.steps + 2):
            opt.zero_grad(set_to_none=True)
            _, loss = model(jx, jy)
            jax.block_until_ready(loss._data)
            t = time.perf_counter()
            if i >= 2:
                prof.enable()
            loss.backward()
            prof.disable()
            times.append(time.perf_counter() - t)
            jg.synchronize()
        print(f"## plans {plans}: backward host {np.median(times[2:]) * 1e3:.1f} ms (first {times[0] * 1e3:.1f} ms)")
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
        print(s.getvalue()[-3500:])


def _whole_steps(jg, model, opt, jx, jy, plans, n):
    import numpy as np
    times = {True: [], False: []}
    for i in range(2 * n + 4):
        on = bool(i % 2)
        plans.eager_plans = on
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss = model(jx, jy)
        loss.backward()
        opt.step()
        loss.item()
        jg.synchronize()
        if i >= 4:
            times[on].append(time.perf_counter() - t)
    for on in (False, True):
        print(f"## whole step, plans {on}: median {np.median(times[on]) * 1e3:.1f} ms over {len(times[on])}")


if __name__ == "__main__":
    main()
