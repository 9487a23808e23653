//! End to end with the real nsys: profile a real NVTX program with `nsys-perfetto profile`,
//! convert the corpus reports nsys can read (checking row counts against MANIFEST.tsv), and
//! check the message for those it cannot. Tests that need nsys print "skipping: nsys not found"
//! and pass where it is absent; CI installs it (`.ci/run`).

use crate::common::skip;
use nsys_perfetto::convert::Options;
use nsys_perfetto::report::{self, finding::Nsys, version::Version};
use nsys_perfetto_model::category::Category;
use nsys_perfetto_write::proto::{self, Trace, trace_packet, track_event};
use prost::Message;
use rusqlite::Connection;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared")
}

fn nsys() -> Option<Nsys> {
    match report::finding::find_nsys(None) {
        Ok(n) => Some(n),
        Err(e) => {
            skip("nsys", &format!("nsys not found ({e:#})"));
            None
        }
    }
}

/// The newest version among every nsys found: reports go to the newest nsys that can read them
/// (`report::finding::nsys_for_report`), so with nsys 2022.4 and 2023.4.4 installed (as `.ci/run`
/// does) a report captured with 2023.2 converts.
fn newest_version() -> Option<Version> {
    report::finding::nsys_candidates(None)
        .ok()?
        .into_iter()
        .filter_map(|(p, s)| Nsys::probe(&p, s).ok()?.version)
        .max()
}

fn corpus() -> Option<PathBuf> {
    let d = shared().join("corpus");
    if d.join("MANIFEST.tsv").is_file() {
        Some(d)
    } else {
        skip("corpus", &format!("{} is absent", d.display()));
        None
    }
}

/// A MANIFEST.tsv row of a report (.nsys-rep / .qdrep).
#[derive(Debug)]
struct Entry {
    file: String,
    /// The capture version the manifest names.
    capture: Version,
    /// Whether nsys 2022.4 exported it.
    export_ok: bool,
    /// Row counts by table key (KERNEL, MEMCPY, ...); absent keys are 0.
    counts: BTreeMap<String, u64>,
}

fn manifest(dir: &Path) -> Vec<Entry> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (file, kind, version, gpu, notes) = (
        col("file"),
        col("kind"),
        col("nsys_or_schema_version"),
        col("gpu_tables_present"),
        col("notes"),
    );
    let mut out = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() <= notes || !(f[kind] == "nsys-rep" || f[kind] == "qdrep") {
            continue;
        }
        let counts = f[gpu]
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect();
        out.push(Entry {
            file: f[file].to_string(),
            capture: Version::parse(f[version]).expect("manifest names the capture version"),
            export_ok: f[notes].contains("export OK"),
            counts,
        });
    }
    assert!(out.len() >= 20, "MANIFEST.tsv lists {} reports", out.len());
    out
}

/// MANIFEST keys and the export tables they count.
const TABLES: &[(&str, &str)] = &[
    ("KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL"),
    ("MEMCPY", "CUPTI_ACTIVITY_KIND_MEMCPY"),
    ("MEMSET", "CUPTI_ACTIVITY_KIND_MEMSET"),
    ("RUNTIME", "CUPTI_ACTIVITY_KIND_RUNTIME"),
    ("SYNC", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
    ("CUDA_EVENT", "CUPTI_ACTIVITY_KIND_CUDA_EVENT"),
    ("NVTX", "NVTX_EVENTS"),
    ("OSRT", "OSRT_API"),
    ("SCHED", "SCHED_EVENTS"),
];

fn table_rows(conn: &Connection, table: &str) -> u64 {
    // Columns, not `sqlite_master`: an Arrow export's tables are eponymous virtual tables,
    // which SQLite declares on first use and does not list.
    let exists: i64 = conn
        .query_row("SELECT count(*) FROM pragma_table_info(?1)", [table], |r| {
            r.get(0)
        })
        .unwrap();
    if exists == 0 {
        return 0;
    }
    conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap() as u64
}

fn run(args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Slices and instants of a .pftrace: (category, name) -> count, resolving interned names per
/// packet sequence; plus the thread names of the thread descriptors.
struct Decoded {
    events: BTreeMap<(String, String), u64>,
    threads: Vec<String>,
}

fn decode(path: &Path) -> Decoded {
    let trace = Trace::decode(&*std::fs::read(path).unwrap()).unwrap();
    let mut names: HashMap<u32, HashMap<u64, String>> = HashMap::new();
    let mut cats: HashMap<u32, HashMap<u64, String>> = HashMap::new();
    // Counter tracks' categories (CounterDescriptor) and each sequence's default track.
    let mut counter_cats: HashMap<u64, String> = HashMap::new();
    let mut default_track: HashMap<u32, u64> = HashMap::new();
    let mut d = Decoded {
        events: BTreeMap::new(),
        threads: Vec::new(),
    };
    for p in trace.packet {
        let seq = match p.optional_trusted_packet_sequence_id {
            Some(trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(s)) => s,
            None => 0,
        };
        if p.sequence_flags.unwrap_or(0) & 1 != 0 {
            names.remove(&seq);
            cats.remove(&seq);
        }
        if let Some(i) = &p.interned_data {
            let n = names.entry(seq).or_default();
            for e in &i.event_names {
                n.insert(e.iid.unwrap(), e.name.clone().unwrap_or_default());
            }
            let c = cats.entry(seq).or_default();
            for e in &i.event_categories {
                c.insert(e.iid.unwrap(), e.name.clone().unwrap_or_default());
            }
        }
        if let Some(t) = p
            .trace_packet_defaults
            .as_ref()
            .and_then(|d| d.track_event_defaults.as_ref())
            .and_then(|t| t.track_uuid)
        {
            default_track.insert(seq, t);
        }
        match p.data {
            Some(trace_packet::Data::PerfSample(_)) => {
                *d.events
                    .entry(("cpu.sample".to_string(), String::new()))
                    .or_default() += 1;
            }
            Some(trace_packet::Data::TrackEvent(ev))
                if ev.r#type == Some(proto::track_event::Type::Counter as i32) =>
            {
                let track = ev.track_uuid.or(default_track.get(&seq).copied());
                let cat = track
                    .and_then(|t| counter_cats.get(&t).cloned())
                    .unwrap_or_default();
                *d.events.entry((cat, String::new())).or_default() += 1;
            }
            Some(trace_packet::Data::TrackEvent(ev)) => {
                let ty = ev.r#type.unwrap_or(0);
                if ty != proto::track_event::Type::SliceBegin as i32
                    && ty != proto::track_event::Type::Instant as i32
                {
                    continue;
                }
                let name = match &ev.name_field {
                    Some(track_event::NameField::NameIid(i)) => names
                        .get(&seq)
                        .and_then(|n| n.get(i))
                        .cloned()
                        .unwrap_or_else(|| panic!("name iid {i} not interned on sequence {seq}")),
                    Some(track_event::NameField::Name(n)) => n.clone(),
                    None => String::new(),
                };
                let cat = ev
                    .category_iids
                    .first()
                    .map(|i| cats[&seq][i].clone())
                    .or_else(|| ev.categories.first().cloned())
                    .unwrap_or_default();
                *d.events.entry((cat, name)).or_default() += 1;
            }
            Some(trace_packet::Data::TrackDescriptor(t)) => {
                if let (Some(u), Some(c)) = (t.uuid, &t.counter) {
                    counter_cats.insert(u, c.categories.first().cloned().unwrap_or_default());
                }
                if let Some(n) = t.thread.and_then(|t| t.thread_name) {
                    d.threads.push(n);
                }
            }
            _ => {}
        }
    }
    d
}

impl Decoded {
    fn by_category(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for ((c, _), n) in &self.events {
            *out.entry(c.clone()).or_default() += n;
        }
        out
    }

    fn named(&self, cat: &str, name: &str) -> u64 {
        self.events
            .get(&(cat.to_string(), name.to_string()))
            .copied()
            .unwrap_or(0)
    }
}

fn nvtx_include(nsys: &Nsys) -> Option<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(real) = std::fs::canonicalize(&nsys.path) {
        let mut d = real.parent();
        for _ in 0..3 {
            let Some(dir) = d else { break };
            dirs.push(dir.join("nvtx/include"));
            dirs.push(dir.join("target-linux-x64/nvtx/include"));
            d = dir.parent();
        }
    }
    dirs.push("/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nvtx/include".into());
    dirs.push("/usr/local/cuda/include".into());
    dirs.push("/usr/include".into());
    dirs.into_iter()
        .find(|d| d.join("nvtx3/nvToolsExt.h").is_file())
}

/// (1) `nsys-perfetto profile` on the real NVTX workload: the ranges and marks it makes, by name.
#[test]
fn profile_nvtx_workload() {
    let Some(nsys) = nsys() else { return };
    let src = shared().join("gen/nvtx_workload.c");
    if !src.is_file() {
        skip("corpus", &format!("{} is absent", src.display()));
        return;
    }
    let Some(include) = nvtx_include(&nsys) else {
        skip("nsys", "NVTX headers (nvtx3/nvToolsExt.h) not found");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("nvtx_workload");
    let gcc = Command::new("gcc")
        .args(["-O1", "-D_GNU_SOURCE", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-lpthread")
        .output();
    match gcc {
        Err(e) => {
            skip("gcc", &format!("gcc not available ({e})"));
            return;
        }
        Ok(o) => assert!(o.status.success(), "gcc failed: {}", stderr(&o)),
    }
    let base = tmp.path().join("wl");
    let o = Command::new(BIN)
        .arg("profile")
        .arg("-o")
        .arg(&base)
        .args(["--trace", "nvtx,osrt", "--timeout", "300", "--"])
        .arg(&exe)
        .env("XDG_CACHE_HOME", tmp.path().join("cache"))
        .output()
        .unwrap();
    let err = stderr(&o);
    eprintln!("{err}");
    assert!(o.status.success(), "profile failed:\n{err}");
    for ext in ["nsys-rep", "pftrace"] {
        assert!(
            tmp.path().join(format!("wl.{ext}")).is_file(),
            "wl.{ext} missing"
        );
    }
    // The export, by the newest nsys found: Arrow from nsys 2023 on, else SQLite.
    assert!(
        tmp.path().join("wl.sqlite").is_file() || tmp.path().join("wl_arwdir").is_dir(),
        "no export of wl.nsys-rep beside it"
    );
    assert!(
        !tmp.path().join("wl.qdstrm").exists(),
        "the .qdstrm is left"
    );
    // The report names the nsys that captured it.
    let captured = report::version::capture_version(&tmp.path().join("wl.nsys-rep"))
        .unwrap()
        .expect("capture version");
    assert_eq!(
        Some(captured.release_str()),
        nsys.version.map(|v| v.release_str())
    );

    let d = decode(&tmp.path().join("wl.pftrace"));
    // Three workers, 50 steps each: step > forward, backward; then a default-domain range;
    // a checkpoint mark every 10 steps. Main: two start/end ranges and the final mark.
    let ranges = [
        ("step", 150),
        ("forward", 150),
        ("backward", 150),
        ("default-domain work", 150),
        ("cross-thread range", 1),
        ("prefetch", 1),
    ];
    for (name, n) in ranges {
        assert_eq!(d.named("nvtx", name), n, "NVTX ranges named {name:?}");
    }
    assert_eq!(d.named("nvtx.mark", "checkpoint"), 15);
    assert_eq!(d.named("nvtx.mark", "done"), 1);
    let by_cat = d.by_category();
    assert_eq!(by_cat.get("nvtx"), Some(&602), "{by_cat:?}");
    assert_eq!(by_cat.get("nvtx.mark"), Some(&16), "{by_cat:?}");
    for w in ["worker-0", "worker-1", "worker-2"] {
        assert!(
            d.threads.iter().any(|t| t == w),
            "thread {w} not named: {:?}",
            d.threads
        );
    }
}

fn copy_into(dir: &Path, src: &Path) -> PathBuf {
    let dst = dir.join(src.file_name().unwrap());
    std::fs::copy(src, &dst).unwrap();
    dst
}

fn sum_skipped(s: &nsys_perfetto_model::summary::Summary, table: &str) -> u64 {
    s.skipped
        .iter()
        .filter(|((t, _), _)| t == table)
        .map(|(_, n)| n)
        .sum::<u64>()
        + s.naming_rows.get(table).copied().unwrap_or(0)
}

/// (2) Every corpus report this nsys can read: converted from the report in one run over a
/// directory; the export holds MANIFEST's row counts; the trace holds the conversion's events,
/// which account for every KERNEL, MEMCPY, MEMSET, RUNTIME and NVTX row.
#[test]
fn corpus_reports_convert_with_manifest_counts() {
    let Some(nsys) = nsys() else { return };
    let Some(dir) = corpus() else { return };
    let _ = nsys.version.expect("nsys --version");
    let version = newest_version().expect("a version");
    let entries: Vec<Entry> = manifest(&dir)
        .into_iter()
        .filter(|e| version.can_read(&e.capture))
        .collect();
    if version.release_str() == "2022.4" {
        // The manifest was made with this nsys: it names the same set.
        let all = manifest(&dir);
        let ok: Vec<&str> = all
            .iter()
            .filter(|e| e.export_ok)
            .map(|e| e.file.as_str())
            .collect();
        let readable: Vec<&str> = entries.iter().map(|e| e.file.as_str()).collect();
        assert_eq!(ok, readable);
    }
    assert!(!entries.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("reports");
    std::fs::create_dir(&work).unwrap();
    for e in &entries {
        copy_into(&work, &dir.join(&e.file));
    }
    let o = run(
        &[work.as_os_str()],
        &[("XDG_CACHE_HOME", &tmp.path().join("cache"))],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("total: {} converted", entries.len())),
        "{err}"
    );

    for e in &entries {
        let report = work.join(&e.file);
        // nsys 2023 and newer export as Arrow (X_arwdir), older ones as SQLite (X.sqlite).
        let arrow = report.with_file_name(format!(
            "{}_arwdir",
            report.file_stem().unwrap().to_string_lossy()
        ));
        let sqlite = if arrow.is_dir() {
            arrow
        } else {
            report.with_extension("sqlite")
        };
        let pftrace = report.with_extension("pftrace");
        assert!(sqlite.exists(), "{}: no export beside the report", e.file);
        let conn = nsys_perfetto_read::connection::open_readonly(&sqlite).unwrap();
        // MANIFEST has row counts of nsys 2022.4's SQLite exports (for the reports it read when
        // the manifest was made); an Arrow export is a newer nsys', which files some rows in
        // other tables (nsys 2023.4 puts a 2020.5 report's MPI calls in MPI_OTHER_EVENTS, not
        // NVTX_EVENTS), so it is checked against its own tables.
        let arrow = sqlite.is_dir();
        let manifest_counts = e.export_ok && !arrow;
        for (key, table) in TABLES.iter().filter(|_| manifest_counts) {
            assert_eq!(
                table_rows(&conn, table),
                e.counts.get(*key).copied().unwrap_or(0),
                "{}: {key} rows in the export",
                e.file
            );
        }
        let driver = table_rows(&conn, "CUPTI_ACTIVITY_KIND_DRIVER");
        let mut counts = e.counts.clone();
        if !manifest_counts {
            for (key, table) in TABLES {
                counts.insert(key.to_string(), table_rows(&conn, table));
            }
        }
        drop(conn);

        let summary = crate::common::convert_to(
            &sqlite,
            &tmp.path().join("scratch.pftrace"),
            &Options::default(),
        );
        let d = decode(&pftrace).by_category();
        // Scheduling is Perfetto's own (ftrace sched_switch): a thread's time on a CPU is a row
        // of `sched`, as the validator replays them, not a slice.
        let sched_rows = crate::common::validate_file(&pftrace).sched_rows().count() as u64;
        for c in Category::ALL {
            let in_trace = match c {
                Category::Sched => sched_rows + d.get(c.as_str()).copied().unwrap_or(0),
                _ => d.get(c.as_str()).copied().unwrap_or(0),
            };
            assert_eq!(
                in_trace,
                summary.events_of(c),
                "{}: {} events in the trace vs the conversion summary",
                e.file,
                c.as_str()
            );
        }
        let want = |k: &str| counts.get(k).copied().unwrap_or(0);
        let accounted = |cats: &[Category], table: &str| {
            cats.iter().map(|c| summary.events_of(*c)).sum::<u64>() + sum_skipped(&summary, table)
        };
        assert_eq!(
            accounted(&[Category::Kernel], "CUPTI_ACTIVITY_KIND_KERNEL"),
            want("KERNEL"),
            "{}",
            e.file
        );
        assert_eq!(
            accounted(&[Category::Memcpy], "CUPTI_ACTIVITY_KIND_MEMCPY"),
            want("MEMCPY"),
            "{}",
            e.file
        );
        assert_eq!(
            accounted(&[Category::Memset], "CUPTI_ACTIVITY_KIND_MEMSET"),
            want("MEMSET"),
            "{}",
            e.file
        );
        assert_eq!(
            accounted(&[Category::CudaApi], "CUPTI_ACTIVITY_KIND_RUNTIME")
                + sum_skipped(&summary, "CUPTI_ACTIVITY_KIND_DRIVER"),
            want("RUNTIME") + driver,
            "{}",
            e.file
        );
        assert_eq!(
            accounted(&[Category::Nvtx, Category::NvtxMark], "NVTX_EVENTS"),
            want("NVTX"),
            "{}",
            e.file
        );
    }

    // A second run reuses every export and every output (same input, same options).
    let o = run(
        &[work.as_os_str()],
        &[("XDG_CACHE_HOME", &tmp.path().join("cache"))],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("0 converted, {} reused", entries.len())),
        "{err}"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "left behind: {leftovers:?}");
}

/// (3) Reports captured by a newer nsys: one clear line each, naming both versions and the
/// nsys found; nothing written; the other files of the run still converted.
#[test]
fn newer_reports_say_what_to_do() {
    let Some(nsys) = nsys() else { return };
    let Some(dir) = corpus() else { return };
    let _ = nsys.version.expect("nsys --version");
    let version = newest_version().expect("a version");
    let entries: Vec<Entry> = manifest(&dir)
        .into_iter()
        .filter(|e| !version.can_read(&e.capture))
        .collect();
    if entries.is_empty() {
        skip(
            "older-nsys",
            &format!("nsys {version} reads every corpus report: no newer capture to refuse"),
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("reports");
    std::fs::create_dir(&work).unwrap();
    for e in &entries {
        copy_into(&work, &dir.join(&e.file));
    }
    // One convertible file among them.
    let good = copy_into(
        &work,
        &dir.join("quasiben__nvtx-examples__multiprocessing.sqlite"),
    );
    let o = run(
        &[work.as_os_str()],
        &[("XDG_CACHE_HOME", &tmp.path().join("cache"))],
    );
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(good.with_extension("pftrace").is_file(), "{err}");
    for e in &entries {
        let line = err
            .lines()
            .find(|l| l.starts_with("error: ") && l.contains(&e.file))
            .unwrap_or_else(|| panic!("no error line for {}:\n{err}", e.file));
        let expect = format!(
            "captured with nsys {}.{}.{}",
            e.capture.year, e.capture.release, e.capture.patch
        );
        assert!(line.contains(&expect), "{line}");
        assert!(
            line.contains(&format!("found {}", nsys.describe())),
            "{line}"
        );
        assert!(
            line.contains(&format!(
                "Install nsys {} or newer",
                e.capture.release_str()
            )),
            "{line}"
        );
        assert!(!work.join(&e.file).with_extension("sqlite").exists());
        assert!(!work.join(&e.file).with_extension("pftrace").exists());
    }
    assert!(
        err.contains(&format!("total: 1 converted, {} failed", entries.len())),
        "{err}"
    );
    let hidden: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "left behind: {hidden:?}");
}

/// The capture version read from each report file matches the manifest (no nsys needed).
#[test]
fn capture_versions_match_manifest() {
    let Some(dir) = corpus() else { return };
    for e in manifest(&dir) {
        let v = report::version::capture_version(&dir.join(&e.file))
            .unwrap()
            .unwrap_or_else(|| panic!("{}: no capture version found", e.file));
        assert_eq!(
            (v.year, v.release, v.patch),
            (e.capture.year, e.capture.release, e.capture.patch),
            "{}",
            e.file
        );
    }
}

/// A report in a read-only folder (the corpus is one): the export goes to the cache directory,
/// named after the report, and is reused by the next run; the folder is left untouched.
/// With --no-cache nothing is cached; with --no-cache --keep-sqlite the export is kept.
#[test]
fn read_only_folder_uses_the_cache_dir() {
    let Some(_nsys) = nsys() else { return };
    let Some(dir) = corpus() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let rep = copy_into(
        &ro,
        &dir.join("quasiben__nvtx-examples__multiprocessing.qdrep"),
    );
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out.pftrace");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let listing = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let conv = |extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![rep.as_os_str(), "-o".as_ref(), out.as_os_str()];
        args.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
        run(&args, &[("XDG_CACHE_HOME", &cache)])
    };

    let o = conv(&[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        listing(&ro),
        vec![rep.file_name().unwrap().to_string_lossy().to_string()]
    );
    let cached = listing(&cache.join("nsys-perfetto"));
    assert_eq!(cached.len(), 1, "{cached:?}");
    // Arrow where the nsys chosen (the newest found) writes it, else SQLite.
    let format = if cached[0].ends_with("_arwdir") {
        "arrowdir"
    } else {
        "sqlite"
    };
    assert!(
        cached[0].starts_with("quasiben__nvtx-examples__multiprocessing-")
            && (cached[0].ends_with(".sqlite") || cached[0].ends_with("_arwdir")),
        "{cached:?}"
    );
    assert!(err.contains("exported by nsys"), "{err}");
    assert!(out.is_file());

    let o = conv(&[]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("reused"), "{err}");

    let _ = std::fs::remove_dir_all(cache.join("nsys-perfetto"));
    let o = conv(&["--no-cache"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&format!("{format}: temporary")), "{err}");
    assert!(listing(&cache.join("nsys-perfetto")).is_empty());
    assert_eq!(listing(&ro).len(), 1);

    let o = conv(&["--no-cache", "--keep-sqlite"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(listing(&cache.join("nsys-perfetto")).len(), 1, "{err}");
    assert_eq!(listing(&ro).len(), 1);
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Two conversions of one report at once: both succeed, share one export, leave no lock or
/// temporary behind.
#[test]
fn concurrent_conversions_share_one_export() {
    let Some(_nsys) = nsys() else { return };
    let Some(dir) = corpus() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let rep = copy_into(
        tmp.path(),
        &dir.join("openhackathons-org__gpubootcamp__jacobi_report.qdrep"),
    );
    let spawn = |out: &str| {
        Command::new(BIN)
            .arg(&rep)
            .arg("-o")
            .arg(tmp.path().join(out))
            .env("XDG_CACHE_HOME", tmp.path().join("cache"))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn("a.pftrace");
    std::thread::sleep(Duration::from_millis(100));
    let b = spawn("b.pftrace");
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (ea, eb) = (stderr(&a), stderr(&b));
    assert!(a.status.success() && b.status.success(), "{ea}\n{eb}");
    let exported = [&ea, &eb]
        .iter()
        .filter(|e| e.contains("exported by nsys"))
        .count();
    assert_eq!(exported, 1, "{ea}\n{eb}");
    assert_eq!(
        std::fs::read(tmp.path().join("a.pftrace")).unwrap().len(),
        std::fs::read(tmp.path().join("b.pftrace")).unwrap().len()
    );
    let hidden: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "left behind: {hidden:?}");
}
