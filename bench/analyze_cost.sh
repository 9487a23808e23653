#!/usr/bin/env bash
# The CPU cost of `analyze` (issue 27: at most 1.5x a default conversion at 20x): `analyze
# --top 0 --csv` (every rule, every finding) against the default conversion of the same export,
# in paired rounds (alternating order, back to back; the median of the per-round ratios), and
# the conversion with `--analyze` for reference. CPU = user+sys of the process. Exits non-zero
# when the median ratio is above 1.5.
#   bench/analyze_cost.sh [ROUNDS] [COPIES]      default: 10 rounds, 20x
# Env: BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
copies=${2:-20}
source bench/lib.sh "$copies"

cpu() { # cpu ARGS...: user+sys seconds of one run
  /usr/bin/time -f '%U %S' -o "$tmp/t" "$bin" "$@" >/dev/null
  awk '{printf "%.3f\n", $1 + $2}' "$tmp/t"
}
convert() { cpu -q "$input" -o "$tmp/out.pftrace" "$@"; }
analyze() { cpu analyze "$input" --top 0 --csv -o "$tmp/findings.csv"; }

for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then
    c=$(convert)
    a=$(analyze)
  else
    a=$(analyze)
    c=$(convert)
  fi
  ca=$(convert --analyze)
  echo "$c $a $ca" >>"$tmp/rounds"
done

python3 - "$tmp/rounds" "$copies" "$(($(wc -l <"$tmp/findings.csv") - 1))" <<'EOF'
import statistics as st
import sys

rows = [tuple(map(float, line.split())) for line in open(sys.argv[1])]
ratio = st.median(a / c for c, a, _ in rows)
extra = st.median(ca / c for c, _, ca in rows)
print(
    f"{sys.argv[2]}x, {len(rows)} paired rounds (medians): conversion {st.median(r[0] for r in rows):.2f} s, "
    f"analyze {st.median(r[1] for r in rows):.2f} s ({sys.argv[3]} findings) = {ratio:.2f}x the "
    f"conversion (limit 1.5x); conversion with --analyze {st.median(r[2] for r in rows):.2f} s "
    f"({100 * (extra - 1):+.0f}%)"
)
sys.exit(0 if ratio <= 1.5 else 1)
EOF
