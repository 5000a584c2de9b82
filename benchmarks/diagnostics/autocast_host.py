"""Where an "auto" GPT step's host time goes, with and without autocast (issue 30's bf16 goal).

    python -m benchmarks.diagnostics.autocast_host [--device gpu] [--tiny] [--autocast bf16] [--steps 10]
        [--no-donate]

Builds the step of ``benchmarks.gpt2_small`` (same model, AdamW, batch), runs it in "auto" mode until it is
hot, then times ``--steps`` steps: the time to issue a step (host) and to finish it, the segments per step and
``segment_cache_info().report()`` and the executable's call per step (``call_seconds``: ``--no-donate`` runs
with ``_segment.donate_inputs = False``, to see what donating the inputs costs the call); then profiles five
steps with cProfile and prints the functions that took the most time, with the calls that wait for the device
(``block_until_ready``, ``__array__``, ``item``) counted.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

import numpy as np

from .. import common
from .. import gpt2_small as g

_WAITS = ("block_until_ready", "__array__", "_value", "item", "tolist", "_single_device_array_to_np_array")


def _log_runs(_segment):
    """Wrap ``_Entry.pick``: each barrier's (entry, ops, donatable count, variants' donation sizes, picked)."""
    log = []
    pick = _segment._Entry.pick

    def logged(self, donatable):
        res = pick(self, donatable)
        log.append((self, self.ops, len(donatable), [len(m) for m, _ in self.variants], res[0] is not None))
        return res

    _segment._Entry.pick = logged
    return log


def _probe_call(_segment, run):
    """Call the hot step's executable again on the same inputs (no donation: they stay valid), host time per
    call, and what kinds of inputs it takes."""
    import collections

    import jax

    from jgrad.core._dtype import x64_scope

    seen = []
    orig = _segment.Segment._run

    def keep(self, live, state):
        seen.append(list(self.inputs))
        return orig(self, live, state)

    _segment.Segment._run = keep
    try:
        run()
    finally:
        _segment.Segment._run = orig
    inputs = seen[-1]
    entry = _segment._listed[-1]
    exe, _ = entry.pick(())
    if exe is None or _segment.donate_inputs:
        print("probe: no executable without donation (run with --no-donate)")
        return
    kinds = collections.Counter(
        (type(a).__name__, getattr(a, "committed", None), getattr(a, "weak_type", None),
         str(getattr(a, "sharding", ""))[:40], getattr(a, "size", 0) <= 8) for a in inputs)
    print(f"probe: {len(inputs)} inputs; kinds (type, committed, weak, sharding, scalar-sized): {dict(kinds)}")
    jax.block_until_ready(exe(*inputs))
    dev = next(iter(inputs[0].devices()))

    def uncommitted(a):  # the weakly typed scalars as device_scalar made them before 2026-11-26
        if not (isinstance(a, jax.Array) and a.weak_type and a.size == 1):
            return a
        with jax.default_device(dev), x64_scope():
            return jax.numpy.asarray(a.item(), dtype=a.dtype)

    for label, args in (("as recorded", inputs),
                        ("all committed", [jax.device_put(a, a.sharding) if isinstance(a, jax.Array) and
                                           not a.committed else a for a in inputs]),
                        ("weak scalars uncommitted", [uncommitted(a) for a in inputs])):
        ts = []
        for _ in range(20):
            t0 = time.perf_counter()
            out = exe(*args)
            ts.append(time.perf_counter() - t0)
        jax.block_until_ready(out)
        print(f"probe: executable call {label}: host {1e3 * np.median(ts):.2f} ms (median of 20, no sync between)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--autocast", choices=("bf16",), default=None)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--no-item", action="store_true", help="do not read the loss every step")
    p.add_argument("--no-donate", action="store_true", help="segments donate no inputs (_segment.donate_inputs)")
    p.add_argument("--no-profile", action="store_true", help="skip the cProfile of five steps")
    p.add_argument("--probe-call", action="store_true",
                   help="with --no-donate: call the last step's executable again on its inputs, timed, and list "
                        "the kinds of its inputs")
    args = p.parse_args(argv)
    g.AUTOCAST[0] = args.autocast
    cfg = g.TINY if args.tiny else g.REAL
    jdev, _ = common.setup_device(args.device)
    import jgrad as jg
    from jgrad.runtime import _segment

    if args.no_donate:
        _segment.donate_inputs = False
    x, y, state = g.batch_and_weights(cfg)
    variants, _ = g.jgrad_variants(cfg, state, x, y, args.device, {"jgrad auto"})
    run = variants[0].fn
    log = _log_runs(_segment)
    before = jg.graphs.segment_cache_info()
    host, total = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        out = run()
        t1 = time.perf_counter()
        jg.synchronize()
        if not args.no_item:
            float(out[0].item())
        t2 = time.perf_counter()
        host.append(t1 - t0)
        total.append(t2 - t0)
    after = jg.graphs.segment_cache_info()
    print(f"autocast={args.autocast} device={args.device} size={'tiny' if args.tiny else 'real'}")
    print(f"host ms/step median {1e3 * np.median(host):.2f}, total ms/step median {1e3 * np.median(total):.2f}, "
          f"executable calls {1e3 * (after.call_seconds - before.call_seconds) / args.steps:.2f} ms/step "
          f"(donating inputs: {_segment.donate_inputs})")
    print(f"per step: segments {(after.segments - before.segments) / args.steps:.2f}, ops "
          f"{(after.ops - before.ops) / args.steps:.1f}, compiled runs "
          f"{(after.compiled_runs - before.compiled_runs) / args.steps:.2f}, compiles {after.compiles - before.compiles}")
    print(after.report())
    print("timed runs (structure #, ops, donatable inputs, variants' donation sizes, compiled?):")
    listed = list(_segment._listed)
    for entry, ops, n_don, masks, compiled in log[-args.steps:]:
        num = next((i for i, e in enumerate(listed) if e is entry), "?")
        print(f"  #{num} ops {ops} donatable {n_don} variants {masks} compiled {compiled}")
    _segment.wait_compiles()
    if args.probe_call:
        _probe_call(_segment, run)
    if args.no_profile:
        return 0
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        out = run()
    float(out[0].item())
    prof.disable()
    stats = pstats.Stats(prof)
    waits = {f"{fn[2]} ({fn[0].rsplit('/', 1)[-1]}:{fn[1]})": v[1] for fn, v in stats.stats.items() if fn[2] in _WAITS}
    print("calls that may wait for the device (5 steps):", waits)
    for order in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(order).print_stats(35)
        print(s.getvalue())


if __name__ == "__main__":
    sys.exit(main())
