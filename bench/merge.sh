#!/usr/bin/env bash
# A job of N ranks, three ways, side by side (wall, CPU, peak RSS from /usr/bin/time -v):
#   merge     `merge RANKS/ -o job.pftrace` (all cores)
#   one-by-one N separate conversions `nsys-perfetto rank_K.sqlite`, one after the other
#   parts     N `merge --part rank_K.sqlite` (one a node in a real job; here one after the
#             other), then `merge *.part.pftrace -o job.pftrace` (the assembly, timed apart)
# plus one report converted alone (the peak-RSS reference), and checks that the assembled trace
# holds what the merge holds (bench/content.py; skipped when its Python package is missing).
#   bench/merge.sh N [SOURCE.sqlite...]   (default sources: tests/fixtures/mpi/rank_*.sqlite)
# Uses $BIN, default target/release/nsys-perfetto (built here when missing), and $BENCH_DIR (default
# /tmp/nsys-perfetto-merge-bench), which holds the N copies made by bench/make_ranks.py.
set -euo pipefail
n=${1:?usage: bench/merge.sh N [SOURCE.sqlite...]}
shift
bin=${BIN:-$PWD/target/release/nsys-perfetto}
[ -x "$bin" ] || cargo build --release -q
work=${BENCH_DIR:-/tmp/nsys-perfetto-merge-bench}/n$n
rm -rf "$work"
mkdir -p "$work/single" "$work/parts"
python3 bench/make_ranks.py "$n" "$work/ranks" "$@"
ranks=("$work"/ranks/rank_*.sqlite)

# measure NAME COMMAND...: one line "NAME wall_s cpu_s peak_rss_MB".
measure() {
  local name=$1
  shift
  /usr/bin/time -v -o "$work/time.txt" "$@" >/dev/null 2>"$work/err.txt" || {
    cat "$work/err.txt" >&2
    exit 1
  }
  awk -v name="$name" -F': ' '
    /Elapsed \(wall clock\)/ { n = split($2, p, ":"); wall = (n == 3) ? p[1] * 3600 + p[2] * 60 + p[3] : p[1] * 60 + p[2] }
    /User time/ { cpu += $2 }
    /System time/ { cpu += $2 }
    /Maximum resident/ { rss = $2 / 1024 }
    END { printf "%-26s %9.2f %9.2f %9.1f\n", name, wall, cpu, rss }' "$work/time.txt"
}

one_by_one() {
  for f in "${ranks[@]}"; do
    "$bin" -q "$f" -o "$work/single/$(basename "$f" .sqlite).pftrace"
  done
}
parts() {
  for f in "${ranks[@]}"; do
    "$bin" merge --part -q "$f" -o "$work/parts/$(basename "$f" .sqlite).part.pftrace"
  done
}

echo "$n reports ($(du -sh "$work/ranks" | cut -f1) of exports), $(nproc) cores"
printf "%-26s %9s %9s %9s\n" "" "wall s" "cpu s" "peak MB"
measure "one report alone" "$bin" -q "${ranks[0]}" -o "$work/one.pftrace"
measure "merge" "$bin" merge -q "$work/ranks" -o "$work/job.pftrace"
measure "one by one" bash -c "$(declare -f one_by_one); bin=$bin work=$work; ranks=(${ranks[*]}); one_by_one"
measure "parts (per-rank steps)" bash -c "$(declare -f parts); bin=$bin work=$work; ranks=(${ranks[*]}); parts"
measure "merge of parts" "$bin" merge -q "$work"/parts/*.part.pftrace -o "$work/assembled.pftrace"
ls -l "$work/job.pftrace" "$work/assembled.pftrace" | awk '{ printf "%s %.1f MB\n", $NF, $5 / 1e6 }'
if python3 -c 'import perfetto' 2>/dev/null; then
  python3 bench/content.py --diff "$work/job.pftrace" "$work/assembled.pftrace"
fi
