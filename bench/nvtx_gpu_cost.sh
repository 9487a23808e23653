#!/usr/bin/env bash
# The CPU cost of NVTX on the GPU (issue 9: at most 15% at 20x): the default conversion against
# `--types=-nvtx-gpu`, in paired rounds. Each round runs both, in alternating order, back to
# back, and takes their ratio; a shared machine slows both of a pair alike, so the median of
# the per-round ratios is steadier than a ratio of medians. CPU = user+sys of the process.
#   bench/nvtx_gpu_cost.sh [ROUNDS] [COPIES]      default: 30 rounds, 20x
# Env: BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-30}
copies=${2:-20}
source bench/lib.sh "$copies"

cpu() { # cpu ARGS...: user+sys seconds of one conversion of the input
  /usr/bin/time -f '%U %S' -o "$tmp/t" "$bin" -q "$input" -o "$tmp/out.pftrace" "$@" >/dev/null
  awk '{printf "%.3f\n", $1 + $2}' "$tmp/t"
}

for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then
    with=$(cpu)
    without=$(cpu --types=-nvtx-gpu)
  else
    without=$(cpu --types=-nvtx-gpu)
    with=$(cpu)
  fi
  echo "$with $without" >>"$tmp/rounds"
done

python3 - "$tmp/rounds" "$copies" <<'EOF'
import statistics as st
import sys

rows = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
ratios = sorted(a / b for a, b in rows)
q1, _, q3 = st.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
print(
    f"{sys.argv[2]}x, {len(rows)} paired rounds: default {st.median(a for a, _ in rows):.2f} s, "
    f"--types=-nvtx-gpu {st.median(b for _, b in rows):.2f} s (medians); "
    f"NVTX on the GPU costs {100 * (st.median(ratios) - 1):+.1f}% "
    f"(quartiles {100 * (q1 - 1):+.1f}% to {100 * (q3 - 1):+.1f}%)"
)
EOF
