//! The workflow commands (`stats`, `extract`, `sweep`) and the NVTX-to-GPU projection, checked
//! against SQL computed here directly on the source exports. The SQL in this file is written
//! independently of the implementation's (different joins, correlated per-item queries).

use nsys_perfetto::nsys;
use nsys_perfetto::projection::{KERNEL_NVTX, NVTX_GPU, PROJ_DB, Projection};
use rusqlite::Connection;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn corpus_dir() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if d.is_dir() {
        Some(d)
    } else {
        eprintln!("skipped: {} is absent", d.display());
        None
    }
}

fn corpus(name: &str) -> Option<PathBuf> {
    let p = corpus_dir()?.join(name);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("skipped: {} is absent", p.display());
        None
    }
}

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
        [nsys::sqlite_uri(path, "mode=ro&immutable=1")],
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

/// Check every row of the projection against per-range and per-GPU-row queries.
fn check_projection(path: &Path) -> (u64, u64) {
    let (_c, schema) = nsys::open_schema(path).unwrap();
    let proj = Projection::build(&schema).unwrap().expect("projection");
    let conn = scratch(path);
    proj.attach(&conn).unwrap();
    build_links(&conn);
    let has_text_id = has_column(&conn, "NVTX_EVENTS", "textId");
    let has_domain = has_column(&conn, "NVTX_EVENTS", "domainId");

    // (a) nvtx_gpu: for every range, the GPU rows launched by calls on its thread inside it.
    let ranges: Vec<(i64, i64, i64, i64, i64, i64, Option<String>, Option<i64>)> = conn
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
        let Some(p) = corpus(name) else { continue };
        let (ranges, kernels) = check_projection(&p);
        eprintln!("{name}: {ranges} range/device rows, {kernels} annotated GPU rows");
        assert!(ranges > 0 && kernels > 0, "{name}: projection is empty");
        checked += 1;
    }
    for p in fixtures() {
        let (_c, schema) = nsys::open_schema(&p).unwrap();
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
    let Some(p) = corpus("quasiben__nvtx-examples__cudf.sqlite") else {
        return;
    };
    let (_c, schema) = nsys::open_schema(&p).unwrap();
    let proj = Projection::build(&schema).unwrap().unwrap();
    let conn = nsys::open_readonly(&p).unwrap();
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
