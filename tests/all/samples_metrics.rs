//! CPU samples, GPU metrics and GPU memory, checked exactly against SQL on real exports (and a
//! made fixture for GPU memory): one Perfetto sample per COMPOSITE_EVENTS row on its thread with
//! every frame of its call stack (leaf first), one counter value per metric sample per GPU, the
//! GENERIC_EVENTS twins of GPU_METRICS converted once, and every output valid (validator,
//! `tpcheck --strict`). JSON outputs carry the same counts.

use crate::common;

use crate::common::{Trace, validate_file};
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::summary::Summary;
use nsys_perfetto_write::output::WellKnown;
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::path::Path;

const SAMPLE_FILES: &[&str] = &[
    "hypdeb__lawrencium__report1.export-2023.4.4.sqlite",
    "NTHU-SC__ISC25-ICON-C__nsys_reports_cpu.sqlite",
    "D-W-Chiang__JACC.jl__cg_trace.sqlite",
    "PhilippRue__SiScLab_23_24__exercise_3_GPU_demonstrators_matmul_out_test.export-2023.4.4.sqlite",
    "PhilippRue__SiScLab_23_24__exercise_4_batched_calls_LU_GPU_out_test_LU_batched_GPU.export-2023.4.4.sqlite",
    "als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite",
    "Sh1mwww__llama3-inference__real_inference_simulation.sqlite",
    "VaclavHrbek__mini_project__Nvidia_OpenACC_std-vector_report_with_pragmas.export-2023.4.4.sqlite",
    "bwyogatama__Mordred-Deprecated__report1@d62909d.sqlite",
    "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "researchgroup-zx93920__MAP-Fusion23__report1.sqlite",
];
const METRICS_FILE: &str = "als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite";

fn tpcheck_ok(out: &Path) {
    if let Some(Err(report)) = common::tpcheck(out) {
        panic!("{}: tpcheck --strict failed:\n{report}", out.display());
    }
}

fn json(input: &Path, out: &Path) -> Summary {
    common::convert_to(input, out, &common::json_options())
}

/// (time, tid, frames, leaf function) of every sample, sorted.
type SampleKey = (i64, u32, usize, String);

fn sql_samples(conn: &Connection) -> Vec<SampleKey> {
    let mut stmt = conn
        .prepare(
            "SELECT c.start, c.globalTid & 16777215, \
               (SELECT count(*) FROM SAMPLING_CALLCHAINS s WHERE s.id = c.id), \
               coalesce((SELECT v.value FROM SAMPLING_CALLCHAINS s JOIN StringIds v ON v.id = s.symbol \
                         WHERE s.id = c.id AND s.stackDepth = 0), '') \
             FROM COMPOSITE_EVENTS c",
        )
        .unwrap();
    let mut out: Vec<SampleKey> = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)? as u32,
                r.get::<_, i64>(2)? as usize,
                r.get::<_, String>(3)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    out.sort();
    out
}

fn trace_samples(t: &Trace) -> Vec<SampleKey> {
    let mut out: Vec<SampleKey> = t
        .samples
        .iter()
        .map(|s| {
            (
                s.ts,
                s.tid,
                s.frames.len(),
                s.frames
                    .first()
                    .map(|f| f.0.to_string())
                    .unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn cpu_samples_are_exact_on_the_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for name in SAMPLE_FILES {
        let Some(input) = common::corpus_file(name) else {
            continue;
        };
        seen += 1;
        let conn = Connection::open(&input).unwrap();
        let want = sql_samples(&conn);
        let frames: i64 = conn
            .query_row("SELECT count(*) FROM SAMPLING_CALLCHAINS", [], |r| r.get(0))
            .unwrap();
        let (summary, out) = common::convert(&input, dir.path());
        let t = validate_file(&out);
        assert_eq!(
            summary.events_of(Category::CpuSample) as usize,
            want.len(),
            "{name}: summary"
        );
        let got = trace_samples(&t);
        assert_eq!(got.len(), want.len(), "{name}: one sample per row");
        assert!(
            got == want,
            "{name}: samples (time, tid, frames, leaf) differ from SQL"
        );
        assert_eq!(
            t.samples.iter().map(|s| s.frames.len() as i64).sum::<i64>(),
            frames,
            "{name}: every frame of SAMPLING_CALLCHAINS"
        );
        // Each sample's thread is described (the UI shows samples under it).
        for s in &t.samples {
            assert!(
                t.thread_tracks().any(|tr| tr
                    .thread
                    .as_ref()
                    .is_some_and(|th| th.tid as u32 == s.tid && th.pid as u32 == s.pid)),
                "{name}: sample on undescribed thread {}",
                s.tid
            );
        }
        // The whole stack matches too, frame by frame, for the first samples.
        let mut stmt = conn
            .prepare(
                "SELECT v.value, m.value FROM SAMPLING_CALLCHAINS s JOIN StringIds v ON v.id = s.symbol \
                 JOIN StringIds m ON m.id = s.module WHERE s.id = \
                 (SELECT id FROM COMPOSITE_EVENTS WHERE start = ?1 AND globalTid & 16777215 = ?2 LIMIT 1) \
                 ORDER BY s.stackDepth",
            )
            .unwrap();
        for s in t.samples.iter().take(50) {
            let want: Vec<(String, String)> = stmt
                .query_map([s.ts, s.tid as i64], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let got: Vec<(String, String)> = s
                .frames
                .iter()
                .map(|(f, m)| (f.to_string(), m.to_string()))
                .collect();
            assert_eq!(got, want, "{name}: stack of the sample at {}", s.ts);
        }
        tpcheck_ok(&out);

        let jout = dir.path().join("samples.json");
        let js = json(&input, &jout);
        assert_eq!(js.events_of(Category::CpuSample) as usize, want.len());
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&jout).unwrap()).unwrap();
        let n = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["cat"] == "cpu.sample" && e["ph"] == "i")
            .count();
        assert_eq!(n, want.len(), "{name}: JSON samples");
    }
    assert!(seen > 0 || crate::common::corpus_dir().is_none());
}

/// Per metric name: (values, sum), from SQL. Negative values are 32-bit wraps of the export
/// (a clock above 2^31 Hz), corrected by 2^32 as the converter does.
fn sql_metrics(conn: &Connection) -> BTreeMap<String, (usize, f64)> {
    let mut stmt = conn
        .prepare(
            "SELECT m.metricName, count(*), \
               sum(CASE WHEN g.value < 0 THEN g.value + 4294967296 ELSE g.value END) FROM GPU_METRICS g \
             JOIN TARGET_INFO_GPU_METRICS m USING (typeId, metricId) GROUP BY 1",
        )
        .unwrap();
    stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            (r.get::<_, i64>(1)? as usize, r.get::<_, f64>(2)?),
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn trace_metrics(t: &Trace, device: i64) -> BTreeMap<String, (usize, f64)> {
    // In the GPU's "GPU metrics" group, below its streams, as Nsight Systems shows them.
    let gpu = WellKnown::Gpu(device).uuid();
    let group = t
        .children(gpu)
        .into_iter()
        .find(|tr| tr.name.as_deref() == Some("GPU metrics"))
        .map(|tr| tr.uuid);
    let mut out = BTreeMap::new();
    for tr in t
        .tracks
        .values()
        .filter(|tr| tr.counter && tr.parent.is_some() && tr.parent == group)
    {
        let name = tr.name.clone().unwrap();
        let vals = t.counter_values(group.unwrap(), &name);
        let info = &t.counter_tracks[&tr.uuid];
        assert_eq!(info.categories, vec!["gpu.metric".to_string()]);
        out.insert(name, (vals.len(), vals.iter().map(|c| c.value).sum()));
    }
    out
}

#[test]
fn gpu_metrics_are_exact_and_converted_once() {
    let Some(input) = common::corpus_file(METRICS_FILE) else {
        crate::common::skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(&input).unwrap();
    let want = sql_metrics(&conn);
    let rows: usize = want.values().map(|v| v.0).sum();
    assert_eq!(rows, 109_620);
    let generic: i64 = conn
        .query_row("SELECT count(*) FROM GENERIC_EVENTS", [], |r| r.get(0))
        .unwrap();

    let (summary, out) = common::convert(&input, dir.path());
    let t = validate_file(&out);
    assert_eq!(summary.events_of(Category::GpuMetric) as usize, rows);
    assert_eq!(trace_metrics(&t, 0), want, "per metric: values and sums");
    // Units: percentages, clocks in Hz.
    for tr in t.tracks.values().filter(|tr| tr.counter) {
        let info = &t.counter_tracks[&tr.uuid];
        let name = tr.name.as_deref().unwrap();
        let unit = info.unit_name.as_deref();
        if name.contains("Frequency") {
            assert_eq!(unit, Some("Hz"), "{name}");
        } else if name.contains("Throughput") || name.contains("Active") {
            assert_eq!(unit, Some("%"), "{name}");
        }
    }
    // The metrics' first sample precedes the session start: kept, at its time.
    let first = t.counters.iter().map(|c| c.ts).min().unwrap();
    assert_eq!(first, -37_928);
    // The GENERIC_EVENTS twins: counted once, as duplicates.
    let dup = summary
        .skipped
        .get(&(
            "GENERIC_EVENTS".to_string(),
            nsys_perfetto_read::metrics::DUPLICATE.to_string(),
        ))
        .copied()
        .unwrap_or(0);
    assert_eq!(dup as i64, generic);
    let wrapped: i64 = conn
        .query_row(
            "SELECT count(*) FROM GPU_METRICS WHERE value < 0",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let noted = summary
        .skipped
        .get(&(
            "GPU_METRICS".to_string(),
            nsys_perfetto_read::metrics::WRAPPED.to_string(),
        ))
        .copied()
        .unwrap_or(0);
    assert_eq!((wrapped, noted), (1, 1));
    assert!(!summary.notes.iter().any(|n| n.contains("COMPOSITE_EVENTS")));
    tpcheck_ok(&out);

    // JSON: one C event per value.
    let jout = dir.path().join("metrics.json");
    let js = json(&input, &jout);
    assert_eq!(js.events_of(Category::GpuMetric) as usize, rows);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&jout).unwrap()).unwrap();
    let c = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .count();
    assert_eq!(c, rows);
}

/// A 2022-style export: the same report with only GENERIC_EVENTS gives the same counters.
#[test]
fn gpu_metrics_from_generic_events_match_gpu_metrics() {
    let Some(input) = common::corpus_file(METRICS_FILE) else {
        crate::common::skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(&input).unwrap();
    let want = sql_metrics(&conn);
    drop(conn);
    let copy = dir.path().join("generic-only.sqlite");
    std::fs::copy(&input, &copy).unwrap();
    let mut perms = std::fs::metadata(&copy).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&copy, perms).unwrap();
    let conn = Connection::open(&copy).unwrap();
    conn.execute_batch("DROP TABLE GPU_METRICS; DROP TABLE TARGET_INFO_GPU_METRICS;")
        .unwrap();
    drop(conn);
    let (summary, out) = common::convert(&copy, dir.path());
    let t = validate_file(&out);
    assert_eq!(trace_metrics(&t, 0), want);
    assert!(summary.skipped.keys().all(|(t, _)| t != "GENERIC_EVENTS"));
    tpcheck_ok(&out);
}

#[test]
fn gpu_memory_counters_and_instants() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gpu_memory.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &db).unwrap();
    let mut perms = std::fs::metadata(&db).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&db, perms).unwrap();
    let sql = std::fs::read_to_string(common::fixture("gpu_memory_rows.sql")).unwrap();
    Connection::open(&db).unwrap().execute_batch(&sql).unwrap();

    let (summary, out) = common::convert(&db, dir.path());
    let t = validate_file(&out);
    // 7 rows: 7 instants, and 2 counter values each (GPU, process).
    assert_eq!(summary.events_of(Category::GpuMemory), 7 * 3);
    let instants: Vec<_> = t.of_category("cuda.memory").collect();
    assert_eq!(instants.len(), 7);
    assert_eq!(
        instants.iter().filter(|s| &*s.name == "cudaFree").count(),
        3
    );
    let freed = instants
        .iter()
        .find(|s| &*s.name == "cudaFree" && s.arg_int("correlationId") == Some(16))
        .unwrap();
    assert_eq!(
        freed.arg_int("bytes"),
        Some(8_388_608),
        "size from its allocation"
    );
    let gpu0 = WellKnown::Gpu(0).uuid();
    let vals = |parent: u64, name: &str| -> Vec<(i64, f64)> {
        t.counter_values(parent, name)
            .iter()
            .map(|c| (c.ts, c.value))
            .collect()
    };
    assert_eq!(
        vals(gpu0, "Memory allocated"),
        vec![
            (20_000_000, 1_048_576.0),
            (21_000_000, 1_052_672.0),
            (22_000_000, 9_441_280.0),
            (30_000_000, 8_392_704.0),
            (31_000_000, 4_096.0),
        ]
    );
    assert_eq!(
        vals(WellKnown::Gpu(1).uuid(), "Memory allocated"),
        vec![(23_000_000, 2_097_152.0), (40_000_000, 0.0)]
    );
    let app = WellKnown::Process(281_933_112_147_968).uuid();
    assert_eq!(
        vals(app, "GPU 0 memory allocated"),
        vec![
            (20_000_000, 1_048_576.0),
            (21_000_000, 1_052_672.0),
            (30_000_000, 4_096.0)
        ]
    );
    for tr in t.tracks.values().filter(|tr| tr.counter) {
        assert_eq!(t.counter_tracks[&tr.uuid].unit, Some(3), "UNIT_SIZE_BYTES");
    }
    tpcheck_ok(&out);

    let jout = dir.path().join("memory.json");
    let js = json(&db, &jout);
    assert_eq!(js.events_of(Category::GpuMemory), 21);
}

/// More distinct frames than the interning bound: the sample sequence starts new generations
/// (clearing its incremental state) and every sample still resolves to its own stack.
#[test]
fn sample_interning_is_bounded_and_restarts_cleanly() {
    use nsys_perfetto_write::proto::{TracePacket, trace_packet};
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("many_frames.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &db).unwrap();
    let mut perms = std::fs::metadata(&db).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&db, perms).unwrap();
    const N: i64 = 30_000;
    // Thread 27307 of ./nvtx_workload; 3 frames per sample, every symbol distinct.
    Connection::open(&db)
        .unwrap()
        .execute_batch(&format!(
            "CREATE TABLE COMPOSITE_EVENTS (id INTEGER NOT NULL PRIMARY KEY, start INTEGER NOT NULL, \
               cpu INTEGER, threadState INTEGER, globalTid INTEGER, cpuCycles INTEGER NOT NULL);
             CREATE TABLE SAMPLING_CALLCHAINS (id INTEGER NOT NULL, symbol INTEGER NOT NULL, \
               module INTEGER NOT NULL, kernelMode INTEGER, thumbCode INTEGER, unresolved INTEGER, \
               specialEntry INTEGER, originalIP INTEGER, unwindMethod INTEGER, \
               stackDepth INTEGER NOT NULL, PRIMARY KEY (id, stackDepth));
             INSERT INTO StringIds (id, value) VALUES (9000000, '/opt/app/libmany.so');
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {N})
             INSERT INTO COMPOSITE_EVENTS SELECT i, 20000000 + i * 1000, 0, 1, 281933112147968 + 27307, 1 FROM n;
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {N} * 3 - 1)
             INSERT INTO StringIds (id, value) SELECT 10000000 + i, 'fn_' || i FROM n;
             WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {N} * 3 - 1)
             INSERT INTO SAMPLING_CALLCHAINS (id, symbol, module, stackDepth) \
               SELECT i / 3 + 1, 10000000 + i, 9000000, i % 3 FROM n;"
        ))
        .unwrap();
    let (summary, out) = common::convert(&db, dir.path());
    assert_eq!(summary.events_of(Category::CpuSample), N as u64);
    let t = validate_file(&out);
    assert_eq!(t.samples.len(), N as usize);
    for s in &t.samples {
        let i = (s.ts - 20_000_000) / 1000 - 1;
        let want: Vec<String> = (0..3).map(|d| format!("fn_{}", i * 3 + d)).collect();
        let got: Vec<String> = s.frames.iter().map(|f| f.0.to_string()).collect();
        assert_eq!(got, want, "sample {i}");
        assert!(s.frames.iter().all(|f| &*f.1 == "/opt/app/libmany.so"));
    }
    // Generations: the sample sequence cleared its state more than once.
    let bytes = std::fs::read(&out).unwrap();
    let mut pos = 0;
    let mut clears = 0;
    while pos < bytes.len() {
        pos += 1;
        let (len, n) = {
            let mut v = 0u64;
            let mut i = 0;
            loop {
                let b = bytes[pos + i];
                v |= u64::from(b & 0x7F) << (7 * i);
                i += 1;
                if b & 0x80 == 0 {
                    break (v as usize, i);
                }
            }
        };
        pos += n;
        let p = TracePacket::decode(&bytes[pos..pos + len]).unwrap();
        pos += len;
        if matches!(p.data, Some(trace_packet::Data::PerfSample(_))) && p.sequence_flags == Some(1)
        {
            clears += 1;
        }
    }
    assert!(clears >= 2, "{clears} generations");
    tpcheck_ok(&out);
}

/// `stats` summarises samples and metrics: the top sampled functions (leaf frames) and each GPU
/// metric's mean, min and max, checked against the raw rows counted here.
#[test]
fn stats_top_sampled_functions_and_metric_averages() {
    use nsys_perfetto::workflow::stats::StatsOptions;
    use nsys_perfetto::workflow::stats::query::stats;
    use std::collections::HashMap;
    let Some(dir) = crate::common::corpus_dir() else {
        crate::common::skip("corpus", "the corpus is absent");
        return;
    };
    let input = dir.join("als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite");
    let st = stats(
        &input,
        &StatsOptions {
            top: 0,
            raw_names: false,
        },
    )
    .unwrap();
    let conn =
        rusqlite::Connection::open_with_flags(&input, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    // Leaf frames, counted row by row.
    let mut leaves: HashMap<i64, u64> = HashMap::new();
    let mut stmt = conn
        .prepare("SELECT symbol FROM SAMPLING_CALLCHAINS WHERE stackDepth = 0")
        .unwrap();
    for sym in stmt.query_map([], |r| r.get::<_, i64>(0)).unwrap() {
        *leaves.entry(sym.unwrap()).or_default() += 1;
    }
    let total: u64 = leaves.values().sum();
    assert_eq!(
        st.sampled_functions.iter().map(|f| f.samples).sum::<u64>(),
        total
    );
    let name_of = |id: i64| -> String {
        conn.query_row("SELECT value FROM StringIds WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap()
    };
    let top = st.sampled_functions.first().unwrap();
    let (&sym, &n) = leaves.iter().max_by_key(|(s, n)| (**n, -**s)).unwrap();
    assert_eq!((top.function.clone(), top.samples), (name_of(sym), n));
    assert!((top.percent - 100.0 * n as f64 / total as f64).abs() < 1e-9);
    // Metrics: per metric, the values as the trace holds them (wrapped values restored).
    let mut values: HashMap<String, Vec<f64>> = HashMap::new();
    let mut stmt = conn
        .prepare(
            "SELECT i.metricName, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS i \
             ON i.typeId = g.typeId AND i.metricId = g.metricId",
        )
        .unwrap();
    for row in stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
    {
        let (m, v) = row.unwrap();
        let v = if v < 0 { v + (1 << 32) } else { v };
        values.entry(m).or_default().push(v as f64);
    }
    assert_eq!(st.gpu_metrics.len(), values.len());
    for m in &st.gpu_metrics {
        let v = &values[&m.metric];
        assert_eq!((m.gpu, m.samples), (0, v.len() as u64), "{}", m.metric);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!(
            (m.mean - mean).abs() <= 1e-6 * mean.abs().max(1.0),
            "{}",
            m.metric
        );
        assert_eq!(m.min, v.iter().cloned().fold(f64::INFINITY, f64::min));
        assert_eq!(m.max, v.iter().cloned().fold(f64::NEG_INFINITY, f64::max));
    }
    // Above 2^31 once the export's wrap is undone: the 2.33 GHz clock sample.
    let gpc = st
        .gpu_metrics
        .iter()
        .find(|m| m.metric == "GPC Clock Frequency")
        .unwrap();
    assert!(gpc.min > 0.0 && gpc.max > 2.3e9);

    // An nsys 2022 export holds the same samples only in GENERIC_EVENTS: the same summary.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("generic-only.sqlite");
    std::fs::copy(&input, &copy).unwrap();
    let mut perms = std::fs::metadata(&copy).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&copy, perms).unwrap();
    rusqlite::Connection::open(&copy)
        .unwrap()
        .execute_batch("DROP TABLE GPU_METRICS; DROP TABLE TARGET_INFO_GPU_METRICS;")
        .unwrap();
    let generic = stats(
        &copy,
        &StatsOptions {
            top: 0,
            raw_names: false,
        },
    )
    .unwrap();
    assert_eq!(generic.gpu_metrics.len(), st.gpu_metrics.len());
    for (g, m) in generic.gpu_metrics.iter().zip(&st.gpu_metrics) {
        assert_eq!(
            (g.gpu, &g.metric, g.samples, g.min, g.max),
            (m.gpu, &m.metric, m.samples, m.min, m.max)
        );
        assert!((g.mean - m.mean).abs() <= 1e-9 * m.mean.abs().max(1.0));
    }
}
