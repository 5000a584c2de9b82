"""Capture on a GPU: correctness of the CPU-tested scenarios on the device, and stream regions.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gpu_capture_check

Checks (PASS/FAIL lines, no assertions): whole-network capture with Dropout and SGD vs the
eager loop, make_graphed_callables vs an ungraphed control, a two-stream branch-and-rejoin
capture vs NumPy; then times two independent matmul chains captured on two streams
(side-stream region lowered with compute_on('gpu_stream:1')) vs the same on one stream.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import jgrad as jg
from benchmarks import common
from jgrad import nn


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def _report(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}")


def whole_network(dev):
    data = [(jg.randn(64, 256, device=dev), jg.randn(64, 10, device=dev)) for _ in range(10)]

    def make():
        jg.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 10)).to(dev)
        return model, jg.optim.SGD(model.parameters(), lr=0.05)

    model, opt = make()
    jg.manual_seed(1)
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    eager = [_np(p) for p in model.parameters()]
    model, opt = make()
    sx, sy = jg.zeros(64, 256, device=dev), jg.zeros(64, 10, device=dev)
    opt.zero_grad(set_to_none=True)
    g = jg.Graph()
    with jg.graph(g):
        nn.functional.mse_loss(model(sx), sy).backward()
        opt.step()
    jg.manual_seed(1)
    for x, y in data:
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
    err = max(float(np.abs(a - b).max()) for a, b in zip(eager, [_np(p) for p in model.parameters()]))
    _report("whole-network capture (Dropout, SGD) == eager loop, 10 steps", err <= 1e-5, f"max |diff| {err:.2e}")


def graphed_callables(dev):
    def build(seed):
        jg.manual_seed(seed)
        return nn.Sequential(nn.Sequential(nn.Linear(128, 96), nn.Dropout(0.1)),
                             nn.Sequential(nn.Linear(96, 32), nn.Dropout(0.2))).to(dev)

    mg, mc = build(5), build(6)
    mg.load_state_dict(mc.state_dict())
    og, oc = jg.optim.SGD(mg.parameters(), lr=0.1), jg.optim.SGD(mc.parameters(), lr=0.1)
    x, h = jg.randn(32, 128, device=dev), jg.randn(32, 96, device=dev, requires_grad=True)
    yp, y = jg.randn(32, 32, device=dev, requires_grad=True), jg.randn(32, 32, device=dev)
    mg[0], mg[1], relu_g, loss_g = jg.make_graphed_callables(
        (mg[0], mg[1], nn.functional.relu, nn.functional.mse_loss), ((x,), (h,), (yp,), (yp, y)))
    inputs = [jg.rand_like(x) for _ in range(10)]
    targets = [jg.rand_like(y) for _ in range(10)]
    for m, opt, relu, loss_fn in ((mg, og, relu_g, loss_g), (mc, oc, nn.functional.relu, nn.functional.mse_loss)):
        jg.manual_seed(5)
        for d, t in zip(inputs, targets):
            opt.zero_grad(set_to_none=True)
            loss_fn(relu(m(d)), t).backward()
            opt.step()
    err = max(float(np.abs(_np(a) - _np(b)).max()) for a, b in zip(mg.parameters(), mc.parameters()))
    _report("make_graphed_callables (2 Modules + 2 functions, Dropout) == control", err <= 1e-5,
            f"max |diff| {err:.2e}")


def _chains(a, b, n):
    for _ in range(n):
        a = (a @ a) * 0.01
        b = (b @ b) * 0.01
    return a, b


def two_streams(dev, n=20, repeat=50):
    a0 = jg.randn(128, 128, device=dev)
    b0 = jg.randn(128, 128, device=dev)

    def capture(split):
        g = jg.Graph()
        side = jg.Stream(dev)
        with jg.graph(g):
            cap = jg.current_stream(dev)
            if split:
                side.wait_stream(cap)
                a = a0
                with jg.stream(side):
                    for _ in range(n):
                        a = (a @ a) * 0.01
                b = b0
                for _ in range(n):
                    b = (b @ b) * 0.01
                cap.wait_stream(side)
            else:
                a, b = _chains(a0, b0, n)
            out = a + b
        return g, out

    results = {}
    for split in (False, True):
        g, out = capture(split)
        g.replay()
        jg.synchronize()
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            g.replay()
            common.block(out)
            ts.append(time.perf_counter() - t0)
        results[split] = (statistics.median(ts), _np(out))
    a, b = _np(a0).astype(np.float64), _np(b0).astype(np.float64)
    for _ in range(n):
        a, b = (a @ a) * 0.01, (b @ b) * 0.01
    ref = a + b
    scale = np.abs(ref).max() or 1.0
    ok = all(np.abs(v[1] - ref).max() / scale < 1e-3 for v in results.values())
    _report("two-stream branch/rejoin capture == NumPy", ok)
    one, two = results[False][0], results[True][0]
    print(f"two independent chains of {n} 128x128 matmuls, replay median: one stream {one * 1e6:.0f} us, "
          f"two streams (compute_on) {two * 1e6:.0f} us, speed-up {one / two:.2f}x")


def main():
    dev = jg.device("gpu:0") if any(d.platform == "gpu" for d in __import__("jax").devices()) else jg.device("cpu")
    print(f"device: {dev}  jax {__import__('jax').__version__}")
    jg.set_float32_matmul_precision("highest")
    whole_network(dev)
    graphed_callables(dev)
    two_streams(dev)


if __name__ == "__main__":
    main()
