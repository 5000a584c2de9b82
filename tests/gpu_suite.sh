#!/bin/bash
# The test suite in the GPU test mode (JGRAD_TEST_DEVICE=gpu, tests/conftest.py), split over 4 pytest processes
# that share the GPU (no XLA preallocation), in one execution mode; logs and a summary under $OUT (default /tmp).
#   bash tests/gpu_suite.sh eager|auto [pytest options]
# One process (`JGRAD_TEST_DEVICE=gpu python -m pytest tests`) works too; on an H100 host this takes ~4 min a mode.
mode=${1:-eager}; shift
OUT=${OUT:-/tmp}
export JGRAD_TEST_DEVICE=gpu XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
mapfile -t GRPS < <(python3 - <<'PY'
import glob, os
files = [f for f in glob.glob("tests/test_*.py") if "notebooks" not in f and "multiprocess" not in f]
files.sort(key=lambda f: -os.path.getsize(f))
groups, sizes = [[] for _ in range(4)], [0] * 4
for f in files:
    i = sizes.index(min(sizes)); groups[i].append(f); sizes[i] += os.path.getsize(f)
for g in groups: print(" ".join(g))
PY
)
i=0
for g in "${GRPS[@]}"; do
  i=$((i+1))
  timeout ${LIMIT:-520} python3 -m pytest -p no:cacheprovider $g -q --execution-mode $mode --timeout 150 -rfE "$@" > $OUT/gpu_${mode}_$i.log 2>&1 &
done
wait
for i in 1 2 3 4; do echo "== group $i"; grep -E "passed|failed|error" $OUT/gpu_${mode}_$i.log | tail -1; grep -E "^(FAILED|ERROR)" $OUT/gpu_${mode}_$i.log | cut -c1-200; done
