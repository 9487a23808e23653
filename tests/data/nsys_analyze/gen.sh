#!/usr/bin/env bash
# Regenerate the `nsys analyze` goldens that tests/all/analyze.rs compares `nsys-perfetto analyze`
# with: for every SQLite export of the corpus, nsys 2023.4.4's six CUDA/GPU expert rules with
# no row limit (rows=-1) and default options, as nsys writes them (--format csv).
#
#   tests/data/nsys_analyze/gen.sh [CORPUS_DIR] [NSYS]
#
# Output: tests/data/nsys_analyze/<export name without .sqlite>/<rule>.csv, nsys' own CSV
# (header and rows; empty when the rule found nothing), or <rule>.skipped holding nsys' reason
# when it did not run the rule (no such table in the export).
#
# nsys runs on COPIES of the exports in a temporary directory (it may write into its input; the
# corpus is read-only). nsys 2023.4's memcpy and memset rules refuse older exports for lacking
# what they only display: the CUPTI_ACTIVITY_KIND_MEMCPY/MEMSET column `greenContextId` (before
# nsys 2023.4) and the label table ENUM_CUDA_MEM_KIND (before 2021.x). On those copies the column
# is added, empty (NULL: nsys shows a green context id of 0 as blank), and the table is created
# with nsys' labels, so that every rule runs on every export with data for it. Nothing else is
# changed; the rules' SQL then runs as on a current export.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus=${1:-$here/../../../../shared/corpus}
nsys=${2:-/opt/nvidia/nsight-systems/2023.4.4/bin/nsys}
# Each rule with its defaults, and the GPU rules with other options too (file RULE@OPTIONS.csv).
rules="cuda_api_sync cuda_memcpy_sync cuda_memcpy_async cuda_memset_sync gpu_gaps gpu_time_util
       gpu_gaps:gap=1 gpu_time_util:threshold=80:chunks=100"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nsys" --version > "$here/NSYS_VERSION"
for src in "$corpus"/*.sqlite; do
    name=$(basename "$src" .sqlite)
    out="$here/$name"
    rm -rf "$out" "$tmp"/*
    mkdir -p "$out"
    cp "$src" "$tmp/in.sqlite"
    python3 - "$tmp/in.sqlite" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
    if cols and "greenContextId" not in cols:
        con.execute(f"ALTER TABLE {t} ADD COLUMN greenContextId INTEGER")
if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'ENUM_CUDA_MEM_KIND'").fetchone():
    con.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
    con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
        (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ])
con.commit()
PY
    for spec in $rules; do
        rule=${spec%%:*}
        opts=${spec#"$rule"}
        o=${opts#:}
        file=$rule${opts:+@${o//:/,}}
        log=$( (cd "$tmp" && "$nsys" analyze --force-overwrite true -r "$rule:rows=-1$opts" \
            --format csv -o "$tmp/out" in.sqlite) 2>&1 ) || { echo "$name $rule: $log" >&2; exit 1; }
        # PROCESSED (rows written), SKIPPED (the reason follows) or neither (no rows).
        if grep -qi 'error' <<<"$log"; then
            echo "$name $rule: $log" >&2; exit 1
        elif grep -q 'SKIPPED' <<<"$log"; then
            sed -n 's/.*SKIPPED: in.sqlite //p' <<<"$log" > "$out/$file.skipped"
        elif [ -e "$tmp/out_${rule}_rows=-1${opts//:/_}.csv" ]; then
            mv "$tmp/out_${rule}_rows=-1${opts//:/_}.csv" "$out/$file.csv"
        else
            : > "$out/$file.csv"
        fi
        rm -f "$tmp"/out_*
    done
    echo "$name: $(ls "$out" | tr '\n' ' ')"
done
