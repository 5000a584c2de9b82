"""The jgrad benchmark suite: side-by-side figures, one file per workload (not run by CI; nothing asserts).

    python -m benchmarks [--quick] [--device cpu|gpu]      # the suite, one process per benchmark, + the report
    python -m benchmarks.eager_overhead [--quick]           # one op, backward per node, MLP step
    python -m benchmarks.stream_overhead [--quick]          # stream stamping / sanitizer cost vs pre-streams 67d2407
    python -m benchmarks.hessian [--quick] [--act tanh]     # PR 82544's Hessian benchmark, trimming on/off
    python -m benchmarks.capture [--quick]                  # a captured training step replayed vs eager, jax.jit, torch
    python -m benchmarks.tiered [--quick]                   # "auto" execution vs eager, replay, torch, jax.jit
    python -m benchmarks.gpt_step [--quick]                 # examples/gpt's training step vs the same file on torch
    python -m benchmarks.scaling [--quick]                  # DDP on 1, 2, 4 devices (opt-in in the runner)
    python -m benchmarks.profile_overhead [--quick]         # phase breakdown + cProfile/pyinstrument (opt-in)

``diagnostics/`` holds one-off GPU tools, outside the suite. See README.md for the method and
RESULTS.md for the recorded figures.
"""
