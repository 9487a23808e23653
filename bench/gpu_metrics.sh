#!/usr/bin/env bash
# Conversion of a GPU-metric-heavy export from its arrowdir against its SQLite twin, in
# interleaved rounds (bench/interleave.sh: CPU s = user+sys, peak RSS MB, per round; medians).
# The input: the corpus's als244 report (an RTX 3090 capture with GPU metrics), exported by nsys
# 2023.4.4 as SQLite and as an arrowdir; its GPU_METRICS table grown COPIES-fold (each copy one
# span later, so every sample stays a sample of its own) and the arrowdir written again in nsys'
# layout (bench/amplify_arrow.py, pyarrow in bench/.venv). The two traces must hold the same
# content (bench/content.py).
#   bench/gpu_metrics.sh [COPIES]      default 20 (2.2 M GPU metric rows)
# Env: ROUNDS (7), BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared),
#      NSYS (/opt/nvidia/nsight-systems/2023.4.4/bin/nsys), BIN (default: the release build).
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-20}
rounds=${ROUNDS:-7}
shared=${SHARED:-../shared}
work=${BENCH_DIR:-/tmp/nsys-perfetto-bench}
nsys=${NSYS:-/opt/nvidia/nsight-systems/2023.4.4/bin/nsys}
if [[ -z ${BIN:-} ]]; then
  cargo build --release -q
  BIN=target/release/nsys-perfetto
fi
mkdir -p "$work"
base="$work/metrics"
if [ ! -d "${base}_arwdir" ]; then
  tmp=$(mktemp -d "$work/metrics.XXXX")
  cp "$shared/corpus/als244__ResourceEstimation__reports_report2.nsys-rep" "$tmp/r.nsys-rep"
  "$nsys" export --type sqlite -o "$tmp/r.sqlite" "$tmp/r.nsys-rep" >/dev/null 2>&1
  "$nsys" export --type arrowdir -o "$tmp/r_arwdir" "$tmp/r.nsys-rep" >/dev/null 2>&1
  mv "$tmp/r.sqlite" "${base}.sqlite" && mv "$tmp/r_arwdir" "${base}_arwdir" && rm -rf "$tmp"
fi
grown="$work/metrics${copies}.sqlite"
if [ ! -f "$grown" ]; then
  python3 - "${base}.sqlite" "$grown.part" "$copies" <<'EOF'
import shutil, sqlite3, sys
src, out, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.copyfile(src, out)
db = sqlite3.connect(out)
lo, hi = db.execute("SELECT min(timestamp), max(timestamp) FROM GPU_METRICS").fetchone()
span = hi - lo + 1
db.execute("CREATE TEMP TABLE one AS SELECT * FROM GPU_METRICS")
for k in range(1, copies):
    db.execute(f"INSERT INTO GPU_METRICS SELECT timestamp + {k * span}, typeId, metricId, value FROM one")
db.commit()
print(f"{out}: {db.execute('SELECT count(*) FROM GPU_METRICS').fetchone()[0]} GPU metric rows")
EOF
  mv "$grown.part" "$grown"
fi
arrow="$work/metrics${copies}_arwdir"
if [ ! -d "$arrow" ]; then
  venv=bench/.venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c 'import pyarrow' 2>/dev/null || "$venv/bin/pip" install -q pyarrow
  rm -rf "$arrow.part"
  "$venv/bin/python" bench/amplify_arrow.py "$grown" "${base}_arwdir" "$arrow.part"
  mv "$arrow.part" "$arrow"
fi
echo "GPU metrics at ${copies}x: arrowdir against SQLite ($rounds rounds)"
bench/interleave.sh "$rounds" \
  arrow "$BIN -q $arrow -o $work/metrics_a.pftrace" \
  sqlite "$BIN -q $grown -o $work/metrics_s.pftrace"
python3 bench/content.py --diff "$work/metrics_s.pftrace" "$work/metrics_a.pftrace"
