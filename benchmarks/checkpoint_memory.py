"""Peak device memory of a GPT training step with and without activation checkpointing (issue 29).

    python -m benchmarks.checkpoint_memory [--device cpu|gpu] [--tiny] [--layers N] [--modes eager,auto] [--steps N]
                                           [--warmup N]

The model is ``examples/gpt/model.py`` (nanoGPT's layout). "checkpointed" wraps every transformer block's forward
in ``jgrad.utils.checkpoint.checkpoint(..., use_reentrant=False)``, as a PyTorch user would; the blocks'
activations are then recomputed in backward instead of kept. Each (mode, variant) runs in a fresh process,
because a device's ``peak_bytes_in_use`` only grows over a process's life: the figure is the peak over a
few training steps, minus the memory held before the first step (parameters, optimizer state, batch). The
CPU backend reports no memory statistics: there the rows give the step time only. That peak includes the
warm-up steps (op by op before a step compiles), so each row also gives what XLA plans for the largest
executable the run compiled (in "auto" mode the step's segment): its temporary buffers
(``memory_analysis().temp_size_in_bytes``), the steady state of a compiled step on any backend.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(device, tiny, layers, mode, checkpointed, steps, warmup=0):
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
    import jax
    import numpy as np

    import jgrad as jg
    from benchmarks import common
    from jgrad.utils.checkpoint import checkpoint

    import twin

    jdev, _ = common.setup_device(device)
    cfg = dict(vocab_size=64, block_size=32, n_layer=layers, n_head=2, n_embd=64, dropout=0.0) if tiny else \
        dict(vocab_size=50304, block_size=1024, n_layer=layers, n_head=12, n_embd=768, dropout=0.0)
    batch = 2 if tiny else 4
    jg.manual_seed(0)
    jmod = twin.load_model("jgrad")
    model = jmod.GPT(jmod.GPTConfig(**cfg)).to(device)
    if checkpointed:
        for block in model.transformer.h:
            forward = block.forward
            block.forward = lambda x, _f=forward: checkpoint(_f, x, use_reentrant=False)
    opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95))
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.integers(0, cfg["vocab_size"], (batch, cfg["block_size"])), device=device)
    y = jg.tensor(rng.integers(0, cfg["vocab_size"], (batch, cfg["block_size"])), device=device)
    stats = getattr(jdev, "memory_stats", lambda: None)

    def in_use():
        s = stats()
        return None if not s else s.get("bytes_in_use")

    compiled = []
    original = jax.stages.Lowered.compile

    def recording(self, *a, **k):  # every executable the run compiles, for its planned temporary memory
        c = original(self, *a, **k)
        compiled.append(c)
        return c

    jax.stages.Lowered.compile = recording
    jg.synchronize()
    before = in_use()
    times, losses = [], []
    from jgrad.runtime import _segment

    if warmup:  # a repeated structure compiles at once (not after paying for itself op by op): the steady state
        _segment.compile_payback = 0
    with jg.execution_mode(mode):
        for k in range(steps + warmup):
            if k == warmup and warmup:  # the warm-up's background compiles finish: the timed steps run compiled
                jg.synchronize()
                _segment.wait_compiles()
                times.clear()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
            times.append(time.perf_counter() - t0)
    s = stats()
    peak = None if not s else s.get("peak_bytes_in_use")
    jax.stages.Lowered.compile = original
    plans = [(m.temp_size_in_bytes, m.argument_size_in_bytes) for m in
             (c.memory_analysis() for c in compiled) if m is not None]
    largest = max(plans, key=lambda p: p[1], default=(None, None))  # the step: the most argument bytes
    return {"peak_over_start": None if peak is None or before is None else peak - before,
            "step_s": sorted(times)[len(times) // 2], "losses": losses, "temp_bytes": largest[0],
            "executables": len(compiled)}


def main(argv=None):
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    p.add_argument("--tiny", action="store_true", help="a small GPT (width 64): for the CPU")
    p.add_argument("--layers", type=int, default=None, help="transformer blocks (default: 12, tiny: 2)")
    p.add_argument("--modes", default="eager,auto")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=0,
                   help="steps before the measured ones, then wait for background compiles (auto's steady state)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    layers = args.layers or (2 if args.tiny else 12)
    if args.child:
        mode, ck = args.child.split(":")
        print(json.dumps(_child(args.device, args.tiny, layers, mode, ck == "1", args.steps, args.warmup)))
        return
    print(f"# GPT step, peak device memory with and without checkpointed blocks ({layers} layers, "
          f"{'tiny' if args.tiny else 'GPT-2-small width'}, device {args.device})\n")
    print("| mode | variant | peak over start (MiB) | largest executable's temporaries (MiB) | median step (ms) "
          "| final loss |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in args.modes.split(","):
        for ck in (0, 1):
            cmd = [sys.executable, "-m", "benchmarks.checkpoint_memory", "--device", args.device, "--layers",
                   str(layers), "--steps", str(args.steps), "--warmup", str(args.warmup), "--child", f"{mode}:{ck}"] + (["--tiny"] if args.tiny else [])
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if out.returncode:
                print(f"| {mode} | {'checkpointed' if ck else 'plain'} | failed: {out.stderr.strip()[-300:]} | | | |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            mib = "n/a (no memory statistics)" if r["peak_over_start"] is None else f"{r['peak_over_start'] / 2**20:.0f}"
            temp = "n/a" if r["temp_bytes"] is None else f"{r['temp_bytes'] / 2**20:.0f} (of {r['executables']})"
            print(f"| {mode} | {'checkpointed' if ck else 'plain'} | {mib} | {temp} | {r['step_s'] * 1e3:.1f} | "
                  f"{r['losses'][-1]:.5f} |")


if __name__ == "__main__":
    main()
