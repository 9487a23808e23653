//! The NVTX-to-GPU projection ([`Projection`]) against its SQL definition, on generated exports
//! built to stress it: nested push/pop ranges with imperfect ends, start/end ranges, equal
//! timestamps everywhere, several threads and processes, repeated correlation ids, rows out of
//! order, values of unexpected types. The reference is the projection's original SQL (joins and
//! `group_concat`), run here verbatim; tables must match row for row, in rowid order too.
//!
//! `NSYS_PROJ_CHECK=a.sqlite:b.sqlite` checks more exports (the benchmark, say); to diff the
//! tables of two builds by hand, `bench/dump_projection.rs` dumps them.

use nsys_perfetto_read::projection::tables::Projection;
use nsys_perfetto_read::projection::{KERNEL_NVTX, NVTX_GPU};
use nsys_perfetto_read::schema::Schema;
use rusqlite::types::Value;
use rusqlite::{Connection, params};
use std::path::Path;

/// The tables as compared: schema, `nvtx_gpu` in rowid order, `kernel_nvtx` in key order, and
/// the three counts.
#[derive(Debug, PartialEq)]
struct Tables {
    schema: Vec<String>,
    nvtx_gpu: Vec<Vec<Value>>,
    kernel_nvtx: Vec<Vec<Value>>,
    counts: [u64; 3],
}

fn rows(conn: &Connection, sql: &str) -> Vec<Vec<Value>> {
    let mut st = conn.prepare(sql).unwrap();
    let n = st.column_count();
    st.query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect())
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn tables(path: &Path, counts: [u64; 3]) -> Tables {
    let conn = Connection::open(path).unwrap();
    Tables {
        schema: rows(
            &conn,
            "SELECT type || ' ' || name || ': ' || sql FROM sqlite_master ORDER BY type, name",
        )
        .into_iter()
        .map(|r| match &r[0] {
            Value::Text(t) => t.clone(),
            v => panic!("{v:?}"),
        })
        .collect(),
        nvtx_gpu: rows(&conn, &format!("SELECT * FROM {NVTX_GPU} ORDER BY rowid")),
        kernel_nvtx: rows(
            &conn,
            &format!("SELECT * FROM {KERNEL_NVTX} ORDER BY src, rid"),
        ),
        counts,
    }
}

fn built(schema: &Schema) -> Option<Tables> {
    let p = Projection::build(schema).unwrap()?;
    Some(tables(
        p.path(),
        [
            p.range_device_rows,
            p.ranges_with_gpu_work,
            p.annotated_gpu_rows,
        ],
    ))
}

/// The projection's original implementation (commit d564df8), verbatim but for error handling.
fn reference(schema: &Schema) -> Option<Tables> {
    const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
    const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
    const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
    const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
    const DRIVER: &str = "CUPTI_ACTIVITY_KIND_DRIVER";
    const NVTX: &str = "NVTX_EVENTS";
    const RANGE_SEPARATOR: &str = " > ";
    let gpu: Vec<(i64, &str)> = [(0, KERNEL), (1, MEMCPY), (2, MEMSET)]
        .into_iter()
        .filter(|(_, t)| {
            schema.has_columns(
                t,
                &["start", "end", "correlationId", "globalPid", "deviceId"],
            )
        })
        .collect();
    let api: Vec<&str> = [RUNTIME, DRIVER]
        .into_iter()
        .filter(|t| schema.has_columns(t, &["start", "correlationId", "globalTid"]))
        .collect();
    if gpu.is_empty()
        || api.is_empty()
        || !schema.has_columns(NVTX, &["start", "end", "eventType", "globalTid"])
    {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reference.sqlite");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        .unwrap();
    let src_uri = nsys_perfetto_read::connection::sqlite_uri(&schema.path, "mode=ro&immutable=1");
    conn.execute("ATTACH DATABASE ?1 AS src", [src_uri])
        .unwrap();
    let mut sql = String::from(
        "CREATE TABLE api_first(pkey INTEGER, corr INTEGER, tid INTEGER, start INTEGER, \
           PRIMARY KEY (pkey, corr)) WITHOUT ROWID;
         CREATE TABLE gpu_link(src INTEGER, rid INTEGER, pkey INTEGER, corr INTEGER, \
           device INTEGER, start INTEGER, \"end\" INTEGER, tid INTEGER, astart INTEGER);
         CREATE TABLE launch_dev(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER, \
           device INTEGER, gmin INTEGER, gmax INTEGER, n INTEGER);
         CREATE TABLE launch(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER);
         CREATE TABLE launch_nvtx(pkey INTEGER, corr INTEGER, ranges TEXT, \
           PRIMARY KEY (pkey, corr)) WITHOUT ROWID;\n",
    );
    for t in &api {
        sql += &format!(
            "INSERT OR IGNORE INTO api_first SELECT globalTid >> 24, correlationId, globalTid, start \
             FROM src.\"{t}\" WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL \
             AND start IS NOT NULL;\n"
        );
    }
    for (s, t) in &gpu {
        sql += &format!(
            "INSERT INTO gpu_link SELECT {s}, g.rowid, a.pkey, a.corr, g.deviceId, g.start, g.\"end\", \
             a.tid, a.start FROM src.\"{t}\" g \
             JOIN api_first a ON a.pkey = g.globalPid >> 24 AND a.corr = g.correlationId \
             WHERE g.deviceId IS NOT NULL AND g.\"end\" >= g.start;\n"
        );
    }
    let text = schema.col_of(NVTX, "r", "text");
    let text_id = schema.col_of(NVTX, "r", "textId");
    let domain = schema.col_of(NVTX, "r", "domainId");
    let (name_join, name_expr) =
        if schema.has_columns("StringIds", &["id", "value"]) && schema.has_column(NVTX, "textId") {
            (
                " LEFT JOIN src.StringIds s ON s.id = r.textId",
                format!("coalesce({text}, s.value, '(unnamed range)')"),
            )
        } else {
            ("", format!("coalesce({text}, '(unnamed range)')"))
        };
    sql += &format!(
        "DROP TABLE api_first;
         INSERT INTO launch_dev SELECT tid, astart, pkey, corr, device, \
           min(start), max(\"end\"), count(*) FROM gpu_link GROUP BY pkey, corr, device;
         CREATE INDEX launch_dev_time ON launch_dev(tid, start);
         INSERT INTO launch SELECT DISTINCT tid, start, pkey, corr FROM launch_dev;
         CREATE INDEX launch_time ON launch(tid, start);
         CREATE TABLE {NVTX_GPU} AS SELECT r.rowid AS nvtx_rid, r.eventType AS event_type, \
           r.globalTid AS global_tid, coalesce({domain}, 0) AS domain, l.device AS device, \
           min(l.gmin) AS gpu_start, max(l.gmax) AS gpu_end, sum(l.n) AS gpu_rows, \
           {text} AS name_text, {text_id} AS name_id \
           FROM src.NVTX_EVENTS r CROSS JOIN launch_dev l \
           ON l.tid = r.globalTid AND l.start BETWEEN r.start AND r.\"end\" \
           WHERE r.eventType IN (59, 60) AND r.\"end\" >= r.start \
           GROUP BY r.rowid, l.device;
         CREATE INDEX nvtx_gpu_start ON {NVTX_GPU}(gpu_start);
         CREATE INDEX nvtx_gpu_rid ON {NVTX_GPU}(nvtx_rid);
         INSERT INTO launch_nvtx SELECT pkey, corr, \
           group_concat(name, '{RANGE_SEPARATOR}' ORDER BY rstart, rend DESC, rrid) \
           FROM (SELECT l.pkey, l.corr, r.start AS rstart, r.\"end\" AS rend, r.rowid AS rrid, \
                 {name_expr} AS name \
                 FROM src.NVTX_EVENTS r CROSS JOIN launch l \
                 ON l.tid = r.globalTid AND l.start BETWEEN r.start AND r.\"end\"{name_join} \
                 WHERE r.eventType = 59 AND r.\"end\" >= r.start) \
           GROUP BY pkey, corr;
         CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
           PRIMARY KEY (src, rid)) WITHOUT ROWID;
         INSERT INTO {KERNEL_NVTX} SELECT g.src, g.rid, n.ranges FROM gpu_link g \
           JOIN launch_nvtx n ON n.pkey = g.pkey AND n.corr = g.corr ORDER BY g.src, g.rid;
         DROP TABLE launch_nvtx; DROP TABLE launch; DROP TABLE launch_dev; DROP TABLE gpu_link;"
    );
    conn.execute_batch(&sql).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64;
    let counts = [
        count(&format!("SELECT count(*) FROM {NVTX_GPU}")),
        count(&format!("SELECT count(DISTINCT nvtx_rid) FROM {NVTX_GPU}")),
        count(&format!("SELECT count(*) FROM {KERNEL_NVTX}")),
    ];
    drop(conn);
    Some(tables(&path, counts))
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// How a generated export deviates from a well-behaved one.
#[derive(Clone, Copy, Debug, Default)]
struct Shape {
    /// Time step: the larger, the more equal timestamps.
    grid: i64,
    processes: u64,
    threads: u64,
    steps: u64,
    /// Push/pop ranges that end past their parent, or not at all, or before they start.
    imperfect: f64,
    /// NVTX rows in random order (`Some(w)`: moved up to `w` rows only).
    shuffle_nvtx: Option<Option<usize>>,
    /// GPU rows in random order (`Some(w)`: moved up to `w` rows only).
    shuffle_gpu: Option<Option<usize>>,
    /// Repeated correlation ids among API calls.
    repeats: f64,
    /// Names as registered strings (`textId`) rather than text.
    string_ids: bool,
    /// Odd values: a start stored as a real, a device id or NVTX rowid too large to pack.
    odd: Option<Odd>,
}

#[derive(Clone, Copy, Debug)]
enum Odd {
    RealStart,
    HugeDevice,
    HugeRowid,
    BlobName,
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T], window: Option<usize>) {
    match window {
        None => {
            for i in (1..v.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                v.swap(i, j);
            }
        }
        Some(w) => {
            for i in 0..v.len() {
                let j = (i + rng.below(w as u64 + 1) as usize).min(v.len() - 1);
                v.swap(i, j);
            }
        }
    }
}

/// Write an export of the given shape to `path`.
fn generate(path: &Path, seed: u64, shape: Shape) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let g = shape.grid;
    let names = ["a", "b", "step", "forward pass", "x > y", ""];
    // NVTX rows: start, end, eventType, text, globalTid, textId, domainId.
    let mut nvtx: Vec<[Value; 7]> = Vec::new();
    // API rows: start, end, globalTid, correlationId; runtime and driver.
    let mut api: [Vec<[Value; 4]>; 2] = [Vec::new(), Vec::new()];
    // GPU rows: start, end, deviceId, correlationId, globalPid; kernel, memcpy, memset.
    let mut gpu: [Vec<[Value; 5]>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let int = Value::Integer;
    let name = |rng: &mut Rng| -> (Value, Value) {
        if shape.string_ids && rng.chance(0.6) {
            // Id 7 is not registered.
            (Value::Null, int(1 + rng.below(7) as i64))
        } else if rng.chance(0.05) {
            (Value::Null, Value::Null)
        } else {
            let n = names[rng.below(names.len() as u64) as usize];
            (Value::Text(n.to_string()), Value::Null)
        }
    };
    for p in 0..shape.processes {
        let pid = 1000 + p as i64;
        let mut corr = 1i64;
        for th in 0..shape.threads {
            let tid = (pid << 24) | (pid + th as i64);
            let mut t = rng.below(5) as i64 * g;
            let mut stack: Vec<(i64, Value, Value, Value)> = Vec::new();
            let push_range = |rng: &mut Rng,
                              nvtx: &mut Vec<[Value; 7]>,
                              (start, text, text_id, domain): (i64, Value, Value, Value),
                              end: i64| {
                let end = if rng.chance(shape.imperfect) {
                    match rng.below(4) {
                        0 => Value::Null,
                        1 => int(start - 1 - rng.below(3) as i64),
                        _ => int(end + rng.below(40) as i64 * g),
                    }
                } else {
                    int(end)
                };
                nvtx.push([int(start), end, int(59), text, int(tid), text_id, domain]);
            };
            for _ in 0..shape.steps {
                t += rng.below(3) as i64 * g;
                match rng.below(20) {
                    0..=5 if stack.len() < 9 => {
                        let (text, text_id) = name(&mut rng);
                        let domain = if rng.chance(0.5) {
                            Value::Null
                        } else {
                            int(rng.below(3) as i64)
                        };
                        stack.push((t, text, text_id, domain));
                    }
                    6..=10 if !stack.is_empty() => {
                        let r = stack.pop().unwrap();
                        push_range(&mut rng, &mut nvtx, r, t);
                    }
                    11 => {
                        // A start/end range, free of the nesting; or another kind of event.
                        let (text, text_id) = name(&mut rng);
                        let ty = if rng.chance(0.8) { 60 } else { 34 };
                        let end = t + rng.below(60) as i64 * g;
                        let tid = if rng.chance(0.03) {
                            Value::Null
                        } else {
                            int(tid)
                        };
                        nvtx.push([int(t), int(end), int(ty), text, tid, text_id, int(0)]);
                    }
                    _ => {
                        let which = usize::from(rng.chance(0.2));
                        let c = if rng.chance(shape.repeats) && corr > 1 {
                            corr - 1 - rng.below(corr.min(3) as u64) as i64
                        } else {
                            corr += 1;
                            corr
                        };
                        let (cv, sv) = match rng.below(100) {
                            0 => (Value::Null, int(t)),
                            1 => (int(c), Value::Null),
                            _ => (int(c), int(t)),
                        };
                        api[which].push([sv, int(t + g), int(tid), cv]);
                        for _ in 0..rng.below(4) {
                            let table = match rng.below(10) {
                                0..=5 => 0,
                                6..=7 => 1,
                                _ => 2,
                            };
                            let start = t + (rng.below(30) as i64 - 2) * g;
                            let end = if rng.chance(0.03) {
                                start - 1
                            } else {
                                start + rng.below(5) as i64 * g
                            };
                            let device = match rng.below(20) {
                                0 => Value::Null,
                                1..=2 => int(7),
                                n => int(n as i64 % 3),
                            };
                            gpu[table].push([int(start), int(end), device, int(c), int(pid << 24)]);
                        }
                    }
                }
            }
            while let Some(r) = stack.pop() {
                t += rng.below(3) as i64 * g;
                push_range(&mut rng, &mut nvtx, r, t);
            }
        }
    }
    // Export order: by start (stable), then shuffled as asked.
    nvtx.sort_by_key(|r| match r[0] {
        Value::Integer(s) => s,
        _ => 0,
    });
    for a in &mut api {
        a.sort_by_key(|r| match r[0] {
            Value::Integer(s) => s,
            _ => 0,
        });
    }
    for t in &mut gpu {
        t.sort_by_key(|r| match r[0] {
            Value::Integer(s) => s,
            _ => 0,
        });
    }
    if let Some(w) = shape.shuffle_nvtx {
        shuffle(&mut rng, &mut nvtx, w);
    }
    if let Some(w) = shape.shuffle_gpu {
        for t in &mut gpu {
            shuffle(&mut rng, t, w);
        }
    }
    match shape.odd {
        Some(Odd::RealStart) if !nvtx.is_empty() => {
            let i = rng.below(nvtx.len() as u64) as usize;
            if let Value::Integer(s) = nvtx[i][0] {
                nvtx[i][0] = Value::Real(s as f64);
            }
        }
        Some(Odd::HugeDevice) if !gpu[0].is_empty() => {
            let i = rng.below(gpu[0].len() as u64) as usize;
            gpu[0][i][2] = int(1 << 33);
        }
        Some(Odd::BlobName) if !nvtx.is_empty() => {
            let i = rng.below(nvtx.len() as u64) as usize;
            nvtx[i][3] = Value::Blob(b"bytes".to_vec());
        }
        _ => {}
    }

    let _ = std::fs::remove_file(path);
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE StringIds(id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE NVTX_EVENTS(start INTEGER, end INTEGER, eventType INTEGER, text TEXT, \
           globalTid INTEGER, textId INTEGER, domainId INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER, end INTEGER, globalTid INTEGER, \
           correlationId INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER(start INTEGER, end INTEGER, globalTid INTEGER, \
           correlationId INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER, end INTEGER, deviceId INTEGER, \
           correlationId INTEGER, globalPid INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY(start INTEGER, end INTEGER, deviceId INTEGER, \
           correlationId INTEGER, globalPid INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET(start INTEGER, end INTEGER, deviceId INTEGER, \
           correlationId INTEGER, globalPid INTEGER);
         BEGIN;",
    )
    .unwrap();
    for (id, v) in ["one", "two", "three", "", "five", "six"]
        .iter()
        .enumerate()
    {
        conn.execute(
            "INSERT INTO StringIds VALUES (?1, ?2)",
            params![id as i64 + 1, v],
        )
        .unwrap();
    }
    let first_rowid: i64 = if matches!(shape.odd, Some(Odd::HugeRowid)) {
        (1 << 31) - 3
    } else {
        1
    };
    {
        let mut st = conn
            .prepare(
                "INSERT INTO NVTX_EVENTS(rowid, start, end, eventType, text, globalTid, textId, \
                 domainId) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .unwrap();
        for (i, r) in nvtx.iter().enumerate() {
            st.execute(params![
                first_rowid + i as i64,
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6]
            ])
            .unwrap();
        }
    }
    for (t, rows) in ["RUNTIME", "DRIVER"].iter().zip(&api) {
        let mut st = conn
            .prepare(&format!(
                "INSERT INTO CUPTI_ACTIVITY_KIND_{t} VALUES (?1, ?2, ?3, ?4)"
            ))
            .unwrap();
        for r in rows {
            st.execute(params![r[0], r[1], r[2], r[3]]).unwrap();
        }
    }
    for (t, rows) in ["KERNEL", "MEMCPY", "MEMSET"].iter().zip(&gpu) {
        let mut st = conn
            .prepare(&format!(
                "INSERT INTO CUPTI_ACTIVITY_KIND_{t} VALUES (?1, ?2, ?3, ?4, ?5)"
            ))
            .unwrap();
        for r in rows {
            st.execute(params![r[0], r[1], r[2], r[3], r[4]]).unwrap();
        }
    }
    conn.execute_batch("COMMIT").unwrap();
}

fn check(path: &Path, what: &str) -> (usize, usize) {
    let (_c, schema) = nsys_perfetto_read::schema::open_schema(path).unwrap();
    let got = built(&schema);
    let want = reference(&schema);
    let (got, want) = match (got, want) {
        (Some(g), Some(w)) => (g, w),
        (None, None) => return (0, 0),
        (g, w) => panic!("{what}: projection {} vs {}", g.is_some(), w.is_some()),
    };
    assert_eq!(got.schema, want.schema, "{what}: schema");
    assert_eq!(got.counts, want.counts, "{what}: counts");
    for (i, (g, w)) in got.nvtx_gpu.iter().zip(&want.nvtx_gpu).enumerate() {
        assert_eq!(g, w, "{what}: nvtx_gpu row {i} in rowid order");
    }
    assert_eq!(
        got.nvtx_gpu.len(),
        want.nvtx_gpu.len(),
        "{what}: nvtx_gpu rows"
    );
    for (i, (g, w)) in got.kernel_nvtx.iter().zip(&want.kernel_nvtx).enumerate() {
        assert_eq!(g, w, "{what}: kernel_nvtx row {i}");
    }
    assert_eq!(
        got.kernel_nvtx.len(),
        want.kernel_nvtx.len(),
        "{what}: kernel_nvtx rows"
    );
    (got.nvtx_gpu.len(), got.kernel_nvtx.len())
}

#[test]
fn projection_matches_its_sql_definition_on_generated_exports() {
    let dir = tempfile::tempdir().unwrap();
    let base = Shape {
        grid: 10,
        processes: 1,
        threads: 1,
        steps: 3000,
        imperfect: 0.0,
        shuffle_nvtx: None,
        shuffle_gpu: None,
        repeats: 0.0,
        string_ids: false,
        odd: None,
    };
    let shapes = [
        base,
        Shape { grid: 1, ..base },
        Shape {
            grid: 1000,
            processes: 2,
            threads: 3,
            imperfect: 0.1,
            string_ids: true,
            ..base
        },
        Shape {
            processes: 3,
            threads: 2,
            repeats: 0.05,
            imperfect: 0.05,
            ..base
        },
        Shape {
            threads: 2,
            shuffle_gpu: Some(Some(30)),
            shuffle_nvtx: Some(Some(30)),
            ..base
        },
        Shape {
            threads: 2,
            imperfect: 0.1,
            shuffle_nvtx: Some(None),
            ..base
        },
        Shape {
            threads: 2,
            steps: 40_000,
            shuffle_gpu: Some(None),
            ..base
        },
        Shape {
            steps: 40_000,
            grid: 1,
            processes: 2,
            threads: 2,
            shuffle_nvtx: Some(Some(3000)),
            shuffle_gpu: Some(Some(3000)),
            ..base
        },
        Shape {
            odd: Some(Odd::RealStart),
            ..base
        },
        Shape {
            odd: Some(Odd::HugeDevice),
            ..base
        },
        Shape {
            odd: Some(Odd::HugeRowid),
            ..base
        },
        Shape {
            odd: Some(Odd::BlobName),
            string_ids: true,
            ..base
        },
    ];
    let (mut ranges, mut kernels) = (0, 0);
    for (i, shape) in shapes.iter().enumerate() {
        for seed in 0..if shape.steps > 10_000 { 1 } else { 3 } {
            let path = dir.path().join(format!("gen-{i}-{seed}.sqlite"));
            generate(&path, seed * 100 + i as u64, *shape);
            let (r, k) = check(&path, &format!("shape {i} {shape:?} seed {seed}"));
            ranges += r;
            kernels += k;
        }
    }
    eprintln!("{ranges} nvtx_gpu rows, {kernels} kernel_nvtx rows checked");
    assert!(ranges > 10_000 && kernels > 10_000);
}

/// The corpus exports (when present) against the SQL definition too.
#[test]
fn projection_matches_its_sql_definition_on_corpus() {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    for name in [
        "quasiben__nvtx-examples__cudf.sqlite",
        "GindaChen__nsys-ai__h100_2gpu_1s.sqlite",
        "GindaChen__nsys-ai__mfu_2gpu_before.sqlite",
        "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
        "NVIDIA__Fuser__report1@8fa9ec2.sqlite",
        "Sh1mwww__llama3-inference__real_inference_simulation.sqlite",
    ] {
        let p = d.join(name);
        if p.is_file() {
            check(&p, name);
        } else {
            crate::common::skip("corpus", &format!("{} is absent", p.display()));
        }
    }
    // More exports, e.g. the benchmark: `NSYS_PROJ_CHECK=a.sqlite:b.sqlite`.
    if let Ok(files) = std::env::var("NSYS_PROJ_CHECK") {
        for f in files.split(':').filter(|f| !f.is_empty()) {
            let (r, k) = check(Path::new(f), f);
            eprintln!("{f}: {r} nvtx_gpu rows, {k} kernel_nvtx rows identical");
        }
    }
}
