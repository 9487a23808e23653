#!/usr/bin/env bash
# `recipe` against NVIDIA's `nsys recipe` (nsys 2023.4.4, ../shared/tools/nsys-recipe) on the
# same RANKS reports, side by side in one run (issue 41: at least 10x faster on 64 ranks).
#   bench/recipe.sh [RANKS] [RECIPE] [REPORT]
# defaults: 64 ranks, cuda_gpu_kern_sum, the gpubootcamp MPI rank
# ../shared/corpus/openhackathons-org__gpubootcamp__mpi_report1.qdrep.
# RANKS copies of REPORT under distinct names (rank_00.qdrep ...) go into two folders, one per
# tool: each tool exports the reports beside them (the recipe to X.sqlite, this tool to
# X_arwdir where the nsys found writes Arrow, else X.sqlite). Two rounds, wall and CPU time
# (user+sys, child processes included: the recipe's workers, both tools' nsys exports) of each:
# - cold: no export yet; each tool exports every report (nsys export dominates both);
# - warm: the second run on the same folders, each tool reusing its exports: the analysis alone.
# - sqlite: this tool on the recipe's own SQLite exports (the files its warm run reads), against
#   the recipe's warm run again: the same data, analysis against analysis.
# On a shared machine wall time swings with the other load (printed); CPU time much less.
# Both tools check their outputs' agreement: rank_stats and all_stats are compared (as CSV,
# numbers to 1e-9 relative) and the run fails if they differ.
# Env: SHARED (../shared), NSYS_RECIPE (the recipe runner), BIN (this tool: default the release
# build, built first).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-64}
recipe=${2:-cuda_gpu_kern_sum}
shared=${SHARED:-../shared}
report=${3:-$shared/corpus/openhackathons-org__gpubootcamp__mpi_report1.qdrep}
runner=${NSYS_RECIPE:-$shared/tools/nsys-recipe}
py=${NSYS_RECIPE_VENV:-$HOME/.cache/nsys-recipe-venv}/bin/python
if [[ -z ${BIN:-} ]]; then
  cargo build --release -q
  BIN=target/release/nsys-perfetto
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ext=${report##*.}
mkdir -p "$tmp/ours" "$tmp/theirs"
for ((i = 0; i < ranks; i++)); do
  name=$(printf 'rank_%02d.%s' "$i" "$ext")
  cp "$report" "$tmp/ours/$name"
  cp "$report" "$tmp/theirs/$name"
done
measure() { # measure OUT CMD...: run CMD; print its wall and CPU (user+sys, children too) seconds
  local out=$1
  shift
  /usr/bin/time -f '%e %U %S' -o "$out.time" "$@" >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  awk '{printf "%.2f %.2f\n", $1, $2 + $3}' "$out.time"
}
echo "$ranks ranks of $(basename "$report"), recipe $recipe, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-6s %10s %10s %8s %10s %10s %8s\n' round 'ours wall' 'recipe' ratio 'ours CPU' 'recipe' ratio
for round in cold warm sqlite; do
  rm -rf "$tmp/out_ours" "$tmp/out_theirs"
  inputs=("$tmp/ours")
  [[ $round == sqlite ]] && inputs=("$tmp"/theirs/*.sqlite)
  read -r ow oc < <(measure "$tmp/ours_$round" "$BIN" recipe "$recipe" --csv --output "$tmp/out_ours" "${inputs[@]}")
  read -r tw tc < <(measure "$tmp/theirs_$round" "$runner" "$recipe" --csv --input "$tmp/theirs" \
    --output "$tmp/out_theirs")
  printf '%-6s %10.2f %10.2f %7.1fx %10.2f %10.2f %7.1fx\n' "$round" "$ow" "$tw" \
    "$(echo "$tw / $ow" | bc -l)" "$oc" "$tc" "$(echo "$tc / $oc" | bc -l)"
done
# The two agree (CSV of the recipe's Parquet tables, as tests/data/nsys_recipe/gen.sh makes).
for f in "$tmp"/out_theirs/*.parquet; do
  t=$(basename "$f" .parquet)
  [[ $t == files ]] && continue
  "$py" - "$f" "$tmp/out_ours/$t.csv" <<'PY'
import sys, math, pandas as pd, io
theirs = pd.read_parquet(sys.argv[1]).to_csv()
ours = open(sys.argv[2]).read()
a, b = theirs.splitlines(), ours.splitlines()
assert len(a) == len(b), f"{sys.argv[1]}: {len(a)} rows against our {len(b)}"
for x, y in zip(a, b):
    if x == y:
        continue
    fx, fy = pd.read_csv(io.StringIO(x), header=None).iloc[0], pd.read_csv(io.StringIO(y), header=None).iloc[0]
    for u, v in zip(fx, fy):
        if isinstance(u, float) and isinstance(v, float) and (math.isclose(u, v, rel_tol=1e-9) or (math.isnan(u) and math.isnan(v))):
            continue
        assert str(u) == str(v) or (isinstance(u, (int, float)) and float(u) == float(v)), f"{sys.argv[1]}: {x} != {y}"
PY
done
echo "outputs agree: $(cd "$tmp/out_theirs" && ls *.parquet | grep -v files | tr '\n' ' ')"
