#!/usr/bin/env bash
# Benchmark: convert a real PyTorch-on-A100 export grown N-fold and report wall time, peak RSS and
# output size per event. Usage: bench/run.sh [COPIES...]   (default: 20; e.g. "10 20 40" shows
# that memory does not grow with input size). Needs ../shared (bench input and amplify_trace.py).
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${SHARED:-../shared}
work=${BENCH_DIR:-/tmp/nsys-perfetto-bench}
runs=${RUNS:-3}
mkdir -p "$work"
cargo build --release -q
bin=target/release/nsys-perfetto
printf '%-7s %9s %8s %9s %11s %11s %12s %13s\n' copies input_MB wall_s peak_MB slices trace_events bytes/slice bytes/event
for copies in "${@:-20}"; do
  in="$work/bench${copies}.sqlite"
  [ -s "$in" ] || python3 "$shared/tools/amplify_trace.py" "$shared/bench/ai-profiler-firstOptimization.sqlite" "$in" --copies "$copies" >/dev/null
  out="$work/bench${copies}.pftrace"
  best=""
  for _ in $(seq "$runs"); do
    /usr/bin/time -f '%e %M' -o "$work/time.txt" "$bin" "$in" -o "$out" 2>"$work/summary.txt"
    read -r wall rss <"$work/time.txt"
    if [ -z "$best" ] || awk "BEGIN{exit !($wall < $best)}"; then best=$wall; best_rss=$rss; fi
  done
  slices=$(sed -n 's/^  events: \([0-9]*\).*/\1/p' "$work/summary.txt")
  events=$(sed -n 's/^  trace events: \([0-9]*\).*/\1/p' "$work/summary.txt")
  bytes=$(stat -c %s "$out")
  awk -v c="$copies" -v i="$(stat -L -c %s "$in")" -v w="$best" -v r="$best_rss" -v s="$slices" -v e="$events" -v b="$bytes" \
    'BEGIN{printf "%-7s %9.0f %8.2f %9.1f %11d %11d %12.1f %13.1f\n", c, i/1e6, w, r/1024, s, e, b/s, b/e}'
done
