"""Where a hot auto-mode step spends its time: recording the forward, the backward pass(es), the optimizer,
and the read (the barrier's executable call and the wait for the device), against main-thread CPU time.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.tiered_phases --workload hessian|gpt [--device gpu] [--mode auto]

hessian: ``benchmarks/tiered.py``'s tanh MLP 6 x 512, batch 10000 (``--small``: 128, batch 1000): the forward,
``grad(create_graph=True)`` (g1), ``grad`` of that (g2), ``.sum().item()`` (read). gpt: ``benchmarks/gpt_step.py``'s
step: forward with the loss, ``backward()``, ``AdamW.step()`` (a barrier), ``jg.synchronize()`` (read).
Also the live outputs of the step's segment (what its executable writes back). Medians over 50 steps.
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def hessian(jg, small):
    hidden, batch = (128, 1000) if small else (512, 10000)
    rng = np.random.default_rng(0)
    sizes = [1] + [hidden] * 6 + [1]
    W = [jg.tensor(rng.uniform(-.1, .1, (o, i)).astype(np.float32), requires_grad=True)
         for i, o in zip(sizes[:-1], sizes[1:])]
    B = [jg.tensor(rng.uniform(-.1, .1, (o,)).astype(np.float32), requires_grad=True) for o in sizes[1:]]
    x = jg.tensor(rng.standard_normal((batch, 1), dtype=np.float32), requires_grad=True)
    ones = jg.ones(batch, 1)

    def step(mark):
        h = x
        for i in range(len(W)):
            h = jg.linear(h, W[i], B[i])
            if i < len(W) - 1:
                h = jg.tanh(h)
        mark("forward")
        (dy,) = jg.autograd.grad(h, x, grad_outputs=ones, create_graph=True)
        mark("g1 (create_graph)")
        (d2y,) = jg.autograd.grad(dy, x, grad_outputs=ones, create_graph=True)
        mark("g2 (create_graph)")
        d2y.sum().item()
        mark("read")
    return step


def gpt(jg, small):
    sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
    import twin
    from benchmarks.gpt_step import BATCH, BETAS, CONFIG, LR, WEIGHT_DECAY

    jmod = twin.load_model("jgrad")
    jg.manual_seed(0)
    model = jmod.GPT(jmod.GPTConfig(**CONFIG))
    opt = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS)
    rng = np.random.default_rng(0)
    x, y = (jg.tensor(rng.integers(0, CONFIG["vocab_size"], (BATCH, CONFIG["block_size"]))) for _ in range(2))

    def step(mark):
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        mark("forward")
        loss.backward()
        mark("backward")
        opt.step()
        mark("optimizer (its end is a barrier)")
        jg.synchronize()
        mark("read (synchronize)")
    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=("hessian", "gpt"), default="hessian")
    p.add_argument("--device", default="gpu")
    p.add_argument("--mode", default="auto", choices=("auto", "eager"))
    p.add_argument("--small", action="store_true", help="the Hessian at width 128, batch 1000 (the CPU's size)")
    args = p.parse_args()
    import jgrad as jg
    from jgrad.runtime import _segment

    jg.set_default_device(args.device)
    step = {"hessian": hessian, "gpt": gpt}[args.workload](jg, args.small)
    live = []
    real_run = _segment.Segment._run

    def counting_run(self, buffers):
        live.append((len(buffers), sum(b.size * b.dtype.itemsize for b in buffers)))
        return real_run(self, buffers)

    _segment.Segment._run = counting_run
    samples = {}
    with jg.execution_mode(args.mode):
        for _ in range(5):
            for _ in range(3):
                step(lambda name: None)
            _segment.wait_compiles()
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(50):
            last = [time.perf_counter()]

            def mark(name):
                now = time.perf_counter()
                samples.setdefault(name, []).append(now - last[0])
                last[0] = now
            step(mark)
        wall, cpu = (time.perf_counter() - w0) / 50, (time.thread_time() - c0) / 50
    _segment.Segment._run = real_run
    print(f"## {args.workload} step, {args.mode} mode, {args.device}\n")
    print(f"- per step: {wall * 1e3:.2f} ms wall, {cpu * 1e3:.2f} ms main-thread CPU")
    for name, v in samples.items():
        print(f"- {name}: {np.median(v) * 1e3:.3f} ms (median)")
    if live:
        n, nbytes = live[-1]
        print(f"- the step's segment at its barrier: {n} live outputs, {nbytes / 2 ** 20:.1f} MiB written back")
    print(f"- {jg.graphs.segment_cache_info()}")


if __name__ == "__main__":
    main()
