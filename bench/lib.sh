# Set-up shared by the paired-round benchmarks, sourced from the repository root:
#   source bench/lib.sh COPIES
# sets $shared, $work, $input (the real export of ../shared/bench grown COPIES-fold, made once
# under $BENCH_DIR), $bin (the release binary, built) and $tmp (removed on exit).
shared=${SHARED:-../shared}
work=${BENCH_DIR:-/tmp/nsys-perfetto-bench}
mkdir -p "$work"
input=$work/bench$1.sqlite
[ -s "$input" ] || python3 "$shared/tools/amplify_trace.py" \
  "$shared/bench/ai-profiler-firstOptimization.sqlite" "$input" --copies "$1" >/dev/null
cargo build --release -q
bin=target/release/nsys-perfetto
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
