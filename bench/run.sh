#!/usr/bin/env bash
# Benchmark: one command reproduces every number of docs/performance.md's conversion tables.
#   bench/run.sh [COPIES...]        default: 10 20 100
# Builds the inputs (a real PyTorch-on-A100 export grown N-fold with amplify_trace.py, the
# NVTX-heavy corpus export grown 157-fold, the adversarial orders of bench/adversarial.py),
# installs the peer (nCompass `nsys-chrome`, ncompass==0.1.15 from PyPI) into bench/.venv,
# builds the SQLite floor (bench/floor.rs; "floorq" is the same read through nsys::Query, the
# converter's own reader), then runs each program RUNS times interleaved and
# reports medians of CPU time (user+sys: the machine is shared, wall time is noise) and peak RSS.
# Env: RUNS (3), BENCH_DIR (/tmp/nsys-perfetto-bench), SHARED (../shared),
#      SKIP="peer nvtx adv tp" (any of them) to leave parts out.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${SHARED:-../shared}
work=${BENCH_DIR:-/tmp/nsys-perfetto-bench}
runs=${RUNS:-3}
skip=" ${SKIP:-} "
copies=("${@:-10 20 100}")
read -r -a copies <<<"${copies[*]}"
types=kernel,cuda-api,nvtx,nvtx-gpu,osrt
peer_types=kernel,nvtx,nvtx-kernel,cuda-api,osrt
mkdir -p "$work"
cargo build --release -q
cargo build --release -q -p nsys-perfetto-bench
bin=target/release/nsys-perfetto
floor=target/release/floor
tp=$shared/tools/perfetto/bin/trace_processor_shell

peer=""
if [[ $skip != *" peer "* ]]; then
  venv=bench/.venv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  find_peer() { ls "$venv"/lib/python3*/site-packages/ncompass/bin/nsys-chrome 2>/dev/null | head -1 || true; }
  peer=$(find_peer)
  if [ -z "$peer" ]; then
    "$venv/bin/pip" install -q ncompass==0.1.15
    peer=$(find_peer)
  fi
fi

grow() { # grow SRC COPIES OUT
  [ -s "$3" ] || python3 "$shared/tools/amplify_trace.py" "$1" "$3" --copies "$2" >/dev/null
}

# measure NAME CMD...: one run; appends "cpu_s rss_mb" to $work/NAME.samples
measure() {
  local name=$1
  shift
  /usr/bin/time -f '%U %S %M' -o "$work/time.txt" "$@" >/dev/null 2>"$work/$name.stderr" || {
    echo "FAILED: $*" >&2
    tail -3 "$work/$name.stderr" >&2
  }
  awk '{printf "%.3f %.1f\n", $1+$2, $3/1024}' "$work/time.txt" >>"$work/$name.samples"
}
# after_peer: the peer writes a JSON of up to GBs; drop it and let the kernel write back its
# pages before the next program runs, so that no one is timed while that happens
after_peer() {
  rm -f "$work/peer.json"
  sync
}
# med NAME COLUMN: median of a column of the samples
med() {
  awk -v c="$2" '{print $c}' "$work/$1.samples" | sort -g |
    awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}
reset() { for n in "$@"; do rm -f "$work/$n.samples"; done; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", (b > 0) ? a/b : 0}'; }

echo "# $(date -u +%F) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); medians of $runs interleaved runs, CPU = user+sys"
src=$shared/bench/ai-profiler-firstOptimization.sqlite

echo
echo "## Default conversion vs the SQLite floor and vs the same without NVTX on the GPU (--types=-nvtx-gpu); --types $types vs the peer"
printf '%-7s %8s %9s %9s %8s %9s %8s %9s %8s %9s %9s %9s %9s %8s\n' copies input_MB ours_cpu floor_cpu /floor floorq_cpu /floorq no_proj /no_proj ours_MB typed_cpu peer_cpu peer/ours peer_MB
for c in "${copies[@]}"; do
  in=$work/bench$c.sqlite
  grow "$src" "$c" "$in"
  reset ours floor floorq noproj typed peer
  for _ in $(seq "$runs"); do
    measure ours "$bin" -q "$in" -o "$work/out.pftrace"
    measure floor "$floor" "$in"
    measure floorq env FLOOR_READER=query "$floor" "$in"
    measure noproj "$bin" -q "$in" -o "$work/noproj.pftrace" --types=-nvtx-gpu
    measure typed "$bin" -q "$in" -o "$work/typed.pftrace" --types "$types"
    [ -n "$peer" ] && measure peer "$peer" -t "$peer_types" -o "$work/peer.json" "$in" && after_peer
  done
  o=$(med ours 1) f=$(med floor 1) t=$(med typed 1)
  p=$([ -n "$peer" ] && med peer 1 || echo 0) pm=$([ -n "$peer" ] && med peer 2 || echo 0)
  n=$(med noproj 1) fq=$(med floorq 1)
  printf '%-7s %8.0f %9s %9s %8s %9s %8s %9s %8s %9s %9s %9s %9s %8s\n' "$c" "$(($(stat -L -c %s "$in") / 1000000))" \
    "$o" "$f" "$(ratio "$o" "$f")" "$fq" "$(ratio "$o" "$fq")" "$n" "$(ratio "$o" "$n")" "$(med ours 2)" "$t" "$p" "$(ratio "$p" "$t")" "$pm"
done

if [[ $skip != *" nvtx "* ]]; then
  echo
  echo "## NVTX-heavy: GindaChen mfu_2gpu_before x157 (--types $types)"
  in=$work/nvtx157.sqlite
  grow "$shared/corpus/GindaChen__nsys-ai__mfu_2gpu_before.sqlite" 157 "$in"
  reset ours peer
  for _ in $(seq "$runs"); do
    measure ours "$bin" -q "$in" -o "$work/nvtx.pftrace" --types "$types"
    [ -n "$peer" ] && measure peer "$peer" -t "$peer_types" -o "$work/peer.json" "$in" && after_peer
  done
  printf '%-12s %8s %8s\n' program cpu_s peak_MB
  printf '%-12s %8s %8s\n' ours "$(med ours 1)" "$(med ours 2)"
  [ -n "$peer" ] && printf '%-12s %8s %8s   peer/ours %s\n' peer "$(med peer 1)" "$(med peer 2)" "$(ratio "$(med peer 1)" "$(med ours 1)")"
fi

if [[ $skip != *" adv "* ]]; then
  echo
  echo "## Adversarial orders vs their in-order twins (bench/adversarial.py)"
  grow "$src" 5 "$work/bench5.sqlite"
  grow "$src" 17 "$work/bench17.sqlite"
  printf '%-18s %-8s %9s %9s %7s %8s %8s\n' case types cpu_s twin_cpu ratio tracks peak_MB
  for spec in "reverse-nvtx 5 nvtx" "shuffle-gpu 17 kernel" "overlap-gpu 5 kernel" "stream-per-kernel 5 kernel"; do
    read -r kind c ty <<<"$spec"
    in=$work/adv-$kind.sqlite
    [ -s "$in" ] || python3 bench/adversarial.py "$kind" "$work/bench$c.sqlite" "$in"
    reset adv twin
    for _ in $(seq "$runs"); do
      measure adv "$bin" "$in" -o "$work/adv.pftrace" --types "$ty"
      measure twin "$bin" -q "$work/bench$c.sqlite" -o "$work/twin.pftrace" --types "$ty"
    done
    tracks=$(sed -n 's/^  tracks: \([0-9]*\).*/\1/p' "$work/adv.stderr")
    printf '%-18s %-8s %9s %9s %7s %8s %8s\n' "$kind" "$ty" "$(med adv 1)" "$(med twin 1)" \
      "$(ratio "$(med adv 1)" "$(med twin 1)")" "$tracks" "$(med adv 2)"
  done
fi

if [[ $skip != *" tp "* ]]; then
  echo
  echo "## Opening the 20x trace in trace_processor $("$tp" --version 2>/dev/null | grep -o 'v[0-9.]*' | head -1): .pftrace vs .json of the same content"
  in=$work/bench20.sqlite
  grow "$src" 20 "$in"
  echo "SELECT count(*) FROM slice;" >"$work/q.sql"
  # The default content, and the same without CPU samples (JSON carries each sample's whole
  # stack as text, which makes its file twice as large).
  no_samples=kernel,memcpy,memset,cuda-api,nvtx,osrt,sync,sched,gpu-metrics,gpu-memory,um,cuda-graph,cudnn,cublas,openacc,openmp,mpi,ucx,cpu-counters,network,video,graphics,diagnostics,overhead
  printf '%-12s %-8s %9s %9s %9s\n' content format file_MB cpu_s peak_MB
  for content in default no-samples; do
    sel=()
    [ $content = no-samples ] && sel=(--types "$no_samples")
    "$bin" -q "$in" -o "$work/tp.pftrace" "${sel[@]}"
    "$bin" -q "$in" -o "$work/tp.json" "${sel[@]}"
    reset tp_proto tp_json
    for _ in $(seq "$runs"); do
      measure tp_proto "$tp" -q "$work/q.sql" "$work/tp.pftrace"
      measure tp_json "$tp" -q "$work/q.sql" "$work/tp.json"
    done
    for f in proto json; do
      file=$work/tp.pftrace
      [ $f = json ] && file=$work/tp.json
      printf '%-12s %-8s %9s %9s %9s\n' $content $f "$(($(stat -c %s "$file") / 1000000))" "$(med tp_$f 1)" "$(med tp_$f 2)"
    done
    echo "$content proto/json: cpu $(ratio "$(med tp_proto 1)" "$(med tp_json 1)"), memory $(ratio "$(med tp_proto 2)" "$(med tp_json 2)")"
  done
fi
