"""Side-by-side performance figures for jgrad (not run by CI; nothing here asserts).

    python -m benchmarks [--quick] [--device cpu|gpu]      # everything, one process per benchmark, + the report
    python -m benchmarks.eager_overhead [--quick]           # one op, backward per node, MLP step
    python -m benchmarks.stream_overhead [--quick]          # stream stamping / sanitizer cost vs pre-streams 67d2407
    python -m benchmarks.hessian [--quick] [--act tanh]     # PR 82544's Hessian benchmark, trimming on/off
    python -m benchmarks.profile_overhead [--quick]         # phase breakdown + cProfile/pyinstrument

See README.md for the method and RESULTS.md for recorded figures.
"""
