#!/usr/bin/env bash
# Regenerate the `nsys recipe` goldens that tests/all/recipe.rs compares `recipe --csv` with.
#   tests/data/nsys_recipe/gen.sh [NSYS_RECIPE] [CORPUS]
# defaults: ../shared/tools/nsys-recipe (nsys 2023.4.4's recipes, set up), ../shared/corpus.
# For each multi-report set below, each recipe runs on COPIES of the set's reports in a temporary
# folder (the recipe exports each report to X.sqlite beside it; the copies keep the reports' file
# names, which the recipe writes in its `File` column). Each parquet table the recipe writes
# (OUT/*.parquet but `files`, the list of the inputs) becomes SET/RECIPE/TABLE.csv.gz: pandas'
# `to_csv` of the table (its index included, floats in full precision), gzip -n. A recipe that finds
# no data writes nothing; the folder SET/RECIPE then holds only a file NODATA.
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")"
here=$(pwd)
recipe=$(realpath "${1:-../../../../shared/tools/nsys-recipe}")
corpus=$(realpath "${2:-../../../../shared/corpus}")
py=${NSYS_RECIPE_VENV:-$HOME/.cache/nsys-recipe-venv}/bin/python
recipes=(
  cuda_gpu_kern_sum cuda_api_sum cuda_gpu_mem_time_sum nvtx_sum nvtx_gpu_proj_sum mpi_sum
  gpu_time_util cuda_gpu_time_util_map
)
declare -A sets=(
  [gpubootcamp_mpi]="$corpus/openhackathons-org__gpubootcamp__mpi_report1.qdrep $corpus/openhackathons-org__gpubootcamp__mpi_report2.qdrep"
  [fixture_mpi]="$(echo "$here"/../../fixtures/mpi/reports/rank_*.nsys-rep)"
  [cardiac]="$corpus/mabdullahsoyturk__cardiac-simulation__report1.qdrep $corpus/mabdullahsoyturk__cardiac-simulation__report2.qdrep"
  [ai_profiler]="$corpus/openhackathons-org__AI-Profiler__baseline.nsys-rep $corpus/openhackathons-org__AI-Profiler__baseline_nvtx.nsys-rep $corpus/openhackathons-org__AI-Profiler__firstOptimization.nsys-rep"
)
only=${ONLY_SETS:-${!sets[*]}}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$recipe" --version >VERSION 2>/dev/null || /opt/nvidia/nsight-systems/2023.4.4/bin/nsys --version >VERSION
for set in $only; do
  rm -rf "${set:?}"
  mkdir -p "$tmp/in"
  rm -rf "${tmp:?}"/in/*
  # shellcheck disable=SC2086
  cp ${sets[$set]} "$tmp/in/"
  for r in "${recipes[@]}"; do
    rm -rf "$tmp/out"
    "$recipe" "$r" --input "$tmp/in" --output "$tmp/out" >"$tmp/log" 2>&1 || {
      cat "$tmp/log" >&2
      echo "$set $r: the recipe failed" >&2
      exit 1
    }
    mkdir -p "$set/$r"
    if [[ ! -d $tmp/out ]]; then
      grep -q "No output generated" "$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
      : >"$set/$r/NODATA"
      echo "$set $r: no data"
      continue
    fi
    for f in "$tmp"/out/*.parquet; do
      t=$(basename "$f" .parquet)
      [[ $t == files ]] && continue
      "$py" -c 'import sys, pandas as pd; pd.read_parquet(sys.argv[1]).to_csv(sys.stdout)' "$f" |
        gzip -n -9 >"$set/$r/$t.csv.gz"
    done
    echo "$set $r: $(cd "$set/$r" && echo *)"
  done
done
