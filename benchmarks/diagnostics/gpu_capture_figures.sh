#!/usr/bin/env bash
# The GPU figure set behind the capture notes (docs/capture.md, docs/performance.md) in one device call:
# where the small-MLP step's time goes (trace), the capture benchmark at both precisions, and the capture
# correctness checks. Each step is bounded and
# writes its full output to $OUT (default: ./gpu-out); the summary lines come last.
#   bash benchmarks/diagnostics/gpu_capture_figures.sh [steps...]   steps: trace32 trace tf32 fp32 check seed seed32 streams context updates
#   interop copy
# STEP_TIMEOUT=SECONDS overrides each step's limit (the full-float32 seed step's one-shot children
# compile for ~10 s each: give it ~400 s alone).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD JGRAD_BENCH_COMMIT=${JGRAD_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
steps=${*:-"trace32 tf32 fp32 check"}
{ date -u; nvidia-smi -L; python -c "import jax, jaxlib; print('jax', jax.__version__, jax.devices())"; echo "commit $JGRAD_BENCH_COMMIT"; } \
  >"$OUT/env.txt" 2>&1
run() {  # name seconds command...
  local name=$1 secs=${STEP_TIMEOUT:-$2}; shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" >"$OUT/$name.txt" 2>&1; local rc=$?
  echo "### $name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
capture() {  # name [--tf32] section: one section of benchmarks.capture, one one-shot child per figure
  local name=$1; shift
  run "$name" 240 python -m benchmarks.capture --device gpu "$@" --quick --repeat 15 --oneshot 1
}
for s in $steps; do
  case $s in
    trace32) run trace-tf32 240 python -m benchmarks.diagnostics.gpu_replay_trace --tf32 --repeat 7 ;;
    trace)   run trace-fp32 240 python -m benchmarks.diagnostics.gpu_replay_trace --repeat 7 ;;
    tf32)    capture small-tf32 --tf32 --only small ;;
    fp32)    capture small-fp32 --only small ;;
    seed)    capture seed-tf32 --tf32 --only seed ;;
    seed32)  capture seed-fp32 --only seed ;;
    streams) run streams 180 python -m benchmarks.capture --device gpu --only streams --repeat 15 ;;
    context) run context-tf32 200 python -m benchmarks.diagnostics.gpu_replay_context --tf32
             run context-tf32-unpacked 200 python -m benchmarks.diagnostics.gpu_replay_context --tf32 --no-pack-state ;;
    updates) run updates-tf32 200 python -m benchmarks.diagnostics.gpu_replay_context --tf32 --updates-log "$OUT/updates-tf32.log"
             run updates-tf32-unpacked 200 python -m benchmarks.diagnostics.gpu_replay_context --tf32 --no-pack-state \
                 --updates-log "$OUT/updates-tf32-unpacked.log" ;;
    interop) run interop-gpu 240 env JAX_PLATFORMS=cuda,cpu python -m pytest -q -p no:cacheprovider -rs \
                 tests/test_interop_torch.py tests/test_interop_cupy.py tests/test_interop_dlpack.py tests/test_inplace.py ;;
    copy)    run copy-diag 200 python -m benchmarks.diagnostics.gpu_copy_diag ;;
    check)   run capture-check 180 python -m benchmarks.diagnostics.gpu_capture_check ;;
    *) echo "unknown step $s" ;;
  esac
done
for f in "$OUT"/*.txt; do
  case $f in */summary.txt|*/env.txt|*/context*|*/updates*) continue ;; esac
  echo "=== $(basename "$f")"; grep -E "replay|jax.jit|CUDA graph|device busy|kernels with|throughput|PASS|FAIL|Error|error|passed|failed" "$f" | cut -c1-220 | tail -30
done
for f in "$OUT"/context*.txt "$OUT"/updates*.txt; do [ -f "$f" ] && { echo "=== $(basename "$f")"; grep "^- " "$f" | cut -c1-300; }; done
rm -f "$OUT"/*.log  # the raw XLA logs are large; their summaries are in updates-*.txt
cat "$OUT/summary.txt"
