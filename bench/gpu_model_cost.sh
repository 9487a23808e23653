#!/usr/bin/env bash
# The cost of `--gpu perfetto` (issue 42: each at most the default's at 20x): conversion CPU
# (user+sys), output size, and trace_processor's load time (user+sys of `trace_processor_shell`
# loading the trace and answering one query), against the default `--gpu tracks`, in paired
# rounds: each round runs both, in alternating order, back to back; medians of per-round ratios.
#   bench/gpu_model_cost.sh [ROUNDS] [COPIES]      default: 5 rounds, 20x
# Env: BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
copies=${2:-20}
source bench/lib.sh "$copies"
tp=$shared/tools/perfetto/bin/trace_processor_shell
echo "SELECT count(*) FROM slice;" >"$tmp/q.sql"

cpu() { # cpu OUT CMD...: user+sys seconds of CMD
  local out=$1
  shift
  /usr/bin/time -f '%U %S' -o "$tmp/t" "$@" >/dev/null 2>&1
  awk '{printf "%.3f\n", $1 + $2}' "$tmp/t"
}

round() { # round MODEL: "convert_cpu bytes load_cpu"
  local out=$tmp/$1.pftrace
  local c l
  c=$(cpu "$out" "$bin" -q "$input" -o "$out" --gpu "$1")
  l=$(cpu "$out" "$tp" -q "$tmp/q.sql" "$out")
  echo "$c $(stat -c %s "$out") $l"
}

for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then
    a=$(round tracks)
    b=$(round perfetto)
  else
    b=$(round perfetto)
    a=$(round tracks)
  fi
  echo "$a $b" >>"$tmp/rounds"
done

python3 - "$tmp/rounds" "$copies" <<'EOF'
import statistics as st
import sys

rows = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
print(f"{sys.argv[2]}x, {len(rows)} paired rounds (medians; perfetto/tracks ratio of each round):")
for i, what in enumerate(["conversion CPU s", "output bytes", "trace_processor load CPU s"]):
    tracks = st.median(r[i] for r in rows)
    native = st.median(r[i + 3] for r in rows)
    ratio = st.median(r[i + 3] / r[i] for r in rows)
    print(f"  {what}: tracks {tracks:.3f}, perfetto {native:.3f}, ratio {ratio:.3f}")
EOF
