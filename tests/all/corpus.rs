//! Converts every nsys SQLite export in ../shared/corpus (or $NSYS_CORPUS) and checks the output
//! against the source, row by row, with expectations computed independently in SQL:
//! - every output passes the Perfetto import rules (tests/common) and, when available,
//!   `tpcheck --strict` (Perfetto's own trace_processor);
//! - exactly one slice per convertible row and category (cuda.kernel, cuda.memcpy, cuda.memset,
//!   cuda.api from RUNTIME+DRIVER, nvtx from eventType 59/60, nvtx.mark from 34), with the
//!   row's exact start and end;
//! - every source row is either converted or counted in `Summary.skipped` (NVTX naming rows in
//!   `Summary.naming_rows`);
//! - exactly one flow per GPU row whose (process, correlationId) matches an API row that starts
//!   before it; rows that start no later than their launch are counted under "flow arrows";
//!   each flow starts on the API slice with the same correlation id in the same process;
//! - names and args users look for (kernel short names and launch args, memcpy/memset args,
//!   API names and return values, NVTX names from text or registered strings, colours),
//!   placement (API and push/pop NVTX on their thread, start/end NVTX on their process, GPU
//!   work on "Stream N" under "GPU N · name"), process and thread names;
//! - facts about specific files (registered NVTX strings in cudf, two GPUs in the 2-GPU files,
//!   GPU model names).
//!
//! All files are checked and every problem is reported before the test fails.

use crate::common;

use crate::common::{Trace, corpus_dir, validate};
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::summary::Summary;
use rusqlite::{Connection, OpenFlags, types::ValueRef};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
const DRIVER: &str = "CUPTI_ACTIVITY_KIND_DRIVER";
const NVTX: &str = "NVTX_EVENTS";
const GPU_TABLES: [(&str, &str); 3] = [
    (KERNEL, "cuda.kernel"),
    (MEMCPY, "cuda.memcpy"),
    (MEMSET, "cuda.memset"),
];
/// (start, end, correlationId): how slices are matched back to their source rows.
type RowKey = (i64, i64, Option<i64>);

const VALID: &str = "start IS NOT NULL AND \"end\" IS NOT NULL AND \"end\" >= start";

// ---------------------------------------------------------------------------------------------
// The source database, read independently of the converter

struct Src {
    conn: Connection,
    tables: HashMap<String, HashSet<String>>,
    strings: HashMap<i64, String>,
}

fn lossy(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        ValueRef::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

fn int(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(i) => Some(i),
        ValueRef::Real(f) => Some(f as i64),
        _ => None,
    }
}

impl Src {
    fn open(path: &Path) -> Src {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let mut tables: HashMap<String, HashSet<String>> = HashMap::new();
        {
            let mut st = conn
                .prepare(
                    "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p \
                     WHERE m.type = 'table'",
                )
                .unwrap();
            let mut rows = st.query([]).unwrap();
            while let Some(r) = rows.next().unwrap() {
                tables
                    .entry(r.get::<_, String>(0).unwrap())
                    .or_default()
                    .insert(r.get::<_, String>(1).unwrap());
            }
        }
        let mut src = Src {
            conn,
            tables,
            strings: HashMap::new(),
        };
        if src.has("StringIds") {
            let mut strings = HashMap::new();
            src.each("SELECT id, value FROM StringIds", |r| {
                if let (Some(id), Some(v)) = (int(r[0]), lossy(r[1])) {
                    strings.insert(id, v);
                }
            });
            src.strings = strings;
        }
        src
    }
    fn has(&self, t: &str) -> bool {
        self.tables.contains_key(t)
    }
    fn has_col(&self, t: &str, c: &str) -> bool {
        self.tables.get(t).is_some_and(|cs| cs.contains(c))
    }
    /// `"c"` when the column exists, else NULL.
    fn col(&self, t: &str, c: &str) -> String {
        if self.has_col(t, c) {
            format!("\"{c}\"")
        } else {
            "NULL".into()
        }
    }
    fn count(&self, sql: &str) -> i64 {
        self.conn
            .query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .unwrap_or(0)
    }
    fn each(&self, sql: &str, mut f: impl FnMut(&[ValueRef<'_>])) {
        let mut st = self
            .conn
            .prepare(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let n = st.column_count();
        let mut rows = st.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let vals: Vec<ValueRef<'_>> = (0..n).map(|i| r.get_ref(i).unwrap()).collect();
            f(&vals);
        }
    }
    fn string(&self, id: Option<i64>) -> Option<String> {
        id.and_then(|i| self.strings.get(&i).cloned())
    }
    fn api_tables(&self) -> Vec<&'static str> {
        [RUNTIME, DRIVER]
            .into_iter()
            .filter(|t| self.has_col(t, "start") && self.has_col(t, "end"))
            .collect()
    }
    fn gpu_tables(&self) -> Vec<(&'static str, &'static str)> {
        GPU_TABLES
            .into_iter()
            .filter(|(t, _)| self.has_col(t, "start") && self.has_col(t, "end"))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Checks

/// Problems found in one file.
#[derive(Default)]
struct Problems {
    file: String,
    list: Vec<String>,
}

impl Problems {
    fn add(&mut self, what: impl Into<String>) {
        self.list.push(what.into());
    }
    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, got: T, want: T) {
        if got != want {
            self.add(format!("{what}: output {got:?}, source {want:?}"));
        }
    }
}

/// Per-file numbers for the report printed at the end.
#[derive(Default)]
struct Stats {
    slices: BTreeMap<String, u64>,
    flows: u64,
    backward: u64,
    skipped: u64,
    fanout: u64,
}

fn pid_of(gid: i64) -> i64 {
    (gid >> 24) & 0xFF_FFFF
}
fn tid_of(gid: i64) -> i64 {
    gid & 0xFF_FFFF
}

fn ints_in(s: &str) -> Vec<i64> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter_map(|x| x.parse().ok())
        .collect()
}

fn sorted_keys<'a>(it: impl Iterator<Item = &'a common::Slice>) -> Vec<(i64, i64)> {
    let mut v: Vec<(i64, i64)> = it.map(|s| (s.start, s.end)).collect();
    v.sort_unstable();
    v
}

fn compare_intervals(
    p: &mut Problems,
    what: &str,
    mut want: Vec<(i64, i64)>,
    got: Vec<(i64, i64)>,
) {
    want.sort_unstable();
    if want == got {
        return;
    }
    let mut a: HashMap<(i64, i64), i64> = HashMap::new();
    for k in &want {
        *a.entry(*k).or_default() += 1;
    }
    for k in &got {
        *a.entry(*k).or_default() -= 1;
    }
    let mut missing: Vec<_> = a.iter().filter(|(_, n)| **n > 0).map(|(k, _)| *k).collect();
    let mut extra: Vec<_> = a.iter().filter(|(_, n)| **n < 0).map(|(k, _)| *k).collect();
    missing.sort_unstable();
    extra.sort_unstable();
    p.add(format!(
        "{what}: (start, end) of slices differ from the source rows: {} source rows have no slice (first {:?}), {} slices match no row (first {:?})",
        missing.len(),
        &missing[..missing.len().min(3)],
        extra.len(),
        &extra[..extra.len().min(3)],
    ));
}

fn skipped_in(summary: &Summary, table: &str) -> u64 {
    summary
        .skipped
        .iter()
        .filter(|((t, _), _)| t == table)
        .map(|(_, n)| *n)
        .sum()
}

fn check_file(path: &Path, out_dir: &Path) -> (Problems, Stats) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut p = Problems {
        file: name.clone(),
        ..Default::default()
    };
    let mut stats = Stats::default();
    let out = out_dir.join(format!("{name}.pftrace"));
    let summary = match nsys_perfetto::convert::convert_export(
        path,
        &out,
        &nsys_perfetto::convert::Options::default(),
    ) {
        Ok(s) => s,
        Err(e) => {
            p.add(format!("conversion failed: {e:#}"));
            return (p, stats);
        }
    };
    let bytes = std::fs::read(&out).unwrap();
    let trace = match validate(&bytes) {
        Ok(t) => t,
        Err(v) => {
            p.add(format!("{v}"));
            return (p, stats);
        }
    };
    stats.slices = trace.count_by_category();
    stats.skipped = summary
        .skipped
        .iter()
        .filter(|((t, _), _)| t != "flow arrows")
        .map(|(_, n)| *n)
        .sum();
    let src = Src::open(path);

    check_counts(&mut p, &src, &trace, &summary);
    check_gpu(&mut p, &src, &trace);
    check_api(&mut p, &src, &trace);
    check_nvtx(&mut p, &src, &trace);
    check_flows(&mut p, &src, &trace, &summary, &mut stats);
    check_names(&mut p, &src, &trace);
    check_specific(&mut p, &name, &src, &trace);

    if let Some(Err(report)) = common::tpcheck(&out) {
        p.add(format!("tpcheck --strict failed:\n{report}"));
    }
    let _ = std::fs::remove_file(&out);
    (p, stats)
}

/// Counts per category and the row accounting: rows in = slices out + skipped (+ naming rows).
fn check_counts(p: &mut Problems, src: &Src, trace: &Trace, summary: &Summary) {
    let by_cat = trace.count_by_category();
    let got = |c: &str| by_cat.get(c).copied().unwrap_or(0) as i64;
    for c in Category::ALL {
        p.eq(
            &format!("Summary.events[{}] vs slices in the file", c.as_str()),
            summary.events_of(c) as i64,
            got(c.as_str()),
        );
    }
    for (t, cat) in src.gpu_tables() {
        let valid = src.count(&format!("SELECT count(*) FROM {t} WHERE {VALID}"));
        let total = src.count(&format!("SELECT count(*) FROM {t}"));
        let skipped = skipped_in(summary, t) as i64;
        if got(cat) != valid {
            p.add(format!(
                "{cat}: {} slices, source has {valid} rows with start/end (end >= start); skipped: {:?}",
                got(cat),
                summary.skipped.iter().filter(|((tt, _), _)| tt == t).collect::<Vec<_>>()
            ));
        }
        p.eq(
            &format!("{t}: rows = slices + skipped"),
            got(cat) + skipped,
            total,
        );
    }
    let api = src.api_tables();
    if !api.is_empty() {
        let valid: i64 = api
            .iter()
            .map(|t| src.count(&format!("SELECT count(*) FROM {t} WHERE {VALID}")))
            .sum();
        let total: i64 = api
            .iter()
            .map(|t| src.count(&format!("SELECT count(*) FROM {t}")))
            .sum();
        let skipped: i64 = api.iter().map(|t| skipped_in(summary, t) as i64).sum();
        p.eq(
            "cuda.api slices vs RUNTIME+DRIVER rows with start/end",
            got("cuda.api"),
            valid,
        );
        p.eq(
            "RUNTIME+DRIVER rows = slices + skipped",
            got("cuda.api") + skipped,
            total,
        );
    } else {
        p.eq("cuda.api slices without API tables", got("cuda.api"), 0);
    }
    if src.has_col(NVTX, "eventType") {
        let ranges = src.count(&format!(
            "SELECT count(*) FROM {NVTX} WHERE eventType IN (59, 60) AND {VALID}"
        ));
        let marks = src.count(&format!("SELECT count(*) FROM {NVTX} WHERE eventType = 34"));
        let total = src.count(&format!("SELECT count(*) FROM {NVTX}"));
        p.eq(
            "nvtx slices vs eventType 59/60 rows with start/end",
            got("nvtx"),
            ranges,
        );
        p.eq(
            "nvtx.mark instants vs eventType 34 rows",
            got("nvtx.mark"),
            marks,
        );
        let naming = summary.naming_rows.get(NVTX).copied().unwrap_or(0) as i64;
        let naming_src = src.count(&format!(
            "SELECT count(*) FROM {NVTX} WHERE eventType IN (33, 39, 75, 76)"
        ));
        p.eq("NVTX naming rows (33/39/75/76)", naming, naming_src);
        p.eq(
            "NVTX rows = ranges + marks + skipped + naming rows",
            got("nvtx") + got("nvtx.mark") + skipped_in(summary, NVTX) as i64 + naming,
            total,
        );
    } else {
        p.eq(
            "nvtx slices without NVTX table",
            got("nvtx") + got("nvtx.mark"),
            0,
        );
    }
}

/// GPU rows: exact times, names, args, and the "Stream N" under "GPU N · name" placement.
fn check_gpu(p: &mut Problems, src: &Src, trace: &Trace) {
    let gpu_names = gpu_names(src);
    for (t, cat) in src.gpu_tables() {
        let c = |n: &str| src.col(t, n);
        let extra: Vec<&str> = match cat {
            "cuda.kernel" => vec![
                "shortName",
                "demangledName",
                "gridX",
                "gridY",
                "gridZ",
                "blockX",
                "blockY",
                "blockZ",
                "registersPerThread",
                "staticSharedMemory",
                "dynamicSharedMemory",
                "launchType",
            ],
            "cuda.memcpy" => vec!["bytes", "copyKind", "srcKind", "dstKind"],
            _ => vec!["bytes", "value", "memKind"],
        };
        let sql = format!(
            "SELECT start, \"end\", {}, {}, {}, {}, {} {} FROM {t} WHERE {VALID}",
            c("deviceId"),
            c("streamId"),
            c("correlationId"),
            c("contextId"),
            c("globalPid"),
            extra
                .iter()
                .map(|e| format!(", {}", c(e)))
                .collect::<String>()
        );
        // (start, end, corr) -> rows
        let mut rows: HashMap<RowKey, Vec<Vec<Option<i64>>>> = HashMap::new();
        let mut want = Vec::new();
        let mut per_stream: BTreeMap<(i64, i64), i64> = BTreeMap::new();
        src.each(&sql, |r| {
            let v: Vec<Option<i64>> = r.iter().map(|x| int(*x)).collect();
            let (s, e) = (v[0].unwrap(), v[1].unwrap());
            want.push((s, e));
            if let (Some(d), Some(st)) = (v[2], v[3]) {
                *per_stream.entry((d, st)).or_default() += 1;
            }
            rows.entry((s, e, v[4])).or_default().push(v);
        });
        let slices: Vec<&common::Slice> = trace.of_category(cat).collect();
        compare_intervals(p, cat, want, sorted_keys(slices.iter().copied()));

        let mut got_stream: BTreeMap<(i64, i64), i64> = BTreeMap::new();
        let mut errors = 0;
        for s in &slices {
            let corr = s.arg_int("correlation_id");
            let device = s.arg_int("device");
            let stream = s.arg_int("stream");
            if let (Some(d), Some(st)) = (device, stream) {
                *got_stream.entry((d, st)).or_default() += 1;
            }
            // Placement: a "Stream N" track (or its lane) under the device's GPU track, or
            // under its CUDA context's group there where the device has several contexts
            // (`tests/all/contexts.rs` checks which).
            let track = trace.track(s.track);
            let tname = track.name.clone().unwrap_or_default();
            let mut gpu = track.parent.map(|u| trace.track(u));
            if let Some(g) = gpu
                && g.name.as_deref().is_some_and(|n| n.starts_with("Context "))
            {
                gpu = g.parent.map(|u| trace.track(u));
            }
            let want_stream = format!("Stream {}", stream.unwrap_or(-1));
            let want_gpu = match device.and_then(|d| gpu_names.get(&d)) {
                Some(n) => format!("GPU {} · {n}", device.unwrap()),
                None => format!("GPU {}", device.unwrap_or(-1)),
            };
            let gname = gpu.and_then(|g| g.name.clone()).unwrap_or_default();
            if !tname.starts_with(&want_stream)
                || gname != want_gpu
                || gpu.is_some_and(|g| g.parent.is_some())
            {
                errors += 1;
                if errors <= 3 {
                    p.add(format!(
                        "{cat} {:?} at {} (device {device:?}, stream {stream:?}) is on track {tname:?} under {gname:?}; want {want_stream:?} under top-level {want_gpu:?}",
                        s.name, s.start
                    ));
                }
            }
            let Some(cands) = rows.get(&(s.start, s.end, corr)) else {
                errors += 1;
                if errors <= 3 {
                    p.add(format!(
                        "{cat} {:?} at {}..{} correlation_id {corr:?}: no source row with these times and correlation id",
                        s.name, s.start, s.end
                    ));
                }
                continue;
            };
            let mut first_err = None;
            let ok = cands.iter().any(|r| match gpu_row_matches(src, cat, s, r) {
                Ok(()) => true,
                Err(e) => {
                    first_err.get_or_insert(e);
                    false
                }
            });
            if !ok {
                errors += 1;
                if errors <= 3 {
                    p.add(format!(
                        "{cat} {:?} at {}: {}",
                        s.name,
                        s.start,
                        first_err.unwrap()
                    ));
                }
            }
        }
        if errors > 3 {
            p.add(format!(
                "{cat}: {errors} slices with wrong names/args/placement in all"
            ));
        }
        p.eq(
            &format!("{cat} rows per (device, stream)"),
            got_stream,
            per_stream,
        );
    }
}

/// GPU model names by CUDA device id, as the source describes them.
fn gpu_names(src: &Src) -> HashMap<i64, String> {
    let mut m = HashMap::new();
    // TARGET_INFO_GPU: `cuDevice` is the CUDA device id where present (`id` is nsys's own);
    // older ones key by deviceId; TARGET_INFO_CUDA_GPU (2021) by deviceId.
    for (t, key) in [
        ("TARGET_INFO_GPU", "cuDevice"),
        ("TARGET_INFO_GPU", "deviceId"),
        ("TARGET_INFO_GPU", "id"),
        ("TARGET_INFO_CUDA_GPU", "deviceId"),
    ] {
        if src.has_col(t, key) && src.has_col(t, "name") && m.is_empty() {
            src.each(&format!("SELECT \"{key}\", name FROM {t}"), |r| {
                if let (Some(d), Some(n)) = (int(r[0]), lossy(r[1])) {
                    m.entry(d).or_insert(n);
                }
            });
        }
    }
    m
}

fn want_int(s: &common::Slice, key: &str, v: Option<i64>) -> Result<(), String> {
    if let Some(v) = v
        && s.arg_int(key) != Some(v)
    {
        return Err(format!("arg {key} = {:?}, source {v}", s.arg(key)));
    }
    Ok(())
}

fn want_present(s: &common::Slice, key: &str, v: Option<i64>) -> Result<(), String> {
    if v.is_some() && s.arg_str(key).is_none_or(str::is_empty) {
        return Err(format!("arg {key} missing or empty (source {v:?})"));
    }
    Ok(())
}

fn gpu_row_matches(
    src: &Src,
    cat: &str,
    s: &common::Slice,
    r: &[Option<i64>],
) -> Result<(), String> {
    // start, end, device, stream, corr, ctx, gpid, extra...
    want_int(s, "device", r[2])?;
    want_int(s, "stream", r[3])?;
    want_int(s, "correlation_id", r[4])?;
    want_int(s, "context", r[5])?;
    let x = &r[7..];
    match cat {
        "cuda.kernel" => {
            let short = src.string(x[0]).or_else(|| src.string(x[1]));
            if let Some(n) = short
                && *s.name != *n
            {
                return Err(format!("name {:?}, source shortName {n:?}", s.name));
            }
            if let Some(d) = src.string(x[1])
                && s.arg_str("demangled_name") != Some(d.as_str())
            {
                return Err(format!(
                    "demangled_name {:?}, source {d:?}",
                    s.arg("demangled_name")
                ));
            }
            for (key, vals) in [("grid", &x[2..5]), ("block", &x[5..8])] {
                if vals.iter().all(Option::is_some) {
                    let want: Vec<i64> = vals.iter().map(|v| v.unwrap()).collect();
                    let got = s.arg_str(key).map(ints_in);
                    if got.as_deref() != Some(&want[..]) {
                        return Err(format!("{key} {:?}, source {want:?}", s.arg(key)));
                    }
                }
            }
            want_int(s, "registers_per_thread", x[8])?;
            want_int(s, "shared_memory_static_bytes", x[9])?;
            want_int(s, "shared_memory_dynamic_bytes", x[10])?;
            want_present(s, "launch_type", x[11])?;
        }
        "cuda.memcpy" => {
            want_int(s, "bytes", x[0])?;
            want_present(s, "copy_kind", x[1])?;
            want_present(s, "src_kind", x[2])?;
            want_present(s, "dst_kind", x[3])?;
            if let Some(b) = x[0]
                && s.dur() > 0
            {
                let want = b as f64 / s.dur() as f64;
                match s.arg_f64("throughput_gbps") {
                    Some(g) if (g - want).abs() <= 0.001 + want * 1e-6 => {}
                    other => {
                        return Err(format!("throughput_gbps {other:?}, bytes/ns = {want}"));
                    }
                }
            }
        }
        _ => {
            want_int(s, "bytes", x[0])?;
            want_int(s, "value", x[1])?;
            want_present(s, "mem_kind", x[2])?;
        }
    }
    Ok(())
}

/// API calls: exact times, on their own thread, named from StringIds, with return value and
/// correlation id.
fn check_api(p: &mut Problems, src: &Src, trace: &Trace) {
    let tables = src.api_tables();
    if tables.is_empty() {
        return;
    }
    let mut want = Vec::new();
    let mut per_thread: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let mut rows: HashMap<RowKey, Vec<[Option<i64>; 3]>> = HashMap::new();
    for t in &tables {
        let sql = format!(
            "SELECT start, \"end\", {}, {}, {}, {} FROM {t} WHERE {VALID}",
            src.col(t, "globalTid"),
            src.col(t, "correlationId"),
            src.col(t, "nameId"),
            src.col(t, "returnValue")
        );
        src.each(&sql, |r| {
            let v: Vec<Option<i64>> = r.iter().map(|x| int(*x)).collect();
            let (s, e) = (v[0].unwrap(), v[1].unwrap());
            want.push((s, e));
            if let Some(g) = v[2] {
                *per_thread.entry((pid_of(g), tid_of(g))).or_default() += 1;
            }
            rows.entry((s, e, v[3]))
                .or_default()
                .push([v[2], v[4], v[5]]);
        });
    }
    let slices: Vec<&common::Slice> = trace.of_category("cuda.api").collect();
    compare_intervals(p, "cuda.api", want, sorted_keys(slices.iter().copied()));
    let mut got_thread: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let mut errors = 0;
    for s in &slices {
        // On the thread track itself, or on an overlap lane right under it.
        let track = trace.track(s.track);
        let thread = track
            .thread
            .as_ref()
            .or_else(|| track.parent.and_then(|u| trace.track(u).thread.as_ref()));
        let Some(th) = thread else {
            errors += 1;
            if errors <= 3 {
                p.add(format!(
                    "cuda.api {:?} at {} is not on a thread track (track {:?})",
                    s.name, s.start, track.name
                ));
            }
            continue;
        };
        *got_thread
            .entry((th.pid as i64, th.tid as i64))
            .or_default() += 1;
        let corr = s.arg_int("correlation_id");
        let Some(cands) = rows.get(&(s.start, s.end, corr)) else {
            errors += 1;
            if errors <= 3 {
                p.add(format!(
                    "cuda.api {:?} at {}: no source row with these times and correlation id {corr:?}",
                    s.name, s.start
                ));
            }
            continue;
        };
        let ok = cands.iter().any(|[gtid, name, ret]| {
            gtid.is_some_and(|g| pid_of(g) == th.pid as i64 && tid_of(g) == th.tid as i64)
                && src.string(*name).is_none_or(|n| {
                    // nsys' name: without the runtime's version suffix; the symbol as an arg.
                    match nsys_perfetto_read::api::display_name(&n) {
                        Some(shown) => *s.name == *shown && s.arg_str("symbol") == Some(n.as_str()),
                        None => *s.name == *n && s.arg("symbol").is_none(),
                    }
                })
                && ret.is_none_or(|r| s.arg_int("return_value") == Some(r))
        });
        let suffixed = s
            .name
            .rsplit_once("_v")
            .is_some_and(|(_, v)| v.len() >= 4 && v.bytes().all(|b| b.is_ascii_digit()));
        if suffixed {
            p.add(format!(
                "cuda.api {:?}: a version suffix nsys does not show",
                s.name
            ));
        }
        if !ok {
            errors += 1;
            if errors <= 3 {
                p.add(format!(
                    "cuda.api {:?} at {} on thread {}/{}: no source row with this name, thread and return_value {:?} (candidates: {:?})",
                    s.name,
                    s.start,
                    th.pid,
                    th.tid,
                    s.arg("return_value"),
                    cands
                        .iter()
                        .map(|c| (c[0].map(tid_of), src.string(c[1]), c[2]))
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    if errors > 3 {
        p.add(format!("cuda.api: {errors} slices wrong in all"));
    }
    p.eq("cuda.api calls per (pid, tid)", got_thread, per_thread);
}

/// NVTX: exact times, names from text or registered strings, colours, placement.
fn check_nvtx(p: &mut Problems, src: &Src, trace: &Trace) {
    if !src.has_col(NVTX, "eventType") {
        return;
    }
    let sql = format!(
        "SELECT start, \"end\", eventType, {}, {}, {}, {}, {} FROM {NVTX} WHERE eventType IN (34, 59, 60)",
        src.col(NVTX, "globalTid"),
        src.col(NVTX, "text"),
        src.col(NVTX, "textId"),
        src.col(NVTX, "color"),
        src.col(NVTX, "domainId"),
    );
    struct Row {
        ty: i64,
        gtid: Option<i64>,
        name: Option<String>,
        color: Option<i64>,
    }
    let mut ranges = Vec::new();
    let mut marks = Vec::new();
    let mut rows: HashMap<(i64, i64), Vec<Row>> = HashMap::new();
    src.each(&sql, |r| {
        let (Some(s), ty) = (int(r[0]), int(r[2]).unwrap()) else {
            return;
        };
        let e = int(r[1]);
        let name = lossy(r[4]).or_else(|| src.string(int(r[5])));
        let row = Row {
            ty,
            gtid: int(r[3]),
            name,
            color: int(r[6]),
        };
        if ty == 34 {
            marks.push((s, s));
            rows.entry((s, s)).or_default().push(row);
        } else if let Some(e) = e.filter(|e| *e >= s) {
            ranges.push((s, e));
            rows.entry((s, e)).or_default().push(row);
        }
    });
    compare_intervals(p, "nvtx", ranges, sorted_keys(trace.of_category("nvtx")));
    compare_intervals(
        p,
        "nvtx.mark",
        marks,
        sorted_keys(trace.of_category("nvtx.mark")),
    );
    let mut errors = 0;
    for s in trace
        .slices
        .iter()
        .filter(|s| &*s.category == "nvtx" || &*s.category == "nvtx.mark")
    {
        if s.name.is_empty() {
            errors += 1;
            if errors <= 3 {
                p.add(format!("{} at {} has an empty name", s.category, s.start));
            }
        }
        let thread = trace.thread_of(s.track).cloned();
        let proc_pid = trace.pid_of(s.track);
        let Some(cands) = rows.get(&(s.start, s.end)) else {
            continue; // reported by compare_intervals
        };
        let ok = cands.iter().any(|r| {
            let placed = match (r.ty, &thread, r.gtid) {
                // Start/end ranges: on the process (not a thread), with the starting tid.
                (60, None, Some(g)) => {
                    proc_pid == Some(pid_of(g) as i32) && s.arg_int("tid") == Some(tid_of(g))
                }
                (60, Some(_), _) => false,
                (_, Some(th), Some(g)) => th.pid as i64 == pid_of(g) && th.tid as i64 == tid_of(g),
                _ => false,
            };
            let named = r.name.as_deref().is_none_or(|n| *s.name == *n);
            let coloured = r.color.is_none_or(|c| {
                s.arg_str("color") == Some(format!("#{:06x}", c & 0xFF_FFFF).as_str())
            });
            let kind = (r.ty == 34) == s.instant;
            placed && named && coloured && kind
        });
        if !ok {
            errors += 1;
            if errors <= 3 {
                p.add(format!(
                    "{} {:?} at {}..{} on {:?} (thread {:?}, color {:?}, tid arg {:?}) matches no source row: {:?}",
                    s.category,
                    s.name,
                    s.start,
                    s.end,
                    trace.track_name(s.track),
                    thread.as_ref().map(|t| (t.pid, t.tid)),
                    s.arg("color"),
                    s.arg("tid"),
                    cands
                        .iter()
                        .map(|r| (r.ty, r.gtid.map(|g| (pid_of(g), tid_of(g))), r.name.clone(), r.color))
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    if errors > 3 {
        p.add(format!("nvtx: {errors} slices wrong in all"));
    }
}

/// Flows: one per GPU row whose (process, correlation id) has an API row starting before it.
fn check_flows(p: &mut Problems, src: &Src, trace: &Trace, summary: &Summary, stats: &mut Stats) {
    let api = src.api_tables();
    let gpu: Vec<_> = src
        .gpu_tables()
        .into_iter()
        .filter(|(t, _)| src.has_col(t, "correlationId") && src.has_col(t, "globalPid"))
        .collect();
    let backward_reported: u64 = summary
        .skipped
        .iter()
        .filter(|((t, _), _)| t == "flow arrows")
        .map(|(_, n)| *n)
        .sum();
    let api: Vec<_> = api
        .into_iter()
        .filter(|t| src.has_col(t, "correlationId") && src.has_col(t, "globalTid"))
        .collect();
    if api.is_empty() || gpu.is_empty() {
        p.eq("flows without API or GPU rows", trace.flows.len() as u64, 0);
        p.eq("Summary.flows", summary.flows, 0);
        return;
    }
    let api_union = api
        .iter()
        .map(|t| {
            format!(
                "SELECT globalTid >> 24 AS p, correlationId AS c, start AS s FROM {t} \
                 WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let gpu_union = gpu
        .iter()
        .map(|(t, cat)| {
            format!(
                "SELECT '{cat}' AS cat, globalPid >> 24 AS p, correlationId AS c, start AS s, \"end\" AS e \
                 FROM {t} WHERE {VALID} AND correlationId IS NOT NULL AND globalPid IS NOT NULL"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let with = format!(
        "WITH launch AS (SELECT p, c, min(s) AS s FROM ({api_union}) GROUP BY p, c), \
         gpu AS ({gpu_union})"
    );
    let matched = src.count(&format!(
        "{with} SELECT count(*) FROM gpu g JOIN launch l ON l.p = g.p AND l.c = g.c"
    ));
    let expected = src.count(&format!(
        "{with} SELECT count(*) FROM gpu g JOIN launch l ON l.p = g.p AND l.c = g.c WHERE g.s > l.s"
    ));
    let backward = src.count(&format!(
        "{with} SELECT count(*) FROM gpu g JOIN launch l ON l.p = g.p AND l.c = g.c WHERE g.s <= l.s"
    ));
    stats.flows = trace.flows.len() as u64;
    stats.backward = backward as u64;
    p.eq(
        "flows in the file vs linkable GPU rows",
        trace.flows.len() as i64,
        expected,
    );
    p.eq("Summary.flows", summary.flows as i64, expected);
    p.eq(
        "GPU rows not drawn because they start no later than their launch (Summary.skipped[\"flow arrows\"])",
        backward_reported as i64,
        backward,
    );
    if matched != expected + backward {
        p.add(format!(
            "{} matched GPU rows have a launch without a start time",
            matched - expected - backward
        ));
    }
    // Fan-out: API slices with k arrows, by k.
    let mut want_fan: BTreeMap<i64, i64> = BTreeMap::new();
    src.each(
        &format!(
            "{with} SELECT n, count(*) FROM (SELECT count(*) AS n FROM gpu g JOIN launch l \
             ON l.p = g.p AND l.c = g.c WHERE g.s > l.s GROUP BY g.p, g.c) GROUP BY n"
        ),
        |r| {
            want_fan.insert(int(r[0]).unwrap(), int(r[1]).unwrap());
        },
    );
    let mut got_fan: BTreeMap<i64, i64> = BTreeMap::new();
    for s in trace.slices.iter().filter(|s| !s.flow_out.is_empty()) {
        *got_fan.entry(s.flow_out.len() as i64).or_default() += 1;
    }
    stats.fanout = want_fan
        .iter()
        .filter(|(k, _)| **k > 1)
        .map(|(_, n)| *n as u64)
        .sum();
    p.eq(
        "API slices by number of arrows (fan-out)",
        got_fan,
        want_fan,
    );

    // Each arrow: from the API call with the GPU row's correlation id, in the GPU row's
    // process, that starts first; into the GPU row.
    let mut launch: HashMap<(i64, i64), i64> = HashMap::new();
    src.each(&format!("{with} SELECT p, c, s FROM launch"), |r| {
        if let (Some(pk), Some(c), Some(s)) = (int(r[0]), int(r[1]), int(r[2])) {
            launch.insert((pk, c), s);
        }
    });
    let mut gpu_pid: HashMap<(String, i64, i64, i64), Vec<i64>> = HashMap::new();
    src.each(&format!("{with} SELECT cat, p, c, s, e FROM gpu"), |r| {
        gpu_pid
            .entry((
                lossy(r[0]).unwrap(),
                int(r[3]).unwrap(),
                int(r[4]).unwrap(),
                int(r[2]).unwrap(),
            ))
            .or_default()
            .push(int(r[1]).unwrap());
    });
    let mut errors = 0;
    for f in &trace.flows {
        let (a, g) = (&trace.slices[f.source], &trace.slices[f.destination]);
        let corr = g.arg_int("correlation_id");
        let pids = corr.and_then(|c| gpu_pid.get(&(g.category.to_string(), g.start, g.end, c)));
        let src_pid = trace.pid_of(a.track).map(i64::from);
        let ok = &*a.category == "cuda.api"
            && a.arg_int("correlation_id") == corr
            && pids.is_some_and(|ps| {
                ps.iter().any(|pk| {
                    Some(pk & 0xFF_FFFF) == src_pid
                        && launch.get(&(*pk, corr.unwrap())) == Some(&a.start)
                })
            });
        if !ok {
            errors += 1;
            if errors <= 3 {
                p.add(format!(
                    "flow {}: from {} {:?} at {} (correlation_id {:?}, pid {src_pid:?}) into {} {:?} at {} (correlation_id {corr:?}, source pids {:?}): not its launching call",
                    f.id,
                    a.category,
                    a.name,
                    a.start,
                    a.arg_int("correlation_id"),
                    g.category,
                    g.name,
                    g.start,
                    pids.map(|v| v.iter().map(|p| p & 0xFF_FFFF).collect::<Vec<_>>())
                ));
            }
        }
    }
    if errors > 3 {
        p.add(format!("{errors} flows with a wrong source in all"));
    }
}

/// Process and thread names from PROCESSES and ThreadNames; every track is named.
fn check_names(p: &mut Problems, src: &Src, trace: &Trace) {
    let mut procs: HashMap<i64, String> = HashMap::new();
    if src.has_col("PROCESSES", "name") && src.has_col("PROCESSES", "globalPid") {
        src.each("SELECT globalPid, name FROM PROCESSES", |r| {
            if let (Some(g), Some(n)) = (int(r[0]), lossy(r[1]))
                && !n.is_empty()
            {
                procs.insert(pid_of(g), n);
            }
        });
    }
    for t in trace.process_tracks() {
        let pr = t.process.as_ref().unwrap();
        // nsys names the application after its launcher in reports launched through nsys;
        // Nsight Systems (and we) show the program instead: never "nsys-launcher".
        if pr.name.as_deref() == Some("nsys-launcher") {
            p.add(format!("process {} is named nsys-launcher", pr.pid));
        }
        if let Some(n) = procs.get(&(pr.pid as i64))
            && n != "nsys-launcher"
        {
            p.eq(
                &format!("name of process {}", pr.pid),
                pr.name.clone().unwrap_or_default(),
                n.clone(),
            );
        }
    }
    let mut threads: HashMap<(i64, i64), Vec<String>> = HashMap::new();
    if src.has_col("ThreadNames", "nameId") && src.has_col("ThreadNames", "globalTid") {
        src.each("SELECT globalTid, nameId FROM ThreadNames", |r| {
            if let (Some(g), Some(n)) = (int(r[0]), src.string(int(r[1]))) {
                threads.entry((pid_of(g), tid_of(g))).or_default().push(n);
            }
        });
    }
    for t in trace.thread_tracks() {
        let th = t.thread.as_ref().unwrap();
        let name = th.name.clone().unwrap_or_default();
        if let Some(names) = threads.get(&(th.pid as i64, th.tid as i64))
            && !names.contains(&name)
        {
            p.add(format!(
                "thread {}/{} is named {name:?}; ThreadNames says {names:?}",
                th.pid, th.tid
            ));
        }
    }
    for t in trace.tracks.values() {
        if trace.track_name(t.uuid).is_empty() {
            p.add(format!("track {} has no name: {t:?}", t.uuid));
        }
    }
}

/// What users look for in particular files of the corpus.
fn check_specific(p: &mut Problems, name: &str, src: &Src, trace: &Trace) {
    let gpu_tracks: Vec<String> = {
        let mut v: Vec<String> = trace
            .slices
            .iter()
            .filter(|s| s.category.starts_with("cuda.") && &*s.category != "cuda.api")
            .filter_map(|s| trace.track(s.track).parent)
            .collect::<HashSet<u64>>()
            .into_iter()
            .map(|u| trace.track_name(u))
            .collect();
        v.sort();
        v
    };
    if name.starts_with("GindaChen__nsys-ai__") && name.contains("_2gpu_") {
        // No TARGET_INFO_GPU in these derived files: the label is the device id alone.
        p.eq(
            "GPU groups of a 2-GPU profile",
            gpu_tracks.clone(),
            vec!["GPU 0".to_string(), "GPU 1".to_string()],
        );
    }
    if name == "GindaChen__nsys-ai__mock.sqlite" {
        p.eq(
            "GPU group",
            gpu_tracks.clone(),
            vec!["GPU 0 · NVIDIA GeForce RTX 3080".to_string()],
        );
    }
    if name == "NVIDIA__Fuser__report1@64ee035.sqlite" {
        p.eq(
            "GPU group",
            gpu_tracks.clone(),
            vec!["GPU 0 · NVIDIA H200".to_string()],
        );
    }
    if name == "quasiben__nvtx-examples__cudf.sqlite" {
        // 718 ranges of domain 2 ("libcudf") are named by registered strings (textId) only.
        let mut want: HashMap<(i64, i64), String> = HashMap::new();
        src.each(
            &format!("SELECT start, \"end\", textId FROM {NVTX} WHERE domainId = 2 AND eventType = 59 AND textId IS NOT NULL"),
            |r| {
                want.insert(
                    (int(r[0]).unwrap(), int(r[1]).unwrap()),
                    src.string(int(r[2])).unwrap_or_default(),
                );
            },
        );
        p.eq("registered-string ranges in cudf", want.len(), 718);
        let mut named = 0;
        for s in trace.of_category("nvtx") {
            if let Some(w) = want.get(&(s.start, s.end)) {
                if *s.name == **w && !w.is_empty() {
                    named += 1;
                }
                let track = trace.track_name(s.track);
                if track != "libcudf" {
                    p.add(format!("libcudf range {:?} is on track {track:?}", s.name));
                }
            }
        }
        p.eq("cudf ranges named by their registered string", named, 718);
        let domains: HashSet<String> = trace
            .of_category("nvtx")
            .map(|s| trace.track_name(s.track))
            .collect();
        p.eq(
            "cudf NVTX domain tracks",
            {
                let mut v: Vec<_> = domains.into_iter().collect();
                v.sort();
                v
            },
            vec!["cudf_python".to_string(), "libcudf".to_string()],
        );
    }
    if name == "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite" {
        // Old runtime exports repeat each call as an inner `_vNNNN` entry with the same
        // correlation id: the arrow starts at the outer (first) call.
        for f in &trace.flows {
            let a = &trace.slices[f.source];
            if a.name.contains("_v") {
                p.add(format!(
                    "flow {} starts at the inner call {:?}",
                    f.id, a.name
                ));
            }
        }
        if trace.flows.is_empty() {
            p.add("pipit: no flows");
        }
    }
    if name == "Sh1mwww__llama3-inference__real_inference_simulation.sqlite" {
        let named = trace
            .process_tracks()
            .filter(|t| {
                t.process
                    .as_ref()
                    .and_then(|p| p.name.as_deref())
                    .is_some_and(|n| !n.starts_with("Process "))
            })
            .count();
        if named == 0 {
            p.add("llama3: no process is named from PROCESSES");
        }
    }
}

#[test]
fn corpus_converts_losslessly() {
    let Some(dir) = corpus_dir() else {
        common::skip(
            "corpus",
            "../shared/corpus not found (set NSYS_CORPUS to run it)",
        );
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .collect();
    files.sort();
    if let Ok(only) = std::env::var("CORPUS_ONLY") {
        files.retain(|f| f.to_string_lossy().contains(&only));
    }
    assert!(!files.is_empty(), "no .sqlite files in {}", dir.display());
    let out = tempfile::tempdir().unwrap();
    let mut report = String::new();
    let mut failed = Vec::new();
    let mut total_backward = 0;
    let mut total_fanout = 0;
    let checked = common::par_map(&files, |f| {
        let started = std::time::Instant::now();
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_file(f, out.path())));
        (started.elapsed(), result)
    });
    for (f, (elapsed, result)) in files.iter().zip(checked) {
        let (problems, stats) = match result {
            Ok(r) => r,
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                (
                    Problems {
                        file: f.file_name().unwrap().to_string_lossy().into_owned(),
                        list: vec![format!("panicked: {msg}")],
                    },
                    Stats::default(),
                )
            }
        };
        total_backward += stats.backward;
        total_fanout += stats.fanout;
        let _ = writeln!(
            report,
            "{:<70} {:>5.1}s {} flows={} backward={} fanout={} skipped={} {:?}",
            problems.file,
            elapsed.as_secs_f64(),
            if problems.list.is_empty() {
                "ok  "
            } else {
                "FAIL"
            },
            stats.flows,
            stats.backward,
            stats.fanout,
            stats.skipped,
            stats.slices
        );
        if !problems.list.is_empty() {
            failed.push(problems);
        }
    }
    eprintln!("{report}");
    eprintln!(
        "GPU rows starting no later than their launch (no arrow), whole corpus: {total_backward}; API calls with fan-out: {total_fanout}"
    );
    if !failed.is_empty() {
        let mut msg = format!(
            "{} of {} corpus files have problems:\n",
            failed.len(),
            files.len()
        );
        for p in &failed {
            let _ = writeln!(msg, "== {}", p.file);
            for l in &p.list {
                let _ = writeln!(msg, "  - {l}");
            }
        }
        panic!("{msg}");
    }
}

// GPU names must follow the CUDA device id that CUPTI rows carry in deviceId (`cuDevice`), not
// TARGET_INFO_GPU.id, which is nsys's own GPU number. In the corpus, MAP-Fusion23's report1.sqlite has
// id 0 = cuDevice 1 and id 1 = cuDevice 0 (no kernels there, so no visible effect yet); a machine
// with different GPU models would get its GPU tracks mislabelled.
#[test]
fn gpu_names_follow_cuda_device_ids() {
    let Some(dir) = corpus_dir() else {
        common::skip("corpus", "../shared/corpus not found");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("two_models.sqlite");
    std::fs::copy(dir.join("GindaChen__nsys-ai__mock.sqlite"), &input).unwrap();
    {
        let c = Connection::open(&input).unwrap();
        // The real GPU (cuDevice 0, where the kernels ran) gets nsys id 1; another model takes
        // nsys id 0 as CUDA device 1, as on MAP-Fusion23's machine.
        c.execute_batch(
            "UPDATE TARGET_INFO_GPU SET id = 1 WHERE cuDevice = 0;
             INSERT INTO TARGET_INFO_GPU (vmId, id, cuDevice, name) VALUES (0, 0, 1, 'Some Other GPU');",
        )
        .unwrap();
    }
    let (_s, out) = common::convert(&input, tmp.path());
    let t = common::validate_file(&out);
    let gpus: HashSet<String> = t
        .of_category("cuda.kernel")
        .filter_map(|s| t.track(s.track).parent)
        .map(|u| t.track_name(u))
        .collect();
    assert_eq!(
        gpus,
        HashSet::from(["GPU 0 · NVIDIA GeForce RTX 3080".to_string()]),
        "kernels of CUDA device 0 sit under that device's name"
    );
}
