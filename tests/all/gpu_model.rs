//! `--gpu perfetto`: GPU work in Perfetto's own GPU model. On every corpus export with GPU
//! rows, trace_processor's `gpu_slice` holds exactly the export's kernels, memcpys and memsets
//! (count, sum of start and of duration per kind), `gpu` names every GPU, kernels carry the
//! export's launch columns as Perfetto's launch args, the arrows into GPU work are the default
//! layout's, and the trace loads clean in trace_processor v58.2 and v56.

use crate::common::{self, convert_with, corpus_dir, skip, tp_query, tpcheck_with};
use nsys_perfetto::convert::Options;
use nsys_perfetto_model::select::{GpuModel, Selection};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";

fn native() -> Options {
    Options {
        selection: Selection {
            gpu: GpuModel::Perfetto,
            ..Selection::default()
        },
        ..Options::default()
    }
}

fn has_table(conn: &Connection, table: &str) -> bool {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [table],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        > 0
}

/// Rows of a query on the export, each value as text (as `tp_query` gives them).
fn rows(conn: &Connection, sql: &str) -> Vec<Vec<String>> {
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| {
        Ok((0..n)
            .map(|i| match r.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                rusqlite::types::ValueRef::Null => "[NULL]".to_string(),
                rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                v => format!("{v:?}"),
            })
            .collect())
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Corpus exports with GPU rows that the model can place (a start, an end, a device and a
/// stream).
fn exports_with_gpu_work() -> Vec<PathBuf> {
    let Some(dir) = corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .filter(|p| {
            let conn = Connection::open_with_flags(p, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            [KERNEL, MEMCPY, MEMSET].iter().any(|t| {
                has_table(&conn, t) && rows(&conn, &where_placed(t, "count(*)"))[0][0] != "0"
            })
        })
        .collect();
    out.sort();
    assert!(out.len() >= 20, "corpus exports with GPU work: {out:?}");
    out
}

fn where_placed(table: &str, what: &str) -> String {
    format!(
        "SELECT {what} FROM {table} WHERE start IS NOT NULL AND \"end\" >= start \
         AND deviceId IS NOT NULL AND streamId IS NOT NULL"
    )
}

/// (kind, count, sum of ts, sum of dur) of the trace's GPU slices: kernels are the compute
/// stage, memsets the other stage's slices named "Memset", memcpys the rest.
fn trace_kinds(trace: &Path) -> Option<Vec<(String, i64, i64, i64)>> {
    let sql = "SELECT CASE WHEN render_stage_category = 2 THEN 'kernel' \
               WHEN name = 'Memset' THEN 'memset' ELSE 'memcpy' END AS kind, \
               count(*), sum(ts), sum(dur) FROM gpu_slice GROUP BY kind ORDER BY kind";
    Some(
        tp_query(trace, sql)?
            .into_iter()
            .map(|r| {
                let n = |i: usize| r[i].parse::<i64>().unwrap();
                (r[0].clone(), n(1), n(2), n(3))
            })
            .collect(),
    )
}

#[test]
fn gpu_slices_are_the_exports_gpu_rows() {
    let exports = exports_with_gpu_work();
    common::par_map(&exports, |input| {
        let conn = Connection::open_with_flags(input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let trace = common::converted(input, &native());
        let Some(got) = trace_kinds(&trace) else {
            return;
        };
        let mut want = Vec::new();
        for (kind, table) in [("kernel", KERNEL), ("memcpy", MEMCPY), ("memset", MEMSET)] {
            if !has_table(&conn, table) {
                continue;
            }
            let r = &rows(
                &conn,
                &where_placed(table, "count(*), sum(start), sum(\"end\" - start)"),
            )[0];
            let n: i64 = r[0].parse().unwrap();
            if n > 0 {
                let v = |s: &str| s.parse::<i64>().unwrap();
                want.push((kind.to_string(), n, v(&r[1]), v(&r[2])));
            }
        }
        // The trace's times are the export's, shifted by one offset for the whole source
        // (where rows precede the session start): the same for every row.
        let offset = trace_offset(input, &trace).unwrap();
        assert!(offset >= 0, "{}: offset {offset}", input.display());
        let want: Vec<_> = want
            .into_iter()
            .map(|(k, n, ts, dur)| (k, n, ts + n * offset, dur))
            .collect();
        assert_eq!(got, want, "{}", input.display());
    });
}

#[test]
fn every_gpu_is_named() {
    let exports = exports_with_gpu_work();
    common::par_map(&exports, |input| {
        let conn = Connection::open_with_flags(input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let trace = common::converted(input, &native());
        let Some(gpus) = tp_query(&trace, "SELECT gpu, name FROM gpu ORDER BY gpu") else {
            return;
        };
        let mut used = std::collections::BTreeSet::new();
        for table in [KERNEL, MEMCPY, MEMSET] {
            if has_table(&conn, table) {
                for r in rows(&conn, &where_placed(table, "DISTINCT deviceId")) {
                    used.insert(r[0].parse::<i64>().unwrap());
                }
            }
        }
        for device in used {
            let name = &gpus
                .iter()
                .find(|g| g[0] == device.to_string())
                .unwrap_or_else(|| panic!("{}: GPU {device} not in `gpu`", input.display()))[1];
            // Where nsys names devices, by CUDA device number first (newest exports first).
            let export_name = [
                ("TARGET_INFO_GPU", "cuDevice"),
                ("TARGET_INFO_GPU", "id"),
                ("TARGET_INFO_GPU", "deviceId"),
                ("TARGET_INFO_CUDA_GPU", "deviceId"),
            ]
            .iter()
            .find_map(|(table, col)| {
                conn.query_row(
                    &format!("SELECT name FROM {table} WHERE \"{col}\" = ?1"),
                    [device],
                    |r| r.get::<_, String>(0),
                )
                .ok()
            })
            .unwrap_or_else(|| format!("GPU {device}"));
            assert_eq!(name, &export_name, "{}: GPU {device}", input.display());
        }
    });
}

#[test]
fn kernels_carry_the_exports_launch_columns() {
    let exports = exports_with_gpu_work();
    common::par_map(&exports, |input| {
        let conn = Connection::open_with_flags(input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        if !has_table(&conn, KERNEL) {
            return;
        }
        let trace = common::converted(input, &native());
        let cols = "gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, \
                    staticSharedMemory, dynamicSharedMemory";
        let want = rows(
            &conn,
            &format!(
                "{} GROUP BY {cols} ORDER BY {cols}",
                where_placed(KERNEL, &format!("{cols}, count(*)"))
            ),
        );
        let args = [
            "launch.grid_size.x",
            "launch.grid_size.y",
            "launch.grid_size.z",
            "launch.workgroup_size.x",
            "launch.workgroup_size.y",
            "launch.workgroup_size.z",
            "registers_per_thread",
            "shared_memory_static_bytes",
            "shared_memory_dynamic_bytes",
        ];
        let extracted: Vec<String> = args
            .iter()
            .enumerate()
            .map(|(i, a)| format!("extract_arg(arg_set_id, '{a}') AS c{i}"))
            .collect();
        let names: Vec<String> = (0..args.len()).map(|i| format!("c{i}")).collect();
        let sql = format!(
            "SELECT {}, count(*) FROM (SELECT {} FROM gpu_slice WHERE render_stage_category = 2) \
             GROUP BY {} ORDER BY {}",
            names.join(", "),
            extracted.join(", "),
            names.join(", "),
            names.join(", ")
        );
        let Some(got) = tp_query(&trace, &sql) else {
            return;
        };
        assert_eq!(got, want, "{}", input.display());
    });
}

/// Arrows into GPU work: those of the default layout, each GPU row at most one.
#[test]
fn launch_arrows_are_the_default_layouts() {
    let exports = exports_with_gpu_work();
    common::par_map(&exports, |input| {
        let native = common::converted(input, &native());
        let default = common::converted(input, &Options::default());
        let Some(got) = tp_query(
            &native,
            "SELECT count(*), count(DISTINCT f.slice_in), sum(s.ts), sum(g.ts) FROM flow f \
             JOIN gpu_slice g ON f.slice_in = g.id JOIN slice s ON f.slice_out = s.id",
        ) else {
            return;
        };
        let want = tp_query(
            &default,
            "SELECT count(*), count(DISTINCT f.slice_in), sum(s.ts), sum(g.ts) FROM flow f \
             JOIN slice g ON f.slice_in = g.id JOIN slice s ON f.slice_out = s.id \
             WHERE g.category IN ('cuda.kernel', 'cuda.memcpy', 'cuda.memset')",
        )
        .unwrap();
        assert_eq!(got, want, "{}", input.display());
        assert_eq!(
            got[0][0],
            got[0][1],
            "{}: one arrow per GPU row",
            input.display()
        );
    });
}

#[test]
fn loads_clean_in_v58_and_v56() {
    let exports = exports_with_gpu_work();
    let v56 = common::manifest_dir().join("../shared/tools/perfetto/bin/trace_processor_shell-v56");
    common::par_map(&exports, |input| {
        let trace = common::converted(input, &native());
        for shell in [None, Some(v56.as_path())] {
            match tpcheck_with(&trace, shell) {
                None => return,
                Some(Ok(_)) => {}
                Some(Err(report)) => panic!("{} ({shell:?}): {report}", input.display()),
            }
        }
    });
}

/// `nsys-perfetto analyze ARGS... --top 0 --csv INPUT`: a lookup of its columns by name, and its
/// rows.
fn analyze_csv(input: &Path, args: &[&str]) -> (impl Fn(&str) -> usize + use<>, Vec<Vec<String>>) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
        .arg("analyze")
        .args(args)
        .args(["--top", "0", "--csv"])
        .arg(input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        input.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = String::from_utf8(out.stdout).unwrap();
    let mut lines = csv.lines();
    let header = common::csv_fields(lines.next().unwrap());
    let rows = lines.map(common::csv_fields).collect();
    let col = move |n: &str| header.iter().position(|h| h == n).unwrap();
    (col, rows)
}

/// Where the export's time lies on `trace`'s timeline: the trace's first GPU slice less the
/// export's first placed GPU row. `None` without trace_processor.
fn trace_offset(input: &Path, trace: &Path) -> Option<i64> {
    let first_trace = tp_query(trace, "SELECT min(ts) FROM gpu_slice")?;
    let conn = Connection::open_with_flags(input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let first = [KERNEL, MEMCPY, MEMSET]
        .iter()
        .filter(|t| has_table(&conn, t))
        .filter_map(|t| {
            rows(&conn, &where_placed(t, "min(start)"))[0][0]
                .parse::<i64>()
                .ok()
        })
        .min()
        .unwrap();
    Some(first_trace[0][0].parse::<i64>().unwrap() - first)
}

/// Idle gaps per process and GPU, as Perfetto's GPU analyses find them over `gpu_slice`
/// (`intervals.overlap`'s merge of the busy intervals, then the gaps between them; its skill
/// `gpu_idle_gaps.sql`, partitioned by process and GPU), are our `analyze -r gpu_gaps`.
#[test]
fn perfettos_idle_gaps_are_our_gpu_gaps() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "GindaChen__nsys-ai__mfu_2gpu_before.sqlite",
        "PolPuigPuy__OpenACC_Project_PolPuig__report12.sqlite",
        "Sh1mwww__llama3-inference__real_inference_simulation.sqlite",
    ] {
        let input = corpus.join(name);
        let (col, lines) = analyze_csv(&input, &["-r", "gpu_gaps", "--gap", "1"]);
        let (start, dur, pid, device) = (
            col("start_ns"),
            col("duration_ns"),
            col("pid"),
            col("device_id"),
        );
        let (_, trace) = convert_with(&input, dir.path(), &native());
        let Some(offset) = trace_offset(&input, &trace) else {
            return;
        };
        let mut ours: Vec<Vec<String>> = lines
            .into_iter()
            .map(|f| {
                let at = f[start].parse::<i64>().unwrap() + offset;
                vec![
                    f[pid].clone(),
                    f[device].clone(),
                    at.to_string(),
                    f[dur].clone(),
                ]
            })
            .collect();
        ours.sort();
        assert!(!ours.is_empty(), "{name}: gaps over 1 ms");
        let sql = "INCLUDE PERFETTO MODULE intervals.overlap;
            CREATE PERFETTO TABLE _work AS
            SELECT s.ts, s.dur, p.pid, g.gpu FROM gpu_slice s
            JOIN gpu_track t ON s.track_id = t.id
            JOIN gpu g ON g.id = extract_arg(t.dimension_arg_set_id, 'ugpu')
            JOIN process p USING (upid)
            WHERE s.dur > 0;
            CREATE PERFETTO TABLE _busy AS
            SELECT * FROM interval_merge_overlapping_partitioned!(_work, (pid, gpu));
            SELECT pid, gpu, te, next_ts - te FROM (
              SELECT pid, gpu, ts + dur AS te,
                LEAD(ts) OVER (PARTITION BY pid, gpu ORDER BY ts) AS next_ts
              FROM _busy)
            WHERE next_ts - te > 1000000
            ORDER BY pid, gpu, te";
        let mut theirs = tp_query(&trace, sql).unwrap();
        theirs.sort();
        assert_eq!(theirs, ours, "{name}");
    }
}

/// Several processes, and several contexts of one process, on one GPU (the exports
/// `tests/all/contexts.rs` makes): each (process, context, stream) is a hardware queue of its
/// own, named apart on its GPU, holding exactly its rows, with its process.
#[test]
fn contexts_and_processes_on_one_gpu_stay_apart() {
    let tmp = tempfile::tempdir().unwrap();
    for scripts in [
        &["contexts_shared_gpu.sql"][..],
        &["contexts_shared_gpu.sql", "contexts_one_process.sql"][..],
    ] {
        let Some(input) = crate::contexts::made(tmp.path(), scripts) else {
            return;
        };
        let conn = Connection::open_with_flags(&input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let union = [KERNEL, MEMCPY, MEMSET]
            .iter()
            .filter(|t| has_table(&conn, t))
            .map(|t| {
                where_placed(
                    t,
                    "deviceId, (globalPid >> 24) & 16777215 AS pid, contextId, streamId",
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let mut want: Vec<(String, String, String)> = rows(
            &conn,
            &format!("SELECT deviceId, pid, count(*) FROM ({union}) GROUP BY deviceId, pid, contextId, streamId"),
        )
        .into_iter()
        .map(|r| (r[0].clone(), r[1].clone(), r[2].clone()))
        .collect();
        want.sort();
        let (_, trace) = convert_with(&input, tmp.path(), &native());
        let Some(queues) = tp_query(
            &trace,
            "SELECT g.gpu, p.pid, count(*), t.name FROM gpu_slice s \
             JOIN gpu_track t ON s.track_id = t.id \
             JOIN gpu g ON g.id = extract_arg(t.dimension_arg_set_id, 'ugpu') \
             JOIN process p USING (upid) GROUP BY t.id, p.pid",
        ) else {
            return;
        };
        let mut got: Vec<(String, String, String)> = queues
            .iter()
            .map(|r| (r[0].clone(), r[1].clone(), r[2].clone()))
            .collect();
        got.sort();
        assert_eq!(got, want, "{scripts:?}");
        let names: std::collections::BTreeSet<(&str, &str)> = queues
            .iter()
            .map(|r| (r[0].as_str(), r[3].as_str()))
            .collect();
        assert_eq!(
            names.len(),
            queues.len(),
            "{scripts:?}: queue names apart: {queues:?}"
        );
    }
}

/// GPU metrics are GPU counters (`GpuCounterEvent`s, one per GPU and sampling time, with
/// interned descriptors): trace_processor's `gpu_counter_track` holds, per GPU and metric, the
/// export's samples (count, sum, min and max of the values, the export's 32-bit wraps undone as
/// the reader does) at the times and with the values of the default layout's counter tracks,
/// and no metric is left as a track event counter.
#[test]
fn gpu_metrics_are_gpu_counters() {
    let Some(dir) = corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return;
    };
    let mut exports: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .filter(|p| {
            let conn = Connection::open_with_flags(p, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            has_table(&conn, "GPU_METRICS")
                && rows(&conn, "SELECT count(*) FROM GPU_METRICS")[0][0] != "0"
        })
        .collect();
    exports.sort();
    assert!(!exports.is_empty(), "corpus exports with GPU_METRICS");
    let tmp = tempfile::tempdir().unwrap();
    for input in &exports {
        let conn = Connection::open_with_flags(input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let want = rows(
            &conn,
            "SELECT m.typeId & 255, n.metricName, count(*), CAST(sum(v) AS INT), \
             CAST(min(v) AS INT), CAST(max(v) AS INT) FROM (SELECT typeId, metricId, \
             CASE WHEN value < 0 AND value >= -2147483648 THEN value + 4294967296 ELSE value END \
             AS v FROM GPU_METRICS) m JOIN TARGET_INFO_GPU_METRICS n USING (typeId, metricId) \
             GROUP BY 1, 2 ORDER BY 1, 2",
        );
        let (_, native) = convert_with(input, tmp.path(), &native());
        let Some(got) = tp_query(
            &native,
            "SELECT t.gpu_id, t.name, count(*), CAST(sum(c.value) AS INT), \
             CAST(min(c.value) AS INT), CAST(max(c.value) AS INT) \
             FROM gpu_counter_track t JOIN counter c ON c.track_id = t.id \
             GROUP BY t.id ORDER BY 1, 2",
        ) else {
            return;
        };
        assert_eq!(got, want, "{}", input.display());

        // The same samples as the default layout's counter tracks, time for time.
        let tracks = tmp.path().join("tracks");
        std::fs::create_dir_all(&tracks).unwrap();
        let (_, default) = common::convert(input, &tracks);
        let per_metric = |trace: &Path, table: &str| {
            tp_query(
                trace,
                &format!(
                    "SELECT t.name, count(*), sum(c.ts), CAST(sum(c.value) AS INT) FROM {table} t \
                     JOIN counter c ON c.track_id = t.id GROUP BY t.name ORDER BY t.name"
                ),
            )
            .unwrap()
        };
        let names: std::collections::BTreeSet<&String> = want.iter().map(|r| &r[1]).collect();
        let default_metrics: Vec<Vec<String>> = per_metric(&default, "counter_track")
            .into_iter()
            .filter(|r| names.contains(&r[0]))
            .collect();
        assert_eq!(
            per_metric(&native, "gpu_counter_track"),
            default_metrics,
            "{}",
            input.display()
        );
        let left = tp_query(
            &native,
            "SELECT t.name FROM counter_track t WHERE t.id NOT IN (SELECT id FROM gpu_counter_track)",
        )
        .unwrap();
        assert!(
            left.iter().all(|r| !names.contains(&r[0])),
            "{}: metrics left as track event counters: {left:?}",
            input.display()
        );
    }
}

/// Kernels carry their theoretical occupancy (the limits Perfetto's GPU compute tab shows) where
/// `TARGET_INFO_GPU` records the SM's limits, as the CUDA occupancy calculator finds it. The
/// RTX 3090 (compute capability 8.6) of this report: 48 warps, 16 blocks, 65536 registers and
/// 102400 bytes of shared memory an SM, 4 register sub-partitions, registers given to warps in
/// units of 256, shared memory to blocks in units of 128 with 1 KiB reserved a block. By hand:
/// - `Kernel`: 128 threads (4 warps), 102 registers, 98304 bytes of dynamic shared memory.
///   Warps: 48 / 4 = 12 blocks. Registers: 102 * 32 = 3264, rounded to 3328 a warp; 16384 a
///   sub-partition hold 4 warps, 16 an SM: 4 blocks. Shared memory: 98304 + 1024 = 99328 a
///   block; 102400 / 99328 = 1 block. Resident: 1 block, 4 warps, 4 / 48 = 8.33%.
/// - `gen_sequenced`: 64 threads (2 warps), 26 registers, no shared memory. Warps: 24 blocks.
///   Registers: 832, rounded to 1024 a warp; 16 warps a sub-partition, 64 an SM: 32 blocks.
///   Shared memory: the 1 KiB reserved, 100 blocks. Resident: 16 blocks (the SM's limit), 32
///   warps, 66.67%.
/// - `generate_seed_pseudo`: as `gen_sequenced` but 40 registers: 1280 a warp, 12 warps a
///   sub-partition, 48 an SM: 24 blocks. Resident: 16 blocks, 32 warps, 66.67%.
#[test]
fn kernels_carry_their_theoretical_occupancy() {
    let Some(input) =
        common::corpus_file("als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, trace) = convert_with(&input, dir.path(), &native());
    let Some(got) = tp_query(
        &trace,
        "SELECT name, count(*), extract_arg(arg_set_id, 'occupancy_limit_blocks'), \
         extract_arg(arg_set_id, 'occupancy_limit_warps'), \
         extract_arg(arg_set_id, 'occupancy_limit_registers'), \
         extract_arg(arg_set_id, 'occupancy_limit_shared_mem'), \
         extract_arg(arg_set_id, 'sm__maximum_warps_avg_per_active_cycle'), \
         printf('%.2f', extract_arg(arg_set_id, 'sm__maximum_warps_per_active_cycle_pct')) \
         FROM gpu_slice WHERE render_stage_category = 2 GROUP BY 1, 3, 4, 5, 6, 7, 8 ORDER BY 1",
    ) else {
        return;
    };
    let want = [
        ["Kernel", "1", "16", "12", "4", "1", "4", "8.33"],
        ["gen_sequenced", "2", "16", "24", "32", "100", "32", "66.67"],
        [
            "generate_seed_pseudo",
            "1",
            "16",
            "24",
            "24",
            "100",
            "32",
            "66.67",
        ],
    ];
    assert_eq!(got, want.map(|r| r.map(String::from).to_vec()).to_vec());
}

/// GPU use per process and GPU, as Perfetto's GPU analyses measure busy time over `gpu_slice`
/// (its skill `gpu_timeline_decomposition.sql`: the union of the GPU slices,
/// `interval_merge_overlapping_partitioned`, measured against windows of the timeline) over
/// nsys' windows (each process's and GPU's span of GPU work in equal chunks, their size rounded
/// up to whole ns), the chunks used less than the threshold coalesced as nsys coalesces them:
/// our `analyze -r gpu_time_util`, with nsys' defaults (30 chunks, 50%) and with 1000 chunks
/// under 99%. nsys sums work that overlaps where Perfetto takes its union, so the exports are
/// ones whose GPU work does not overlap within a process and GPU (asserted).
#[test]
fn perfettos_busy_time_is_our_gpu_time_util() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for name in [
        "PolPuigPuy__OpenACC_Project_PolPuig__report12.sqlite",
        "Sh1mwww__llama3-inference__real_inference_simulation.sqlite",
        "RajaATAli__SC23_Programming-Your-GPU-with-OpenMP_Tutorial__report3.sqlite",
        "bwyogatama__Mordred-Deprecated__report1@84a0fd9.sqlite",
    ] {
        let input = corpus.join(name);
        let (_, trace) = convert_with(&input, dir.path(), &native());
        let Some(overlap) = tp_query(
            &trace,
            "INCLUDE PERFETTO MODULE intervals.overlap;
            CREATE PERFETTO TABLE _work AS
            SELECT s.ts, s.dur, s.upid, extract_arg(t.dimension_arg_set_id, 'ugpu') AS ugpu
            FROM gpu_slice s JOIN gpu_track t ON s.track_id = t.id WHERE s.dur > 0;
            SELECT (SELECT sum(dur) FROM _work) - (SELECT sum(dur) FROM
              interval_merge_overlapping_partitioned!(_work, (upid, ugpu))) AS overlap",
        ) else {
            return;
        };
        assert_eq!(overlap[0][0], "0", "{name}: GPU work overlaps");
        let offset = trace_offset(&input, &trace).unwrap();
        for (chunks, threshold) in [(30, 50), (1000, 99)] {
            let (chunks_arg, threshold_arg) = (chunks.to_string(), threshold.to_string());
            let (col, lines) = analyze_csv(
                &input,
                &[
                    "-r",
                    "gpu_time_util",
                    "--chunks",
                    &chunks_arg,
                    "--threshold",
                    &threshold_arg,
                ],
            );
            let (start, dur, pid, device, pct) = (
                col("start_ns"),
                col("duration_ns"),
                col("pid"),
                col("device_id"),
                col("in_use_pct"),
            );
            let mut ours: Vec<Vec<String>> = lines
                .into_iter()
                .map(|f| {
                    let at = f[start].parse::<i64>().unwrap() + offset;
                    let pct: f64 = f[pct].parse().unwrap();
                    vec![
                        f[pid].clone(),
                        f[device].clone(),
                        at.to_string(),
                        f[dur].clone(),
                        format!("{pct:.1}"),
                    ]
                })
                .collect();
            ours.sort();
            let sql = format!(
                "INCLUDE PERFETTO MODULE intervals.overlap;
                CREATE PERFETTO TABLE _work AS
                SELECT s.ts, s.dur, p.pid, g.gpu FROM gpu_slice s
                JOIN gpu_track t ON s.track_id = t.id
                JOIN gpu g ON g.id = extract_arg(t.dimension_arg_set_id, 'ugpu')
                JOIN process p USING (upid);
                CREATE PERFETTO TABLE _busy AS
                SELECT * FROM interval_merge_overlapping_partitioned!(
                  (SELECT * FROM _work WHERE dur > 0), (pid, gpu));
                CREATE PERFETTO TABLE _chunk AS
                WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {last}),
                span AS (SELECT pid, gpu, min(ts) AS lo, max(ts + dur) AS hi,
                  (max(ts + dur) - min(ts) + {last}) / {chunks} AS size FROM _work GROUP BY pid, gpu)
                SELECT pid, gpu, i, lo + i * size AS cs, min(lo + (i + 1) * size, hi) AS ce
                FROM span, n WHERE lo + i * size < hi;
                CREATE PERFETTO TABLE _use AS
                SELECT c.pid, c.gpu, c.i, c.cs, c.ce,
                  IFNULL(SUM(min(b.ts + b.dur, c.ce) - max(b.ts, c.cs)), 0) AS busy
                FROM _chunk c LEFT JOIN _busy b
                  ON b.pid = c.pid AND b.gpu = c.gpu AND b.ts < c.ce AND b.ts + b.dur > c.cs
                GROUP BY c.pid, c.gpu, c.i;
                SELECT pid, gpu, min(cs) AS start, max(ce) - min(cs) AS dur,
                  printf('%.1f', round(100.0 * sum(busy) / sum(ce - cs), 1)) AS pct FROM (
                  SELECT *, i - ROW_NUMBER() OVER (PARTITION BY pid, gpu ORDER BY i) AS run
                  FROM _use WHERE 100 * busy < {threshold} * (ce - cs))
                GROUP BY pid, gpu, run",
                last = chunks - 1,
            );
            let mut theirs = tp_query(&trace, &sql).unwrap();
            theirs.sort();
            assert_eq!(theirs, ours, "{name}, {chunks} chunks under {threshold}%");
            compared += ours.len();
        }
    }
    assert!(compared >= 100, "runs of chunks compared: {compared}");
}
