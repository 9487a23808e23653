#!/usr/bin/env bash
# Conversion from nsys' Arrow export (arrowdir) and Parquet export (parquetdir) against
# conversion from its SQLite export, in
# interleaved rounds (bench/interleave.sh: CPU s = user+sys, peak RSS MB, per round; medians):
#  - the corpus's AI-Profiler firstOptimization report exported by nsys 2023.4.4 as SQLite and
#    as an arrowdir, the SQLite export grown COPIES-fold (../shared/tools/amplify_trace.py) and
#    its Arrow and Parquet twins written in nsys' layout (bench/amplify_arrow.py,
#    bench/amplify_parquet.py, pyarrow in bench/.venv):
#    and the arrowdir's streams one after another in one file, as nsys' single-file Arrow export
#    (`--type arrow`, `.arrows`) holds them:
#    conversion from each, and each one's floor (bench/floor.rs: the columns a conversion reads,
#    through SQLite; bench/floor_arrow.rs: the same columns from the arrowdir, with arrow-ipc);
#  - end to end on the corpus's 3 largest reports nsys 2023.4 reads: `nsys-perfetto --no-cache
#    --nsys NSYS REPORT` (the CLI's own export), and nsys' SQLite export or arrowdir export
#    followed by the conversion of it.
# Both traces of the grown export are compared with bench/content.py where it can run.
#   bench/arrow.sh [COPIES]      default 20
# Env: ROUNDS (10), E2E_ROUNDS (5; 0 leaves the end-to-end runs out), BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared),
#      NSYS (/opt/nvidia/nsight-systems/2023.4.4/bin/nsys).
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-20}
rounds=${ROUNDS:-10}
e2e_rounds=${E2E_ROUNDS:-5}
shared=${SHARED:-../shared}
work=${BENCH_DIR:-/tmp/nsys-perfetto-bench}
nsys=${NSYS:-/opt/nvidia/nsight-systems/2023.4.4/bin/nsys}
mkdir -p "$work"
cargo build --release -q
cargo build --release -q -p nsys-perfetto-bench
bin=target/release/nsys-perfetto
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# nsys' two exports of the report (made once).
base=$work/arrow-ai
if [ ! -s "$base.sqlite" ] || [ ! -d "${base}_arwdir" ]; then
  rm -rf "$base.sqlite" "${base}_arwdir"
  cp "$shared/corpus/openhackathons-org__AI-Profiler__firstOptimization.nsys-rep" "$tmp/ai.nsys-rep"
  "$nsys" export --type sqlite -o "$tmp/ai.sqlite" "$tmp/ai.nsys-rep" >/dev/null 2>&1
  "$nsys" export --type arrowdir -o "$tmp/ai_arwdir" "$tmp/ai.nsys-rep" >/dev/null 2>&1
  mv "$tmp/ai_arwdir" "${base}_arwdir"
  mv "$tmp/ai.sqlite" "$base.sqlite"
fi
if [ ! -d "${base}_pqtdir" ]; then
  cp "$shared/corpus/openhackathons-org__AI-Profiler__firstOptimization.nsys-rep" "$tmp/ai.nsys-rep"
  "$nsys" export --type parquetdir -o "$tmp/ai_pqtdir" "$tmp/ai.nsys-rep" >/dev/null 2>&1
  mv "$tmp/ai_pqtdir" "${base}_pqtdir"
fi

# Grown COPIES-fold, and its Arrow twin (made once).
grown=$work/arrow-ai$copies.sqlite
arrow=$work/arrow-ai${copies}_arwdir
if [ ! -s "$grown" ]; then
  python3 "$shared/tools/amplify_trace.py" "$base.sqlite" "$grown.part" --copies "$copies" >/dev/null
  mv "$grown.part" "$grown"
fi
# pyarrow, for writing the twins, in bench/.venv.
venv=bench/.venv
pyarrow() {
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -c 'import pyarrow' 2>/dev/null || "$venv/bin/pip" install -q pyarrow
}
if [ ! -d "$arrow" ]; then
  pyarrow
  rm -rf "$arrow.part"
  "$venv/bin/python" bench/amplify_arrow.py "$grown" "${base}_arwdir" "$arrow.part"
  mv "$arrow.part" "$arrow"
fi
parquet=$work/arrow-ai${copies}_pqtdir
if [ ! -d "$parquet" ]; then
  pyarrow
  rm -rf "$parquet.part"
  "$venv/bin/python" bench/amplify_parquet.py "$arrow" "${base}_pqtdir" "$parquet.part"
  mv "$parquet.part" "$parquet"
fi
arrows=$work/arrow-ai${copies}.arrows
if [ ! -s "$arrows" ]; then
  cat "$arrow"/*.arrow >"$arrows.part"
  mv "$arrows.part" "$arrows"
fi
echo "${copies}x: $grown ($(du -sh "$grown" | cut -f1)), $arrow ($(du -sh "$arrow" | cut -f1)), $parquet ($(du -sh "$parquet" | cut -f1))"

# The same trace from both (content as trace_processor reads it).
"$bin" -q "$grown" -o "$tmp/s.pftrace"
"$bin" -q "$arrow" -o "$tmp/a.pftrace"
"$bin" -q "$parquet" -o "$tmp/p.pftrace"
python3 bench/content.py --diff "$tmp/s.pftrace" "$tmp/a.pftrace" ||
  echo "(content not compared, or different: see above)"
python3 bench/content.py --diff "$tmp/s.pftrace" "$tmp/p.pftrace" ||
  echo "(content not compared, or different: see above)"
"$bin" -q "$arrows" -o "$tmp/f.pftrace"
python3 bench/content.py --diff "$tmp/s.pftrace" "$tmp/f.pftrace" ||
  echo "(content not compared, or different: see above)"

bench/interleave.sh "$rounds" \
  sqlite "$bin -q $grown -o $tmp/s.pftrace" \
  arrow "$bin -q $arrow -o $tmp/a.pftrace" \
  arrows "$bin -q $arrows -o $tmp/f.pftrace" \
  parquet "$bin -q $parquet -o $tmp/p.pftrace" \
  floor-sqlite "target/release/floor $grown" \
  floor-arrow "target/release/floor_arrow $arrow"

# End to end, export included, on the 3 largest corpus reports nsys 2023.4 reads.
[ "$e2e_rounds" -gt 0 ] || exit 0
for r in openhackathons-org__AI-Profiler__firstOptimization.nsys-rep \
  openhackathons-org__AI-Profiler__baseline_nvtx.nsys-rep \
  cqhcolorado__test-case-cori-gpu-omp-06212021__report9.qdrep; do
  ext=${r##*.}
  cp "$shared/corpus/$r" "$tmp/r.$ext"
  echo "== $r ($(du -h "$tmp/r.$ext" | cut -f1))"
  bench/interleave.sh "$e2e_rounds" \
    cli-sqlite "$bin -q --no-cache --export sqlite --nsys $nsys $tmp/r.$ext -o $tmp/c.pftrace" \
    cli "$bin -q --no-cache --nsys $nsys $tmp/r.$ext -o $tmp/c.pftrace" \
    via-sqlite "rm -f $tmp/r.sqlite && $nsys export --type sqlite -o $tmp/r.sqlite $tmp/r.$ext && $bin -q $tmp/r.sqlite -o $tmp/s.pftrace" \
    via-arrow "rm -rf $tmp/r_arwdir && $nsys export --type arrowdir -o $tmp/r_arwdir $tmp/r.$ext && $bin -q $tmp/r_arwdir -o $tmp/a.pftrace"
  python3 bench/content.py --diff "$tmp/s.pftrace" "$tmp/a.pftrace" || true
done
