#!/usr/bin/env bash
# Conversion from nsys' Arrow export against conversion from its SQLite export, on the corpus's
# 3 largest reports nsys 2023.4 reads (the reports of bench/arrow.sh's end-to-end runs), each
# exported once by nsys 2023.4.4 as SQLite and as an arrowdir. A conversion takes tens of ms,
# below what /usr/bin/time resolves, so the CPU time is perf's task-clock; ROUNDS rounds
# interleave every conversion, and the script prints per report and binary the medians of CPU
# ms and peak RSS MB of both, and the ratio Arrow / SQLite. Both traces of each report must hold
# the same content (bench/content.py).
#   bench/reports.sh [BIN...]      default: the release build; several binaries side by side
# Env: ROUNDS (10), BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared),
#      NSYS (/opt/nvidia/nsight-systems/2023.4.4/bin/nsys).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-10}
shared=${SHARED:-../shared}
work=${BENCH_DIR:-/tmp/nsys-perfetto-bench}
nsys=${NSYS:-/opt/nvidia/nsight-systems/2023.4.4/bin/nsys}
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  cargo build --release -q
  bins=(target/release/nsys-perfetto)
fi
mkdir -p "$work"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
reports=(openhackathons-org__AI-Profiler__firstOptimization.nsys-rep
  openhackathons-org__AI-Profiler__baseline_nvtx.nsys-rep
  cqhcolorado__test-case-cori-gpu-omp-06212021__report9.qdrep)
# nsys' two exports of each report (made once).
for r in "${reports[@]}"; do
  base=$work/report-${r%%.*}
  if [ ! -s "$base.sqlite" ] || [ ! -d "${base}_arwdir" ]; then
    rm -rf "$base.sqlite" "${base}_arwdir"
    cp "$shared/corpus/$r" "$tmp/r.${r##*.}"
    "$nsys" export --type sqlite -o "$tmp/r.sqlite" "$tmp/r.${r##*.}" >/dev/null 2>&1
    "$nsys" export --type arrowdir -o "$tmp/r_arwdir" "$tmp/r.${r##*.}" >/dev/null 2>&1
    mv "$tmp/r_arwdir" "${base}_arwdir" && mv "$tmp/r.sqlite" "$base.sqlite"
  fi
  "${bins[0]}" -q "$base.sqlite" -o "$tmp/s.pftrace"
  "${bins[0]}" -q "${base}_arwdir" -o "$tmp/a.pftrace"
  python3 bench/content.py --diff "$tmp/s.pftrace" "$tmp/a.pftrace" ||
    echo "(content not compared, or different: see above)"
done

declare -A cpu rss
for ((i = 0; i < rounds; i++)); do
  for r in "${reports[@]}"; do
    base=$work/report-${r%%.*}
    for b in "${!bins[@]}"; do
      for kind in sqlite arrow; do
        input=$base.sqlite
        [ $kind = arrow ] && input=${base}_arwdir
        out=$(/usr/bin/time -f "rss %M" perf stat -x, -e task-clock \
          "${bins[$b]}" -q "$input" -o "$tmp/o.pftrace" 2>&1)
        cpu[$r $b $kind]+="$(echo "$out" | grep task-clock | cut -d, -f1) "
        rss[$r $b $kind]+="$(echo "$out" | awk '/^rss/ {print $2 / 1024}') "
      done
    done
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for r in "${reports[@]}"; do
  echo "== $r"
  for b in "${!bins[@]}"; do
    s=$(echo ${cpu[$r $b sqlite]} | median)
    a=$(echo ${cpu[$r $b arrow]} | median)
    printf "%s: sqlite %.1f ms %.1f MB, arrow %.1f ms %.1f MB, arrow / sqlite %.2f\n" \
      "${bins[$b]}" "$s" "$(echo ${rss[$r $b sqlite]} | median)" \
      "$a" "$(echo ${rss[$r $b arrow]} | median)" "$(echo "$a / $s" | bc -l)"
  done
done
