//! One track per (device, process, CUDA context, stream): two processes or two contexts on one
//! GPU both have a "Stream 7", and they are different streams. Where a device has GPU work of
//! several contexts, the trace shows GPU > context > stream as Nsight Systems does; where it has
//! one, streams stay directly under the GPU with the names they always had.
//!
//! Checked on every corpus export (no real export at hand has two contexts on one device: the
//! second "context" of the PhilippRue exports is id 0, nsys' unified-memory migrations, which is
//! no context), and on two made ones: `tests/fixtures/contexts_shared_gpu.sql` (two processes
//! on one GPU) and `contexts_one_process.sql` (one process, two contexts), applied to a copy of
//! a real 2-GPU export (see `tests/fixtures/README.md`). Placements are compared with SQL on the
//! source; the track tree is also read back through Perfetto's own trace_processor.

use crate::common::{self, Trace, corpus_dir, validate_file};
use nsys_perfetto::convert::Options;
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::select::Selection;
use rusqlite::{Connection, OpenFlags};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

const GPU_TABLES: [(&str, &str); 3] = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "cuda.kernel"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "cuda.memcpy"),
    ("CUPTI_ACTIVITY_KIND_MEMSET", "cuda.memset"),
];
const SYNC: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
/// The rows the converter writes (the others are counted as skipped).
const VALID: &str = "start IS NOT NULL AND \"end\" IS NOT NULL AND \"end\" >= start \
                     AND deviceId IS NOT NULL AND streamId IS NOT NULL";
/// The real export the made fixtures start from.
const BASE: &str = "GindaChen__nsys-ai__h100_2gpu_1s.sqlite";

fn open(p: &Path) -> Connection {
    Connection::open_with_flags(p, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

fn has_columns(conn: &Connection, table: &str, cols: &[&str]) -> bool {
    let have: BTreeSet<String> = conn
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))
                .map(|r| r.flatten().collect())
        })
        .unwrap_or_default();
    cols.iter().all(|c| have.contains(*c))
}

fn pid(global_pid: i64) -> i64 {
    (global_pid >> 24) & 0xFF_FFFF
}

/// (device, pid, context, stream)
type StreamKey = (i64, i64, i64, i64);

/// What the source says, read with SQL independently of the converter.
struct Src {
    /// Converted GPU rows per (device, pid, context, stream).
    streams: BTreeMap<StreamKey, u64>,
    /// (category, start, end, correlationId) -> the pids of GPU rows with these values.
    row_pids: HashMap<(&'static str, i64, i64, Option<i64>), BTreeSet<i64>>,
    /// device -> its contexts (pid, context) with GPU rows or waits, context 0 left out.
    contexts: BTreeMap<i64, BTreeSet<(i64, i64)>>,
    /// (pid, context) -> device of that context's work.
    context_device: HashMap<(i64, i64), i64>,
}

impl Src {
    fn read(input: &Path) -> Src {
        let conn = open(input);
        let mut src = Src {
            streams: BTreeMap::new(),
            row_pids: HashMap::new(),
            contexts: BTreeMap::new(),
            context_device: HashMap::new(),
        };
        for (t, cat) in GPU_TABLES {
            if !has_columns(
                &conn,
                t,
                &["deviceId", "globalPid", "contextId", "streamId"],
            ) {
                continue;
            }
            let sql = format!(
                "SELECT deviceId, globalPid, contextId, streamId, start, \"end\", correlationId \
                 FROM {t} WHERE {VALID}"
            );
            let mut stmt = conn.prepare(&sql).unwrap();
            let mut rows = stmt.query([]).unwrap();
            while let Some(r) = rows.next().unwrap() {
                let d: i64 = r.get(0).unwrap();
                let p = pid(r.get::<_, Option<i64>>(1).unwrap().unwrap_or(0));
                let c: i64 = r.get::<_, Option<i64>>(2).unwrap().unwrap_or(0);
                let s: i64 = r.get(3).unwrap();
                *src.streams.entry((d, p, c, s)).or_default() += 1;
                src.row_pids
                    .entry((cat, r.get(4).unwrap(), r.get(5).unwrap(), r.get(6).unwrap()))
                    .or_default()
                    .insert(p);
                src.context_device.entry((p, c)).or_insert(d);
                if c != 0 {
                    src.contexts.entry(d).or_default().insert((p, c));
                }
            }
        }
        if has_columns(&conn, SYNC, &["deviceId", "globalPid", "contextId"]) {
            let sql = format!("SELECT DISTINCT globalPid, contextId, deviceId FROM {SYNC}");
            let mut stmt = conn.prepare(&sql).unwrap();
            let mut rows = stmt.query([]).unwrap();
            while let Some(r) = rows.next().unwrap() {
                let p = pid(r.get::<_, Option<i64>>(0).unwrap().unwrap_or(0));
                let Some(c) = r.get::<_, Option<i64>>(1).unwrap().filter(|c| *c != 0) else {
                    continue;
                };
                let own: Option<i64> = r.get(2).unwrap();
                if let Some(d) = src.context_device.get(&(p, c)).copied().or(own) {
                    src.contexts.entry(d).or_default().insert((p, c));
                }
            }
        }
        src
    }

    fn multi_context(&self, device: i64) -> bool {
        self.contexts.get(&device).is_some_and(|c| c.len() > 1)
    }

    /// Whether the device's contexts belong to several processes (their groups then name the
    /// process).
    fn several_processes(&self, device: i64) -> bool {
        self.contexts
            .get(&device)
            .is_some_and(|c| c.iter().map(|(p, _)| p).collect::<BTreeSet<_>>().len() > 1)
    }
}

/// The "GPU N" or "GPU N · model" top-level track's device.
fn gpu_device(name: &str) -> Option<i64> {
    name.strip_prefix("GPU ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Checks every GPU row and wait of a trace against its source; returns how many devices had
/// several contexts (the context level) and how many rows were checked.
fn check_placement(what: &str, src: &Src, t: &Trace) -> (usize, usize) {
    let mut group_keys: BTreeMap<(Option<u64>, String), BTreeSet<StreamKey>> = BTreeMap::new();
    let mut checked = 0;
    let mut problems = Vec::new();
    let mut place = |s: &common::Slice, key: StreamKey, want_name: String| {
        let (device, p, ctx, _) = key;
        let track = t.track(s.track);
        let name = track.name.clone().unwrap_or_default();
        let parent = track.parent.map(|u| t.track(u));
        let parent_name = parent.and_then(|p| p.name.clone()).unwrap_or_default();
        let expect_context = src.multi_context(device) && ctx != 0;
        let gpu = if expect_context {
            let want = if src.several_processes(device) {
                format!("Context {ctx} · ")
            } else {
                format!("Context {ctx}")
            };
            let ok = if src.several_processes(device) {
                parent_name.starts_with(&want) && parent_name.ends_with(&format!(" (pid {p})"))
            } else {
                parent_name == want
            };
            if !ok {
                problems.push(format!(
                    "{what}: {} at {} (device {device}, pid {p}, context {ctx}) is under {parent_name:?}, not its context's group",
                    s.name, s.start
                ));
            }
            parent.and_then(|p| p.parent).map(|u| t.track(u))
        } else {
            parent
        };
        let gpu_ok = gpu.is_some_and(|g| {
            g.parent.is_none() && g.name.as_deref().and_then(gpu_device) == Some(device)
        });
        if !gpu_ok || name != want_name {
            problems.push(format!(
                "{what}: {} at {} (device {device}, pid {p}, context {ctx}) is on {name:?} under {:?}; want {want_name:?} under GPU {device}{}",
                s.name,
                s.start,
                t.ancestry(s.track)
                    .iter()
                    .filter_map(|a| a.name.clone())
                    .collect::<Vec<_>>(),
                if expect_context { " > its context" } else { "" }
            ));
        }
        group_keys
            .entry((track.parent, name))
            .or_default()
            .insert(key);
        checked += 1;
    };
    for (_, cat) in GPU_TABLES {
        for s in t.of_category(cat) {
            let (Some(d), Some(c), Some(st)) = (
                s.arg_int("device"),
                s.arg_int("context"),
                s.arg_int("stream"),
            ) else {
                panic!(
                    "{what}: {cat} slice at {} without device/context/stream",
                    s.start
                );
            };
            let pids = &src.row_pids[&(cat, s.start, s.end, s.arg_int("correlation_id"))];
            let p = match pids.len() {
                1 => *pids.iter().next().unwrap(),
                // Two processes' rows with equal times and ids: cannot tell which.
                _ => continue,
            };
            place(s, (d, p, c, st), format!("Stream {st}"));
        }
    }
    let mut sync_keys = 0;
    for s in t.of_category("cuda.sync") {
        let (Some(d), Some(c), Some(st)) = (
            s.arg_int("device"),
            s.arg_int("context"),
            s.arg_int("stream"),
        ) else {
            continue;
        };
        // The wait's process: the one of its context on that device (contexts of one device
        // never repeat an id across processes in these exports; otherwise it is not checked).
        let owners: Vec<i64> = src
            .contexts
            .get(&d)
            .map(|cs| {
                cs.iter()
                    .filter(|(_, x)| *x == c)
                    .map(|(p, _)| *p)
                    .collect()
            })
            .unwrap_or_default();
        let [p] = owners[..] else { continue };
        let want = if (0..u32::MAX as i64).contains(&st) {
            format!("Stream {st} · sync")
        } else {
            "Synchronization (no stream)".to_string()
        };
        place(s, (d, p, c, st), want);
        sync_keys += 1;
    }
    assert!(
        problems.is_empty(),
        "{}",
        problems[..problems.len().min(5)].join("\n")
    );
    // One track (and its overlap lanes, siblings of one name) per stream of one context: no
    // group holds two contexts' or processes' rows, and no stream is split.
    for ((_, name), keys) in &group_keys {
        assert_eq!(
            keys.len(),
            1,
            "{what}: track {name:?} holds rows of {keys:?}"
        );
    }
    let gpu_groups: BTreeSet<StreamKey> = group_keys
        .iter()
        .filter(|((_, n), _)| !n.contains("sync") && !n.starts_with("Synchronization"))
        .flat_map(|(_, k)| k.iter().copied())
        .collect();
    let stream_tracks = group_keys
        .keys()
        .filter(|(_, n)| !n.contains("sync") && !n.starts_with("Synchronization"))
        .count();
    let sql_keys: BTreeSet<StreamKey> = src.streams.keys().copied().collect();
    assert_eq!(gpu_groups, sql_keys, "{what}: streams in the trace vs SQL");
    assert_eq!(
        stream_tracks,
        sql_keys.len(),
        "{what}: distinct GPU stream tracks vs distinct (device, pid, context, stream) in SQL"
    );
    // No context level on a device with one context.
    for tr in t.tracks.values() {
        if let Some(n) = tr.name.as_deref().filter(|n| n.starts_with("Context ")) {
            let gpu = tr.parent.map(|u| t.track(u));
            let device = gpu.and_then(|g| g.name.as_deref().and_then(gpu_device));
            assert!(
                device.is_some_and(|d| src.multi_context(d)),
                "{what}: a context group {n:?} on a device with one context"
            );
        }
    }
    let _ = sync_keys;
    let multi = src
        .contexts
        .keys()
        .filter(|d| src.multi_context(**d))
        .count();
    (multi, checked)
}

fn with_nvtx_gpu() -> Options {
    let mut selection = Selection::default();
    selection.types.insert(EventType::NvtxGpu);
    Options {
        selection,
        ..Options::default()
    }
}

/// A copy of the base export with the fixture scripts applied, in `dir`.
pub(crate) fn made(dir: &Path, scripts: &[&str]) -> Option<PathBuf> {
    let base = common::corpus_file(BASE)?;
    let path = dir.join(format!("{}.sqlite", scripts.join("+")));
    std::fs::copy(&base, &path).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    let conn = Connection::open(&path).unwrap();
    for s in scripts {
        let sql = std::fs::read_to_string(common::fixture(s)).unwrap();
        conn.execute_batch(&sql).unwrap();
    }
    Some(path)
}

/// Every track path ("GPU 0 > Context 1 > Stream 7") with its slice count, as Perfetto's
/// trace_processor reads the file; `None` (skipped) without it.
fn tp_tree(trace: &Path) -> Option<BTreeMap<String, u64>> {
    let tp = common::manifest_dir().join("../shared/tools/perfetto/bin/trace_processor_shell");
    if !tp.is_file() {
        common::skip("tpcheck", &format!("{} not found", tp.display()));
        return None;
    }
    let query = trace.with_extension("tree.sql");
    std::fs::write(
        &query,
        "with recursive p(id, path) as ( \
           select id, name from track where parent_id is null \
           union all \
           select t.id, p.path || ' > ' || coalesce(t.name, '?') from track t \
             join p on t.parent_id = p.id) \
         select p.path, (select count(*) from slice s where s.track_id = p.id) \
         from p where p.path like 'GPU%';",
    )
    .unwrap();
    let out = std::process::Command::new(&tp)
        .arg("-q")
        .arg(&query)
        .arg(trace)
        .output()
        .expect("trace_processor_shell runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut tree: BTreeMap<String, u64> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        let (path, n) = line.rsplit_once(',').expect("path,count");
        // Overlap lanes are siblings of one name: their counts add up.
        *tree.entry(path.trim_matches('"').to_string()).or_default() += n.parse::<u64>().unwrap();
    }
    Some(tree)
}

/// Thread names of a JSON trace's GPU pseudo-processes with the number of GPU rows on each.
fn json_gpu_threads(path: &Path) -> BTreeMap<String, u64> {
    let root: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let events = root["traceEvents"].as_array().unwrap();
    let mut names: HashMap<(u64, u64), String> = HashMap::new();
    let mut gpu_pids = BTreeSet::new();
    for e in events.iter().filter(|e| e["ph"] == "M") {
        let pid = e["pid"].as_u64().unwrap();
        match e["name"].as_str() {
            Some("thread_name") => {
                let tid = e["tid"].as_u64().unwrap();
                names.insert((pid, tid), e["args"]["name"].as_str().unwrap().to_string());
            }
            Some("process_name") if e["args"]["name"].as_str().unwrap().starts_with("GPU") => {
                gpu_pids.insert(pid);
            }
            _ => {}
        }
    }
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for e in events {
        let cat = e["cat"].as_str().unwrap_or_default();
        if !["cuda.kernel", "cuda.memcpy", "cuda.memset"].contains(&cat) {
            continue;
        }
        let (pid, tid) = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        assert!(gpu_pids.contains(&pid), "a GPU row outside the GPU: {e}");
        *out.entry(names[&(pid, tid)].clone()).or_default() += 1;
    }
    out
}

fn tpcheck(path: &Path) {
    if let Some(Err(report)) = common::tpcheck(path) {
        panic!("{}: trace_processor: {report}", path.display());
    }
}

#[test]
fn every_stream_of_every_context_has_its_own_track_across_the_corpus() {
    let Some(dir) = corpus_dir() else {
        common::skip("corpus", "the corpus is absent");
        return;
    };
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .collect();
    inputs.sort();
    let tmp = tempfile::tempdir().unwrap();
    let (mut exports, mut rows) = (0, 0);
    for input in inputs {
        let src = Src::read(&input);
        if src.streams.is_empty() {
            continue;
        }
        let out = tmp.path().join("out.pftrace");
        common::convert_to(&input, &out, &Options::default());
        let t = validate_file(&out);
        let name = input.file_name().unwrap().to_string_lossy().to_string();
        let (multi, n) = check_placement(&name, &src, &t);
        // No real export at hand has two contexts on one device; one that does keeps its
        // checks above and is named here when it turns up.
        assert_eq!(
            multi, 0,
            "{name}: a corpus export with several contexts on a device"
        );
        // Single-context devices: streams keep the names they always had, directly under the
        // GPU, and no context level appears anywhere.
        assert!(
            !t.tracks.values().any(|tr| tr
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("Context "))),
            "{name}: a context level on an export with one context per device"
        );
        exports += 1;
        rows += n;
    }
    assert!(exports >= 20 && rows > 0, "{exports} exports, {rows} rows");
}

/// The PhilippRue exports' GPU has rows of context 1 and of "context 0": unified-memory
/// migrations (UVM copy kinds, a migration cause), which nsys writes with context and stream 0
/// and shows on their own, not as a CUDA context. They stay as they were: "Stream 0" beside the
/// context's streams, all directly under the GPU.
#[test]
fn unified_memory_migrations_are_no_context() {
    let Some(input) = common::corpus_file(
        "PhilippRue__SiScLab_23_24__exercise_4_batched_calls_LU_GPU_out_test_LU_batched_GPU.export-2023.4.4.sqlite",
    ) else {
        return;
    };
    let conn = open(&input);
    let (uvm, with_cause): (i64, i64) = conn
        .query_row(
            "SELECT count(*), sum(migrationCause IS NOT NULL) FROM CUPTI_ACTIVITY_KIND_MEMCPY \
             WHERE contextId = 0",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(uvm > 0 && uvm == with_cause, "{uvm} rows of context 0");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.pftrace");
    common::convert_to(&input, &out, &Options::default());
    let t = validate_file(&out);
    let gpu = t
        .tracks
        .values()
        .find(|tr| {
            tr.parent.is_none() && tr.name.as_deref().is_some_and(|n| n.starts_with("GPU 0"))
        })
        .expect("a GPU 0 group");
    let children: BTreeSet<String> = t
        .children(gpu.uuid)
        .iter()
        .filter_map(|c| c.name.clone())
        .collect();
    for want in [
        "Stream 0",
        "Stream 19",
        "Stream 19 · sync",
        "Synchronization (no stream)",
    ] {
        assert!(
            children.contains(want),
            "{want:?} not directly under GPU 0: {children:?}"
        );
    }
    let on_stream0 = t
        .of_category("cuda.memcpy")
        .filter(|s| t.track_name(s.track) == "Stream 0")
        .count() as i64;
    assert_eq!(on_stream0, uvm);
}

/// Two processes on one GPU, both with a "Stream 7" (made from a real 2-GPU export): one
/// group per process's context, named after the process, each holding its own "Stream 7".
#[test]
fn two_processes_on_one_gpu_each_get_their_context() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(input) = made(tmp.path(), &["contexts_shared_gpu.sql"]) else {
        return;
    };
    let src = Src::read(&input);
    assert_eq!(
        src.contexts[&0],
        BTreeSet::from([(111, 1), (112, 2)]),
        "the fixture's contexts"
    );
    let out = tmp.path().join("shared.pftrace");
    common::convert_to(&input, &out, &with_nvtx_gpu());
    let t = validate_file(&out);
    let (multi, rows) = check_placement("shared GPU", &src, &t);
    assert_eq!(multi, 1);
    assert!(rows > 4000, "{rows}");
    tpcheck(&out);
    if let Some(tree) = tp_tree(&out) {
        let k = src.streams[&(0, 111, 1, 7)];
        assert_eq!(src.streams[&(0, 112, 2, 7)], k);
        for (path, n) in [
            ("GPU 0 > Context 1 · python3 (pid 111) > Stream 7", k),
            ("GPU 0 > Context 2 · python3 (pid 112) > Stream 7", k),
            ("GPU 0 > Context 1 · python3 (pid 111) > Stream 7 · sync", 4),
            ("GPU 0 > Context 2 · python3 (pid 112) > Stream 7 · sync", 4),
            (
                "GPU 0 > Context 2 · python3 (pid 112) > Stream 30 · sync",
                59,
            ),
        ] {
            assert_eq!(tree.get(path), Some(&n), "{path} in {tree:#?}");
        }
        // Each process's NVTX projected onto the GPU sits in its own context, over its streams.
        for c in [
            "Context 1 · python3 (pid 111)",
            "Context 2 · python3 (pid 112)",
        ] {
            let path = format!("GPU 0 > {c} > NVTX · python3");
            assert!(
                tree.get(&path).is_some_and(|n| *n > 0),
                "{path} in {tree:#?}"
            );
        }
        // Nothing of theirs directly under the GPU.
        assert!(
            tree.keys()
                .all(|p| p == "GPU 0" || p.starts_with("GPU 0 > Context ")),
            "{tree:#?}"
        );
    }
    // JSON: one thread per stream of each context, named after its context.
    let json = tmp.path().join("shared.json");
    common::convert_to(&input, &json, &common::json_options());
    tpcheck(&json);
    let threads = json_gpu_threads(&json);
    assert_eq!(
        threads,
        BTreeMap::from([
            (
                "Context 1 · python3 (pid 111) · Stream 7".to_string(),
                src.streams[&(0, 111, 1, 7)]
            ),
            (
                "Context 2 · python3 (pid 112) · Stream 7".to_string(),
                src.streams[&(0, 112, 2, 7)]
            ),
        ])
    );
}

/// One process with two CUDA contexts on one GPU, both with a "Stream 7" (made from a real
/// export): before, both contexts' rows shared one "Stream 7" track and were drawn as overlap
/// lanes of it. Now GPU 0 > "Context 1" / "Context 2" > "Stream 7", one lane each.
#[test]
fn two_contexts_of_one_process_on_one_gpu() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(input) = made(
        tmp.path(),
        &["contexts_shared_gpu.sql", "contexts_one_process.sql"],
    ) else {
        return;
    };
    let src = Src::read(&input);
    assert_eq!(src.contexts[&0], BTreeSet::from([(111, 1), (111, 2)]));
    let out = tmp.path().join("one.pftrace");
    common::convert_to(&input, &out, &with_nvtx_gpu());
    let t = validate_file(&out);
    let (multi, _) = check_placement("one process", &src, &t);
    assert_eq!(multi, 1);
    // Stream 7 of each context: one track, no overlap lane (the kernels of one stream of one
    // context never overlap here).
    for c in ["Context 1", "Context 2"] {
        let group = t
            .tracks
            .values()
            .find(|tr| tr.name.as_deref() == Some(c))
            .unwrap_or_else(|| panic!("no {c} group"));
        let streams: Vec<_> = t
            .children(group.uuid)
            .into_iter()
            .filter(|tr| tr.name.as_deref() == Some("Stream 7"))
            .collect();
        assert_eq!(streams.len(), 1, "{c}: Stream 7 split into lanes");
        let gpu = t.track(group.parent.expect("under its GPU"));
        assert_eq!(gpu.name.as_deref(), Some("GPU 0"));
    }
    // The process has two contexts on GPU 0: its NVTX projection belongs to neither and stays
    // directly under the GPU; the launches' arrows still reach every GPU row.
    let nvtx: Vec<_> = t
        .tracks
        .values()
        .filter(|tr| tr.name.as_deref() == Some("NVTX · python3"))
        .collect();
    assert!(!nvtx.is_empty());
    for tr in nvtx {
        assert_eq!(t.track(tr.parent.unwrap()).name.as_deref(), Some("GPU 0"));
    }
    tpcheck(&out);
    if let Some(tree) = tp_tree(&out) {
        let k = src.streams[&(0, 111, 1, 7)];
        for (path, n) in [
            ("GPU 0 > Context 1 > Stream 7", k),
            ("GPU 0 > Context 2 > Stream 7", src.streams[&(0, 111, 2, 7)]),
            ("GPU 0 > Context 1 > Stream 22 · sync", 59),
            ("GPU 0 > Context 2 > Stream 34 · sync", 59),
        ] {
            assert_eq!(tree.get(path), Some(&n), "{path} in {tree:#?}");
        }
    }
    let json = tmp.path().join("one.json");
    common::convert_to(&input, &json, &common::json_options());
    tpcheck(&json);
    let threads = json_gpu_threads(&json);
    assert_eq!(
        threads,
        BTreeMap::from([
            (
                "Context 1 · Stream 7".to_string(),
                src.streams[&(0, 111, 1, 7)]
            ),
            (
                "Context 2 · Stream 7".to_string(),
                src.streams[&(0, 111, 2, 7)]
            ),
        ])
    );
}
