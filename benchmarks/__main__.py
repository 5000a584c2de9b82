"""Run every benchmark, each in its own process: ``python -m benchmarks [--quick] [--device cpu|gpu]``."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser(description="Run all jgrad benchmarks (each in a fresh process).")
    p.add_argument("--quick", action="store_true", help="few repeats: a smoke run")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--profile", action="store_true", help="also run benchmarks.profile_overhead")
    p.add_argument("--only", choices=("eager_overhead", "hessian", "profile_overhead"), action="append",
                   help="run only these (repeatable)")
    args = p.parse_args(argv)
    common = ["--device", args.device] + (["--quick"] if args.quick else []) + (
        ["--repeat", str(args.repeat)] if args.repeat else [])
    runs = [("eager_overhead", []), ("hessian", []), ("hessian", ["--act", "tanh"]), ("profile_overhead", [])]
    if args.only:
        runs = [r for r in runs if r[0] in args.only]
    elif not args.profile:
        runs = runs[:-1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    failures = []
    for mod, extra in runs:
        cmd = [sys.executable, "-m", f"benchmarks.{mod}"] + common + extra
        print(f"\n\n# $ {' '.join(cmd[1:])}\n", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=root)
        print(f"\n(took {time.perf_counter() - t0:.0f} s, exit status {rc})", flush=True)
        if rc:
            failures.append(mod)
    if failures:  # reported, not raised: benchmarks never fail a build
        print(f"\nbenchmarks that did not finish: {', '.join(failures)}")


if __name__ == "__main__":
    main()
