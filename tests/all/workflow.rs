//! The workflow commands (`stats`, `extract`, `sweep`) and the NVTX-to-GPU projection, checked
//! against SQL computed here directly on the source exports. The SQL in this file is written
//! independently of the implementation's (different joins, correlated per-item queries).

use crate::common::{self, corpus_dir, corpus_file, skip};
use nsys_perfetto_read::projection::tables::Projection;
use nsys_perfetto_read::projection::{KERNEL_NVTX, NVTX_GPU, PROJ_DB};
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The repo's own fixtures (tests/fixtures/*.sqlite), when present.
fn fixtures() -> Vec<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&d)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sqlite"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// An in-memory database with the export attached read-only as `s`.
fn scratch(path: &Path) -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute(
        "ATTACH DATABASE ?1 AS s",
        [nsys_perfetto_read::connection::sqlite_uri(
            path,
            "mode=ro&immutable=1",
        )],
    )
    .unwrap();
    conn
}

fn has_table(conn: &Connection, t: &str) -> bool {
    conn.query_row(
        "SELECT count(*) FROM s.sqlite_master WHERE type = 'table' AND name = ?1",
        [t],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        > 0
}

fn has_column(conn: &Connection, t: &str, c: &str) -> bool {
    conn.query_row(
        &format!("SELECT count(*) FROM pragma_table_info('{t}', 's') WHERE name = ?1"),
        [c],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        > 0
}

/// Test-side copies: `api` (the earliest call per process and correlation id) and `gpu`.
fn build_links(conn: &Connection) {
    // The launch of each (process, correlation id): its lowest-rowid runtime call, else its
    // lowest-rowid driver call.
    conn.execute_batch(
        "CREATE TABLE api(tid INTEGER, start INTEGER, corr INTEGER);
         CREATE INDEX api_t ON api(tid, start);",
    )
    .unwrap();
    for (i, t) in ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"]
        .iter()
        .enumerate()
        .filter(|(_, t)| has_table(conn, t))
    {
        conn.execute_batch(&format!(
            "INSERT INTO api SELECT globalTid, start, correlationId FROM s.{t} x \
             WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL \
             AND x.rowid = (SELECT min(y.rowid) FROM s.{t} y WHERE y.correlationId = x.correlationId \
                            AND (y.globalTid >> 24) = (x.globalTid >> 24)) \
             AND ({i} = 0 OR NOT EXISTS (SELECT 1 FROM api a WHERE a.corr = x.correlationId \
                            AND (a.tid >> 24) = (x.globalTid >> 24)))"
        ))
        .unwrap();
    }
    let gpu: Vec<String> = [
        (0, "CUPTI_ACTIVITY_KIND_KERNEL"),
        (1, "CUPTI_ACTIVITY_KIND_MEMCPY"),
        (2, "CUPTI_ACTIVITY_KIND_MEMSET"),
    ]
    .iter()
    .filter(|(_, t)| has_table(conn, t))
    .map(|(s, t)| {
        format!(
            "SELECT {s} AS src, rowid AS rid, deviceId AS dev, start, end, correlationId AS corr, \
             globalPid AS gpid FROM s.{t}"
        )
    })
    .collect();
    conn.execute_batch(&format!(
        "CREATE TABLE gpu AS SELECT * FROM ({}) WHERE end >= start AND corr IS NOT NULL \
         AND dev IS NOT NULL AND gpid IS NOT NULL;
         CREATE INDEX gpu_c ON gpu(corr);",
        gpu.join(" UNION ALL ")
    ))
    .unwrap();
}

type GpuSpan = (i64, i64, i64, i64); // device, start, end, rows
/// rowid, eventType, globalTid, start, end, domain, text, textId
type RangeRow = (i64, i64, i64, i64, i64, i64, Option<String>, Option<i64>);

/// Check every row of the projection against per-range and per-GPU-row queries.
fn check_projection(path: &Path) -> (u64, u64) {
    let (_c, schema) = nsys_perfetto_read::schema::open_schema(path).unwrap();
    let proj = Projection::build(&schema).unwrap().expect("projection");
    let conn = scratch(path);
    proj.attach(&conn).unwrap();
    build_links(&conn);
    let has_text_id = has_column(&conn, "NVTX_EVENTS", "textId");
    let has_domain = has_column(&conn, "NVTX_EVENTS", "domainId");

    // (a) nvtx_gpu: for every range, the GPU rows launched by calls on its thread inside it.
    let ranges: Vec<RangeRow> = conn
        .prepare(&format!(
            "SELECT rowid, eventType, globalTid, start, end, {}, text, {} FROM s.NVTX_EVENTS \
             WHERE eventType IN (59, 60) AND end IS NOT NULL AND end >= start AND globalTid IS NOT NULL",
            if has_domain { "coalesce(domainId, 0)" } else { "0" },
            if has_text_id { "textId" } else { "NULL" }
        ))
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut expect_stmt = conn
        .prepare(
            "SELECT g.dev, min(g.start), max(g.end), count(*) FROM api a, gpu g \
             WHERE a.tid = ?1 AND a.start BETWEEN ?2 AND ?3 \
             AND g.corr = a.corr AND (g.gpid >> 24) = (a.tid >> 24) GROUP BY g.dev ORDER BY g.dev",
        )
        .unwrap();
    let mut got_stmt = conn
        .prepare(&format!(
            "SELECT device, gpu_start, gpu_end, gpu_rows, event_type, global_tid, domain, name_text, name_id \
             FROM {PROJ_DB}.{NVTX_GPU} WHERE nvtx_rid = ?1 ORDER BY device"
        ))
        .unwrap();
    let mut expected_rows = 0u64;
    let mut ranges_with_work = 0u64;
    for (rid, ty, tid, start, end, domain, text, text_id) in &ranges {
        let expect: Vec<GpuSpan> = expect_stmt
            .query_map((tid, start, end), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut got: Vec<GpuSpan> = Vec::new();
        let mut rows = got_stmt.query([rid]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            got.push((
                r.get(0).unwrap(),
                r.get(1).unwrap(),
                r.get(2).unwrap(),
                r.get(3).unwrap(),
            ));
            assert_eq!(r.get::<_, i64>(4).unwrap(), *ty);
            assert_eq!(r.get::<_, i64>(5).unwrap(), *tid);
            assert_eq!(r.get::<_, i64>(6).unwrap(), *domain);
            assert_eq!(r.get::<_, Option<String>>(7).unwrap(), *text);
            assert_eq!(r.get::<_, Option<i64>>(8).unwrap(), *text_id);
        }
        assert_eq!(got, expect, "{}: NVTX range rowid {rid}", path.display());
        expected_rows += expect.len() as u64;
        ranges_with_work += u64::from(!expect.is_empty());
    }
    let total: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM {PROJ_DB}.{NVTX_GPU}"),
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(total as u64, expected_rows);
    assert_eq!(proj.range_device_rows, expected_rows);
    assert_eq!(proj.ranges_with_gpu_work, ranges_with_work);

    // (b) kernel_nvtx: for every linked GPU row, the push/pop ranges around its launch.
    conn.execute_batch(&format!(
        "CREATE TABLE pp AS SELECT rowid AS rid, globalTid AS tid, start, end, \
         coalesce(text, {}, '(unnamed range)') AS name FROM s.NVTX_EVENTS \
         WHERE eventType = 59 AND end >= start AND globalTid IS NOT NULL;
         CREATE INDEX pp_t ON pp(tid, start);",
        if has_text_id {
            "(SELECT value FROM s.StringIds WHERE id = textId)"
        } else {
            "NULL"
        }
    ))
    .unwrap();
    let launches: Vec<(i64, i64, i64, i64)> = conn
        .prepare(
            "SELECT g.src, g.rid, a.tid, a.start FROM gpu g JOIN api a \
             ON a.corr = g.corr AND (a.tid >> 24) = (g.gpid >> 24)",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut enclosing = conn
        .prepare(
            "SELECT name FROM pp WHERE tid = ?1 AND start <= ?2 AND end >= ?2 \
             ORDER BY start, end DESC, rid",
        )
        .unwrap();
    let mut got_k = conn
        .prepare(&format!(
            "SELECT ranges FROM {PROJ_DB}.{KERNEL_NVTX} WHERE src = ?1 AND rid = ?2"
        ))
        .unwrap();
    let mut annotated = 0u64;
    for (src, rid, tid, start) in &launches {
        let names: Vec<String> = enclosing
            .query_map((tid, start), |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let expect = (!names.is_empty()).then(|| names.join(" > "));
        let got: Option<String> = got_k
            .query_row((src, rid), |r| r.get(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .unwrap();
        assert_eq!(
            got,
            expect,
            "{}: GPU row src {src} rowid {rid}",
            path.display()
        );
        annotated += u64::from(expect.is_some());
    }
    let total: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM {PROJ_DB}.{KERNEL_NVTX}"),
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(total as u64, annotated);
    assert_eq!(proj.annotated_gpu_rows, annotated);
    (expected_rows, annotated)
}

#[test]
fn projection_matches_sql_on_corpus() {
    let mut checked = 0;
    for name in [
        "quasiben__nvtx-examples__cudf.sqlite",
        "GindaChen__nsys-ai__h100_2gpu_1s.sqlite",
        "Sh1mwww__llama3-inference__real_inference_simulation.sqlite",
        "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
        "NVIDIA__Fuser__report1@8fa9ec2.sqlite",
    ] {
        let Some(p) = corpus_file(name) else { continue };
        let (ranges, kernels) = check_projection(&p);
        eprintln!("{name}: {ranges} range/device rows, {kernels} annotated GPU rows");
        assert!(ranges > 0 && kernels > 0, "{name}: projection is empty");
        checked += 1;
    }
    for p in fixtures() {
        let (_c, schema) = nsys_perfetto_read::schema::open_schema(&p).unwrap();
        if Projection::build(&schema).unwrap().is_some() {
            check_projection(&p);
            checked += 1;
        }
    }
    eprintln!("checked {checked} files");
}

/// A few ranges of the cuDF capture checked by hand (values read with the sqlite3 shell).
#[test]
fn projection_hand_checked_ranges() {
    let Some(p) = corpus_file("quasiben__nvtx-examples__cudf.sqlite") else {
        return;
    };
    let (_c, schema) = nsys_perfetto_read::schema::open_schema(&p).unwrap();
    let proj = Projection::build(&schema).unwrap().unwrap();
    let conn = nsys_perfetto_read::connection::open_readonly(&p).unwrap();
    proj.attach(&conn).unwrap();
    let rows: BTreeMap<i64, Vec<(i64, i64, i64, i64)>> = {
        let mut m: BTreeMap<i64, Vec<_>> = BTreeMap::new();
        let mut st = conn
            .prepare("SELECT nvtx_rid, device, gpu_start, gpu_end, gpu_rows FROM proj.nvtx_gpu")
            .unwrap();
        let mut rows = st.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            m.entry(r.get(0).unwrap()).or_default().push((
                r.get(1).unwrap(),
                r.get(2).unwrap(),
                r.get(3).unwrap(),
                r.get(4).unwrap(),
            ));
        }
        m
    };
    // "from_arrow" (rowid 22) encloses cudaMemcpyAsync calls with correlation ids 223 and 226:
    // memcpy rows 3 (3371531070-3371532478) and 4 (3371550942-3371552030).
    assert_eq!(rows[&22], vec![(0, 3371531070, 3371552030, 2)]);
    // Its child "make_fixed_width_column" (23) only encloses a memset and a malloc without GPU rows.
    assert!(!rows.contains_key(&23));
    // "SORT_INDEX" (235): 14 GPU rows.
    assert_eq!(rows[&235], vec![(0, 3698332313, 3699247767, 14)]);
    let ranges: String = conn
        .query_row(
            "SELECT ranges FROM proj.kernel_nvtx WHERE src = 0 AND rid = 51",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(ranges, "GROUPBY_AGG > SORT_INDEX > sorted_order");
    let ranges: String = conn
        .query_row(
            "SELECT ranges FROM proj.kernel_nvtx WHERE src = 1 AND rid = 3",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(ranges, "from_arrow");
}

// ---------------------------------------------------------------------------------------------
// stats and extract

use nsys_perfetto::workflow::extract::{self, Extract};
use nsys_perfetto::workflow::stats::{self, Stats, StatsOptions};
use nsys_perfetto::workflow::{Output, Pattern, Unit};
use nsys_perfetto_model::category::Kind;

/// Every `.sqlite` export of the corpus, then the repo fixtures.
fn all_exports() -> Vec<PathBuf> {
    let corpus = corpus_dir();
    if corpus.is_none() {
        skip(
            "corpus",
            "../shared/corpus is absent: the repo's fixtures only",
        );
    }
    let mut out: Vec<PathBuf> = corpus
        .map(|d| {
            let mut v: Vec<PathBuf> = std::fs::read_dir(d)
                .unwrap()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sqlite"))
                .collect();
            v.sort();
            v
        })
        .unwrap_or_default();
    out.extend(fixtures());
    out
}

/// nsys' labels of the copy kinds (`cuda_gpu_mem_time_sum`: `[CUDA memcpy Host-to-Device]`).
const COPY_LABELS: [&str; 14] = [
    "Unknown",
    "Host-to-Device",
    "Device-to-Host",
    "Host-to-Array",
    "Array-to-Host",
    "Array-to-Array",
    "Array-to-Device",
    "Device-to-Array",
    "Device-to-Device",
    "Host-to-Host",
    "Peer-to-Peer",
    "Unified Host-to-Device",
    "Unified Device-to-Host",
    "Unified Device-to-Device",
];

/// `cuda_api_sum`'s name of an API symbol: a six-character `_vNNNN` suffix dropped.
fn api_report_name(symbol: &str) -> String {
    let c: Vec<char> = symbol.chars().collect();
    if c.len() >= 6 && c[c.len() - 6] == '_' && c[c.len() - 5] == 'v' {
        c[..c.len() - 6].iter().collect()
    } else {
        symbol.to_string()
    }
}

/// The trace's name of an API symbol: any `_vNNNN` (4+ digits) suffix dropped.
fn api_trace_name(symbol: &str) -> Option<&str> {
    let (stem, v) = symbol.rsplit_once("_v")?;
    (v.len() >= 4 && v.chars().all(|c| c.is_ascii_digit()) && !stem.is_empty()).then_some(stem)
}

const COPY_KINDS: [&str; 14] = [
    "Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP",
    "UVM HtoD", "UVM DtoH", "UVM DtoD",
];

/// An event as the test sees it: its name, a second name (a kernel's demangled name) and its
/// duration in ns.
#[derive(Debug, Clone)]
struct Ev {
    name: String,
    alt: Option<String>,
    dur: i64,
    /// NVTX ranges: the thread and CPU interval (what nesting is judged by).
    tid: Option<i64>,
    start: i64,
    end: i64,
}

/// Every event of every kind, read with plain row-by-row SQL.
fn events(path: &Path) -> BTreeMap<Kind, Vec<Ev>> {
    let conn = scratch(path);
    let mut out: BTreeMap<Kind, Vec<Ev>> = BTreeMap::new();
    let strings = has_table(&conn, "StringIds");
    let read = |sql: &str| -> Vec<(Option<String>, Option<String>, i64)> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| {
                let name = match r.get_ref(0)? {
                    rusqlite::types::ValueRef::Integer(v) => Some(v.to_string()),
                    rusqlite::types::ValueRef::Text(t) => {
                        Some(String::from_utf8_lossy(t).into_owned())
                    }
                    _ => None,
                };
                Ok((name, r.get(1)?, r.get(2)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let string = |col: &str| {
        if strings {
            format!("(SELECT value FROM s.StringIds WHERE id = {col})")
        } else {
            "NULL".into()
        }
    };
    if has_table(&conn, "CUPTI_ACTIVITY_KIND_KERNEL") {
        let v = read(&format!(
            "SELECT {}, {}, end - start FROM s.CUPTI_ACTIVITY_KIND_KERNEL WHERE end >= start",
            string("coalesce(demangledName, shortName)"),
            string("shortName")
        ));
        out.insert(
            Kind::Kernel,
            v.into_iter()
                .map(|(n, a, d)| Ev {
                    name: n.unwrap_or_else(|| "(unnamed kernel)".into()),
                    alt: a,
                    dur: d,
                    tid: None,
                    start: 0,
                    end: 0,
                })
                .collect(),
        );
    }
    let mut mem = Vec::new();
    if has_table(&conn, "CUPTI_ACTIVITY_KIND_MEMCPY") {
        for (k, _, d) in read(
            "SELECT copyKind, NULL, end - start FROM s.CUPTI_ACTIVITY_KIND_MEMCPY WHERE end >= start",
        ) {
            let k: usize = k.unwrap().parse().unwrap();
            mem.push(Ev {
                name: format!("[CUDA memcpy {}]", COPY_LABELS[k]),
                alt: Some(format!("Memcpy {}", COPY_KINDS[k])),
                dur: d,
                tid: None,
                start: 0,
                end: 0,
            });
        }
    }
    if has_table(&conn, "CUPTI_ACTIVITY_KIND_MEMSET") {
        for (_, _, d) in read(
            "SELECT NULL, NULL, end - start FROM s.CUPTI_ACTIVITY_KIND_MEMSET WHERE end >= start",
        ) {
            mem.push(Ev {
                name: "[CUDA memset]".into(),
                alt: Some("Memset".into()),
                dur: d,
                tid: None,
                start: 0,
                end: 0,
            });
        }
    }
    if has_table(&conn, "CUPTI_ACTIVITY_KIND_MEMCPY")
        || has_table(&conn, "CUPTI_ACTIVITY_KIND_MEMSET")
    {
        out.insert(Kind::Memory, mem);
    }
    let mut api = Vec::new();
    let mut any_api = false;
    for t in ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"] {
        if has_table(&conn, t) {
            any_api = true;
            for (n, _, d) in read(&format!(
                "SELECT {}, NULL, end - start FROM s.{t} WHERE end >= start",
                string("nameId")
            )) {
                api.push(Ev {
                    name: n
                        .as_deref()
                        .map_or_else(|| "(unnamed API call)".into(), api_report_name),
                    alt: n,
                    dur: d,
                    tid: None,
                    start: 0,
                    end: 0,
                });
            }
        }
    }
    if any_api {
        out.insert(Kind::Api, api);
    }
    if has_table(&conn, "NVTX_EVENTS") {
        let text_id = if has_column(&conn, "NVTX_EVENTS", "textId") {
            string("textId")
        } else {
            "NULL".into()
        };
        let domain = nvtx_domain(&conn);
        let v: Vec<NvtxRow<Option<i64>>> = conn
            .prepare(&format!(
                "SELECT coalesce(text, {text_id}), globalTid, start, end, {domain} FROM s.NVTX_EVENTS e \
                 WHERE eventType IN (59, 60) AND end >= start"
            ))
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        out.insert(
            Kind::Nvtx,
            v.into_iter()
                .map(|(n, tid, start, end, d)| Ev {
                    name: nvtx_full_name(d.as_deref(), n.as_deref()),
                    alt: Some(n.unwrap_or_else(|| "(unnamed range)".into())),
                    dur: end - start,
                    tid,
                    start,
                    end,
                })
                .collect(),
        );
    }
    // NVTX on the GPU: per range, the GPU rows launched by the calls on its thread inside it.
    let (_c, schema) = nsys_perfetto_read::schema::open_schema(path).unwrap();
    if Projection::build(&schema).unwrap().is_some() {
        build_links(&conn);
        let text_id = if has_column(&conn, "NVTX_EVENTS", "textId") {
            string("textId")
        } else {
            "NULL".into()
        };
        let domain = nvtx_domain(&conn);
        let ranges: Vec<NvtxRow<i64>> = conn
            .prepare(&format!(
                "SELECT coalesce(text, {text_id}), globalTid, start, end, {domain} FROM s.NVTX_EVENTS e \
                 WHERE eventType IN (59, 60) AND end >= start AND globalTid IS NOT NULL"
            ))
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut span = conn
            .prepare(
                "SELECT min(g.start), max(g.end) FROM api a, gpu g WHERE a.tid = ?1 \
                 AND a.start BETWEEN ?2 AND ?3 AND g.corr = a.corr AND (g.gpid >> 24) = (a.tid >> 24)",
            )
            .unwrap();
        let mut v = Vec::new();
        for (name, tid, start, end, d) in ranges {
            let (lo, hi): (Option<i64>, Option<i64>) = span
                .query_row((tid, start, end), |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap();
            if let (Some(lo), Some(hi)) = (lo, hi) {
                v.push(Ev {
                    name: nvtx_full_name(d.as_deref(), name.as_deref()),
                    alt: Some(name.unwrap_or_else(|| "(unnamed range)".into())),
                    dur: hi - lo,
                    tid: Some(tid),
                    start,
                    end,
                });
            }
        }
        out.insert(Kind::NvtxGpu, v);
    }
    out
}

/// An NVTX range read by the test: (text, thread, start, end, domain).
type NvtxRow<T> = (Option<String>, T, i64, i64, Option<String>);

/// The SQL naming the domain of an NVTX row `e` (its creation, event type 75, in the row's
/// process, the earliest one), NULL where the export has no domains.
fn nvtx_domain(conn: &Connection) -> &'static str {
    if has_column(conn, "NVTX_EVENTS", "domainId") {
        conn.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS dom AS SELECT domainId, \
             (globalTid >> 24) & 16777215 AS pid, text, start FROM s.NVTX_EVENTS WHERE eventType = 75; \
             CREATE INDEX IF NOT EXISTS temp.dom_key ON dom (domainId, pid, start);",
        )
        .unwrap();
        "(SELECT d.text FROM temp.dom d WHERE d.domainId = e.domainId \
         AND d.pid = (e.globalTid >> 24) & 16777215 ORDER BY d.start LIMIT 1)"
    } else {
        "NULL"
    }
}

/// nsys' name of an NVTX range: `Domain:name` in a named domain.
fn nvtx_full_name(domain: Option<&str>, name: Option<&str>) -> String {
    let name = name.unwrap_or("(unnamed range)");
    match domain {
        Some(d) => format!("{d}:{name}"),
        None => name.to_string(),
    }
}

/// Per name: the sorted durations.
fn by_name(evs: &[Ev]) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for e in evs {
        m.entry(e.name.clone()).or_default().push(e.dur);
    }
    for v in m.values_mut() {
        v.sort();
    }
    m
}

fn median(sorted: &[i64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The numbers of one stats row, computed by the test.
#[derive(Debug, Clone, PartialEq)]
struct Expect {
    count: u64,
    total: i64,
    mean: f64,
    median: f64,
    min: i64,
    max: i64,
    percent: f64,
}

/// Per kind: (events, total ns, per-name numbers).
type KindExpect = (u64, i64, BTreeMap<String, Expect>);

/// The test's reading of name grouping: drop `, WORD = INTEGER` parts that a comma or the end
/// of the name follows, until none is left.
fn test_group(name: &str) -> String {
    let re = regex::Regex::new(r", [A-Za-z_][A-Za-z0-9_]* = -?[0-9]+(, |$)").unwrap();
    let mut n = name.to_string();
    loop {
        let next = re.replace(&n, "$1").into_owned();
        if next == n {
            return n;
        }
        n = next;
    }
}

/// Per kind: distinct names before grouping.
fn raw_names(path: &Path) -> BTreeMap<Kind, u64> {
    events(path)
        .iter()
        .map(|(k, v)| (*k, by_name(v).len() as u64))
        .collect()
}

fn expected_stats(path: &Path, group: bool) -> (i64, BTreeMap<Kind, KindExpect>) {
    let mut evs = events(path);
    if group {
        for kind in [Kind::Nvtx, Kind::NvtxGpu] {
            for e in evs.get_mut(&kind).into_iter().flatten() {
                e.name = test_group(&e.name);
            }
        }
    }
    let sum = |k: Kind| -> i64 { evs.get(&k).map_or(0, |v| v.iter().map(|e| e.dur).sum()) };
    let gpu_time = sum(Kind::Kernel) + sum(Kind::Memory);
    let mut out = BTreeMap::new();
    for (kind, v) in &evs {
        let cat_total = sum(*kind);
        let basis = if matches!(kind, Kind::Kernel | Kind::Memory) {
            gpu_time
        } else {
            cat_total
        };
        let mut rows = BTreeMap::new();
        for (name, d) in by_name(v) {
            let total: i64 = d.iter().sum();
            rows.insert(
                name,
                Expect {
                    count: d.len() as u64,
                    total,
                    mean: total as f64 / d.len() as f64,
                    median: median(&d),
                    min: d[0],
                    max: *d.last().unwrap(),
                    percent: if basis > 0 {
                        total as f64 * 100.0 / basis as f64
                    } else {
                        0.0
                    },
                },
            );
        }
        out.insert(*kind, (v.len() as u64, cat_total, rows));
    }
    (gpu_time, out)
}

/// A minimal CSV reader (quoted fields, doubled quotes).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    rows
}

fn grouped(v: i64) -> String {
    nsys_perfetto::workflow::group_digits(&v.to_string())
}

fn grouped_f(v: f64, d: usize) -> String {
    nsys_perfetto::workflow::group_digits(&format!("{v:.d$}"))
}

/// Check a stats result, its table, CSV and JSON renderings against the test's own numbers.
fn check_stats(path: &Path, st: &Stats, group: bool) {
    let (gpu_time, expect) = expected_stats(path, group);
    let raw = raw_names(path);
    let f = path.display();
    assert_eq!(st.gpu_time, gpu_time, "{f}: GPU time");
    let kinds: Vec<Kind> = st.sections.iter().map(|s| s.kind).collect();
    let expect_kinds: Vec<Kind> = expect.keys().copied().collect();
    assert_eq!(kinds, expect_kinds, "{f}: sections");
    for sec in &st.sections {
        let (count, total, rows) = &expect[&sec.kind];
        assert_eq!(sec.count, *count, "{f} {:?}: count", sec.kind);
        assert_eq!(sec.total, *total, "{f} {:?}: total", sec.kind);
        assert_eq!(sec.names, rows.len() as u64, "{f} {:?}: names", sec.kind);
        assert_eq!(
            sec.raw_names, raw[&sec.kind],
            "{f} {:?}: raw names",
            sec.kind
        );
        assert_eq!(
            sec.rows.len(),
            rows.len(),
            "{f} {:?}: rows (top 0 = all)",
            sec.kind
        );
        let mut last = i64::MAX;
        for r in &sec.rows {
            let e = rows
                .get(&r.name)
                .unwrap_or_else(|| panic!("{f} {:?}: unexpected name {:?}", sec.kind, r.name));
            let what = format!("{f} {:?} {:?}", sec.kind, r.name);
            assert_eq!(r.count, e.count, "{what}: count");
            assert_eq!(r.total, e.total, "{what}: total");
            assert_eq!(r.min, e.min, "{what}: min");
            assert_eq!(r.max, e.max, "{what}: max");
            assert_eq!(r.median, e.median, "{what}: median");
            assert!(
                close(r.mean, e.mean),
                "{what}: mean {} vs {}",
                r.mean,
                e.mean
            );
            assert!(
                close(r.percent, e.percent),
                "{what}: % {} vs {}",
                r.percent,
                e.percent
            );
            assert!(r.total <= last, "{what}: not sorted by total");
            last = r.total;
        }
    }

    // The table: every number printed, from the test's numbers, for our own section (the
    // NVTX projection onto the GPU; nsys' reports are checked against nsys in nsys_stats.rs).
    let table = st.render(Output::Table, Unit::Ns);
    assert!(
        table.contains(&format!(
            "GPU time (kernels + memory operations): {} ns",
            grouped(gpu_time)
        )),
        "{f}: GPU time line"
    );
    let mut lines = table.lines();
    for sec in st.sections.iter().filter(|s| s.kind == Kind::NvtxGpu) {
        let (count, total, rows) = &expect[&sec.kind];
        let head = format!(
            "{}: {} events, {} names, total {} ns; % of ",
            sec.kind.title(),
            grouped(*count as i64),
            grouped(rows.len() as i64),
            grouped(*total)
        );
        assert!(
            lines.by_ref().any(|l| l.starts_with(&head)),
            "{f}: no section line {head:?}"
        );
        if raw[&sec.kind] != rows.len() as u64 {
            let note = lines.next().unwrap();
            assert!(
                note.starts_with(&format!(
                    "  ({} distinct names grouped by removing counters",
                    grouped(raw[&sec.kind] as i64)
                )),
                "{f}: {note:?}"
            );
        }
        if sec.rows.is_empty() {
            continue;
        }
        let _header = lines.next().unwrap();
        let _rule = lines.next().unwrap();
        for r in &sec.rows {
            let line = lines.next().unwrap();
            let e = &rows[&r.name];
            let cells: Vec<&str> = line.split_whitespace().take(7).collect();
            assert_eq!(
                cells,
                vec![
                    format!("{:.1}", e.percent).as_str(),
                    &grouped(e.total),
                    &grouped(e.count as i64),
                    &grouped_f(e.mean, 1),
                    &grouped_f(e.median, 1),
                    &grouped(e.min),
                    &grouped(e.max),
                ],
                "{f}: table line {line:?}"
            );
            assert!(line.ends_with(r.name.trim_end()), "{f}: name in {line:?}");
        }
    }

    // JSON.
    let j: serde_json::Value = serde_json::from_str(&st.render(Output::Json, Unit::Ns)).unwrap();
    assert_eq!(j["gpu_time_ns"].to_string(), gpu_time.to_string());
    let secs = j["sections"].as_array().unwrap();
    assert_eq!(secs.len(), expect.len());
    for s in secs {
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s["kind"].as_str().unwrap())
            .unwrap();
        let (count, total, rows) = &expect[&kind];
        assert_eq!(s["count"].to_string(), count.to_string());
        assert_eq!(s["total_ns"].to_string(), total.to_string());
        assert_eq!(s["rows"].as_array().unwrap().len(), rows.len());
        for r in s["rows"].as_array().unwrap() {
            let e = &rows[r["name"].as_str().unwrap()];
            let num = |k: &str| -> f64 { r[k].to_string().parse().unwrap() };
            assert_eq!(r["count"].to_string(), e.count.to_string());
            assert_eq!(r["total_ns"].to_string(), e.total.to_string());
            assert_eq!(r["min_ns"].to_string(), e.min.to_string());
            assert_eq!(r["max_ns"].to_string(), e.max.to_string());
            assert!(close(num("mean_ns"), e.mean));
            assert_eq!(num("median_ns"), e.median);
            assert!(close(num("percent"), e.percent));
        }
    }
}

#[test]
fn stats_match_sql_on_every_export() {
    let files = all_exports();
    if files.is_empty() {
        skip("corpus", "no corpus and no fixtures");
        return;
    }
    common::par_map(&files, |p| {
        let st = stats::query::stats(
            p,
            &StatsOptions {
                top: 0,
                raw_names: false,
            },
        )
        .unwrap();
        check_stats(p, &st, true);
    });
    eprintln!("checked stats of {} exports", files.len());
}

#[test]
fn stats_top_keeps_the_largest() {
    let Some(p) = corpus_file("GindaChen__nsys-ai__h100_2gpu_1s.sqlite") else {
        return;
    };
    let all = stats::query::stats(
        &p,
        &StatsOptions {
            top: 0,
            ..Default::default()
        },
    )
    .unwrap();
    let top = stats::query::stats(
        &p,
        &StatsOptions {
            top: 3,
            ..Default::default()
        },
    )
    .unwrap();
    for (a, t) in all.sections.iter().zip(&top.sections) {
        assert_eq!(t.rows.len(), a.rows.len().min(3));
        assert_eq!(t.rows[..], a.rows[..t.rows.len()]);
        assert_eq!((t.count, t.total, t.names), (a.count, a.total, a.names));
    }
    let table = top.render(Output::Table, Unit::Ns);
    assert!(table.contains("more names (--top 0 shows all)"));
}

/// The test's own matcher: `re:` regexes, else substrings.
enum TestPattern {
    Re(regex::Regex),
    Sub(String),
}

impl TestPattern {
    fn new(p: &str) -> TestPattern {
        match p.strip_prefix("re:") {
            Some(r) => TestPattern::Re(regex::Regex::new(r).unwrap()),
            None => TestPattern::Sub(p.to_string()),
        }
    }
    fn matches(&self, name: &str) -> bool {
        match self {
            TestPattern::Re(r) => r.is_match(name),
            TestPattern::Sub(s) => name.contains(s.as_str()),
        }
    }
}

/// (counted, total ns, nested) of the events of one kind matching `m`. NVTX ranges count once
/// per outermost match: a match is left out (nested) when another match on its thread contains
/// it, the earlier one in (start, longest first, file order) order when both have the same
/// interval. Checked pair by pair here, per thread.
fn matched(kind: Kind, evs: &[Ev], m: &TestPattern) -> (u64, i64, u64) {
    let hits: Vec<&Ev> = evs
        .iter()
        .filter(|e| {
            m.matches(&e.name)
                || e.alt.as_deref().is_some_and(|a| m.matches(a))
                || (kind == Kind::Api && api_trace_name(&e.name).is_some_and(|a| m.matches(a)))
        })
        .collect();
    if !matches!(kind, Kind::Nvtx | Kind::NvtxGpu) {
        return (hits.len() as u64, hits.iter().map(|e| e.dur).sum(), 0);
    }
    let mut by_tid: BTreeMap<Option<i64>, Vec<&Ev>> = BTreeMap::new();
    for e in hits {
        by_tid.entry(e.tid).or_default().push(e);
    }
    let (mut n, mut t, mut nested) = (0u64, 0i64, 0u64);
    for (tid, mut v) in by_tid {
        v.sort_by_key(|e| (e.start, std::cmp::Reverse(e.end)));
        for (i, e) in v.iter().enumerate() {
            let inside =
                tid.is_some() && v[..i].iter().any(|o| o.start <= e.start && o.end >= e.end);
            if inside {
                nested += 1;
            } else {
                n += 1;
                t += e.dur;
            }
        }
    }
    (n, t, nested)
}

/// Check an extract result and its renderings against the test's own sums.
fn check_extract(path: &Path, patterns: &[&str], got: &Extract) {
    let evs = events(path);
    let f = path.display();
    let mut expect: Vec<(String, Option<Kind>, u64, i64)> = Vec::new();
    let mut expect_nested: Vec<u64> = Vec::new();
    for p in patterns {
        let before = expect.len();
        let m = TestPattern::new(p);
        for kind in Kind::ALL {
            let (n, t, nested) = matched(
                kind,
                evs.get(&kind).map(Vec::as_slice).unwrap_or_default(),
                &m,
            );
            if n > 0 {
                expect.push((p.to_string(), Some(kind), n, t));
                expect_nested.push(nested);
            }
        }
        if expect.len() == before {
            expect.push((p.to_string(), None, 0, 0));
            expect_nested.push(0);
        }
    }
    let got_rows: Vec<(String, Option<Kind>, u64, i64)> = got
        .rows
        .iter()
        .map(|r| (r.pattern.clone(), r.kind, r.count, r.total))
        .collect();
    assert_eq!(got_rows, expect, "{f}");
    let got_nested: Vec<u64> = got.rows.iter().map(|r| r.nested).collect();
    assert_eq!(got_nested, expect_nested, "{f}: nested");
    let any_nvtx = expect
        .iter()
        .any(|e| matches!(e.1, Some(Kind::Nvtx | Kind::NvtxGpu)));

    let one = std::slice::from_ref(got);
    let table = extract::render(one, Output::Table, Unit::Ns);
    let mut lines: Vec<&str> = table.lines().skip(2).collect();
    if any_nvtx {
        assert_eq!(
            lines.pop(),
            Some(extract::NESTED_NOTE),
            "{f}: how NVTX matches count"
        );
    }
    assert_eq!(lines.len(), expect.len());
    for ((line, (p, kind, n, t)), nested) in lines.iter().zip(&expect).zip(&expect_nested) {
        let rest = line.strip_prefix(&f.to_string()).unwrap().trim_start();
        let rest = rest.strip_prefix(p.as_str()).unwrap();
        let cells: Vec<&str> = rest.split_whitespace().collect();
        let mean = if *n > 0 {
            grouped_f(*t as f64 / *n as f64, 1)
        } else {
            "-".into()
        };
        assert_eq!(
            cells,
            vec![
                kind.map_or("-", Kind::as_str),
                &grouped(*n as i64),
                &grouped(*t),
                &mean,
                &if matches!(kind, Some(Kind::Nvtx | Kind::NvtxGpu)) {
                    grouped(*nested as i64)
                } else {
                    "-".into()
                },
            ],
            "{f}: {line:?}"
        );
    }
    let csv = parse_csv(&extract::render(one, Output::Csv, Unit::Ns));
    assert_eq!(
        csv[0],
        [
            "file", "pattern", "kind", "count", "total_ns", "mean_ns", "nested"
        ]
    );
    assert_eq!(csv.len() - 1, expect.len());
    for ((row, (p, kind, n, t)), nested) in csv[1..].iter().zip(&expect).zip(&expect_nested) {
        assert_eq!(row[6].parse::<u64>().unwrap(), *nested);
        assert_eq!(row[0], f.to_string());
        assert_eq!(&row[1], p);
        assert_eq!(row[2], kind.map_or("", Kind::as_str));
        assert_eq!(row[3].parse::<u64>().unwrap(), *n);
        assert_eq!(row[4].parse::<i64>().unwrap(), *t);
        if *n > 0 {
            assert!(close(row[5].parse().unwrap(), *t as f64 / *n as f64));
        } else {
            assert_eq!(row[5], "");
        }
    }
    let j: serde_json::Value =
        serde_json::from_str(&extract::render(one, Output::Json, Unit::Ns)).unwrap();
    let evs_j = j[0]["events"].as_array().unwrap();
    assert_eq!(evs_j.len(), expect.len());
    for ((e, (p, kind, n, t)), nested) in evs_j.iter().zip(&expect).zip(&expect_nested) {
        assert_eq!(e["nested"].to_string(), nested.to_string());
        assert_eq!(e["pattern"].as_str().unwrap(), p);
        assert_eq!(e["kind"].as_str(), kind.map(Kind::as_str));
        assert_eq!(e["count"].to_string(), n.to_string());
        assert_eq!(e["total_ns"].to_string(), t.to_string());
    }
}

/// Patterns drawn from the export itself: part of its busiest kernel's name, an API prefix
/// regex, an NVTX name, memory kinds, and one that matches nothing.
fn patterns_for(path: &Path) -> Vec<String> {
    let st = stats::query::stats(
        path,
        &StatsOptions {
            top: 2,
            raw_names: true,
        },
    )
    .unwrap();
    let mut pats = vec![
        "re:^cuda(Launch|Memcpy)".to_string(),
        "Memcpy".into(),
        "HtoD".into(),
        "no such event name anywhere".into(),
    ];
    for sec in &st.sections {
        if let Some(r) = sec.rows.first() {
            let chars: Vec<char> = r.name.chars().collect();
            let piece: String = if chars.len() > 6 {
                chars[1..chars.len() - 2].iter().collect()
            } else {
                r.name.clone()
            };
            pats.push(piece);
        }
    }
    pats
}

#[test]
fn extract_matches_sql_on_every_export() {
    let files = all_exports();
    if files.is_empty() {
        skip("corpus", "no corpus and no fixtures");
        return;
    }
    common::par_map(&files, |p| {
        let pats = patterns_for(p);
        let parsed: Vec<Pattern> = pats
            .iter()
            .map(|s| Pattern::parse(s, false).unwrap())
            .collect();
        let got = extract::extract(p, &parsed).unwrap();
        let refs: Vec<&str> = pats.iter().map(String::as_str).collect();
        check_extract(p, &refs, &got);
    });
    eprintln!("checked extract on {} exports", files.len());
}

/// NVTX GPU time by hand: the cuDF "from_arrow" ranges (3 of them launched GPU work).
#[test]
fn extract_nvtx_gpu_time_by_hand() {
    let Some(p) = corpus_file("quasiben__nvtx-examples__cudf.sqlite") else {
        return;
    };
    let got = extract::extract(&p, &[Pattern::parse("re:^from_arrow$", false).unwrap()]).unwrap();
    let gpu = got
        .rows
        .iter()
        .find(|r| r.kind == Some(Kind::NvtxGpu))
        .unwrap();
    // Independent: per from_arrow range, span of the GPU rows whose runtime call it encloses.
    let conn = scratch(&p);
    let (n, total): (i64, i64) = conn
        .query_row(
            "WITH r AS (SELECT n.rowid AS id, n.globalTid AS tid, n.start AS s, n.end AS e \
               FROM s.NVTX_EVENTS n JOIN s.StringIds t ON t.id = n.textId \
               WHERE n.eventType = 59 AND t.value = 'from_arrow'), \
             g AS (SELECT correlationId, start, end FROM s.CUPTI_ACTIVITY_KIND_KERNEL \
               UNION ALL SELECT correlationId, start, end FROM s.CUPTI_ACTIVITY_KIND_MEMCPY \
               UNION ALL SELECT correlationId, start, end FROM s.CUPTI_ACTIVITY_KIND_MEMSET), \
             spans AS (SELECT r.id, max(g.end) - min(g.start) AS d FROM r \
               JOIN s.CUPTI_ACTIVITY_KIND_RUNTIME c ON c.globalTid = r.tid AND c.start BETWEEN r.s AND r.e \
               JOIN g ON g.correlationId = c.correlationId GROUP BY r.id) \
             SELECT count(*), sum(d) FROM spans",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(n > 0);
    assert_eq!((gpu.count, gpu.total), (n as u64, total));
}

// ---------------------------------------------------------------------------------------------
// sweep

use nsys_perfetto::workflow::sweep::Metric;
use nsys_perfetto::workflow::sweep::{self, Sweep, SweepOptions};

/// (count, total) of the events of `kind` matching `pattern`, by the test's own reading.
fn sums(path: &Path, pattern: &str, kind: Kind) -> (u64, i64) {
    let evs = events(path);
    let (n, t, _) = matched(
        kind,
        evs.get(&kind).map(Vec::as_slice).unwrap_or_default(),
        &TestPattern::new(pattern),
    );
    (n, t)
}

/// Check every cell, the terminal table and the CSV of a sweep against per-run sums.
fn check_sweep(sw: &Sweep, export_of: &dyn Fn(&Path) -> PathBuf) {
    for row in &sw.rows {
        for (v, cell) in sw.values.iter().zip(&row.cells) {
            let runs: Vec<_> = sw.runs.iter().filter(|r| &r.value == v).collect();
            assert_eq!(runs.len(), sw.iterations);
            let (mut n, mut t) = (0u64, 0i64);
            if let Some(kind) = row.kind {
                for r in &runs {
                    let (a, b) = sums(&export_of(&r.profile), &row.pattern, kind);
                    n += a;
                    t += b;
                }
            }
            assert_eq!(
                (cell.count_sum, cell.total_sum),
                (n, t),
                "{} p={v}",
                row.pattern
            );
            let iters = sw.iterations as f64;
            assert!(close(cell.total(), t as f64 / iters));
            assert!(close(cell.count(), n as f64 / iters));
        }
    }
    // The terminal table prints the mean total per run.
    let table = sw.table(Metric::Total, Unit::Ns);
    // (The list of traces follows after an empty line.)
    let lines: Vec<&str> = table
        .lines()
        .skip(3)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), sw.rows.len());
    for (line, row) in lines.iter().zip(&sw.rows) {
        let rest = line.strip_prefix(row.pattern.as_str()).unwrap();
        let cells: Vec<&str> = rest.split_whitespace().collect();
        let mut expect = vec![row.kind.map_or("-".to_string(), |k| k.as_str().to_string())];
        for c in &row.cells {
            expect.push(if row.kind.is_some() {
                grouped_f(c.total_sum as f64 / sw.iterations as f64, 1)
            } else {
                "-".into()
            });
        }
        assert_eq!(cells, expect, "{line:?}");
    }
    let csv = parse_csv(&sw.csv());
    let mut header = vec!["event".to_string(), "kind".into(), "metric".into()];
    header.extend(sw.values.iter().cloned());
    assert_eq!(csv[0], header);
    assert_eq!(csv.len() - 1, 3 * sw.rows.len());
    for (i, row) in sw.rows.iter().enumerate() {
        for (j, metric) in ["total_ns", "mean_ns", "count"].iter().enumerate() {
            let line = &csv[1 + 3 * i + j];
            assert_eq!(line[0], row.pattern);
            assert_eq!(line[1], row.kind.map_or("", Kind::as_str));
            assert_eq!(line[2], *metric);
            for (k, c) in row.cells.iter().enumerate() {
                let iters = sw.iterations as f64;
                let expect = match j {
                    0 => c.total_sum as f64 / iters,
                    1 => c.total_sum as f64 / c.count_sum as f64,
                    _ => c.count_sum as f64 / iters,
                };
                if expect.is_finite() {
                    assert!(close(line[3 + k].parse().unwrap(), expect), "{line:?}");
                } else {
                    assert_eq!(line[3 + k], "");
                }
            }
        }
    }
}

/// The sweep machinery with a stand-in profiler that hands out corpus exports: value "a" runs
/// the cuDF capture then the cuDF workflow capture, value "b" the 2-GPU torch capture twice.
#[test]
fn sweep_with_stand_in_profiler() {
    let (Some(cudf), Some(wf), Some(torch)) = (
        corpus_file("quasiben__nvtx-examples__cudf.sqlite"),
        corpus_file("quasiben__nvtx-examples__workflow.sqlite"),
        corpus_file("GindaChen__nsys-ai__h100_2gpu_1s.sqlite"),
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str| tmp.path().join(name);
    let opts = SweepOptions {
        values: vec!["a".into(), "b".into()],
        iterations: 2,
        patterns: [
            "from_arrow",
            "re:^cudaLaunchKernel",
            "Memcpy",
            "gemm",
            "never seen",
        ]
        .iter()
        .map(|p| Pattern::parse(p, false).unwrap())
        .collect(),
        output: format!("{}/run_$p", tmp.path().display()),
        command: vec!["./app".into(), "--size=$p".into(), "$p$p".into()],
        export: Default::default(),
        traces: true,
    };
    let mut calls: Vec<(Vec<String>, PathBuf)> = Vec::new();
    let mut profile = |cmd: &[String], out: &Path| -> anyhow::Result<PathBuf> {
        calls.push((cmd.to_vec(), out.to_path_buf()));
        Ok(match (cmd[1].as_str(), calls.len()) {
            ("--size=a", 1) => cudf.clone(),
            ("--size=a", _) => wf.clone(),
            _ => torch.clone(),
        })
    };
    let sw = sweep::sweep(&opts, &mut profile, &mut |_| {}).unwrap();
    assert_eq!(
        calls,
        vec![
            (
                vec!["./app".into(), "--size=a".into(), "aa".into()],
                run("run_a-1")
            ),
            (
                vec!["./app".into(), "--size=a".into(), "aa".into()],
                run("run_a-2")
            ),
            (
                vec!["./app".into(), "--size=b".into(), "bb".into()],
                run("run_b-1")
            ),
            (
                vec!["./app".into(), "--size=b".into(), "bb".into()],
                run("run_b-2")
            ),
        ]
    );
    let kinds: Vec<(&str, Option<Kind>)> = sw
        .rows
        .iter()
        .map(|r| (r.pattern.as_str(), r.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("from_arrow", Some(Kind::Nvtx)),
            ("from_arrow", Some(Kind::NvtxGpu)),
            ("re:^cudaLaunchKernel", Some(Kind::Api)),
            ("Memcpy", Some(Kind::Memory)),
            // cudaMemcpyAsync and friends.
            ("Memcpy", Some(Kind::Api)),
            ("gemm", Some(Kind::Kernel)),
            ("never seen", None),
        ]
    );
    check_sweep(&sw, &|p| p.to_path_buf());
    // Every run's profile was converted beside its report, and the table names the traces.
    let table = sw.table(Metric::Total, Unit::Us);
    assert!(
        table.contains("Perfetto traces (open in ui.perfetto.dev):"),
        "{table}"
    );
    for (r, name) in sw
        .runs
        .iter()
        .zip(["run_a-1", "run_a-2", "run_b-1", "run_b-2"])
    {
        let trace = run(&format!("{name}.pftrace"));
        assert_eq!(r.trace.as_deref(), Some(trace.as_path()));
        let t = crate::common::validate_file(&trace);
        let check = tmp.path().join("check");
        std::fs::create_dir_all(&check).unwrap();
        let expect = crate::common::convert(&r.profile, &check).0;
        assert_eq!(t.slices.len() as u64, expect.total_events(), "{name}");
        let label = format!("p={} #{}", r.value, r.iteration);
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&label) && l.ends_with(&*trace.to_string_lossy())),
            "{label} in {table}"
        );
    }
}

#[test]
fn sweep_command_line() {
    use clap::Parser;
    use nsys_perfetto::cli::Cli;
    use nsys_perfetto::commands::Command;
    let cli = Cli::try_parse_from([
        "nsys-perfetto",
        "sweep",
        "-p",
        "16",
        "32",
        "64",
        "--iter",
        "3",
        "--events",
        "gemm",
        "-e",
        "re:^nccl",
        "-o",
        "run_$p",
        "--csv",
        "out.csv",
        "--",
        "./app",
        "--n",
        "$p",
    ])
    .unwrap();
    let Some(Command::Sweep(args)) = cli.command else {
        panic!("not a sweep");
    };
    let o = args.options().unwrap();
    assert_eq!(o.values, ["16", "32", "64"]);
    assert_eq!(o.iterations, 3);
    assert_eq!(
        o.patterns
            .iter()
            .map(|p| p.text.as_str())
            .collect::<Vec<_>>(),
        ["gemm", "re:^nccl"]
    );
    assert_eq!(o.output, "run_$p");
    assert_eq!(o.command, ["./app", "--n", "$p"]);
    assert_eq!(args.csv, Some(PathBuf::from("out.csv")));
    assert_eq!(sweep::output_name("run_$p", "16", 2, 3), "run_16-2");
    assert_eq!(sweep::output_name("run", "16", 1, 1), "run_16");

    let cli = Cli::try_parse_from([
        "nsys-perfetto",
        "extract",
        "a.sqlite",
        "b.nsys-rep",
        "--events",
        "x",
        "-e",
        "re:y",
        "--csv",
    ])
    .unwrap();
    let Some(Command::Extract(args)) = cli.command else {
        panic!("not an extract");
    };
    assert_eq!(args.profiles.len(), 2);
    assert_eq!(args.events, ["x", "re:y"]);
    assert_eq!(args.out.format(), Output::Csv);
    let cli = Cli::try_parse_from(["nsys-perfetto", "stats", "a.sqlite", "--json", "--top", "0"])
        .unwrap();
    let Some(Command::Stats(args)) = cli.command else {
        panic!("not stats");
    };
    assert_eq!((args.top, args.out.format()), (Some(0), Output::Json));
}

/// A real sweep: compile a small NVTX program whose argument sets how many "work" ranges it
/// runs, profile it with nsys for two values, twice each. Needs nsys, gcc and the NVTX headers.
#[test]
fn sweep_with_nsys() {
    let nvtx_include =
        Path::new("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nvtx/include");
    let nsys = match nsys_perfetto::report::finding::find_nsys(None) {
        Ok(n) => n,
        Err(e) => {
            skip("nsys", &format!("no nsys: {e:#}"));
            return;
        }
    };
    let include = std::env::var_os("NVTX_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| nvtx_include.to_path_buf());
    if !include.join("nvtx3/nvToolsExt.h").is_file() {
        skip(
            "nsys",
            &format!(
                "no NVTX headers in {} (set NVTX_INCLUDE)",
                include.display()
            ),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("sweep_work.c");
    std::fs::write(
        &src,
        r#"#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>
#include <time.h>
static void spin_us(long us) { struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  do { clock_gettime(CLOCK_MONOTONIC, &b); }
  while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us); }
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1;
  nvtxRangePushA("sweep");
  for (int i = 0; i < n; i++) { nvtxRangePushA("work"); spin_us(100); nvtxRangePop(); }
  nvtxRangePop();
  return 0;
}
"#,
    )
    .unwrap();
    let bin = dir.path().join("sweep_work");
    let gcc = std::process::Command::new("gcc")
        .arg("-O1")
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .arg("-ldl")
        .status();
    if !gcc.is_ok_and(|s| s.success()) {
        skip("gcc", "cannot compile the NVTX program with gcc");
        return;
    }
    let opts = SweepOptions {
        values: vec!["3".into(), "7".into()],
        iterations: 2,
        patterns: vec![
            Pattern::parse("work", false).unwrap(),
            Pattern::parse("re:^sweep$", false).unwrap(),
        ],
        output: dir.path().join("run_$p").to_string_lossy().into_owned(),
        command: vec![bin.to_string_lossy().into_owned(), "$p".into()],
        export: nsys_perfetto::report::export::ExportOptions {
            nsys: Some(nsys.path.clone()),
            quiet: true,
            ..Default::default()
        },
        traces: true,
    };
    let mut profile = |cmd: &[String], out: &Path| -> anyhow::Result<PathBuf> {
        let popts = nsys_perfetto::report::profile::ProfileOptions {
            nsys: Some(nsys.path.clone()),
            output: Some(out.to_path_buf()),
            trace: "nvtx".into(),
            timeout: Some(std::time::Duration::from_secs(180)),
            quiet: true,
            ..Default::default()
        };
        let cmd: Vec<std::ffi::OsString> = cmd.iter().map(Into::into).collect();
        // nsys 2022.4 fails now and then when another nsys session runs at the same time
        // ("GetLocalEndpoint"): that is not what this test is about, so try again.
        let mut tries = 0;
        loop {
            match nsys_perfetto::report::profile::profile(&popts, &cmd) {
                Err(e) if tries < 2 => {
                    eprintln!("nsys failed, trying again: {e:#}");
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_secs(3));
                }
                r => return r,
            }
        }
    };
    let sw = sweep::sweep(&opts, &mut profile, &mut |l| eprintln!("{l}")).unwrap();
    assert_eq!(sw.runs.len(), 4);
    let rows: Vec<(&str, Option<Kind>)> = sw
        .rows
        .iter()
        .map(|r| (r.pattern.as_str(), r.kind))
        .collect();
    assert_eq!(
        rows,
        vec![("work", Some(Kind::Nvtx)), ("re:^sweep$", Some(Kind::Nvtx))]
    );
    // The program ran p "work" ranges per run, in one "sweep" range.
    assert_eq!(sw.rows[0].cells[0].count_sum, 6);
    assert_eq!(sw.rows[0].cells[1].count_sum, 14);
    assert_eq!(sw.rows[1].cells[0].count_sum, 2);
    for c in &sw.rows[0].cells {
        // Each range spins for 100 us.
        assert!(c.mean() >= 100_000.0, "{c:?}");
    }
    check_sweep(&sw, &|p| nsys_perfetto::report::export::sibling_export(p));
    for r in &sw.runs {
        let trace = r.trace.as_ref().expect("a trace per run");
        let t = crate::common::validate_file(trace);
        assert!(
            t.slices.iter().any(|s| &*s.name == "work"),
            "{}",
            trace.display()
        );
    }
    eprintln!("{}", sw.table(Metric::Total, Unit::Us));
}

// ---------------------------------------------------------------------------------------------
// name grouping, nested matches, comparisons

const TORCH_A: &str = "GindaChen__nsys-ai__h100_2gpu_1s.sqlite";
const TORCH_B: &str = "GindaChen__nsys-ai__mfu_2gpu_before.sqlite";

#[test]
fn group_name_drops_counters_only() {
    use nsys_perfetto_read::reports::functions::group_name;
    for (raw, grouped) in [
        ("aten::mul, seq = 45328, op_id = 990726", "aten::mul"),
        ("aten::to, op_id = 314428", "aten::to"),
        (
            "FSDP::pre_forward (encoder.block.3.layer.0), op_id = 12",
            "FSDP::pre_forward (encoder.block.3.layer.0)",
        ),
        ("step, iter = -3, phase = warmup", "step, phase = warmup"),
        (
            "aten::mm, sizes = [[4, 4], [4, 4]]",
            "aten::mm, sizes = [[4, 4], [4, 4]]",
        ),
        ("seq = 5", "seq = 5"),
        ("x, seq = 5.5", "x, seq = 5.5"),
        ("x, 2seq = 5", "x, 2seq = 5"),
        ("plain name", "plain name"),
    ] {
        assert_eq!(group_name(raw), grouped, "{raw:?}");
        assert_eq!(test_group(raw), grouped, "{raw:?} (the test's reading)");
    }
}

/// The user's profile: PyTorch names every range with counters, so without grouping nearly
/// every range has its own name and the top of the table says nothing.
#[test]
fn stats_group_pytorch_names_and_raw_names_keep_them() {
    let Some(p) = corpus_file(TORCH_B) else {
        return;
    };
    let grouped = stats::query::stats(&p, &StatsOptions::default()).unwrap();
    let nvtx = grouped
        .sections
        .iter()
        .find(|s| s.kind == Kind::Nvtx)
        .unwrap();
    assert!(nvtx.raw_names > 18_000, "{}", nvtx.raw_names);
    assert!(nvtx.names < 200, "{}", nvtx.names);
    // The top rows are operators many ranges share, not one range each.
    assert!(
        nvtx.rows.iter().take(3).all(|r| r.count > 1000),
        "{:?}",
        nvtx.rows
    );
    assert!(nvtx.rows.iter().all(|r| !r.name.contains("op_id")));
    let table = grouped.render(Output::Table, Unit::Ms);
    assert!(table.contains("--raw-names keeps them"), "{table}");

    let raw = stats::query::stats(
        &p,
        &StatsOptions {
            top: 0,
            raw_names: true,
        },
    )
    .unwrap();
    check_stats(&p, &raw, false);
    let nvtx = raw.sections.iter().find(|s| s.kind == Kind::Nvtx).unwrap();
    assert_eq!(nvtx.names, nvtx.raw_names);
    assert!(nvtx.names > 18_000);
}

/// `extract -e 're:^nccl'`: NCCL's NVTX ranges nest (a group call around the send/recv calls),
/// and summing every match counted the GPU work inside twice. Checked with SQL: the outermost
/// matches, and their GPU time against the NCCL kernels they launched.
#[test]
fn extract_counts_nested_matches_once() {
    let Some(p) = corpus_file(TORCH_B) else {
        return;
    };
    let got = extract::extract(&p, &[Pattern::parse("re:^nccl", false).unwrap()]).unwrap();
    let row = |k: Kind| got.rows.iter().find(|r| r.kind == Some(k)).unwrap().clone();
    let (nvtx, gpu, kernel) = (row(Kind::Nvtx), row(Kind::NvtxGpu), row(Kind::Kernel));
    let conn = scratch(&p);
    let (n, total, all): (i64, i64, i64) = conn
        .query_row(
            "WITH m AS MATERIALIZED (SELECT n.rowid AS id, n.globalTid AS tid, n.start AS s, n.end AS e \
               FROM s.NVTX_EVENTS n LEFT JOIN s.StringIds t ON t.id = n.textId \
               WHERE n.eventType IN (59, 60) AND n.end >= n.start \
               AND coalesce(n.text, t.value) GLOB 'nccl*') \
             SELECT (SELECT count(*) FROM m a WHERE NOT EXISTS (SELECT 1 FROM m b \
                       WHERE b.tid = a.tid AND b.s <= a.s AND b.e >= a.e \
                       AND (b.s < a.s OR b.e > a.e OR b.id < a.id))), \
                    (SELECT sum(e - s) FROM m a WHERE NOT EXISTS (SELECT 1 FROM m b \
                       WHERE b.tid = a.tid AND b.s <= a.s AND b.e >= a.e \
                       AND (b.s < a.s OR b.e > a.e OR b.id < a.id))), \
                    (SELECT count(*) FROM m)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((nvtx.count, nvtx.total), (n as u64, total));
    assert_eq!(nvtx.count + nvtx.nested, all as u64);
    assert!(nvtx.nested > 0, "the profile has nested NCCL ranges");
    // The GPU time of the outermost ranges is the span of the NCCL kernels they launched: no
    // more than a few percent above the kernels' own time (it was twice that).
    assert!(
        (gpu.total as f64) < kernel.total as f64 * 1.05,
        "NVTX GPU {} vs kernels {}",
        gpu.total,
        kernel.total
    );
    assert!(gpu.nested > 0);
    let table = extract::render(&[got], Output::Table, Unit::Ms);
    assert!(table.contains(extract::NESTED_NOTE), "{table}");
}

/// `stats A B`: every row against the two profiles' own per-name sums, and the renderings.
#[test]
fn stats_compare_two_profiles() {
    let (Some(a), Some(b)) = (corpus_file(TORCH_A), corpus_file(TORCH_B)) else {
        return;
    };
    let all = StatsOptions {
        top: 0,
        ..Default::default()
    };
    let cmp = stats::comparison::compare(
        &stats::query::stats(&a, &all).unwrap(),
        &stats::query::stats(&b, &all).unwrap(),
        0,
    );
    let (_, ea) = expected_stats(&a, true);
    let (_, eb) = expected_stats(&b, true);
    assert_eq!(cmp.gpu_time_a, expected_stats(&a, true).0);
    assert_eq!(cmp.gpu_time_b, expected_stats(&b, true).0);
    for sec in &cmp.sections {
        let side = |e: &BTreeMap<Kind, KindExpect>, name: &str| {
            e.get(&sec.kind)
                .and_then(|(_, _, rows)| rows.get(name))
                .map(|x| (x.count, x.total))
        };
        let names: std::collections::BTreeSet<&String> = ea
            .get(&sec.kind)
            .into_iter()
            .chain(eb.get(&sec.kind))
            .flat_map(|(_, _, rows)| rows.keys())
            .collect();
        assert_eq!(sec.rows.len(), names.len(), "{:?}", sec.kind);
        let mut last = i64::MAX;
        for r in &sec.rows {
            assert_eq!(r.a, side(&ea, &r.name), "{:?} {}", sec.kind, r.name);
            assert_eq!(r.b, side(&eb, &r.name), "{:?} {}", sec.kind, r.name);
            assert_eq!(r.change(), r.total_b() - r.total_a());
            let key = r.total_a().max(r.total_b());
            assert!(key <= last);
            last = key;
        }
    }
    // The command line, as CSV: the same rows, top 5 per kind.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
        .args(["stats", "--csv", "--top", "5"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = parse_csv(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(
        csv[0],
        [
            "kind",
            "name",
            "count_a",
            "count_b",
            "total_a_ns",
            "total_b_ns",
            "change_ns",
            "change_percent"
        ]
    );
    let expect: Vec<Vec<String>> = cmp
        .sections
        .iter()
        .flat_map(|s| s.rows.iter().take(5).map(move |r| (s.kind, r)))
        .map(|(k, r)| {
            let opt = |v: Option<i64>| v.map_or_else(String::new, |x| x.to_string());
            vec![
                k.as_str().to_string(),
                r.name.clone(),
                opt(r.a.map(|x| x.0 as i64)),
                opt(r.b.map(|x| x.0 as i64)),
                opt(r.a.map(|x| x.1)),
                opt(r.b.map(|x| x.1)),
                r.change().to_string(),
            ]
        })
        .collect();
    let got: Vec<Vec<String>> = csv[1..].iter().map(|r| r[..7].to_vec()).collect();
    assert_eq!(got, expect);
    let table = cmp.render(Output::Table, Unit::Ms);
    assert!(table.starts_with(&format!("A: {}\nB: {}\n", a.display(), b.display())));
    let j = cmp.json();
    assert_eq!(j["sections"].as_array().unwrap().len(), cmp.sections.len());
}
