#!/bin/bash
# Time benchmarks on this tree and on an older commit, in alternating processes on the same machine.
#   bash benchmarks/diagnostics/before_after.sh <old-tree-dir> <rounds> <benchmark args...>
# <old-tree-dir> holds a checkout of the older commit (e.g. `git worktree add .before <commit>`; on the device
# machine, carry it). Each round runs `python -m benchmarks.<args>` once in the old tree (its own benchmark and
# its own jgrad), then once in this one; outputs go to $OUT (default /tmp) as before_<i>.md / after_<i>.md, and
# the table rows matching $ROWS (a grep -E pattern, default: every row) are printed round by round.
set -u
old=$1; rounds=$2; shift 2
OUT=${OUT:-/tmp}
here=$(cd "$(dirname "$0")/../.." && pwd)
for i in $(seq 1 "$rounds"); do
  (cd "$old" && python3 -m benchmarks."$@" > "$OUT/before_$i.md" 2>&1)
  (cd "$here" && python3 -m benchmarks."$@" > "$OUT/after_$i.md" 2>&1)
done
for i in $(seq 1 "$rounds"); do
  echo "== round $i: before"; grep -E "${ROWS:-^\|}" "$OUT/before_$i.md"
  echo "== round $i: after"; grep -E "${ROWS:-^\|}" "$OUT/after_$i.md"
done
