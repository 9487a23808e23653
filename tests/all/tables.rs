//! "Everything the profile recorded": the tables beyond CUDA, NVTX, OS runtime and scheduling.
//!
//! - Every timed table (a `start`, `timestamp` or `rawTimestamp` column) with rows in any corpus
//!   export is either converted or on the reasoned exclusion list (`tables::EXCLUDED`).
//! - For every table of `tables::SPECS` (and the profiler markers of `OSRT_API`), the trace holds
//!   exactly one event per row in the table's category, at the row's exact times (slices with
//!   their end, instants at their timestamp), on a track of the kind the table belongs on
//!   (thread, process, GPU, or a top-level track), computed independently in SQL.
//! - Tables no corpus profile has rows of are checked the same way on a made fixture:
//!   `tests/fixtures/documented_tables.sql` applied to a copy of a real export.

use crate::common;

use crate::common::{Trace, corpus_dir, validate_file};
use nsys_perfetto_read::tables::{EXCLUDED, NameFrom, Place, SPECS, Spec, is_marker_name};
use rusqlite::{Connection, OpenFlags, types::ValueRef};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

fn open(path: &Path) -> Connection {
    Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

fn columns(c: &Connection, table: &str) -> Vec<String> {
    let mut stmt = c.prepare("SELECT name FROM pragma_table_info(?1)").unwrap();
    stmt.query_map([table], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn tables(c: &Connection) -> Vec<String> {
    let mut stmt = c
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn count(c: &Connection, table: &str) -> i64 {
    c.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
        r.get(0)
    })
    .unwrap()
}

fn int(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(i) => Some(i),
        _ => None,
    }
}

fn corpus_files() -> Vec<PathBuf> {
    let Some(dir) = corpus_dir() else {
        return Vec::new();
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
    files
}

/// Columns that time rows; `ANALYSIS_DETAILS.startTime` and `TARGET_INFO_SESSION_START_TIME` are
/// one-row descriptions of the capture, not events.
const TIME_COLUMNS: [&str; 3] = ["start", "timestamp", "rawTimestamp"];

#[test]
fn every_timed_table_with_rows_is_converted_or_excluded() {
    let files = corpus_files();
    if files.is_empty() {
        crate::common::skip("corpus", "../shared/corpus not found (set NSYS_CORPUS)");
        return;
    }
    let excluded: HashMap<&str, &str> = EXCLUDED.iter().copied().collect();
    let mut seen: BTreeMap<String, (u64, i64, &str)> = BTreeMap::new();
    let mut problems = Vec::new();
    for f in &files {
        let c = open(f);
        for t in tables(&c) {
            let cols = columns(&c, &t);
            if !cols.iter().any(|c| TIME_COLUMNS.contains(&c.as_str())) {
                continue;
            }
            let n = count(&c, &t);
            if n == 0 {
                continue;
            }
            let how = if nsys_perfetto_read::source::is_converted(&t) {
                "converted"
            } else if let Some(why) = excluded.get(t.as_str()) {
                why
            } else {
                problems.push(format!(
                    "{}: {t} ({n} rows) is neither converted nor excluded",
                    f.file_name().unwrap().to_string_lossy()
                ));
                "NOT CONVERTED"
            };
            let e = seen.entry(t).or_insert((0, 0, how));
            e.0 += 1;
            e.1 += n;
        }
    }
    for (t, (files, rows, how)) in &seen {
        eprintln!("{t:<45} {files:>3} files {rows:>9} rows  {how}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// (start, end) of each expected event, by category.
type Expected = BTreeMap<&'static str, Vec<(i64, i64)>>;

fn marker_ids(c: &Connection) -> HashSet<i64> {
    let mut out = HashSet::new();
    if columns(c, "StringIds").is_empty() {
        return out;
    }
    let mut stmt = c.prepare("SELECT id, value FROM StringIds").unwrap();
    let mut rows = stmt.query([]).unwrap();
    while let Some(r) = rows.next().unwrap() {
        if let (Some(id), Ok(ValueRef::Text(v))) = (int(r.get_ref(0).unwrap()), r.get_ref(1))
            && is_marker_name(&String::from_utf8_lossy(v))
        {
            out.insert(id);
        }
    }
    out
}

/// What the source says the trace must hold for every table of SPECS and the OSRT markers.
fn expected(c: &Connection) -> (Expected, BTreeMap<&'static str, i64>) {
    let markers = marker_ids(c);
    let mut exp: Expected = BTreeMap::new();
    let mut rows_per_table = BTreeMap::new();
    for s in SPECS {
        exp.entry(s.category.as_str()).or_default();
    }
    exp.entry("nsys.marker").or_default();
    for s in SPECS {
        let cols = columns(c, s.table);
        let Some(time) = ["start", "timestamp"]
            .into_iter()
            .find(|t| cols.iter().any(|c| c == t))
        else {
            continue;
        };
        let slices = !s.instants && time == "start" && cols.iter().any(|c| c == "end");
        let name_col = match s.name {
            NameFrom::StringId(n) if cols.iter().any(|c| c == n) => format!("\"{n}\""),
            _ => "NULL".to_string(),
        };
        let end = if slices { "\"end\"" } else { "NULL" };
        let sql = format!("SELECT \"{time}\", {end}, {name_col} FROM \"{}\"", s.table);
        let mut stmt = c.prepare(&sql).unwrap();
        let mut rows = stmt.query([]).unwrap();
        let mut n = 0;
        while let Some(r) = rows.next().unwrap() {
            n += 1;
            let start = int(r.get_ref(0).unwrap()).expect("rows have a time");
            let end = int(r.get_ref(1).unwrap());
            let name = int(r.get_ref(2).unwrap());
            if name.is_some_and(|id| markers.contains(&id)) {
                exp.get_mut("nsys.marker").unwrap().push((start, start));
                continue;
            }
            match end {
                Some(e) if e >= start => exp.get_mut(s.category.as_str()).unwrap().push((start, e)),
                Some(_) => {}
                None => exp
                    .get_mut(s.category.as_str())
                    .unwrap()
                    .push((start, start)),
            }
        }
        rows_per_table.insert(s.table, n);
    }
    // OS runtime calls and the profiler markers among them.
    if columns(c, "OSRT_API").iter().any(|c| c == "nameId") {
        let osrt = exp.entry("osrt").or_default();
        let mut stmt = c
            .prepare("SELECT start, \"end\", nameId FROM OSRT_API")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        let mut marks = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            let (s, e, id) = (
                int(r.get_ref(0).unwrap()),
                int(r.get_ref(1).unwrap()),
                int(r.get_ref(2).unwrap()),
            );
            match (s, e) {
                (Some(s), _) if id.is_some_and(|id| markers.contains(&id)) => marks.push((s, s)),
                (Some(s), Some(e)) if e >= s => osrt.push((s, e)),
                _ => {}
            }
        }
        exp.get_mut("nsys.marker").unwrap().extend(marks);
    }
    (exp, rows_per_table)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Parent {
    Thread,
    Process,
    Gpu,
    TopLevel,
}

fn parent_kind(t: &Trace, track: u64) -> Parent {
    match t.track(track).parent {
        None => Parent::TopLevel,
        Some(p) => {
            let p = t.track(p);
            if p.thread.is_some() {
                Parent::Thread
            } else if p.process.is_some() {
                Parent::Process
            } else if p.name.as_deref().is_some_and(|n| n.starts_with("GPU ")) {
                Parent::Gpu
            } else {
                Parent::TopLevel
            }
        }
    }
}

/// Where events of a spec may sit: (track name, parent kind).
fn allowed(s: &Spec) -> Vec<(&'static str, Parent)> {
    match s.place {
        Place::Thread(k) => vec![(k.label(), Parent::Thread)],
        Place::Process(k) => vec![(k.label(), Parent::Process)],
        Place::Gpu(k, _) => vec![(k.label(), Parent::Gpu)],
        Place::Global(k) => vec![(k.label(), Parent::TopLevel)],
        Place::ProcessOrGlobal(k) => {
            vec![(k.label(), Parent::Process), (k.label(), Parent::TopLevel)]
        }
    }
}

/// Convert `path` and compare with the source; returns the problems and the trace.
fn check(path: &Path, dir: &Path) -> (Vec<String>, Trace, BTreeMap<&'static str, i64>) {
    let (summary, out) = common::convert(path, dir);
    let trace = validate_file(&out);
    let c = open(path);
    let (exp, rows) = expected(&c);
    let mut p = Vec::new();
    for (cat, want) in &exp {
        let mut want = want.clone();
        want.sort_unstable();
        let mut got: Vec<(i64, i64)> = trace.of_category(cat).map(|s| (s.start, s.end)).collect();
        got.sort_unstable();
        if got != want {
            p.push(format!(
                "{cat}: {} events in the trace, {} rows in the source (first differences: {:?} vs {:?})",
                got.len(),
                want.len(),
                got.iter().find(|g| !want.contains(g)),
                want.iter().find(|w| !got.contains(w)),
            ));
        }
        if summary
            .events
            .iter()
            .zip(nsys_perfetto_model::category::Category::ALL)
            .any(|(n, c)| c.as_str() == *cat && *n != want.len() as u64)
        {
            p.push(format!(
                "{cat}: the summary's count differs from the source"
            ));
        }
    }
    // Placement: each category's events sit on the tracks its tables belong on.
    let mut places: HashMap<&str, BTreeSet<(&str, Parent)>> = HashMap::new();
    for s in SPECS {
        places
            .entry(s.category.as_str())
            .or_default()
            .extend(allowed(s));
    }
    for (cat, ok) in &places {
        for s in trace.of_category(cat) {
            let at = (trace.track_name(s.track), parent_kind(&trace, s.track));
            if !ok.iter().any(|(n, k)| at.0 == *n && at.1 == *k) {
                p.push(format!(
                    "{cat}: '{}' on track {at:?}, expected one of {ok:?}",
                    s.name
                ));
                break;
            }
        }
    }
    // Args users look for: the faulting address and PC of unified memory faults, the text and
    // severity of diagnostics.
    if rows
        .get("CUDA_UM_CPU_PAGE_FAULT_EVENTS")
        .is_some_and(|n| *n > 0)
    {
        let mut want: Vec<(i64, Option<i64>, Option<i64>)> = Vec::new();
        let mut stmt = c
            .prepare("SELECT start, address, originalFaultPc FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            want.push((
                int(r.get_ref(0).unwrap()).unwrap(),
                int(r.get_ref(1).unwrap()),
                int(r.get_ref(2).unwrap()),
            ));
        }
        let mut got: Vec<_> = trace
            .of_category("cuda.um.cpu_fault")
            .map(|s| {
                (
                    s.start,
                    s.arg_int("address"),
                    s.arg_int("original_fault_pc"),
                )
            })
            .collect();
        want.sort_unstable();
        got.sort_unstable();
        if got != want {
            p.push(
                "cuda.um.cpu_fault: address / original_fault_pc args differ from the source".into(),
            );
        }
    }
    if rows.get("DIAGNOSTIC_EVENT").is_some_and(|n| *n > 0) {
        let mut want: Vec<(i64, String)> = Vec::new();
        let mut stmt = c
            .prepare("SELECT timestamp, text FROM DIAGNOSTIC_EVENT")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let text = match r.get_ref(1).unwrap() {
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                _ => "(diagnostic)".to_string(),
            };
            want.push((int(r.get_ref(0).unwrap()).unwrap(), text));
        }
        let mut got: Vec<_> = trace
            .of_category("nsys.diagnostic")
            .map(|s| (s.start, s.name.to_string()))
            .collect();
        want.sort();
        got.sort();
        if got != want {
            p.push("nsys.diagnostic: names differ from DIAGNOSTIC_EVENT.text".into());
        }
        if trace
            .of_category("nsys.diagnostic")
            .any(|s| s.arg("severity").is_none())
        {
            p.push("nsys.diagnostic: a diagnostic without severity".into());
        }
    }
    if let Some(Err(report)) = common::tpcheck(&out) {
        p.push(format!("tpcheck --strict failed:\n{report}"));
    }
    let _ = std::fs::remove_file(&out);
    (p, trace, rows)
}

#[test]
fn corpus_tables_convert_exactly() {
    let files = corpus_files();
    if files.is_empty() {
        crate::common::skip("corpus", "../shared/corpus not found (set NSYS_CORPUS)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut failed = Vec::new();
    let mut totals: BTreeMap<&str, usize> = BTreeMap::new();
    let checked = crate::common::par_map(&files, |f| {
        let c = open(f);
        let (exp, _) = expected(&c);
        if exp.values().all(Vec::is_empty) {
            return None;
        }
        let (problems, _, _) = check(f, dir.path());
        let rows: Vec<(&str, usize)> = exp
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(c, v)| (*c, v.len()))
            .collect();
        Some((f, problems, rows))
    });
    for (f, problems, rows) in checked.into_iter().flatten() {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let counts: Vec<String> = rows
            .iter()
            .map(|(c, n)| {
                *totals.entry(c).or_default() += n;
                format!("{c} {n}")
            })
            .collect();
        eprintln!(
            "{name:<70} {} {}",
            if problems.is_empty() { "ok  " } else { "FAIL" },
            counts.join(", ")
        );
        if !problems.is_empty() {
            failed.push(format!("== {name}\n  - {}", problems.join("\n  - ")));
        }
    }
    eprintln!("whole corpus: {totals:?}");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A copy of the nvtx_workload export with documented rows of tables no corpus file holds.
fn made_fixture(dir: &Path) -> PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let path = dir.join("documented_tables.sqlite");
    std::fs::copy(fixtures.join("nvtx_workload.sqlite"), &path).unwrap();
    let sql = std::fs::read_to_string(fixtures.join("documented_tables.sql")).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch(&sql)
        .unwrap();
    path
}

#[test]
fn documented_tables_convert_exactly_on_a_made_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let input = made_fixture(dir.path());
    let (problems, t, rows) = check(&input, dir.path());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Every table the fixture fills gave events.
    for (table, n) in &rows {
        assert!(*n > 0, "{table}: no rows in the fixture");
    }
    let by_cat = t.count_by_category();
    for cat in [
        "cuda.um.gpu_fault",
        "cuda.um.cpu_fault",
        "cuda.graph",
        "cuda.event",
        "cublas",
        "cudnn",
        "mpi",
        "ucx",
        "openmp",
        "openacc",
        "nvvideo",
        "graphics.api",
        "graphics.gpu",
        "gpu.context_switch",
        "cpu.counters",
        "network",
        "nsys.diagnostic",
        "nsys.overhead",
        "nsys.marker",
    ] {
        assert!(by_cat.get(cat).is_some_and(|n| *n > 0), "no {cat} events");
    }
    // GPU page faults: on each GPU's "Unified memory" track, overlapping faults on two lanes,
    // the access type by its label.
    let faults: Vec<_> = t.of_category("cuda.um.gpu_fault").collect();
    let gpus: BTreeSet<String> = faults
        .iter()
        .map(|s| t.track_name(t.track(s.track).parent.unwrap()))
        .collect();
    assert_eq!(
        gpus,
        BTreeSet::from(["GPU 0".to_string(), "GPU 1".to_string()])
    );
    let lanes: BTreeSet<u64> = faults.iter().map(|s| s.track).collect();
    assert_eq!(
        lanes.len(),
        3,
        "two overlapping faults on GPU 0 take two lanes"
    );
    assert!(
        faults
            .iter()
            .any(|s| s.arg_str("fault_access_type") == Some("Read"))
    );
    assert!(
        faults
            .iter()
            .all(|s| s.arg_int("number_of_page_faults").is_some())
    );
    // CUDA graphs: creation on the thread with graph and node ids.
    let graphs: Vec<_> = t.of_category("cuda.graph").collect();
    assert!(
        graphs
            .iter()
            .any(|s| &*s.name == "cudaGraphCreate" && s.arg_int("graph_id") == Some(1))
    );
    assert!(
        graphs
            .iter()
            .any(|s| s.arg_int("original_graph_node_id") == Some(10))
    );
    // cuBLAS: the "profiling started" row is a marker, not a call.
    assert!(
        t.of_category("nsys.marker")
            .any(|s| &*s.name == "cuBLAS profiling started" && s.instant)
    );
    assert_eq!(t.of_category("cublas").count(), 2);
    // MPI: a call with no end is an instant; args by their snake_case column names.
    assert!(
        t.of_category("mpi")
            .any(|s| &*s.name == "MPI_Barrier" && s.instant)
    );
    assert!(
        t.of_category("mpi")
            .any(|s| s.arg_int("remote_rank") == Some(1) && s.arg_int("size") == Some(4096))
    );
    // OpenMP tasks nest inside their parallel region on one track.
    let omp: Vec<_> = t.of_category("openmp").collect();
    assert_eq!(
        omp.iter().map(|s| s.track).collect::<BTreeSet<_>>().len(),
        1
    );
    assert!(omp.iter().any(|s| &*s.name == "omp_task" && s.depth == 1));
    // OpenACC: string ids and enums resolved.
    let acc = t.of_category("openacc").next().unwrap();
    assert_eq!(acc.arg_str("kernel_name"), Some("kernel_saxpy"));
    assert_eq!(acc.arg_str("src_file"), Some("main.c"));
    assert_eq!(acc.arg_int("num_gangs"), Some(128));
    // Graphics: text columns kept, workloads under the GPU.
    assert!(
        t.of_category("graphics.api")
            .any(|s| s.arg_str("object_name") == Some("main queue"))
    );
    // Diagnostics: the profiler's pid-0 message on a top-level track, the process's under it.
    let diag: BTreeSet<Parent> = t
        .of_category("nsys.diagnostic")
        .map(|s| parent_kind(&t, s.track))
        .collect();
    assert_eq!(diag, BTreeSet::from([Parent::Process, Parent::TopLevel]));
    // Counters as instants with their values and interval end.
    assert!(
        t.of_category("cpu.counters")
            .all(|s| s.instant && s.arg_int("end").is_some())
    );
    assert!(
        t.of_category("cpu.counters")
            .any(|s| s.arg_int("count") == Some(654321))
    );
}

#[test]
fn new_types_select_what_they_name() {
    use nsys_perfetto_model::category::EventType;
    use nsys_perfetto_model::select::Selection;
    let dir = tempfile::tempdir().unwrap();
    let input = made_fixture(dir.path());
    let out = dir.path().join("um.pftrace");
    let opts = nsys_perfetto::convert::Options {
        selection: Selection {
            types: [EventType::Um, EventType::Mpi].into_iter().collect(),
            ..Selection::default()
        },
        ..Default::default()
    };
    crate::common::convert_to(&input, &out, &opts);
    let t = validate_file(&out);
    let cats: BTreeSet<String> = t.count_by_category().into_keys().collect();
    assert_eq!(
        cats,
        BTreeSet::from([
            "cuda.um.cpu_fault".to_string(),
            "cuda.um.gpu_fault".to_string(),
            "mpi".to_string()
        ])
    );
    for name in [
        "um",
        "cuda-graph",
        "cudnn",
        "cublas",
        "openacc",
        "openmp",
        "mpi",
        "ucx",
        "cpu-counters",
        "network",
        "video",
        "graphics",
        "diagnostics",
        "overhead",
    ] {
        assert!(EventType::parse_list(&[name]).is_ok(), "{name}");
    }
}

#[test]
fn stats_count_page_faults_per_process() {
    use nsys_perfetto::workflow::stats::{self, StatsOptions};
    use nsys_perfetto::workflow::{Output, Unit};
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = corpus_files()
        .into_iter()
        .filter(|f| {
            let c = open(f);
            !columns(&c, "CUDA_UM_CPU_PAGE_FAULT_EVENTS").is_empty()
                && count(&c, "CUDA_UM_CPU_PAGE_FAULT_EVENTS") > 0
        })
        .collect();
    files.push(made_fixture(dir.path()));
    for f in &files {
        let c = open(f);
        let mut stmt = c
            .prepare(
                "SELECT (globalPid >> 24) & 16777215, count(*), count(DISTINCT address) \
                 FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS GROUP BY 1",
            )
            .unwrap();
        let mut want: Vec<(i64, u64, u64)> = stmt
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get::<_, i64>(1)? as u64,
                    r.get::<_, i64>(2)? as u64,
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let st = stats::query::stats(
            f,
            &StatsOptions {
                top: 1,
                raw_names: false,
            },
        )
        .unwrap();
        let mut got: Vec<(i64, u64, u64)> = st
            .page_faults
            .iter()
            .map(|p| (p.pid, p.faults, p.addresses))
            .collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "{}", f.display());
        let total: u64 = want.iter().map(|w| w.1).sum();
        let table = st.render(Output::Table, Unit::Ns);
        let grouped = nsys_perfetto::workflow::group_digits(&total.to_string());
        assert!(
            table.contains(&format!(
                "Unified memory CPU page faults: {grouped} in {} process{}",
                want.len(),
                if want.len() == 1 { "" } else { "es" }
            )),
            "{table}"
        );
        let j = st.json();
        assert_eq!(
            j["um_cpu_page_faults"].as_array().unwrap().len(),
            want.len()
        );
    }
}
