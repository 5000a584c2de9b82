"""The per-op cost of stream stamping and of the stream sanitizer (issue 4).

    python -m benchmarks.stream_overhead [--quick] [--rounds R] [--repeat N] [--device cpu|gpu]
                                         [--prestreams 67d2407 | --no-prestreams] [--json out.json]

One jgrad eager op -- a 64x256 ``mul`` without and with ``requires_grad`` (tape
record) and a 64x256 @ 256x256 ``matmul`` (both ways) -- timed

- with this checkout, sanitizer off (the default: every op stamps its outputs
  with the current stream and remembers the work it issued for
  ``synchronize``/``query``/events);
- with this checkout, sanitizer on (``jg.streams.sanitizer()``, the runtime
  switch behind ``JGRAD_STREAM_SANITIZER=1``: a vector-clock check of every
  access and the user's source line of every op);
- with the last commit before streams (``67d2407``), checked out into a
  temporary ``git worktree`` (removed afterwards) and imported through
  ``PYTHONPATH`` in a subprocess;
- and, in every process, a bare call of the op's cached ``jax.jit`` kernel.

Sanitizer off/on and the bare kernel are interleaved in one process, so their
ratios are as good as the other benchmarks'. The pre-streams checkout is timed
two ways: (1) in the same process, imported beside this one as
``jgrad_prestreams`` (jgrad imports itself only relatively) and interleaved
with the other rows -- the figure to quote; (2) in its own process with
``PYTHONPATH`` pointing at the worktree, alternating with this checkout's
process ``--rounds`` times (the order flips every round); that ratio compares
two processes, so it is also given with each side divided by its own
process's bare-kernel time, which cancels load that differed between them.
Every table gives the median over rounds of each process's median; ratios are
computed per round, then their median taken.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if __package__ in (None, ""):
    # Run as a script (this is how the worker runs): load common.py by path and do NOT put the
    # repository root on sys.path, so that ``import jgrad`` finds the checkout named by PYTHONPATH.
    import importlib.util

    _spec = importlib.util.spec_from_file_location("_jgrad_bench_common", os.path.join(HERE, "common.py"))
    common = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(common)
else:
    from . import common

PRESTREAMS = "67d2407"
CASES = ("mul 64x256", "mul 64x256, requires_grad", "matmul 64x256@256x256", "matmul 64x256@256x256, requires_grad")


# ================================================================== worker (one checkout)
def worker(args):
    """Time the ops with whatever jgrad PYTHONPATH gives; print one JSON line."""
    import jgrad as jg

    jdev, _ = common.setup_device(args.device)
    streams = getattr(jg, "streams", None)
    has_san = streams is not None and hasattr(streams, "sanitizer")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256), dtype=np.float32)
    b = rng.standard_normal((64, 256), dtype=np.float32)
    w = rng.standard_normal((256, 256), dtype=np.float32) / 16
    x, xg, y, wt = jg.tensor(a), jg.tensor(a, requires_grad=True), jg.tensor(b), jg.tensor(w)
    fns = {
        CASES[0]: lambda: x * y,
        CASES[1]: lambda: xg * y,
        CASES[2]: lambda: jg.matmul(x, wt),
        CASES[3]: lambda: jg.matmul(xg, wt),
    }
    variants = []
    for case, fn in fns.items():
        variants.append(common.Variant(f"{case} | jgrad", fn))
        if has_san:
            san = streams.sanitizer()
            variants.append(common.Variant(f"{case} | jgrad, sanitizer on", fn,
                                           around=(san.__enter__, lambda s=san: s.__exit__(None, None, None))))
    if args.prestreams_path:  # the pre-streams checkout, imported beside this one under another name
        pj = _load_alias(os.path.join(args.prestreams_path, "jgrad"), "jgrad_prestreams")
        pj.set_default_device(args.device)
        px, pxg, py, pw = pj.tensor(a), pj.tensor(a, requires_grad=True), pj.tensor(b), pj.tensor(w)
        pfns = [lambda: px * py, lambda: pxg * py, lambda: pj.matmul(px, pw), lambda: pj.matmul(pxg, pw)]
        for case, fn in zip(CASES, pfns):
            variants.append(common.Variant(f"{case} | pre-streams, same process", fn))
    for case, out in ((CASES[0], xg * y), (CASES[2], jg.matmul(xg, wt))):
        kernel = common.jgrad_forward_kernel(out)
        if kernel is None:
            continue
        arrs = (x._data, y._data) if case.startswith("mul") else (x._data, wt._data)
        variants.append(common.Variant(f"{case} | bare jit kernel", lambda k=kernel, A=arrs: k(*A)))
    res = common.compare(variants, repeat=args.repeat, quiet=True)
    if has_san:
        assert not streams.sanitizer_enabled(), "the sanitizer leaked out of its batches"
    out = {"jgrad_file": jg.__file__, "has_streams": streams is not None, "has_sanitizer": has_san,
           "device": str(jdev), "results": {r.name: r.samples for r in res}}
    print("JSONRESULT " + json.dumps(out))


def _load_alias(pkg_dir, name):
    """Import the package in ``pkg_dir`` as ``name`` (works because jgrad imports itself only relatively)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(pkg_dir, "__init__.py"),
                                                  submodule_search_locations=[pkg_dir])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


# ====================================================================== driver (both)
def _run_worker(pythonpath, args, label, prestreams_path=None):
    env = dict(os.environ, PYTHONPATH=pythonpath, JGRAD_STREAM_SANITIZER="0")
    cmd = [sys.executable, os.path.join(HERE, "stream_overhead.py"), "--worker", "--device", args.device,
           "--repeat", str(args.repeat)] + (["--prestreams-path", prestreams_path] if prestreams_path else [])
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=pythonpath, capture_output=True, text=True)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("JSONRESULT ")), None)
    if p.returncode or line is None:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise RuntimeError(f"{label} worker failed (exit status {p.returncode})")
    out = json.loads(line[len("JSONRESULT "):])
    print(f"  [stream_overhead] {label}: {time.perf_counter() - t0:.0f} s, jgrad from {out['jgrad_file']}",
          file=sys.stderr, flush=True)
    return out


def _add_worktree(commit):
    path = "/tmp/jgrad-prestreams"
    if os.path.exists(path):  # someone else's (or a stale) one: use a private path instead
        path = tempfile.mkdtemp(prefix="jgrad-prestreams-")
        os.rmdir(path)
    subprocess.run(["git", "worktree", "add", "--detach", path, commit], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    return path


def _remove_worktree(path):
    r = subprocess.run(["git", "worktree", "remove", "--force", path], cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv=None):
    p = common.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=None, help="alternating worker processes per checkout "
                   "(default 3, --quick 2)")
    p.add_argument("--prestreams", default=PRESTREAMS, help=f"the pre-streams commit (default {PRESTREAMS})")
    p.add_argument("--no-prestreams", action="store_true", help="skip the pre-streams checkout")
    p.add_argument("--no-inprocess", action="store_true",
                   help="do not also import the pre-streams checkout beside this one in the same process")
    p.add_argument("--worker", action="store_true", help=argparse_suppress())
    p.add_argument("--prestreams-path", default=None, help=argparse_suppress())
    args = p.parse_args(argv)
    args.repeat = args.repeat or (5 if args.quick else 15)
    if args.worker:
        return worker(args)
    rounds = args.rounds or (2 if args.quick else 3)
    jdev, tdev = common.setup_device(args.device)
    env = common.environment(jdev, tdev)
    common.print_header("Stream stamping and sanitizer: per-op cost", env)
    print(f"- {rounds} rounds x 2 processes (this checkout, pre-streams {args.prestreams}), "
          f"{args.repeat} interleaved batches per variant in each")
    sides = {"streams": ROOT}
    wt = None
    try:
        if not args.no_prestreams:
            try:
                wt = _add_worktree(args.prestreams)
                sides["pre-streams"] = wt
            except subprocess.CalledProcessError as e:
                print(f"- pre-streams rows skipped: git worktree add {args.prestreams} failed: {e.stderr.strip()}")
        runs = {k: [] for k in sides}
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for side in order:
                runs[side].append(_run_worker(sides[side], args, f"round {r + 1}/{rounds}, {side}",
                                              wt if side == "streams" and not args.no_inprocess else None))
    finally:
        if wt:
            _remove_worktree(wt)
    return report(args, env, runs, rounds)


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def report(args, env, runs, rounds):
    def per_round(side, name):  # per-round medians (per call, seconds)
        return [_med(o["results"][name]) for o in runs.get(side, []) if name in o["results"]]

    tables, summary = [], []
    for case in CASES:
        rows = []
        kern_case = "mul 64x256" if case.startswith("mul") else "matmul 64x256@256x256"
        off = per_round("streams", f"{case} | jgrad")
        on = per_round("streams", f"{case} | jgrad, sanitizer on")
        pre = per_round("pre-streams", f"{case} | jgrad")
        pre_in = per_round("streams", f"{case} | pre-streams, same process")
        s_pre_in = [a / b for a, b in zip(off, pre_in)]
        kern = per_round("streams", f"{kern_case} | bare jit kernel")
        kern_pre = per_round("pre-streams", f"{kern_case} | bare jit kernel")
        on_off = [a / b for a, b in zip(on, off)]
        s_pre = [a / b for a, b in zip(off, pre)]
        s_pre_norm = [(a / ka) / (b / kb) for a, b, ka, kb in zip(off, pre, kern, kern_pre)]
        summary.append({"case": case, "pre_s": _med(pre), "off_s": _med(off), "on_s": _med(on),
                        "kernel_s": _med(kern), "kernel_pre_s": _med(kern_pre),
                        "on_over_off": _med(on_off), "on_over_off_rounds": on_off,
                        "streams_over_pre": _med(s_pre), "streams_over_pre_rounds": s_pre,
                        "streams_over_pre_kernel_normalised": _med(s_pre_norm),
                        "pre_inproc_s": _med(pre_in), "streams_over_pre_inproc": _med(s_pre_in),
                        "streams_over_pre_inproc_rounds": s_pre_in})
        note_pre = f"commit {args.prestreams}, separate process"
        for name, side, samples_name, note in (
                ("pre-streams, own process", "pre-streams", f"{case} | jgrad", note_pre),
                ("pre-streams, same process", "streams", f"{case} | pre-streams, same process",
                 f"commit {args.prestreams} imported as jgrad_prestreams, interleaved with the rows below"),
                ("streams, sanitizer off", "streams", f"{case} | jgrad", "this checkout (default)"),
                ("streams, sanitizer on", "streams", f"{case} | jgrad, sanitizer on",
                 "jg.streams.sanitizer()"),
                ("bare jit kernel", "streams", f"{kern_case} | bare jit kernel",
                 "the op's cached jax.jit kernel")):
            samples = [s for o in runs.get(side, []) for s in o["results"].get(samples_name, [])]
            if samples:
                rows.append(common.Result(name, samples, note))
        tables.append((case, rows))
    print(f"\n### Per-op cost, median of {rounds} per-process medians\n")
    print("| op | pre-streams (own process) | pre-streams (same process) | streams, sanitizer off | "
          "streams, sanitizer on | bare jit kernel | sanitizer on / off | streams / pre-streams, same process | "
          "streams / pre-streams, own processes | same, each / its bare kernel |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    f, r = common.fmt_time, (lambda v: f"{v:.2f}" if v == v else "n/a")
    for s in summary:
        spread = lambda xs: f" ({min(xs):.2f}-{max(xs):.2f})" if len(xs) > 1 else ""  # noqa: E731
        print(f"| {s['case']} | {f(s['pre_s'])} | {f(s['pre_inproc_s'])} | {f(s['off_s'])} | {f(s['on_s'])} | "
              f"{f(s['kernel_s'])} | **{r(s['on_over_off'])}**{spread(s['on_over_off_rounds'])} | "
              f"**{r(s['streams_over_pre_inproc'])}**{spread(s['streams_over_pre_inproc_rounds'])} | "
              f"{r(s['streams_over_pre'])}{spread(s['streams_over_pre_rounds'])} | "
              f"{r(s['streams_over_pre_kernel_normalised'])} |")
    print("\n(ratios: median over rounds of the per-round ratio; in brackets the range over rounds)")
    tabs = [common.table(f"one op: {case} (batches of all rounds pooled)", rows,
                         baselines=("bare jit kernel", "pre-streams, same process")) for case, rows in tables]
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "tables": tabs, "summary": summary,
                                 "args": {"rounds": rounds, "repeat": args.repeat, "prestreams": args.prestreams}})
    return summary


if __name__ == "__main__":
    main()
