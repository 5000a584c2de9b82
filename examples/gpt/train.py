"""Train a character-level GPT on a small text, then sample from it: a PyTorch program run by jgrad.

    python examples/gpt/train.py                      # 300 steps on coriolanus.txt, about a minute on 2 CPU cores
    python examples/gpt/train.py --steps 2000 --device gpu --mode auto

The model is ``model.py``; this file is the data pipeline (NumPy on the host, as most PyTorch
programs have it), AdamW with a warmup + cosine learning-rate schedule, gradient clipping, periodic
evaluation, a progress bar, a checkpoint (``torch.save``), a loss curve (PNG, when matplotlib is
installed) and a sample of generated text. Apart from ``--mode`` (jgrad's execution mode), every
call is PyTorch's.
"""
import argparse
import os
import sys
import time
from dataclasses import asdict

import numpy as np

import jgrad as torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, GPTConfig  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class CharTokenizer:
    """Characters to integer ids and back (the vocabulary is the text's set of characters)."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, s):
        return [self.stoi[c] for c in s]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


def load_data(path, val_fraction=0.1):
    """(tokenizer, train ids, validation ids) of a text file; ids are int64 NumPy arrays."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    tok = CharTokenizer(text)
    data = np.array(tok.encode(text), dtype=np.int64)
    n = int(len(data) * (1 - val_fraction))
    return tok, data[:n], data[n:]


def get_batch(data, block_size, batch_size, rng, device):
    """A random batch of ``batch_size`` windows of ``block_size`` tokens and their next tokens."""
    ix = rng.integers(0, len(data) - block_size - 1, size=batch_size)
    x = np.stack([data[i:i + block_size] for i in ix])
    y = np.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


@torch.no_grad()
def estimate_loss(model, splits, block_size, batch_size, iters, rng, device):
    """Mean loss over ``iters`` batches of each split (model in eval mode meanwhile)."""
    model.eval()
    out = {}
    for name, data in splits.items():
        losses = torch.stack([model(*get_batch(data, block_size, batch_size, rng, device))[1] for _ in range(iters)])
        out[name] = losses.mean().item()
    model.train()
    return out


class ProgressBar:
    """A one-line progress bar on stderr: ``step 120/300 [=======>      ] loss 2.31, 14.2 it/s``."""

    def __init__(self, total, width=30, stream=sys.stderr, min_interval=0.2):
        self.total, self.width, self.stream, self.min_interval = total, width, stream, min_interval
        self.start = self.last = time.perf_counter()
        self.text = ""

    def update(self, step, **info):
        now = time.perf_counter()
        if step < self.total and now - self.last < self.min_interval:
            return
        self.last = now
        done = int(self.width * step / self.total)
        bar = "=" * done + (">" if done < self.width else "") + " " * (self.width - done - 1)
        rate = step / max(now - self.start, 1e-9)
        extra = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in info.items())
        self.text = f"step {step}/{self.total} [{bar[:self.width]}] {extra}{', ' if extra else ''}{rate:.1f} it/s"
        self.stream.write("\r" + self.text)
        self.stream.flush()

    def close(self):
        self.stream.write("\n")
        self.stream.flush()


def make_scheduler(optimizer, warmup, steps):
    """Linear warmup for ``warmup`` steps, then cosine annealing to a tenth of the learning rate."""
    eta_min = optimizer.param_groups[0]["lr"] / 10
    warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=max(warmup, 1))
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps - warmup, 1), eta_min=eta_min)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cosine], milestones=[max(warmup, 1)])


def train_step(model, optimizer, scheduler, x, y, grad_clip):
    """One optimisation step; returns the loss (a 0-d tensor, not read on the host)."""
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()
    return loss


def train(args, log=print):
    """Train as ``args`` says; returns a dict: model, tokenizer, per-step losses, evaluations, seconds, sample."""
    if getattr(args, "mode", None) and hasattr(torch, "set_execution_mode"):
        torch.set_execution_mode(args.mode)  # jgrad's tiered execution ('auto') or op by op ('eager')
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    device = torch.device(args.device)
    tok, train_data, val_data = load_data(args.data)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                       n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout)
    model = GPT(config).to(device)
    log(f"{model.num_params() / 1e3:.0f}k parameters, vocabulary of {tok.vocab_size} characters, "
        f"{len(train_data)} training tokens")
    optimizer = model.configure_optimizers(args.weight_decay, args.lr, (0.9, 0.95))
    scheduler = make_scheduler(optimizer, args.warmup, args.steps)
    losses, pending, evals = [], [], []
    bar = ProgressBar(args.steps) if args.progress else None
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        x, y = get_batch(train_data, args.block_size, args.batch_size, rng, device)
        pending.append(train_step(model, optimizer, scheduler, x, y, args.grad_clip).detach())
        if step % args.log_interval == 0 or step == args.steps:  # read the losses in one host sync
            losses += torch.stack(pending).tolist()
            pending = []
            if bar is not None:
                bar.update(step, loss=losses[-1], lr=scheduler.get_last_lr()[0])
        if args.eval_interval and (step % args.eval_interval == 0 or step == args.steps):
            ev = estimate_loss(model, {"train": train_data, "val": val_data}, args.block_size, args.batch_size,
                               args.eval_iters, rng, device)
            evals.append((step, ev["train"], ev["val"]))
            if bar is not None:
                bar.close()
            log(f"step {step}: train loss {ev['train']:.4f}, val loss {ev['val']:.4f}")
    seconds = time.perf_counter() - start
    context = torch.tensor([tok.encode("\n")], dtype=torch.long, device=device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    model.eval()
    sample = tok.decode(model.generate(context, args.sample_tokens, temperature=0.8, top_k=20,
                                       generator=gen)[0].tolist())
    return {"model": model, "config": config, "tokenizer": tok, "optimizer": optimizer, "losses": losses,
            "evals": evals, "seconds": seconds, "sample": sample}


def plot_losses(losses, evals, path):
    """Save the loss curve as a PNG (needs matplotlib); returns the path, or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses, lw=0.8, alpha=0.6, label="training batch")
    if evals:
        steps, tr, va = zip(*evals)
        ax.plot(steps, tr, "o-", label="train (eval)")
        ax.plot(steps, va, "s-", label="validation (eval)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("character-level GPT on jgrad")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.path.join(HERE, "coriolanus.txt"), help="a UTF-8 text file")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=64, help="context length")
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--device", default="cpu", help="cpu, gpu or cuda (an alias of gpu)")
    p.add_argument("--mode", choices=("eager", "auto"), default="eager", help="jgrad's execution mode")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--eval-interval", type=int, default=100)
    p.add_argument("--eval-iters", type=int, default=10)
    p.add_argument("--sample-tokens", type=int, default=300)
    p.add_argument("--out", default=os.path.join(HERE, "out"), help="where the checkpoint and loss curve go")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    result = train(args)
    os.makedirs(args.out, exist_ok=True)
    ckpt = os.path.join(args.out, "ckpt.pt")
    torch.save({"model": result["model"].state_dict(), "optimizer": result["optimizer"].state_dict(),
                "config": asdict(result["config"]), "vocab": result["tokenizer"].chars, "steps": args.steps}, ckpt)
    png = plot_losses(result["losses"], result["evals"], os.path.join(args.out, "loss.png"))
    print(f"{args.steps} steps in {result['seconds']:.1f} s ({args.steps / result['seconds']:.1f} it/s); "
          f"checkpoint: {ckpt}" + (f"; loss curve: {png}" if png else " (no matplotlib: no loss curve)"))
    print("---- sample ----")
    print(result["sample"])
    return result


if __name__ == "__main__":
    main()
