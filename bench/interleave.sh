#!/usr/bin/env bash
# Time commands interleaved, N rounds, and print each one's CPU times (user+sys, s) and peak
# RSS (MB) per round with the median CPU time, and the median wall time: a noisy shared
# machine slows every command of a round alike, so compare commands within one call.
#   bench/interleave.sh N LABEL "COMMAND" [LABEL "COMMAND"]...
# e.g. the cost of NVTX on the GPU at 20x:
#   bench/interleave.sh 18 default "target/release/nsys-perfetto -q /tmp/nsys-perfetto-bench/bench20.sqlite -o /tmp/a.pftrace" \
#     without "target/release/nsys-perfetto -q /tmp/nsys-perfetto-bench/bench20.sqlite -o /tmp/b.pftrace --types=-nvtx-gpu"
set -euo pipefail
n=$1
shift
labels=()
cmds=()
while [ $# -ge 2 ]; do
  labels+=("$1")
  cmds+=("$2")
  shift 2
done
declare -A res wall
t=$(mktemp)
trap 'rm -f "$t"' EXIT
for ((i = 0; i < n; i++)); do
  for j in "${!labels[@]}"; do
    /usr/bin/time -o "$t" -f "%U %S %M %e" bash -c "${cmds[$j]}" >/dev/null 2>&1
    res[${labels[$j]}]+="$(awk '{printf "%.2f:%d ", $1+$2, $3/1024}' "$t")"
    wall[${labels[$j]}]+="$(awk '{printf "%.2f ", $4}' "$t")"
  done
done
for l in "${labels[@]}"; do
  median=$(echo ${res[$l]} | tr ' ' '\n' | cut -d: -f1 | sort -g |
    awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
  wall_median=$(echo ${wall[$l]} | tr ' ' '\n' | sort -g |
    awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
  echo "$l: ${res[$l]} median $median (wall median $wall_median s)"
done
