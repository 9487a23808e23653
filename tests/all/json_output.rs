//! Chrome JSON output: the same exactness checks as the protobuf output, by parsing the JSON.
//!
//! Over every export in `../shared/corpus` (skipped, visibly, when absent): events per category
//! equal the converter's summary and SQL counts on the source; every flow start has its end, on
//! the right slices; slices of one pseudo-thread never overlap partly; every process and thread
//! used is named; timestamps of source rows come back to the nanosecond. Plus a synthetic export
//! for what the corpus lacks (NVTX marks, overlapping ranges, colours, odd strings) and gzip.

use nsys_perfetto::convert::Options;
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::summary::Summary;
use nsys_perfetto_write::output::formats::OutputFormat;
use rusqlite::Connection;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    if files.is_empty() {
        crate::common::skip("corpus", &format!("corpus not found ({})", dir.display()));
    }
    files
}

fn json_opts(colors: bool) -> Options {
    Options {
        format: OutputFormat::Json,
        json_colors: colors,
        ..Default::default()
    }
}

/// A JSON number in microseconds, in nanoseconds: `1234.567` µs -> 1234567. serde_json prints
/// the shortest text that reads back as the same `f64`, which for the trace's times (at most 15
/// significant digits) is the decimal written, less trailing zeros. That it was written with
/// exactly three decimals, `three_decimals` checks on the text.
fn ns(v: &Value) -> i64 {
    let text = match v {
        Value::Number(n) => n.to_string(),
        other => panic!("not a number: {other}"),
    };
    let (neg, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text.as_str()),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    assert!(frac.len() <= 3, "timestamp finer than a nanosecond: {text}");
    let v = int.parse::<i64>().unwrap() * 1000 + format!("{frac:0<3}").parse::<i64>().unwrap();
    if neg { -v } else { v }
}

/// Every `ts` and `dur` of the trace's text carries exactly three decimals, so no precision is
/// lost or invented (the parsed numbers no longer show how they were written).
fn three_decimals(text: &str) {
    for key in ["\"ts\":", "\"dur\":"] {
        for (at, _) in text.match_indices(key) {
            let value: String = text[at + key.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-' || *c == '.')
                .collect();
            let digits = value.strip_prefix('-').unwrap_or(&value);
            let ok = digits.split_once('.').is_some_and(|(int, frac)| {
                !int.is_empty()
                    && frac.len() == 3
                    && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
            });
            assert!(ok, "{key} without 3 decimals: {value:?}");
        }
    }
}

#[derive(Debug, Clone)]
struct Ev {
    ph: String,
    cat: String,
    name: String,
    pid: u64,
    tid: u64,
    ts: i64,
    dur: Option<i64>,
    id: Option<u64>,
    raw: Value,
}

struct Trace {
    events: Vec<Ev>,
    process_names: HashMap<u64, String>,
    thread_names: HashMap<(u64, u64), String>,
}

fn parse(bytes: &[u8]) -> Trace {
    let root: Value = serde_json::from_slice(bytes).expect("output is valid JSON");
    three_decimals(std::str::from_utf8(bytes).expect("output is UTF-8"));
    let list = root["traceEvents"].as_array().expect("traceEvents array");
    // No placeholder: every object is a real event. Pid 0 is no real process: only GPU 0's
    // pseudo-process can have it (Perfetto's UI then shows "... · GPU 0").
    assert!(
        list.iter().all(|e| e["ph"].is_string()),
        "an object without a phase"
    );
    assert!(
        list.iter().all(|e| e["pid"] != 0
            || e["ph"] == "M"
            || e["cat"].as_str().is_some_and(|c| c.starts_with("cuda.")
                || c.starts_with("nvtx")
                || c.starts_with("gpu")
                || c == "flow")),
        "an event of no GPU on pid 0"
    );
    let mut t = Trace {
        events: Vec::new(),
        process_names: HashMap::new(),
        thread_names: HashMap::new(),
    };
    for e in list {
        let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
        let n = |k: &str| e[k].as_u64();
        let ph = s("ph");
        if ph == "M" {
            let pid = n("pid").expect("metadata pid");
            match e["name"].as_str() {
                Some("process_name") => {
                    t.process_names
                        .insert(pid, e["args"]["name"].as_str().unwrap().to_string());
                }
                Some("thread_name") => {
                    let tid = n("tid").expect("thread metadata tid");
                    t.thread_names
                        .insert((pid, tid), e["args"]["name"].as_str().unwrap().to_string());
                }
                Some("process_sort_index") | Some("thread_sort_index") => {
                    assert!(e["args"]["sort_index"].is_i64(), "{e}");
                }
                other => panic!("unexpected metadata {other:?}"),
            }
            continue;
        }
        t.events.push(Ev {
            cat: s("cat"),
            name: s("name"),
            pid: n("pid").expect("pid"),
            // Counter values (`C`) belong to a process, not a thread.
            tid: if ph == "C" {
                n("tid").unwrap_or(0)
            } else {
                n("tid").expect("tid")
            },
            ts: ns(&e["ts"]),
            dur: e.get("dur").map(ns),
            id: n("id"),
            ph,
            raw: e.clone(),
        });
    }
    // The "Session start" marker stands at the source's time zero: kept apart, and the other
    // times read back in session time (the trace shifts a source with rows before its start).
    let (markers, events): (Vec<Ev>, Vec<Ev>) =
        t.events.drain(..).partition(|e| e.cat == "session");
    assert_eq!(markers.len(), 1, "one session-start marker");
    let zero = markers[0].ts;
    t.events = events;
    for e in &mut t.events {
        e.ts -= zero;
    }
    t
}

fn convert(input: &Path, output: &Path, opts: &Options) -> (Summary, Trace) {
    let summary = crate::common::convert_to(input, output, opts);
    let mut bytes = Vec::new();
    let file = std::fs::File::open(output).unwrap();
    if output.extension().is_some_and(|e| e == "gz") {
        flate2::read::GzDecoder::new(file)
            .read_to_end(&mut bytes)
            .unwrap();
    } else {
        std::io::BufReader::new(file)
            .read_to_end(&mut bytes)
            .unwrap();
    }
    (summary, parse(&bytes))
}

const GPU_TABLES: [(&str, Category); 3] = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", Category::Kernel),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", Category::Memcpy),
    ("CUPTI_ACTIVITY_KIND_MEMSET", Category::Memset),
];
/// Categories whose source rows this test counts in SQL.
const SQL_CHECKED: [Category; 6] = [
    Category::Kernel,
    Category::Memcpy,
    Category::Memset,
    Category::CudaApi,
    Category::Nvtx,
    Category::NvtxMark,
];
const GPU_CATS: [&str; 3] = ["cuda.kernel", "cuda.memcpy", "cuda.memset"];
const API_TABLES: [&str; 2] = ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"];

fn has(conn: &Connection, table: &str, cols: &[&str]) -> bool {
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .unwrap();
    let have: HashSet<String> = stmt
        .query_map([table], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    cols.iter().all(|c| have.contains(*c))
}

fn count(conn: &Connection, sql: &str) -> u64 {
    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64
}

/// The rows each category converts: (table, condition on its columns, prefixed by `a`) for rows
/// with a valid interval and the ids that place them.
fn valid_rows(conn: &Connection, c: Category, a: &str) -> Vec<(String, String)> {
    let interval = format!(
        "{a}start IS NOT NULL AND {a}\"end\" IS NOT NULL AND {a}\"end\" >= {a}start AND {a}start >= 0"
    );
    let gpu = ["start", "end", "deviceId", "streamId"];
    let gpu_valid = format!("{interval} AND {a}deviceId IS NOT NULL AND {a}streamId IS NOT NULL");
    let (tables, columns, valid): (&[&str], &[&str], String) = match c {
        Category::Kernel => (&["CUPTI_ACTIVITY_KIND_KERNEL"], &gpu, gpu_valid),
        Category::Memcpy => (&["CUPTI_ACTIVITY_KIND_MEMCPY"], &gpu, gpu_valid),
        Category::Memset => (&["CUPTI_ACTIVITY_KIND_MEMSET"], &gpu, gpu_valid),
        Category::CudaApi => (
            &API_TABLES,
            &["start", "end", "globalTid"],
            format!("{interval} AND {a}globalTid IS NOT NULL"),
        ),
        Category::Nvtx => (
            &["NVTX_EVENTS"],
            &["start", "end", "eventType", "globalTid"],
            format!("{a}eventType IN (59, 60) AND {interval} AND {a}globalTid IS NOT NULL"),
        ),
        Category::NvtxMark => (
            &["NVTX_EVENTS"],
            &["start", "eventType", "globalTid"],
            format!(
                "{a}eventType = 34 AND {a}start IS NOT NULL AND {a}start >= 0 \
                 AND {a}globalTid IS NOT NULL"
            ),
        ),
        // Other sources (NVTX projected onto the GPU, OS runtime...) are checked against SQL
        // by their own tests; here only against the summary.
        _ => return Vec::new(),
    };
    tables
        .iter()
        .filter(|t| has(conn, t, columns))
        .map(|t| (t.to_string(), valid.clone()))
        .collect()
}

/// Flow arrows the source calls for: a converted GPU row whose process has a CUDA API call
/// with its correlation id (the first one, runtime before driver, by rowid) starting earlier.
fn sql_flows(conn: &Connection) -> u64 {
    let api: Vec<String> = API_TABLES
        .iter()
        .enumerate()
        .filter(|(_, t)| has(conn, t, &["start", "correlationId", "globalTid"]))
        .map(|(i, t)| {
            format!(
                "SELECT globalTid >> 24 AS pkey, correlationId AS corr, start, {i} AS src, rowid AS rid \
                 FROM \"{t}\" WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL"
            )
        })
        .collect();
    if api.is_empty() {
        return 0;
    }
    let mut total = 0;
    for (t, c) in GPU_TABLES {
        if !has(conn, t, &["correlationId", "globalPid"]) {
            continue;
        }
        for (_, valid) in valid_rows(conn, c, "g.") {
            total += count(
                conn,
                &format!(
                    "WITH api AS ({}), first AS (SELECT pkey, corr, start FROM \
                       (SELECT *, row_number() OVER (PARTITION BY pkey, corr ORDER BY src, rid) AS rn \
                        FROM api) WHERE rn = 1) \
                     SELECT count(*) FROM \"{t}\" g JOIN first a \
                       ON a.pkey = g.globalPid >> 24 AND a.corr = g.correlationId \
                     WHERE g.start > a.start AND {}",
                    api.join(" UNION ALL "),
                    valid,
                ),
            );
        }
    }
    total
}

/// Events per category and flows equal SQL counts on the source (the JSON's equal the summary's,
/// by [`check_structure`]).
fn check_sql(what: &str, conn: &Connection, summary: &Summary) {
    for c in SQL_CHECKED {
        let n: u64 = valid_rows(conn, c, "")
            .iter()
            .map(|(t, w)| count(conn, &format!("SELECT count(*) FROM \"{t}\" WHERE {w}")))
            .sum();
        assert_eq!(summary.events_of(c), n, "{what}: {} vs SQL", c.as_str());
    }
    assert_eq!(summary.flows, sql_flows(conn), "{what}: flows vs SQL");
}

/// The checks every JSON output must pass, whatever its source.
fn check_structure(what: &str, summary: &Summary, t: &Trace) {
    // Events per category equal the converter's counts.
    let mut per_cat: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &t.events {
        match e.ph.as_str() {
            "X" => {
                assert!(
                    e.dur.is_some_and(|d| d >= 0),
                    "{what}: X without dur: {}",
                    e.raw
                );
                *per_cat.entry(cat_key(&e.cat)).or_default() += 1;
            }
            "i" => {
                assert_eq!(e.raw["s"], "t", "{what}: instants are thread-scoped");
                *per_cat.entry(cat_key(&e.cat)).or_default() += 1;
            }
            "C" => {
                // A counter value: one numeric arg, under a named (pseudo-)process.
                let args = e.raw["args"].as_object().expect("C event has args");
                assert_eq!(args.len(), 1, "{what}: one value per C event: {}", e.raw);
                assert!(
                    args.values().all(|v| v.is_number()),
                    "{what}: C value is a number: {}",
                    e.raw
                );
                *per_cat.entry(cat_key(&e.cat)).or_default() += 1;
            }
            "s" | "f" => {
                assert_eq!((e.cat.as_str(), e.name.as_str()), ("flow", "launch"));
                assert_eq!(e.raw["bp"], "e");
            }
            other => panic!("{what}: unexpected phase {other}"),
        }
    }
    for c in Category::ALL {
        assert_eq!(
            per_cat.get(c.as_str()).copied().unwrap_or(0),
            summary.events_of(c),
            "{what}: {} events vs summary",
            c.as_str()
        );
    }

    // Flows: one start and one end per id, as many as the summary says, each on its slice: a
    // start at the start of a CUDA API slice of its thread, an end at the start of a GPU slice.
    let mut slice_at: HashMap<(u64, u64, i64), Vec<&str>> = HashMap::new();
    for e in t.events.iter().filter(|e| e.ph == "X") {
        slice_at
            .entry((e.pid, e.tid, e.ts))
            .or_default()
            .push(&e.cat);
    }
    let (mut starts, mut ends) = (HashSet::new(), HashSet::new());
    for e in &t.events {
        let on = slice_at.get(&(e.pid, e.tid, e.ts));
        match e.ph.as_str() {
            "s" => {
                assert!(
                    starts.insert(e.id.expect("flow id")),
                    "{what}: flow start twice"
                );
                assert!(
                    on.is_some_and(|c| c.contains(&"cuda.api")),
                    "{what}: flow start not on an API slice: {}",
                    e.raw
                );
            }
            "f" => {
                assert!(
                    ends.insert(e.id.expect("flow id")),
                    "{what}: flow end twice"
                );
                assert!(
                    on.is_some_and(|c| c.iter().any(|c| GPU_CATS.contains(c))),
                    "{what}: flow end not on a GPU slice: {}",
                    e.raw
                );
            }
            _ => {}
        }
    }
    assert_eq!(
        starts.len() as u64,
        summary.flows,
        "{what}: flow starts vs summary"
    );
    assert_eq!(starts, ends, "{what}: flow starts and ends differ");

    // Lanes: on one (pid, tid), slices nest or follow each other, never overlap partly.
    let mut lanes: HashMap<(u64, u64), Vec<(i64, i64)>> = HashMap::new();
    for e in t.events.iter().filter(|e| e.ph == "X") {
        lanes
            .entry((e.pid, e.tid))
            .or_default()
            .push((e.ts, e.ts + e.dur.unwrap()));
    }
    for ((pid, tid), mut v) in lanes {
        v.sort_by_key(|&(s, e)| (s, std::cmp::Reverse(e)));
        let mut open: Vec<i64> = Vec::new();
        for (s, e) in v {
            while open.last().is_some_and(|&end| end <= s) {
                open.pop();
            }
            if let Some(&outer) = open.last() {
                assert!(
                    e <= outer,
                    "{what}: pid {pid} tid {tid}: slice [{s}, {e}] overlaps one ending at {outer}"
                );
            }
            open.push(e);
        }
    }

    // Streams and lanes of one GPU have names of their own: a stream's number is its tid
    // where the name leaves it to the tid ("Stream" with tid 7: the UI shows "Stream 7").
    let gpu = |pid: &u64| {
        *pid >= 0x7000_0000
            || t.process_names
                .get(pid)
                .is_some_and(|n| n == "GPU" || n.ends_with("· GPU"))
    };
    let mut gpu_threads: HashSet<(u64, String)> = HashSet::new();
    for ((pid, tid), name) in &t.thread_names {
        if gpu(pid) {
            let shown = if *tid < 0x4000_0000 {
                format!("{name} {tid}")
            } else {
                name.clone()
            };
            assert!(
                gpu_threads.insert((*pid, shown.clone())),
                "{what}: two GPU threads named {shown}"
            );
        }
    }

    // Names: every process and thread that holds an event has its metadata.
    for e in &t.events {
        assert!(
            t.process_names.contains_key(&e.pid),
            "{what}: pid {} has no process_name",
            e.pid
        );
        // Counter values (`C`) belong to their process only.
        assert!(
            e.ph == "C" || t.thread_names.contains_key(&(e.pid, e.tid)),
            "{what}: pid {} tid {} has no thread_name",
            e.pid,
            e.tid
        );
    }
}

fn cat_key(cat: &str) -> &'static str {
    Category::ALL
        .iter()
        .map(|c| c.as_str())
        .find(|c| *c == cat)
        .unwrap_or_else(|| panic!("unknown category {cat}"))
}

#[test]
fn corpus_json_is_exact() {
    let files = corpus();
    let dir = tempfile::tempdir().unwrap();
    crate::common::par_map(&files, |input| {
        let what = input.file_name().unwrap().to_string_lossy().to_string();
        let output = dir.path().join(format!("{what}.json"));
        let (summary, t) = convert(input, &output, &json_opts(false));
        check_structure(&what, &summary, &t);

        let conn =
            Connection::open_with_flags(input, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        check_sql(&what, &conn, &summary);

        // Timestamps to the nanosecond: rows from the start and the end of each source table
        // are found with ts * 1000 == start and dur * 1000 == end - start exactly.
        let mut have: HashMap<(&str, i64, i64), u32> = HashMap::new();
        for e in t.events.iter().filter(|e| e.ph == "X") {
            *have
                .entry((cat_key(&e.cat), e.ts, e.dur.unwrap()))
                .or_default() += 1;
        }
        let mut checked = 0;
        for c in [
            Category::Kernel,
            Category::Memcpy,
            Category::Memset,
            Category::CudaApi,
            Category::Nvtx,
        ] {
            for (table, valid) in valid_rows(&conn, c, "") {
                for order in ["ASC", "DESC"] {
                    let sql = format!(
                        "SELECT start, \"end\" FROM \"{table}\" WHERE {valid} ORDER BY rowid {order} LIMIT 50"
                    );
                    let mut stmt = conn.prepare(&sql).unwrap();
                    let rows = stmt
                        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
                        .unwrap();
                    for row in rows {
                        let (start, end) = row.unwrap();
                        assert!(
                            have.contains_key(&(c.as_str(), start, end - start)),
                            "{what}: {table} row [{start}, {end}] not found to the ns"
                        );
                        checked += 1;
                    }
                }
            }
        }
        let ranges = [
            Category::Kernel,
            Category::Memcpy,
            Category::Memset,
            Category::CudaApi,
            Category::Nvtx,
        ];
        if ranges.iter().any(|c| summary.events_of(*c) > 0) {
            assert!(checked > 0, "{what}: no row checked");
        }
        eprintln!(
            "{what}: {} events, {} flows, {checked} timestamps checked",
            summary.total_events(),
            summary.flows
        );
    });
}

/// Events with pids and tids replaced by the names their metadata gives them: pseudo ids depend
/// on the order threads allocate them, names do not.
fn by_names(t: &Trace) -> Vec<String> {
    let mut v: Vec<String> = t
        .events
        .iter()
        .map(|e| {
            let mut raw = e.raw.clone();
            raw["pid"] = Value::String(t.process_names[&e.pid].clone());
            raw["tid"] = Value::String(t.thread_names[&(e.pid, e.tid)].clone());
            raw.to_string()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn gzip_holds_the_same_trace() {
    let Some(input) = corpus()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("h100_2gpu_1s"))
        .chain(corpus())
        .next()
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (s1, plain) = convert(&input, &dir.path().join("t.json"), &json_opts(false));
    let gz_path = dir.path().join("t.json.gz");
    let (s2, gz) = convert(&input, &gz_path, &json_opts(false));
    let mut magic = [0u8; 2];
    std::fs::File::open(&gz_path)
        .unwrap()
        .read_exact(&mut magic)
        .unwrap();
    assert_eq!(magic, [0x1f, 0x8b], "gzip magic");
    assert_eq!(s1.events, s2.events);
    assert_eq!(s2.output_bytes, std::fs::metadata(&gz_path).unwrap().len());
    assert_eq!(by_names(&plain), by_names(&gz));
}

/// (start, end, eventType, color, text) of an `NVTX_EVENTS` row.
type NvtxRow = (i64, Option<i64>, i64, Option<i64>, &'static str);

/// A small export with what the corpus lacks: NVTX marks, partly overlapping push/pop and
/// start/end ranges, colours, names with quotes, control characters and invalid UTF-8.
fn synthetic(path: &Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);
         CREATE TABLE ThreadNames(nameId INTEGER, globalTid INTEGER);
         CREATE TABLE NVTX_EVENTS(start INTEGER, \"end\" INTEGER, eventType INTEGER, \
           globalTid INTEGER, domainId INTEGER, color INTEGER, text TEXT);
         INSERT INTO StringIds VALUES (1, 'main \"thread\"');",
    )
    .unwrap();
    let gt: i64 = (100 << 24) | 101;
    conn.execute("INSERT INTO ThreadNames VALUES (1, ?1)", [gt])
        .unwrap();
    let rows: [NvtxRow; 6] = [
        (1_000, Some(5_000), 59, Some(0xFF0000), "outer"),
        (
            2_000,
            Some(7_000),
            59,
            Some(0x00FF00),
            "partly\toverlapping \"push\"",
        ),
        (2_500, None, 34, Some(0x0000FF), "mark\u{1}\\"),
        (3_001, Some(9_999), 60, None, "start/end a"),
        (4_002, Some(12_345), 60, Some(0xDDDDDD), "start/end b"),
        (1_234_567, Some(1_234_568), 59, None, "one ns"),
    ];
    for (start, end, ty, color, text) in rows {
        conn.execute(
            "INSERT INTO NVTX_EVENTS VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6)",
            rusqlite::params![start, end, ty, gt, color, text],
        )
        .unwrap();
    }
    // Invalid UTF-8 in a name: converted lossily.
    conn.execute(
        "INSERT INTO NVTX_EVENTS VALUES (20000, 20010, 59, ?1, 0, NULL, CAST(X'6E6F80FF' AS TEXT))",
        [gt],
    )
    .unwrap();
}

#[test]
fn marks_lanes_colours_and_strings() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("synthetic.sqlite");
    synthetic(&input);
    let (summary, t) = convert(&input, &dir.path().join("s.json"), &json_opts(true));
    check_structure("synthetic", &summary, &t);
    check_sql("synthetic", &Connection::open(&input).unwrap(), &summary);
    assert_eq!(summary.events_of(Category::Nvtx), 6);
    assert_eq!(summary.events_of(Category::NvtxMark), 1);

    let by_name: HashMap<&str, &Ev> = t.events.iter().map(|e| (e.name.as_str(), e)).collect();
    let mark = by_name["mark\u{1}\\"];
    assert_eq!((mark.ph.as_str(), mark.ts, mark.dur), ("i", 2_500, None));
    assert_eq!(by_name["one ns"].ts, 1_234_567);
    assert_eq!(by_name["one ns"].dur, Some(1));
    assert!(by_name.contains_key("no\u{fffd}\u{fffd}"), "lossy name");

    // Colours: the nearest Chrome names; none where the range has no colour.
    assert_eq!(by_name["outer"].raw["cname"], "terrible");
    assert_eq!(
        by_name["partly\toverlapping \"push\""].raw["cname"],
        "cq_build_attempt_passed"
    );
    assert_eq!(mark.raw["cname"], "vsync_highlight_color");
    assert_eq!(by_name["start/end b"].raw["cname"], "grey");
    assert!(by_name["start/end a"].raw.get("cname").is_none());
    assert_eq!(by_name["outer"].raw["args"]["color"], "#ff0000");

    // Overlapping ranges moved to named lanes of the same process.
    let thread_of = |name: &str| {
        let e = by_name[name];
        assert_eq!(e.pid, 100);
        t.thread_names[&(e.pid, e.tid)].as_str()
    };
    assert_eq!(thread_of("outer"), "NVTX · main \"thread\"");
    assert_eq!(
        thread_of("partly\toverlapping \"push\""),
        "NVTX (overlap 1) · main \"thread\""
    );
    assert_eq!(thread_of("start/end a"), "NVTX (start/end)");
    assert_eq!(thread_of("start/end b"), "NVTX (start/end) (overlap 1)");
    assert_eq!(t.process_names[&100], "Process 100");
    // Every pseudo-thread has a name of its own (here a row out of time order may have gone to
    // a further track of its group's name).
    let pseudo: Vec<&String> = t
        .thread_names
        .iter()
        .filter(|((_, tid), _)| *tid >= 0x4000_0000)
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        pseudo.iter().collect::<HashSet<_>>().len(),
        pseudo.len(),
        "{pseudo:?}"
    );

    // Without the flag, no colours.
    let (_, plain) = convert(&input, &dir.path().join("p.json"), &json_opts(false));
    assert!(plain.events.iter().all(|e| e.raw.get("cname").is_none()));
}

#[test]
fn format_from_flag_or_output_name() {
    use clap::Parser;
    let format = |args: &[&str]| {
        nsys_perfetto::cli::Cli::try_parse_from(args)
            .unwrap()
            .convert
            .output_format()
            .ok()
    };
    assert_eq!(format(&["x", "in.sqlite"]), Some(OutputFormat::Protobuf));
    assert_eq!(
        format(&["x", "in.sqlite", "-o", "t.json"]),
        Some(OutputFormat::Json)
    );
    assert_eq!(
        format(&["x", "in.sqlite", "-o", "T.JSON.GZ"]),
        Some(OutputFormat::Json)
    );
    assert_eq!(
        format(&["x", "in.sqlite", "-o", "t.pftrace.gz"]),
        Some(OutputFormat::Protobuf)
    );
    assert_eq!(
        format(&["x", "in.sqlite", "--format", "json"]),
        Some(OutputFormat::Json)
    );
    // Contradictory choices are an error, not a protobuf file named .json.
    assert_eq!(
        format(&["x", "in.sqlite", "--format", "protobuf", "-o", "t.json"]),
        None
    );
    assert_eq!(
        format(&["x", "in.sqlite", "--format", "json", "-o", "t.pftrace"]),
        None
    );
    assert_eq!(
        format(&["x", "in.sqlite", "--format", "json", "-o", "-"]),
        Some(OutputFormat::Json)
    );

    // The binary: JSON and gzip both chosen by the output name.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("synthetic.sqlite");
    synthetic(&input);
    let out = dir.path().join("t.json.gz");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
        .arg("-q")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .arg("--json-colors")
        .status()
        .unwrap();
    assert!(status.success());
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&out).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let t = parse(&bytes);
    assert_eq!(t.events.iter().filter(|e| e.ph == "i").count(), 1);
    assert!(t.events.iter().any(|e| e.raw.get("cname").is_some()));
}
