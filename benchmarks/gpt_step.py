"""GPT training step: jgrad (eager and tiered 'auto' execution) vs PyTorch eager, same run.

    python -m benchmarks.gpt_step [--quick] [--device cpu|gpu] [--mode eager|auto|both] [--tf32] [--json out.json]

The model is ``examples/gpt/model.py`` (4 layers, 4 heads, width 128, context 64, vocabulary 65,
batch 8, float32); its PyTorch twin is the same file with its import lines pointed at torch
(``examples/gpt/twin.py``), given the same weights. One step: ``zero_grad(set_to_none=True)``,
forward with the cross-entropy loss, ``backward()``, ``AdamW.step()`` (two param groups, weight
decay on the matrices). Every variant's step is waited on before the clock stops: jgrad's arrays
(``block_until_ready``), ``jg.synchronize()`` in auto mode (it runs the pending segment), CUDA for
PyTorch on a GPU. Same method as the other benchmarks: medians over interleaved batches.

Goal (issue 18): jgrad <= PyTorch eager on the GPU with the tiered mode.
"""
from __future__ import annotations

import os
import sys

import numpy as np

if __package__ in (None, ""):  # run as a script: python benchmarks/gpt_step.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import common  # noqa: E402
else:
    from . import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

CONFIG = dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, dropout=0.0)
BATCH, LR, WEIGHT_DECAY, BETAS = 8, 1e-3, 0.1, (0.9, 0.95)


def _torch():
    try:
        import torch

        return torch
    except ImportError:
        return None


def build(args, tdev):
    """(variants, checks): one Variant per framework/mode, all starting from the same weights and batch."""
    import jgrad as jg
    import twin

    torch = _torch()
    rng = np.random.default_rng(0)
    x = rng.integers(0, CONFIG["vocab_size"], (BATCH, CONFIG["block_size"])).astype(np.int64)
    y = rng.integers(0, CONFIG["vocab_size"], (BATCH, CONFIG["block_size"])).astype(np.int64)
    jmod = twin.load_model("jgrad")
    jg.manual_seed(0)
    reference = jmod.GPT(jmod.GPTConfig(**CONFIG))
    state = {k: v.detach().cpu().numpy().copy() for k, v in reference.state_dict().items()}
    variants, checks, first_losses = [], {}, {}
    modes = ("eager", "auto") if args.mode == "both" else (args.mode,)
    for mode in modes:
        model = jmod.GPT(jmod.GPTConfig(**CONFIG)).to(args.device)
        model.load_state_dict({k: jg.tensor(v) for k, v in state.items()})
        opt = model.configure_optimizers(WEIGHT_DECAY, LR, BETAS)
        jx, jy = jg.tensor(x, device=args.device), jg.tensor(y, device=args.device)
        params = list(model.parameters())

        def step(model=model, opt=opt, jx=jx, jy=jy, params=params, mode=mode):
            with jg.execution_mode(mode):
                opt.zero_grad(set_to_none=True)
                _, loss = model(jx, jy)
                loss.backward()
                opt.step()  # its end is a barrier in auto mode: the recorded step runs (compiled once it repeats)
            return [loss] + params

        first_losses[f"jgrad {mode}"] = float(step()[0].item())
        if mode == "auto":
            _until_compiled(step)
        note = ("op by op, each op a cached jax.jit kernel" if mode == "eager" else
                "tiered: ops recorded, the repeated step runs as one compiled executable")
        variants.append(common.Variant(f"jgrad {mode}", step, note=note))
    if torch is not None:
        tmod = twin.load_model("torch")
        tmodel = tmod.GPT(tmod.GPTConfig(**CONFIG)).to(tdev)
        tmodel.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        topt = tmodel.configure_optimizers(WEIGHT_DECAY, LR, BETAS)
        tx, ty = torch.tensor(x, device=tdev), torch.tensor(y, device=tdev)
        sync = common.torch_sync(tdev)

        def tstep():
            topt.zero_grad(set_to_none=True)
            _, loss = tmodel(tx, ty)
            loss.backward()
            topt.step()
            return None

        first_losses["torch eager"] = float(_first_loss(tstep, tmodel, tx, ty))
        variants.append(common.Variant("torch eager", tstep, sync=sync,
                                       note=f"same model.py on torch, AdamW defaults, {torch.get_num_threads()} "
                                            "threads"))
        if tdev == "cpu" and torch.get_num_threads() > 1:
            variants.append(common.Variant("torch eager (1 thread)", tstep, sync=sync,
                                           around=common.torch_threads(1), note="torch.set_num_threads(1)"))
    base = first_losses.get("torch eager")
    for name, value in first_losses.items():
        checks[f"first-step loss, {name}"] = value
        if base is not None and name != "torch eager":
            checks[f"|first-step loss {name} - torch|"] = abs(value - base)
    return variants, checks


def _until_compiled(step, limit_s=180.0):
    """Run the auto-mode step until it runs compiled and compiles nothing new (common.until_hot)."""
    took = common.until_hot(step, limit_s=limit_s)
    print(f"- jgrad auto: the step ran compiled after {took:.1f} s of warm-up steps", file=sys.stderr)


def _first_loss(tstep, model, tx, ty):
    import torch

    with torch.no_grad():
        _, loss = model(tx, ty)
    tstep()
    return loss.item()


def main(argv=None):
    p = common.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("eager", "auto", "both"), default="both",
                   help="jgrad's execution mode(s) to time (jg.set_execution_mode); default both")
    p.add_argument("--tf32", action="store_true", help="TF32 matmuls in jgrad and torch (float32 precision 'high')")
    args = p.parse_args(argv)
    jdev, tdev = common.setup_device(args.device)
    if args.tf32:
        import jgrad as jg

        jg.set_float32_matmul_precision("high")
        torch = _torch()
        if torch is not None:
            torch.set_float32_matmul_precision("high")
    env = common.environment(jdev, tdev)
    common.print_header("GPT training step: jgrad vs PyTorch eager", env)
    repeat = args.repeat or (5 if args.quick else 15)
    variants, checks = build(args, tdev)
    res = common.compare(variants, repeat=repeat, batch_s=0.3)
    c = CONFIG
    title = (f"GPT step: {c['n_layer']} layers, {c['n_head']} heads, width {c['n_embd']}, context {c['block_size']}, "
             f"batch {BATCH}, vocabulary {c['vocab_size']}, AdamW, float32{' (TF32)' if args.tf32 else ''}")
    tab = common.table(title, res, baselines=("torch eager", "torch eager (1 thread)"))
    by = {r.name: r.median for r in res}
    torch_rows = [n for n in ("torch eager", "torch eager (1 thread)") if n in by]
    verdicts, ratios = [], []
    if torch_rows:
        best = min(torch_rows, key=by.get)
        for mode in ("eager", "auto"):
            name = f"jgrad {mode}"
            if name not in by:
                continue
            r = by[name] / by[best]
            ratios.append(f"{name} / {best} (the faster torch row): {r:.2f}x")
            if args.device == "gpu" and mode == "auto":
                verdicts.append(common.verdict(f"GPT step, {name} / {best}", f"{r:.2f}x", "<= 1.0x", r <= 1.0))
    print("\n### Cross-checks (first step from the same weights and batch)\n")
    for k, v in checks.items():
        print(f"- {k}: {v:.6g}")
    print("\n### Ratios\n")
    for line in ratios:
        print(f"- {line}")
    print("\n### Target (issue 18: jgrad in auto mode <= PyTorch eager, on the GPU)\n")
    if not verdicts:
        print("- not evaluated here: the goal applies to the GPU with --mode auto or both")
    for v in verdicts:
        print(f"- {v['label']}: {v['value']} (target {v['target']}) -> {'MET' if v['met'] else 'NOT met'}")
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "tables": [tab], "targets": verdicts, "checks": checks})


if __name__ == "__main__":
    main()
