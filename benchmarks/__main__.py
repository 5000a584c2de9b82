"""Run every benchmark and write the report: ``python -m benchmarks [--quick] [--device cpu|gpu]``.

The suite: ``eager_overhead``, ``stream_overhead``, ``hessian`` (ReLU and tanh), ``capture``, ``views``,
``tiered``, ``gpt_step``, ``gpt2_small`` (its ``--tiny`` size on the CPU) and ``programs``, one file per workload;
``scaling`` and ``profile_overhead`` run when asked for (``--only``,
``--profile``); on a GPU, ``diagnostics/gpu_smoke.py`` first. One-off diagnostics are not run here: see
``benchmarks/diagnostics/README.md``.

Each benchmark runs in its own process (``python -m benchmarks.<name> ... --json``); its
tables are echoed to stdout as they come, and one progress line per benchmark and per
timed variant goes to stderr. Then the report is written:

- ``--device cpu`` (default): the generated block of ``benchmarks/RESULTS.md`` (between the
  ``BEGIN GENERATED`` / ``END GENERATED`` markers; the hand-written notes around it are kept)
  and ``benchmarks/plots/cpu-*.png``;
- ``--device gpu``: ``benchmarks/results/gpu-<model>-<date>.md`` (``-run2``, ... for later runs that day) and
  ``benchmarks/plots/gpu-<model>-<date>-*.png``; RESULTS.md's GPU index then links it.

Every run regenerates the GPU index of RESULTS.md from ``benchmarks/results/gpu-*.md``.
Tables give each median as a ratio against the ``jax.jit`` row of its table (the bare
call of jgrad's cached ``jax.jit`` kernel for single ops) and against PyTorch when installed.
Nothing here asserts; a benchmark that fails is reported in the output and the report.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from . import common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS_MD = os.path.join(HERE, "RESULTS.md")
RESULTS_DIR = os.path.join(HERE, "results")
PLOTS_DIR = os.path.join(HERE, "plots")
BEGIN, END = "<!-- BEGIN GENERATED: {} -->", "<!-- END GENERATED: {} -->"
NAMES = ("gpu_smoke", "eager_overhead", "stream_overhead", "hessian", "capture", "views", "tiered", "gpt_step", "gpt2_small",
         "programs",
         "scaling", "profile_overhead")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ plan
def plan(args):
    """[(key, label, argv)] for this run; argv runs with the repository root as cwd."""
    py = sys.executable
    common = ["--device", args.device] + (["--quick"] if args.quick else []) + (
        ["--repeat", str(args.repeat)] if args.repeat else [])
    runs = []
    if args.device == "gpu":
        runs.append(("gpu_smoke", "gpu_smoke", [py, os.path.join(HERE, "diagnostics", "gpu_smoke.py")], False))
    runs += [
        ("eager_overhead", "eager_overhead", [py, "-m", "benchmarks.eager_overhead"] + common, True),
        ("stream_overhead", "stream_overhead", [py, "-m", "benchmarks.stream_overhead"] + common, True),
        ("hessian", "hessian (ReLU)", [py, "-m", "benchmarks.hessian"] + common, True),
        ("hessian", "hessian (tanh)", [py, "-m", "benchmarks.hessian", "--act", "tanh"] + common, True),
    ]
    if os.path.exists(os.path.join(HERE, "capture.py")):  # the slot for the capture benchmark
        if _has_graphs():
            runs.append(("capture", "capture", [py, "-m", "benchmarks.capture"] + common, True))
        else:
            log("note: benchmarks/capture.py exists but jgrad.graphs does not: capture benchmark skipped")
    runs.append(("views", "views", [py, "-m", "benchmarks.views"] + common, True))
    runs.append(("tiered", "tiered", [py, "-m", "benchmarks.tiered"] + common, True))
    runs.append(("gpt_step", "gpt_step", [py, "-m", "benchmarks.gpt_step"] + common, True))
    runs.append(("gpt2_small", "gpt2_small", [py, "-m", "benchmarks.gpt2_small"] + common
                 + (["--tiny"] if args.device == "cpu" else []), True))  # the real size is for a GPU
    runs.append(("programs", "programs", [py, "-m", "benchmarks.programs"] + common, True))
    if args.only and "scaling" in args.only:
        runs.append(("scaling", "scaling", [py, "-m", "benchmarks.scaling"] + common, True))
    if args.profile or (args.only and "profile_overhead" in args.only):
        runs.append(("profile_overhead", "profile_overhead", [py, "-m", "benchmarks.profile_overhead"] + common, True))
    if args.only:
        runs = [r for r in runs if r[0] in args.only]
    return runs


def _has_graphs():
    try:
        return importlib.util.find_spec("jgrad.graphs") is not None
    except Exception:  # noqa: BLE001 - jgrad itself failing to import shows up in every benchmark
        return False


def gpu_model():
    """('h100', 'NVIDIA H100 80GB HBM3') for the first GPU JAX sees, or None."""
    try:
        import jax

        devs = jax.devices("gpu")
    except Exception:  # noqa: BLE001 - no CUDA/ROCm backend
        return None
    if not devs:
        return None
    kind = getattr(devs[0], "device_kind", "") or "gpu"
    words = [w for w in re.split(r"[^a-z0-9]+", kind.lower()) if w and w not in ("nvidia", "amd", "tesla")]
    slug = next((w for w in words if re.fullmatch(r"[a-z]+\d+[a-z]*", w)), "-".join(words[:3]) or "gpu")
    return slug, kind


# ------------------------------------------------------------------------------- run
def run_all(args, runs, workdir):
    done = []
    for i, (key, label, argv, has_json) in enumerate(runs, 1):
        js = os.path.join(workdir, f"{i:02d}-{key}.json")
        logf = os.path.join(workdir, f"{i:02d}-{key}.txt")
        cmd = argv + (["--json", js] if has_json else [])
        shown = " ".join(["python"] + [os.path.relpath(a, ROOT) if a.startswith(HERE) else a for a in cmd[1:]])
        log(f"[{i}/{len(runs)}] {label}: {shown}")
        print(f"\n\n# $ {shown}\n", flush=True)
        t0 = time.perf_counter()
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(logf, "w") as f:
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, bufsize=1)
            for line in p.stdout:
                sys.stdout.write(line)
                f.write(line)
            rc = p.wait()
        took = time.perf_counter() - t0
        data = None
        if has_json and os.path.exists(js):
            with open(js) as f:
                data = json.load(f)
        with open(logf) as f:
            text = f.read()
        status = "ok" if rc == 0 else f"FAILED (exit status {rc})"
        log(f"[{i}/{len(runs)}] {label}: {status}, {took:.0f} s")
        done.append({"key": key, "label": label, "cmd": shown, "rc": rc, "seconds": took, "data": data,
                     "text": text})
    return done


# ---------------------------------------------------------------------------- report
def _fmt(s):
    return "n/a" if s is None else common.fmt_time(s)


def jit_row(rows):
    names = [r["name"] for r in rows]
    for n in names:
        if n.startswith("jax.jit(") and "whole step" not in n:
            return n
    for n in names:
        if n.startswith("bare jit kernel"):
            return n
    return None


def torch_row(rows):
    return next((r["name"] for r in rows if r["name"].startswith("torch")), None)


def md_table(tab):
    rows = tab["rows"]
    by = {r["name"]: r["median_s"] for r in rows}
    jit, tor = jit_row(rows), torch_row(rows)
    head = ["variant", "median", "IQR"] + ([f"x vs {jit}"] if jit else []) + ([f"x vs {tor}"] if tor else [])
    if any("per_s" in r for r in rows):
        head.insert(3, "per node")
    head.append("note")
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [r["name"], _fmt(r["median_s"]), f"{_fmt(r.get('q1_s'))} - {_fmt(r.get('q3_s'))}"]
        if "per node" in head:
            cells.append(_fmt(r.get("per_s")))
        for b in (jit, tor):
            if b:
                cells.append(f"{r['median_s'] / by[b]:.2f}" if by.get(b) else "n/a")
        cells.append(r.get("note", "") or "")
        out.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(out), jit


def plot_table(tab, path):
    """Horizontal bars: each row's median over the table's jax.jit row (log scale). False when no plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = tab["rows"]
    base = jit_row(rows) or rows[0]["name"]
    by = {r["name"]: r["median_s"] for r in rows}
    if not by.get(base):
        return False
    names = [r["name"] for r in rows][::-1]
    ratios = [by[n] / by[base] for n in names]

    def colour(n):  # torch orange, jax (jit, eager, bare kernel) green, jgrad blue
        return "#ff7f0e" if n.startswith("torch") else "#2ca02c" if any(k in n for k in ("jax", "jit", "jnp")) \
            else "#1f77b4"

    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    ax.barh(range(len(names)), ratios, color=[colour(n) for n in names])
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    for i, r in enumerate(ratios):
        ax.text(r, i, f" {r:.2f}x", va="center", fontsize=7)
    ax.set_xlabel(f"median time / median of '{base}' (log scale; lower is faster)")
    title = tab["title"]
    ax.set_title(title if len(title) < 90 else title[:87] + "...", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def render(args, done, plot_prefix, md_dir, title, plots_dir=PLOTS_DIR):
    """The Markdown of one run; writes its plots as ``plots/<plot_prefix>-*.png``."""
    os.makedirs(plots_dir, exist_ok=True)
    for old in glob.glob(os.path.join(plots_dir, f"{plot_prefix}-*.png")):
        os.remove(old)
    env = next((d["data"]["env"] for d in done if d["data"]), {})
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmd = "PYTHONPATH=$PWD python -m benchmarks " + " ".join(args.argv)
    L = [f"## {title}", "",
         f"Generated by `{cmd.strip()}` on {now}; regenerated by every such run (do not edit by hand).", "",
         f"- machine: {env.get('host_cpu', '?')}, nproc={env.get('nproc', '?')}, {env.get('platform', '?')}",
         f"- devices: jax/jgrad on {env.get('jax_device', '?')}, torch on {env.get('torch_device', '?')} "
         f"(torch threads: {env.get('torch_threads')}, OMP_WAIT_POLICY={env.get('omp_wait_policy')})",
         f"- versions: python {env.get('python')}, jax {env.get('jax')}, jaxlib {env.get('jaxlib')}, "
         f"numpy {env.get('numpy')}, torch {env.get('torch')}; jgrad commit {env.get('jgrad_commit')}",
         f"- mode: {'--quick (few batches: a smoke run, not a measurement)' if args.quick else 'full repeats'}; "
         f"each figure is a median over interleaved batches, every ratio compares medians of the same run",
         "- load average (1, 5, 15 min) at start / end of each benchmark: " + "; ".join(
             f"{d['label']} {_load(d, 'loadavg_at_start')} / {_load(d, 'loadavg_at_end')}" for d in done if d["data"]),
         ""]
    targets = [(d["label"], t) for d in done if d["data"] for t in d["data"].get("targets", [])]
    if targets:
        L += ["### Targets", "", "| benchmark | target | value | goal | met? |", "|---|---|---|---|---|"]
        L += [f"| {lab} | {t['label']} | {t['value']} | {t['target']} | {'yes' if t['met'] else '**no**'} |"
              for lab, t in targets]
        L.append("")
    failed = [d for d in done if d["rc"]]
    if failed:
        L += ["### Did not finish", ""] + [f"- {d['label']}: exit status {d['rc']} (`{d['cmd']}`); last output:\n\n"
                                          f"```\n{d['text'][-1500:]}\n```" for d in failed] + [""]
    nplot = 0
    for d in done:
        L += [f"### {d['label']}", "", f"`{d['cmd']}` ({d['seconds']:.0f} s)", ""]
        if d["key"] == "gpu_smoke" or not d["data"]:
            if d["rc"] == 0:
                L += ["```", d["text"].strip()[-4000:], "```", ""]
            continue
        data = d["data"]
        if d["key"] == "stream_overhead":
            L += _stream_summary(data)
        for k, tab in enumerate(data.get("tables", []), 1):
            if not tab.get("rows"):
                continue
            text, jit = md_table(tab)
            L += [f"#### {tab['title']}", "", text, ""]
            name = f"{plot_prefix}-{re.sub(r'[^a-z0-9]+', '_', d['label'].lower()).strip('_')}-{k}.png"
            if plot_table(tab, os.path.join(plots_dir, name)):
                nplot += 1
                args.plots.append(os.path.join(plots_dir, name))
                rel = os.path.relpath(os.path.join(plots_dir, name), md_dir)
                L += [f"![{tab['title']}]({rel})", ""]
        if data.get("checks"):
            L += ["Cross-checks: " + "; ".join(f"{k} = {v:.1e}" if isinstance(v, (int, float)) else f"{k} = {v}"
                                               for k, v in data["checks"].items()), ""]
        if data.get("errors"):
            L += ["Errors reported by the benchmark:", ""] + [f"- {e}" for e in data["errors"]] + [""]
    log(f"report: {nplot} plots in {plots_dir}/{plot_prefix}-*.png")
    return "\n".join(L).rstrip() + "\n"


def _load(d, k):
    v = d["data"]["env"].get(k)
    return "?" if not v else "(" + ", ".join(f"{x:.1f}" for x in v) + ")"


def _stream_summary(data):
    s = data.get("summary") or []
    if not s:
        return []
    a = data.get("args", {})
    L = [f"Per op, median of {a.get('rounds')} per-process medians; pre-streams = commit {a.get('prestreams')} "
         f"from a git worktree, timed in the same process (imported as `jgrad_prestreams`, interleaved: the ratio "
         f"to quote) and in its own processes alternating with this checkout's:", "",
         "| op | pre-streams | streams, sanitizer off | streams, sanitizer on | bare jit kernel | sanitizer on / off "
         "| streams / pre-streams (same process) | streams / pre-streams (own processes) | same, each over its own "
         "bare kernel |", "|---|---|---|---|---|---|---|---|---|"]
    r = (lambda v: "n/a" if v is None or v != v else f"{v:.2f}")
    for x in s:
        L.append(f"| {x['case']} | {_fmt(x.get('pre_inproc_s'))} | {_fmt(x['off_s'])} | {_fmt(x['on_s'])} | "
                 f"{_fmt(x['kernel_s'])} | **{r(x['on_over_off'])}** | **{r(x.get('streams_over_pre_inproc'))}** | "
                 f"{r(x['streams_over_pre'])} | {r(x['streams_over_pre_kernel_normalised'])} |")
    return L + [""]


def replace_block(text, tag, block, anchor=None):
    """Put ``block`` between the ``tag`` markers of ``text`` (inserted before ``anchor``, else appended)."""
    b, e = BEGIN.format(tag), END.format(tag)
    new = f"{b}\n{block.rstrip()}\n{e}"
    if b in text and e in text:
        return text[:text.index(b)] + new + text[text.index(e) + len(e):]
    if anchor and anchor in text:
        i = text.index(anchor)
        return text[:i] + new + "\n\n" + text[i:]
    return text.rstrip() + "\n\n" + new + "\n"


def gpu_index():
    files = sorted(glob.glob(os.path.join(RESULTS_DIR, "gpu-*.md")))
    L = ["## GPU results", "",
         "Every `benchmarks/results/gpu-*.md` (newest last). Files with a generated header come from "
         "`python -m benchmarks --device gpu`; the others were recorded by hand. This list is regenerated by "
         "every `python -m benchmarks` run.", ""]
    if not files:
        L.append("_none yet: run `PYTHONPATH=$PWD python -m benchmarks --device gpu` on a GPU machine_")
    for f in files:
        with open(f) as fh:
            head = next((ln.lstrip("# ").strip() for ln in fh if ln.startswith("#")), "")
        L.append(f"- [{os.path.relpath(f, HERE)}]({os.path.relpath(f, HERE)}): {head}")
    return "\n".join(L)


def write_reports(args, done):
    written = []
    if args.results_file or args.device == "gpu":
        if args.results_file:
            path = os.path.abspath(args.results_file)
            stem = os.path.splitext(os.path.basename(path))[0]
            title = f"Benchmarks on {args.device}, {_dt.date.today().isoformat()}"
        else:
            slug, kind = args.gpu
            day = f"gpu-{slug}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d')}"
            stem, n = day, 1
            while os.path.exists(os.path.join(RESULTS_DIR, stem + ".md")):  # keep earlier runs of the day
                n += 1
                stem = f"{day}-run{n}"
            path = os.path.join(RESULTS_DIR, stem + ".md")
            title = f"GPU: {kind}, {_dt.date.today().isoformat()}{' (--quick)' if args.quick else ''}"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        body = render(args, done, stem, os.path.dirname(path), title,
                      os.path.join(os.path.dirname(path), "plots") if args.results_file else PLOTS_DIR)
        with open(path, "w") as f:
            f.write(f"# {title}\n\n{BEGIN.format('run')}\n{body}{END.format('run')}\n")
        written.append(path)
    else:
        body = render(args, done, "cpu", HERE, f"Generated report: CPU, {_dt.date.today().isoformat()}"
                      + (" (--quick)" if args.quick else ""))
        text = open(RESULTS_MD).read() if os.path.exists(RESULTS_MD) else "# jgrad benchmark results\n"
        text = replace_block(text, "cpu", body, anchor="\n## ")
        with open(RESULTS_MD, "w") as f:
            f.write(text)
        written.append(RESULTS_MD)
    if os.path.exists(RESULTS_MD) and not args.results_file:
        text = open(RESULTS_MD).read()
        with open(RESULTS_MD, "w") as f:
            f.write(replace_block(text, "gpu-index", gpu_index()))
        if RESULTS_MD not in written:
            written.append(RESULTS_MD)
    return written


# ------------------------------------------------------------------------------ main
def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="Run all jgrad benchmarks (each in a fresh process) and write the report.")
    p.add_argument("--quick", action="store_true", help="few repeats: a smoke run")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--repeat", type=int, default=None, help="timed batches per variant (passed on)")
    p.add_argument("--profile", action="store_true", help="also run benchmarks.profile_overhead")
    p.add_argument("--only", choices=NAMES, action="append",
                   help="run only these (repeatable); scaling and profile_overhead run only when named here")
    p.add_argument("--results-file", metavar="PATH", default=None,
                   help="write the report of this run to PATH (with plots named after it) instead of RESULTS.md "
                        "or results/gpu-*.md; RESULTS.md is left alone")
    p.add_argument("--no-write", action="store_true", help="print only; write no report or plots")
    p.add_argument("--copy-to", metavar="DIR", default=None,
                   help="also copy the written report, plots and per-benchmark logs into DIR "
                        "(e.g. a folder that comes back from a remote machine)")
    p.add_argument("--index-only", action="store_true",
                   help="only regenerate RESULTS.md's list of results/gpu-*.md (after copying in a GPU run's files)")
    args = p.parse_args(argv)
    args.argv = argv
    if args.index_only:
        text = open(RESULTS_MD).read()
        with open(RESULTS_MD, "w") as f:
            f.write(replace_block(text, "gpu-index", gpu_index()))
        log(f"updated the GPU results list in {os.path.relpath(RESULTS_MD, ROOT)}")
        return 0
    args.gpu = None
    args.plots = []
    if args.device == "gpu":
        args.gpu = gpu_model()
        if args.gpu is None:
            log("--device gpu: JAX sees no GPU on this machine (jax.devices('gpu') failed or is empty; a CUDA build "
                "of jaxlib is needed). Nothing was run and nothing was written. Use --device cpu here.")
            return 2
        log(f"GPU: {args.gpu[1]} -> results/gpu-{args.gpu[0]}-<date>.md")
    runs = plan(args)
    t0 = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="jgrad-bench-")
    done = run_all(args, runs, workdir)
    log(f"all benchmarks: {time.perf_counter() - t0:.0f} s; logs and JSON in {workdir}")
    failed = [d["label"] for d in done if d["rc"]]
    if failed:  # reported, not raised: benchmarks never fail a build
        print(f"\nbenchmarks that did not finish: {', '.join(failed)}")
    if args.no_write:
        return 0
    written = write_reports(args, done)
    for w in written:
        log(f"wrote {os.path.relpath(w, ROOT) if w.startswith(ROOT) else w}")
    if args.copy_to:
        for w in written:
            rel = os.path.relpath(w, ROOT) if w.startswith(ROOT) else os.path.basename(w)
            os.makedirs(os.path.join(args.copy_to, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(w, os.path.join(args.copy_to, rel))
        for png in args.plots:
            rel = os.path.relpath(png, ROOT) if png.startswith(ROOT) else os.path.join("plots", os.path.basename(png))
            os.makedirs(os.path.join(args.copy_to, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(png, os.path.join(args.copy_to, rel))
        shutil.copytree(workdir, os.path.join(args.copy_to, "benchmarks", "logs"), dirs_exist_ok=True)
        log(f"copied the report, plots and logs to {args.copy_to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
