#!/usr/bin/env bash
# Every corpus report that an nsys reads (default nsys 2023.4.4), exported by it as SQLite, as an
# arrowdir, as one .arrows file and as a parquetdir, each export converted, and the content of
# each trace (bench/content.py: trace_processor's view, per category) compared with the SQLite
# one's. Prints one line a report; exits 1 if any report's traces differ or fail to convert.
#   bench/exact.sh [REPORT...]      default: every .nsys-rep and .qdrep of ../shared/corpus
# Env: NSYS (/opt/nvidia/nsight-systems/2023.4.4/bin/nsys), SHARED (../shared).
set -uo pipefail
cd "$(dirname "$0")/.."
shared=${SHARED:-../shared}
nsys=${NSYS:-/opt/nvidia/nsight-systems/2023.4.4/bin/nsys}
cargo build --release -q || exit 1
bin=$PWD/target/release/nsys-perfetto
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ $# -eq 0 ]; then
  set -- "$shared"/corpus/*.nsys-rep "$shared"/corpus/*.qdrep
fi
same=0 differ=0 unread=0
for report in "$@"; do
  name=$(basename "$report")
  ext=${name##*.}
  rm -rf "$tmp/r" && mkdir "$tmp/r"
  cp "$report" "$tmp/r/r.$ext"
  # A report this nsys cannot export is out of the comparison, and said so.
  if ! "$nsys" export -q true --type sqlite -o "$tmp/r/r.sqlite" "$tmp/r/r.$ext" >"$tmp/r/log" 2>&1 ||
    [ ! -s "$tmp/r/r.sqlite" ]; then
    echo "unread   $name: $(grep -m1 -i error "$tmp/r/log" | cut -c1-100)"
    unread=$((unread + 1))
    continue
  fi
  "$nsys" export -q true --type arrowdir -o "$tmp/r/r_arwdir" "$tmp/r/r.$ext" >/dev/null 2>&1
  "$nsys" export -q true --type arrow -o "$tmp/r/r.arrows" "$tmp/r/r.$ext" >/dev/null 2>&1
  "$nsys" export -q true --type parquetdir -o "$tmp/r/r_pqtdir" "$tmp/r/r.$ext" >/dev/null 2>&1
  verdict="same"
  why=""
  if ! "$bin" -q "$tmp/r/r.sqlite" -o "$tmp/r/s.pftrace" 2>"$tmp/r/err"; then
    verdict="differ" why="SQLite export: $(head -c 200 "$tmp/r/err")"
  else
    facts=$(python3 bench/content.py "$tmp/r/s.pftrace" | wc -l)
    for input in r_arwdir r.arrows r_pqtdir; do
      if ! "$bin" -q "$tmp/r/$input" -o "$tmp/r/x.pftrace" 2>"$tmp/r/err"; then
        verdict="differ" why="$why $input: $(head -c 200 "$tmp/r/err")"
      elif ! python3 bench/content.py --diff "$tmp/r/s.pftrace" "$tmp/r/x.pftrace" >"$tmp/r/diff" 2>&1; then
        verdict="differ" why="$why $input: $(head -c 300 "$tmp/r/diff" | tr '\n' ' ')"
      fi
    done
  fi
  if [ "$verdict" = same ]; then
    echo "same     $name ($facts facts)"
    same=$((same + 1))
  else
    echo "DIFFER   $name:$why"
    differ=$((differ + 1))
  fi
done
echo "reports: $same the same from SQLite, arrowdir, .arrows and parquetdir; $differ differ; $unread not read by $nsys"
[ "$differ" -eq 0 ]
