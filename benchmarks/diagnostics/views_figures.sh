#!/bin/bash
# Issue 25's figures in one device call: the views benchmark on the GPU and on two CPU cores, and the small-MLP
# and GPT steps before (the tree in $1, e.g. `git worktree add .before <commit>`) and after the views change,
# in alternating processes on the same machine.
#   bash benchmarks/diagnostics/views_figures.sh .before [rounds]
# Everything goes to $OUT (default /tmp): views_gpu.md, views_cpu2.md, before_after.md.
set -u
old=$1; rounds=${2:-2}
OUT=${OUT:-/tmp}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
two_cores="taskset -c 0,1"
python3 -m benchmarks.views --device gpu --quick > "$OUT/views_gpu.md" 2>&1
JAX_PLATFORMS=cpu $two_cores python3 -m benchmarks.views --device cpu --quick > "$OUT/views_cpu2.md" 2>&1
{
  echo "## before ($old) / after, alternating processes"
  for args in "eager_overhead --only mlp --device gpu --quick" "gpt_step --device gpu --quick" \
              "tiered --only mlp --device gpu --quick"; do
    echo; echo "### $args"
    ROWS='^\| (jgrad|torch)' OUT=/tmp bash benchmarks/diagnostics/before_after.sh "$old" "$rounds" $args
  done
} > "$OUT/before_after.md" 2>&1
