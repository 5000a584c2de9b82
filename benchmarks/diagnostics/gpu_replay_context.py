"""Why the small-MLP replay is slower inside ``benchmarks.capture`` than timed alone.

    PYTHONPATH=$PWD python -m benchmarks.diagnostics.gpu_replay_context [--repeat 9] [--tf32] [--no-pack-state] [--updates-log FILE]

Builds the small-MLP variants exactly as ``benchmarks.capture`` does (same models, warm-up,
capture, jax step, torch eager and CUDA-graph replay) in one process, then times the jgrad
replay in different company: alone in gpu_replay_diag's loop, alone in ``common.compare`` at two
batch lengths, paired with each other variant, and with all of them. For every phase it prints
each variant's median per call and, for the replay, the host time per call spent inside
``g.replay()`` (when it is close to the median, the replay is host-bound in that phase).

With ``--updates-log FILE`` it instead reruns itself with XLA's command-buffer log on (one line per
command-buffer execution and per update of a recorded CUDA graph, on stderr) and counts, per phase
and per command buffer (told apart by their number of commands), how many executions needed an
update and how long the updates took: an XLA executable re-records its CUDA graphs whenever a
buffer it uses (argument, output or temporary) comes at another device address than last time.

No assertions: the figures go into ``benchmarks/RESULTS.md`` by hand.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time

from benchmarks import capture, common
from benchmarks.diagnostics.gpu_replay_diag import _time as diag_time


def _build(tdev):
    import jax
    import jax.numpy as jnp

    import jgrad as jg
    from jgrad import nn

    w = capture.small_workload()
    loss_mod = nn.MSELoss()
    model_e, opt_e, model_r, opt_r, x_r, y_r, x_e, y_e, eager_step = capture._jg_setup(w, loss_mod)
    params_e, params_r = list(model_e.parameters()), list(model_r.parameters())
    g, static_loss = capture.jg_capture(model_r, opt_r, loss_mod, x_r, y_r)
    g.replay()
    common.block(params_r + [static_loss])

    host = [0.0, 0]

    def replay():
        t0 = time.perf_counter()
        g.replay()
        host[0] += time.perf_counter() - t0
        host[1] += 1
        return params_r + [static_loss]

    step = capture.jax_step(w)
    params, key = capture.jax_state(w)
    st = {"p": params, "k": key, "x": jnp.asarray(w.X), "y": jnp.asarray(w.Y)}
    jax.block_until_ready(step(*capture.jax_state(w), st["x"], st["y"]))

    def jit_call():
        loss, st["p"], st["k"] = step(st["p"], st["k"], st["x"], st["y"])
        return [loss, st["p"]]

    variants = {"replay": common.Variant("replay", replay),
                "jgrad eager": common.Variant("jgrad eager", lambda: [eager_step()] + params_e),
                "jax.jit": common.Variant("jax.jit", jit_call)}
    torch = capture._torch()
    if torch is not None and tdev == "cuda":
        tm, topt = capture.torch_model(torch, w, tdev)
        tl = torch.nn.MSELoss()
        tx, ty = torch.from_numpy(w.X).to(tdev), torch.from_numpy(w.Y).to(tdev)

        def torch_eager():
            topt.zero_grad(set_to_none=True)
            tl(tm(tx), ty).backward()
            topt.step()

        sync = common.torch_sync(tdev)
        variants["torch eager"] = common.Variant("torch eager", torch_eager, sync=sync)
        variants["cuda graph"] = common.Variant("cuda graph", capture.torch_cuda_graph(torch, w), sync=sync)
    return variants, host, jg


def _mark(label):
    """A phase marker in the process's stderr, between XLA's own log lines."""
    sys.stderr.flush()
    os.write(2, f"PHASE {label}\n".encode())


def _phase(label, names, variants, host, repeat, batch_s):
    _mark(label)
    host[0], host[1] = 0.0, 0
    res = common.compare([variants[n] for n in names], repeat=repeat, batch_s=batch_s, quiet=True)
    parts = [f"{r.name} {r.median * 1e6:.1f} us (IQR {r.iqr[0] * 1e6:.0f}-{r.iqr[1] * 1e6:.0f})" for r in res]
    hpc = host[0] / host[1] * 1e6 if host[1] else float("nan")
    print(f"- {label}: " + "; ".join(parts) + f"; replay host {hpc:.1f} us/call", flush=True)


_UPDATE = re.compile(r"Update command buffer .*num_commands=(\d+); updated_allocs=(\d+)")
_UPDATED = re.compile(r"Updated command buffer in (\d+) .*num_commands=(\d+)")


def summarize_updates(path):
    """Per phase: command-buffer updates (by num_commands), the buffers that changed and the median cost."""
    phase = "start-up"
    upd, cost, allocs = collections.Counter(), collections.defaultdict(list), collections.defaultdict(list)

    def flush():
        if upd:
            parts = [f"{n} cmds: {upd[n]} updates (updated_allocs median {sorted(allocs[n])[len(allocs[n]) // 2]}, "
                     f"{sorted(cost[n])[len(cost[n]) // 2] if cost[n] else 0} us each)" for n in sorted(upd)]
            print(f"- {phase}: " + "; ".join(parts))
        else:
            print(f"- {phase}: no command-buffer updates")

    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("PHASE "):
                flush()
                phase = line[6:].strip()
                upd.clear(), cost.clear(), allocs.clear()
                continue
            if m := _UPDATE.search(line):
                upd[int(m[1])] += 1
                allocs[int(m[1])].append(int(m[2]))
            elif m := _UPDATED.search(line):
                cost[int(m[2])].append(int(m[1]))
    flush()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--device", default="gpu")
    p.add_argument("--tf32", action="store_true", help="TF32 matmuls (as benchmarks.capture --tf32)")
    p.add_argument("--updates-log", metavar="FILE", default=None,
                   help="rerun with XLA's command-buffer log into FILE and count the updates per phase")
    p.add_argument("--no-pack-state", action="store_true",
                   help="parameters travel as one argument and output each (jgrad.runtime._capture.pack_state = False)")
    a = p.parse_args(argv)
    if a.no_pack_state:
        from jgrad.runtime import _capture
        _capture.pack_state = False
    if a.updates_log:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="command_buffer_thunk=3")
        with open(a.updates_log, "w") as err:
            subprocess.run([sys.executable, "-m", "benchmarks.diagnostics.gpu_replay_context", "--repeat", str(a.repeat),
                            "--device", a.device] + (["--tf32"] if a.tf32 else [])
                           + (["--no-pack-state"] if a.no_pack_state else []), env=env, stderr=err, stdout=subprocess.DEVNULL)
        summarize_updates(a.updates_log)
        return 0
    capture._quiet_donation()
    jdev, tdev = common.setup_device(a.device)
    env = common.environment(jdev, tdev)
    common.print_header("small-MLP replay in company", env)
    capture.set_precision(a.tf32, tdev)
    capture._process_warmup()
    variants, host, jg = _build(tdev)
    rv = variants["replay"]

    def alone(label):
        _mark(label)
        thr, issue = diag_time(rv.fn, common.block, 200, a.repeat)
        print(f"- {label}: gpu_replay_diag loop, 200 calls: {thr * 1e6:.1f} us/call, host issue {issue * 1e6:.1f}",
              flush=True)

    alone("alone, before anything else ran")
    _phase("alone, batch 0.03 s", ["replay"], variants, host, a.repeat, 0.03)
    _phase("alone, batch 0.15 s (capture.py's)", ["replay"], variants, host, a.repeat, 0.15)
    for other in [n for n in variants if n != "replay"]:
        _phase(f"with {other}", ["replay", other], variants, host, a.repeat, 0.15)
    _phase("all variants (capture.py's company)", list(variants), variants, host, a.repeat, 0.15)
    _phase("all variants, batch 0.03 s", list(variants), variants, host, a.repeat, 0.03)
    alone("alone, at the end")
    print(f"- default stream's pending list: {len(jg.current_stream()._pending)} entries")
    common.print_footer(env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
