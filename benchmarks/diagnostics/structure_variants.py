"""Does a repeated GPT training step in "auto" mode settle on one compiled structure, and if it alternates,
between which variants and why?

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.structure_variants [--device cpu|gpu] [--layers 6]
        [--width 768] [--context 1024] [--vocab 50304] [--batch 4] [--steps 60] [--pack auto|on|off]
        [--foreground]

Runs ``examples/gpt/model.py``'s step (AdamW, no host read inside) and prints, per step: the trie node its
segment ended on (the structure), whether it ran op by op or compiled, compiles finished and in flight. At the
end, for the first two distinct structures that followed each other, the steps and inputs where they differ
(a packed-slice input against a plain one, a different kernel, another input order), which says why the
step alternates. Issue 28 saw, on an H100, a 6-layer step adding 5 op-by-op and 5 compiled segments per 10
steps long after warm-up; on the CPU the variants found were the deferred-check chain (fixed) and the packed
inputs of a compiled run, each compiling in the background while the other one runs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--pack", choices=("auto", "on", "off"), default="auto", help="_segment.pack_outputs")
    p.add_argument("--foreground", action="store_true", help="compile in the foreground (background_compile off)")
    args = p.parse_args(argv)
    import jgrad as jg
    from jgrad.runtime import _segment
    import twin

    jg.set_default_device(args.device)
    _segment.pack_outputs = {"auto": None, "on": True, "off": False}[args.pack]
    _segment.background_compile = not args.foreground
    seen = []
    orig = _segment.Segment.flush

    def flush(self):
        if self.pending and self.steps:
            seen.append((id(self.node), [(getattr(s[0], "__name__", str(s[0]))[:40], s[2]) for s in self.steps],
                         [(type(x).__name__, getattr(x, "shape", None)) for x in self.inputs]))
        return orig(self)

    _segment.Segment.flush = flush
    jmod = twin.load_model("jgrad")
    cfg = jmod.GPTConfig(vocab_size=args.vocab, block_size=args.context, n_layer=args.layers, n_head=args.heads,
                         n_embd=args.width)
    model = jmod.GPT(cfg).to(args.device)
    opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95))
    rng = np.random.default_rng(0)
    x, y = (jg.tensor(rng.integers(0, args.vocab, (args.batch, args.context)), device=args.device)
            for _ in range(2))
    jg.set_execution_mode("auto")
    info = jg.graphs.segment_cache_info
    nodes, order = {}, []
    t0 = time.perf_counter()
    for i in range(args.steps):
        a = info()
        k = len(seen)
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        b = info()
        node = seen[-1][0] if len(seen) > k else None
        name = nodes.setdefault(node, f"S{len(nodes)}")
        order.append((name, len(seen) - 1))
        print(f"step {i:3d} {time.perf_counter() - t0:7.1f} s  structure {name}  op by op {b.interpreted - a.interpreted}"
              f"  compiled {b.compiled_runs - a.compiled_runs}  compiles done {b.compiles}  in flight "
              f"{len(_segment._compiling)}", flush=True)
    _diff(order, seen)


def _diff(order, seen):
    for (n1, i1), (n2, i2) in zip(order, order[1:]):
        if n1 != n2 and n1 != "S0":
            a, b = seen[i1], seen[i2]
            print(f"\n{n1} -> {n2}: {len(a[1])} vs {len(b[1])} steps, {len(a[2])} vs {len(b[2])} inputs")
            for k, (sa, sb) in enumerate(zip(a[1], b[1])):
                if sa != sb:
                    print(f"  step {k}: {sa[0]} {sa[1]}\n       vs {sb[0]} {sb[1]}")
            for k, (ia, ib) in enumerate(zip(a[2], b[2])):
                if ia != ib:
                    print(f"  input {k}: {ia} vs {ib}")
            return
    print("\none structure after the first step: nothing alternates")


if __name__ == "__main__":
    main()
