"""What does reading one value back cost on a GPU, and what do auto mode's host copies save?

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gpu_read_latency [--device cpu]

1. Plain JAX: a jitted ``x + 1`` on a 0-d array, then reading it: ``float(x)``; ``block_until_ready`` then
   ``float``; the same value written by the executable to pinned host memory (``out_shardings`` with
   ``memory_kind="pinned_host"``); ``jax.device_put`` to pinned host; PyTorch's ``add_`` + ``item()``.
2. jgrad auto mode, the small MLP step of ``benchmarks/tiered.py`` with ``loss.item()`` every step, and with
   no read, with host copies (``jgrad.runtime._segment.host_copies``) on and off, interleaved rounds, a fresh
   structure cache per variant. Medians of 5 rounds; wall and main-thread CPU time per call.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def per_call(fn, n=300, rounds=5):
    for _ in range(20):
        fn()
    ts = []
    for _ in range(rounds):
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(n):
            fn()
        ts.append(((time.perf_counter() - t0) / n * 1e6, (time.thread_time() - c0) / n * 1e6))
    ts.sort()
    return "%.1f us wall, %.1f us main-thread CPU" % ts[len(ts) // 2]


def plain_jax(dev):
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    f = jax.jit(lambda x: x + 1)
    host = SingleDeviceSharding(dev, memory_kind="pinned_host")
    fh = jax.jit(lambda x: (x + 1, x + 1), out_shardings=(SingleDeviceSharding(dev), host))
    st = {"y": jax.device_put(jnp.zeros((), jnp.float32), dev)}

    def step():
        st["y"] = f(st["y"])

    def step_host():
        st["y"], st["h"] = fh(st["y"])

    cases = [("dispatch only (no read)", step),
             ("float(x)", lambda: (step(), float(st["y"]))),
             ("block_until_ready, then float(x)", lambda: (step(), st["y"].block_until_ready(), float(st["y"]))),
             ("pinned_host output of the executable, float", lambda: (step_host(), float(st["h"]))),
             ("jax.device_put to pinned_host, float", lambda: (step(), float(jax.device_put(st["y"], host))))]
    for name, fn in cases:
        print(f"- {name}: {per_call(fn)}")
    jax.block_until_ready(st["y"])
    try:
        import torch
        if torch.cuda.is_available():
            t = torch.zeros((), device="cuda")
            print(f"- torch add_ + item(): {per_call(lambda: t.add_(1).item())}")
    except ImportError:
        pass


def auto_mlp(device, rounds=3):
    import jgrad as jg
    from benchmarks import tiered
    from jgrad.runtime import _segment

    jg.set_default_device(device)
    W0, B0, X, Y = tiered._mlp_init()
    for r in range(rounds):
        for read in (True, False):
            for host in (None, False):
                _segment.host_copies = host
                jg.graphs.segment_cache_clear()
                *_, step = tiered.jgrad_mlp(jg, W0, B0, X, Y, read=read)
                with jg.execution_mode("auto"):
                    for _ in range(4):
                        for _ in range(4):
                            step()
                        _segment.wait_compiles()
                    i0 = jg.graphs.segment_cache_info()
                    line = per_call(step, 200)
                    i1 = jg.graphs.segment_cache_info()
                    jg.synchronize()
                call = (i1.call_seconds - i0.call_seconds) / max(1, i1.compiled_runs - i0.compiled_runs) * 1e6
                print(f"- round {r}, {'item() every step' if read else 'no read'}, host_copies="
                      f"{'None (the default: on for GPUs)' if host is None else 'False'}: {line}; executable call {call:.1f} us")
    _segment.host_copies = None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    args = p.parse_args()
    import jax

    dev = jax.devices(args.device)[0]
    print(f"## Reading a value back ({dev.device_kind}, jax {jax.__version__})\n\n### Plain JAX\n")
    plain_jax(dev)
    print("\n### jgrad auto mode, small MLP step\n")
    auto_mlp(args.device)


if __name__ == "__main__":
    main()
