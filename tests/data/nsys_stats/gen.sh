#!/usr/bin/env bash
# Regenerate the `nsys stats` goldens that tests/all/nsys_stats.rs compares `stats --csv` with.
#   tests/data/nsys_stats/gen.sh [--nvtx] [NSYS] [CORPUS]
# defaults: /opt/nvidia/nsight-systems/2023.4.4/bin/nsys, ../shared/corpus (from the repo root).
# With --nvtx, only the NVTX projection reports (nvtx_gpu_proj_sum, nvtx_kern_sum and its
# :base/:mangled forms) are run, into nvtx/NAME.txt.gz, leaving the other goldens as they are.
# For every SQLite export of the corpus, nsys 2023.4 runs every report below on a COPY of the
# export in a temporary folder (nsys may write next to its input), with `--format csv`, and the
# results go into one file per export, NAME.txt.gz (gzip -n): for each report a line `### REPORT` and then
# nsys' CSV as it wrote it, or, where nsys skipped the report for lack of data, a line
# `#SKIPPED` (any other outcome stops the script). nsys writes an empty file where the
# report's query found no rows.
set -euo pipefail
cd "$(dirname "$0")"
nvtx=
if [[ ${1:-} == --nvtx ]]; then
  nvtx=1
  shift
fi
nsys=${1:-/opt/nvidia/nsight-systems/2023.4.4/bin/nsys}
corpus=$(realpath "${2:-../../../../shared/corpus}")
reports=(
  cuda_gpu_kern_sum cuda_gpu_kern_sum:base cuda_gpu_kern_sum:mangled cuda_api_sum
  cuda_gpu_mem_time_sum cuda_gpu_mem_size_sum nvtx_sum osrt_sum um_sum um_total_sum
  um_cpu_page_faults_sum openacc_sum openmp_sum cuda_gpu_kern_gb_sum cuda_kern_exec_sum
)
if [[ -n $nvtx ]]; then
  reports=(nvtx_gpu_proj_sum nvtx_kern_sum nvtx_kern_sum:base nvtx_kern_sum:mangled)
  mkdir -p nvtx
  cd nvtx
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nsys" --version >VERSION
rm -f ./*.txt.gz
for src in "$corpus"/*.sqlite; do
  name=$(basename "$src" .sqlite)
  rm -rf "${tmp:?}"/*
  cp "$src" "$tmp/in.sqlite"
  out=$name.txt
  : >"$out.part"
  for r in "${reports[@]}"; do
    file=$tmp/out_$(echo "$r" | tr ':' '_').csv
    rm -f "$file"
    said=$(timeout 600 "$nsys" stats --force-overwrite=true --format csv -r "$r" \
      -o "$tmp/out" "$tmp/in.sqlite" 2>&1 || true)
    echo "### $r" >>"$out.part"
    if [[ $said == *"SKIPPED"* ]]; then
      echo "#SKIPPED" >>"$out.part"
    elif [[ -f $file ]]; then
      # Empty when the query found no rows.
      cat "$file" >>"$out.part"
    else
      echo "$name $r: $said" >&2
      exit 1
    fi
  done
  gzip -n -9 <"$out.part" >"$out.gz"
  rm "$out.part"
  echo "$name"
done
