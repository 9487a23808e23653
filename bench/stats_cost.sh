#!/usr/bin/env bash
# The CPU cost of `stats` against a default conversion of the same export (issue 27: at most
# 1.5x at 20x), in paired rounds: each round runs the conversion, `stats` (table) and
# `stats --csv`, in rotating order, back to back, and takes each one's ratio to the conversion;
# the medians of the per-round ratios are printed. CPU = user+sys of the process.
#   bench/stats_cost.sh [ROUNDS] [COPIES]      default: 10 rounds, 20x
# Env: BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
copies=${2:-20}
source bench/lib.sh "$copies"

cpu() { # cpu ARGS...: user+sys seconds of one run of the binary with ARGS
  /usr/bin/time -f '%U %S' -o "$tmp/t" "$bin" "$@" >/dev/null
  awk '{printf "%.3f\n", $1 + $2}' "$tmp/t"
}

for ((i = 0; i < rounds; i++)); do
  declare -A t=()
  for j in 0 1 2; do
    case $(((i + j) % 3)) in
      0) t[convert]=$(cpu -q "$input" -o "$tmp/out.pftrace") ;;
      1) t[stats]=$(cpu stats "$input") ;;
      2) t[csv]=$(cpu stats --csv "$input") ;;
    esac
  done
  echo "${t[convert]} ${t[stats]} ${t[csv]}" >>"$tmp/rounds"
done

python3 - "$tmp/rounds" "$copies" <<'PY'
import statistics as st
import sys

rows = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
conv = st.median(r[0] for r in rows)
table = st.median(r[1] / r[0] for r in rows)
csv = st.median(r[2] / r[0] for r in rows)
print(
    f"{sys.argv[2]}x, {len(rows)} rounds: conversion {conv:.2f} s CPU (median); "
    f"stats {table:.2f}x, stats --csv {csv:.2f}x of it (medians of per-round ratios)"
)
PY
