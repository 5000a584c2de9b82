"""Timing helpers shared by the jgrad benchmarks.

Every benchmark prints a header (date, machine, device, versions) and one
table per section with absolute times and ratios against named baselines.

Method (see benchmarks/README.md): each variant is warmed up (compilation excluded), then
timed in batches of ``number`` calls; the outputs of a batch are waited on
(``block_until_ready`` for JAX/jgrad, ``torch.cuda.synchronize`` for CUDA) before
the clock stops, and the per-call time of a batch is ``elapsed / number``.
Variants are *interleaved* batch by batch (round-robin, order rotated every
round), so that load from other processes on a shared machine lands on all of
them alike; the reported figure is the median over ``repeat`` batches, with the
inter-quartile spread beside it. Ratios compare medians measured in the same run.

Nothing here asserts: benchmarks never fail a build.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

# PyTorch's OpenMP workers busy-wait between parallel regions by default; in a process
# that also runs JAX's thread pools on a small shared machine this makes torch eager
# 10-80x slower than alone (measured on the 2-core box: 4 ms -> 70-360 ms per MLP step).
# Passive waiting restores torch's standalone speed. Must be set before torch is imported;
# an explicit OMP_WAIT_POLICY in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# --------------------------------------------------------------------------- CLI


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="few repeats (a smoke run; numbers are rougher)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="where jgrad, jax and (if it has CUDA) torch run (default: cpu)")
    p.add_argument("--repeat", type=int, default=None, help="timed batches per variant (overrides the default)")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results as JSON to PATH")
    return p


def setup_device(kind: str):
    """Point jax, jgrad and torch at ``kind`` ('cpu' or 'gpu'); return (jax_device, torch_device_str)."""
    import jax

    try:
        devs = jax.devices(kind)
    except RuntimeError as e:  # no such backend
        raise SystemExit(f"--device {kind}: JAX sees no {kind} device ({e})")
    jdev = devs[0]
    jax.config.update("jax_default_device", jdev)
    import jgrad as jg

    jg.set_default_device(kind)
    tdev = "cpu"
    if kind == "gpu":
        try:
            import torch

            if torch.cuda.is_available():
                tdev = "cuda"
        except ImportError:
            pass
    return jdev, tdev


# ----------------------------------------------------------------------- syncing


def block(obj) -> None:
    """Wait until every array in ``obj`` (jgrad tensors, jax arrays, nested lists/tuples/dicts) is computed."""
    import jax

    leaves = []
    _collect(obj, leaves)
    if leaves:
        jax.block_until_ready(leaves)


def _collect(obj, out):
    if obj is None:
        return
    if isinstance(obj, (list, tuple)):
        for o in obj:
            _collect(o, out)
        return
    if isinstance(obj, dict):
        for o in obj.values():
            _collect(o, out)
        return
    data = getattr(obj, "_data", None)  # a jgrad Tensor: its jax.Array
    if data is not None and hasattr(data, "block_until_ready"):
        out.append(data)
        return
    if data is not None and hasattr(data, "packed"):  # a graph's output: its value, or the packed arrays
        if data._val is None and getattr(data.owner, "pending", False):
            data.value  # a pending tiered segment ("auto" mode): run it (a barrier)
        if data._val is not None:
            out.append(data._val)
        elif data.packed is not None and data.packed.flats is not None:
            out.extend(data.packed.flats)
        return
    if hasattr(obj, "block_until_ready"):
        out.append(obj)


def torch_threads(n):
    """An ``around`` pair that runs a batch with ``torch.set_num_threads(n)``."""
    import torch

    saved = []

    def enter():
        saved.append(torch.get_num_threads())
        torch.set_num_threads(n)

    def leave():
        torch.set_num_threads(saved.pop())

    return enter, leave


def torch_sync(device: str):
    if device == "cuda":
        import torch

        return torch.cuda.synchronize
    return None


# ------------------------------------------------------------- jgrad internals
# The benchmarks reach the kernels jgrad caches through the node an op records
# (``out.grad_fn.op`` / ``.key``), not through op names, so that renames inside
# jgrad/ops do not break them; when even that is gone the "bare kernel" rows
# are skipped with a note instead of failing.


def jgrad_forward_kernel(out):
    """The cached ``jax.jit`` forward kernel that produced ``out`` (a tensor with a grad_fn), or None."""
    node = getattr(out, "grad_fn", None)
    op, key = getattr(node, "op", None), getattr(node, "key", None)
    kernels = getattr(op, "_kernels", None)
    if not kernels:
        return None
    return kernels.get(key)


def jgrad_backward_kernel(node, mask=None):
    """A cached backward kernel of ``node``'s op (for ``mask`` when given), or None."""
    op = getattr(node, "op", None)
    kernels = getattr(op, "_bwd_kernels", None)
    if not kernels:
        return None
    for k, fn in kernels.items():
        if mask is None or (isinstance(k, tuple) and len(k) > 1 and k[1] == mask):
            return fn
    return None


# ------------------------------------------------------------------------ timing


def until_hot(fn, calls=3, limit_s=180.0):
    """Call ``fn`` (jgrad code in "auto" execution mode) until it runs compiled and compiles nothing new.

    Compiles run in a background thread; a structure's variants (inputs that come back packed from the
    previous step on a GPU, inputs that can be donated) compile one after the other, so this waits until
    two rounds in a row compiled nothing and the last one ran compiled. Returns the seconds it took.
    """
    import jgrad as jg
    from jgrad.runtime import _segment

    start = time.perf_counter()
    quiet = 0
    while time.perf_counter() - start < limit_s and quiet < 2:
        before = jg.graphs.segment_cache_info()
        for _ in range(calls):
            fn()
        _segment.wait_compiles()
        after = jg.graphs.segment_cache_info()
        hot = after.compiles == before.compiles and after.compiled_runs - before.compiled_runs == calls
        quiet = quiet + 1 if hot else 0
    return time.perf_counter() - start


class Result:
    """Per-call times (seconds) of one variant, one entry per timed batch."""

    def __init__(self, name, samples, note=""):
        self.name = name
        self.samples = list(samples)
        self.note = note

    @property
    def median(self):
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def iqr(self):
        if len(self.samples) < 4:
            return (min(self.samples, default=float("nan")), max(self.samples, default=float("nan")))
        q = statistics.quantiles(self.samples, n=4)
        return (q[0], q[2])

    def as_dict(self):
        lo, hi = self.iqr
        return {"name": self.name, "median_s": self.median, "q1_s": lo, "q3_s": hi, "n": len(self.samples),
                "note": self.note, "samples_s": self.samples}


class Variant:
    """A function to time.

    ``fn()`` runs one call and returns what must be waited on (or None);
    ``sync`` is called after a batch (default: ``block`` on the last output);
    ``setup()`` (optional, untimed) runs before *each* call and its return value
    is passed to ``fn`` -- for timing only part of a step (e.g. backward only);
    ``around=(enter, exit)`` (optional, untimed) wraps each batch (e.g. a thread setting).
    """

    def __init__(self, name, fn, *, sync=None, setup=None, note="", number=None, around=None):
        self.name, self.fn, self.sync, self.setup, self.note, self.number = name, fn, sync, setup, note, number
        self.around = around  # (enter, exit) called, untimed, before and after each batch


def _run_batch(v: Variant, number: int) -> float:
    if v.around is None:
        return _timed_batch(v, number)
    enter, leave = v.around
    enter()
    try:
        return _timed_batch(v, number)
    finally:
        leave()


def _timed_batch(v: Variant, number: int) -> float:
    fn, setup, sync = v.fn, v.setup, v.sync
    if setup is None:
        t0 = time.perf_counter()
        out = None
        for _ in range(number):
            out = fn()
        if sync is not None:
            sync()
        block(out)
        return (time.perf_counter() - t0) / number
    total = 0.0
    for _ in range(number):
        arg = setup()
        block(arg)
        t0 = time.perf_counter()
        out = fn(arg)
        if sync is not None:
            sync()
        block(out)
        total += time.perf_counter() - t0
        del arg, out
    return total / number


def calibrate(v: Variant, target_s: float, max_number: int = 100000) -> int:
    """The number of calls per batch so that one batch takes about ``target_s``."""
    if v.number is not None:
        return v.number
    n = 1
    while True:
        t = _run_batch(v, n) * n
        if t >= target_s / 4 or n >= max_number:
            est = max(1, int(round(n * target_s / max(t, 1e-9))))
            return min(est, max_number)
        n *= 4


def compare(variants, *, repeat=15, warmup=3, batch_s=0.05, quiet=False):
    """Time ``variants`` interleaved; return a list of Result (same order)."""
    variants = [v for v in variants if v is not None]
    numbers = []
    for v in variants:
        if not quiet:  # progress, one line per variant (stderr: the tables go to stdout)
            print(f"  . {v.name}", file=sys.stderr, flush=True)
        for _ in range(warmup):
            _run_batch(v, 1)  # compile + warm caches
        numbers.append(calibrate(v, batch_s))
    samples = [[] for _ in variants]
    order = list(range(len(variants)))
    # Move what exists now out of the collector's sight (gc.freeze), so that a full
    # collection of JAX's many long-lived objects does not land inside one variant's
    # batch; young generations are collected (cheaply) before every batch.
    gc.collect()
    gc.freeze()
    try:
        for r in range(repeat):
            k = r % len(order)
            for i in order[k:] + order[:k]:
                gc.collect(1)
                samples[i].append(_run_batch(variants[i], numbers[i]))
    finally:
        gc.unfreeze()
    if not quiet:
        print(f"  (timed {repeat} interleaved batches per variant; calls/batch: "
              + ", ".join(f"{v.name}={n}" for v, n in zip(variants, numbers)) + ")", file=sys.stderr)
    return [Result(v.name, s, v.note) for v, s in zip(variants, samples)]


# ------------------------------------------------------------------------ output


def fmt_time(s: float) -> str:
    if s != s:  # nan
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.3f} s"


def table(title, results, baselines=(), *, per=None, per_label=None):
    """Print a Markdown table: name, median, IQR, and ``time / baseline`` per baseline name.

    ``per``: divide every time by this (e.g. nodes per backward) and show it as ``per_label``.
    Returns the rows as dicts (for --json).
    """
    by = {r.name: r for r in results}
    base = [b for b in baselines if b in by]
    head = ["variant", "median", "IQR"]
    if per:
        head.append(per_label or f"per 1/{per}")
    head += [f"x vs {b}" for b in base]
    head.append("note")
    rows, out = [], []
    for r in results:
        lo, hi = r.iqr
        row = [r.name, fmt_time(r.median), f"{fmt_time(lo)} - {fmt_time(hi)}"]
        d = r.as_dict()
        if per:
            row.append(fmt_time(r.median / per))
            d["per_s"] = r.median / per
        for b in base:
            ratio = r.median / by[b].median
            row.append(f"{ratio:.2f}")
            d[f"ratio_vs_{b}"] = ratio
        row.append(r.note)
        rows.append(row)
        out.append(d)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print(f"\n### {title}\n")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(row, widths)) + " |")
    sys.stdout.flush()
    return {"title": title, "rows": out}


def verdict(label, value, target, ok):
    return {"label": label, "value": value, "target": target, "met": bool(ok)}


# ------------------------------------------------------------------------ header


def _git(*args):
    try:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - informational only
        return ""


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def environment(jax_device=None, torch_device=None) -> dict:
    import jax
    import numpy as np

    try:
        import jaxlib

        jaxlib_v = jaxlib.__version__
    except Exception:  # noqa: BLE001
        jaxlib_v = "?"
    try:
        import torch

        torch_v = torch.__version__
        torch_threads = torch.get_num_threads()
    except ImportError:
        torch_v, torch_threads = "not installed", None
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host_cpu": _cpu_model(),
        "nproc": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib_v,
        "numpy": np.__version__,
        "torch": torch_v,
        "torch_threads": torch_threads,
        "jax_device": str(jax_device if jax_device is not None else jax.devices()[0]),
        "torch_device": torch_device,
        # JGRAD_BENCH_COMMIT: the commit a copied tree was made from, where its .git is not that commit's
        "jgrad_commit": os.environ.get("JGRAD_BENCH_COMMIT") or (
            _git("rev-parse", "--short", "HEAD") + (" + uncommitted changes in jgrad/"
                                                    if _git("diff", "--name-only", "HEAD", "--", "jgrad") else "")),
        "loadavg_at_start": load,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "argv": " ".join(sys.argv),
    }
    return env


def print_header(title, env):
    print(f"## {title}\n")
    print(f"- date: {env['date']}")
    print(f"- machine: {env['host_cpu']}, nproc={env['nproc']}, {env['platform']}")
    print(f"- devices: jax/jgrad on {env['jax_device']}, torch on {env['torch_device']}"
          f" (torch threads: {env['torch_threads']}, OMP_WAIT_POLICY={env['omp_wait_policy']})")
    print(f"- versions: python {env['python']}, jax {env['jax']}, jaxlib {env['jaxlib']}, numpy {env['numpy']}, "
          f"torch {env['torch']}, jgrad {env['jgrad_commit']}")
    print(f"- load average at start: {env['loadavg_at_start']}")
    print(f"- command: python {env['argv']}")
    sys.stdout.flush()


def print_footer(env):
    """The load average at the end (compare with the start: a busy machine inflates every figure)."""
    try:
        env["loadavg_at_end"] = os.getloadavg()
    except OSError:
        env["loadavg_at_end"] = None
    print(f"\n- load average at end: {env['loadavg_at_end']} (at start: {env['loadavg_at_start']})")


def dump_json(path, payload):
    if not path:
        return
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)
    print(f"\n(results written to {path})")
