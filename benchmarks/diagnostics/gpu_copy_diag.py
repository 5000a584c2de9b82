"""What the docs' loop (``static_x.copy_(x); static_y.copy_(y); g.replay()``) costs per step, and where.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gpu_copy_diag [--device gpu]

For the small-MLP capture of ``benchmarks.capture``: how many device addresses the static input takes
over six ``copy_`` calls (each copy_ rebinds the tensor to a new array), and per call two ``copy_``
alone, ``replay()`` alone and both; then a bare ``jax.jit`` full-size update of a (64, 256) array with
and without donating the old one (jax's own cost of one call, and of keeping the address).
No assertions: figures go into ``benchmarks/RESULTS.md`` by hand.
"""
from __future__ import annotations

import argparse
import sys

from benchmarks.diagnostics.gpu_replay_diag import _time as diag_time


def _per_call(fn, block):
    """Median us per call over 7 batches of 300 back-to-back calls (gpu_replay_diag's loop)."""
    return diag_time(fn, block, 300, 7)[0] * 1e6


def _bare_update(src_arrays, donate):
    import jax

    f = jax.jit(lambda a, b: jax.lax.dynamic_update_slice(a, b, (0,) * a.ndim),
                donate_argnums=(0,) if donate else ())
    st = {"a": jax.numpy.zeros_like(src_arrays[0]), "i": 0}

    def call():
        st["a"] = f(st["a"], src_arrays[st["i"] & 1])
        st["i"] += 1
        return st["a"]
    return call


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu")
    a = p.parse_args(argv)
    from benchmarks import capture, common
    capture._quiet_donation()
    common.setup_device(a.device)
    import jax

    import jgrad as jg
    from jgrad import nn

    dev = "gpu" if a.device == "gpu" else "cpu"
    w = capture.small_workload()
    loss_mod = nn.MSELoss()
    _, _, model, opt, x_r, y_r, *_ = capture._jg_setup(w, loss_mod)
    g, static_loss = capture.jg_capture(model, opt, loss_mod, x_r, y_r)
    batches = [(jg.tensor(w.X * 0.5, device=dev), jg.tensor(w.Y * 0.5, device=dev)),
               (jg.tensor(w.X, device=dev), jg.tensor(w.Y, device=dev))]
    copy_next = capture.batch_copier(batches, x_r, y_r)

    def copies():
        copy_next()
        return [x_r, y_r]

    def replay():
        g.replay()
        return [static_loss]

    def both():
        copies()
        return replay()

    addrs = set()
    for _ in range(6):
        copies()
        addrs.add(x_r._data.unsafe_buffer_pointer())
    print(f"- static_x: {len(addrs)} device addresses over 6 copy_ calls")
    for name, fn in (("two copy_", copies), ("replay", replay), ("two copy_ + replay", both),
                     ("replay", replay), ("two copy_ + replay", both)):
        print(f"  - {name}: {_per_call(fn, common.block):.1f} us/call", flush=True)
    srcs = [bx._data for bx, _ in batches]
    for donate in (False, True):
        print(f"- bare jax.jit full-size update of a {tuple(srcs[0].shape)} array, donated={donate}: "
              f"{_per_call(_bare_update(srcs, donate), jax.block_until_ready):.1f} us/call", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
