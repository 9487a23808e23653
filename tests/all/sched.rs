//! Scheduling (`SCHED_EVENTS`) as Perfetto's own, checked against SQL on every corpus export
//! that records it: each sched-in/out pair is one row of trace_processor's `sched` table (the
//! validator's replay, and trace_processor itself when it is here) at the pair's times, on its
//! CPU, thread and process, ending in the state the export recorded; threads get thread-state
//! rows (Running, then how they left); JSON keeps one slice per pair on a track per CPU; a
//! merge keeps each report's CPUs and threads apart; `--pid` and `--time-range` still select.

use crate::common::{self, Trace, corpus_dir, tp_query, validate_file};
use nsys_perfetto::convert::Options;
use nsys_perfetto::convert::merge::{Align, merge_exports};
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::select::{Selection, TimeRange};
use rusqlite::{Connection, OpenFlags};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Corpus exports with scheduling rows.
fn sched_exports() -> Vec<PathBuf> {
    let Some(dir) = corpus_dir() else {
        common::skip(
            "corpus",
            "../shared/corpus not found: no scheduling to check",
        );
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .filter(|p| {
            let c = open(p);
            c.query_row("SELECT count(*) FROM SCHED_EVENTS", [], |r| {
                r.get::<_, i64>(0)
            })
            .is_ok_and(|n| n > 0)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus export has SCHED_EVENTS rows");
    files
}

fn open(p: &Path) -> Connection {
    Connection::open_with_flags(p, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// A sched-in and the same thread's sched-out after it on one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    start: i64,
    end: i64,
    cpu: i64,
    global_tid: i64,
    /// `threadState` of the sched-out row (`ENUM_SAMPLING_THREAD_STATE`), when recorded.
    state: Option<i64>,
}

impl Pair {
    fn tid(&self) -> i64 {
        self.global_tid & 0xFF_FFFF
    }
    fn pid(&self) -> i64 {
        (self.global_tid >> 24) & 0xFF_FFFF
    }
}

/// The export's pairs: its rows sorted per CPU by time (sched-outs before sched-ins at one
/// instant, then storage order); a sched-in is paired with the next sched-out of its thread on
/// that CPU unless another sched-in comes first. `filter` is an SQL condition on the rows.
fn sql_pairs(conn: &Connection, filter: &str) -> Vec<Pair> {
    let state = if conn
        .prepare("SELECT threadState FROM SCHED_EVENTS LIMIT 0")
        .is_ok()
    {
        "threadState"
    } else {
        "NULL"
    };
    let sql = format!(
        "SELECT start, cpu, isSchedIn != 0, globalTid, {state} FROM SCHED_EVENTS \
         WHERE start IS NOT NULL AND cpu IS NOT NULL AND globalTid IS NOT NULL AND ({filter}) \
         ORDER BY cpu, start, isSchedIn != 0, rowid"
    );
    let mut stmt = conn.prepare(&sql).unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut pairs = Vec::new();
    let mut running: Option<(i64, i64, i64)> = None; // (cpu, thread, start)
    while let Some(r) = rows.next().unwrap() {
        let (start, cpu, is_in, gtid): (i64, i64, bool, i64) = (
            r.get(0).unwrap(),
            r.get(1).unwrap(),
            r.get(2).unwrap(),
            r.get(3).unwrap(),
        );
        let st: Option<i64> = r.get(4).unwrap();
        if running.is_some_and(|(c, _, _)| c != cpu) {
            running = None;
        }
        if is_in {
            running = Some((cpu, gtid, start));
        } else if let Some((c, t, s)) = running
            && t == gtid
        {
            pairs.push(Pair {
                start: s,
                end: start,
                cpu: c,
                global_tid: t,
                state: st,
            });
            running = None;
        }
    }
    pairs.sort();
    pairs
}

/// (start, end, cpu, tid) of the validator's `sched` rows of threads, sorted.
fn rows_of(t: &Trace) -> Vec<(i64, i64, i64, i64)> {
    let mut rows: Vec<_> = t
        .sched_rows()
        .map(|r| {
            (
                r.ts,
                r.end
                    .expect("the validator checked every thread's row ends"),
                i64::from(r.cpu),
                i64::from(r.tid),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn keys(pairs: &[Pair]) -> Vec<(i64, i64, i64, i64)> {
    let mut k: Vec<_> = pairs
        .iter()
        .map(|p| (p.start, p.end, p.cpu, p.tid()))
        .collect();
    k.sort();
    k
}

/// Every pair of every export is one `sched` row at its times, on its CPU and thread, the
/// thread under its process, leaving in the state recorded ("X" for a thread that ended, "S"
/// where the export says nothing); trace_processor agrees row for row and fills thread states.
#[test]
fn every_pair_is_one_sched_row() {
    let dir = tempfile::tempdir().unwrap();
    let exports = sched_exports();
    common::par_map(&exports, |input| {
        let what = name(input);
        let conn = open(input);
        let pairs = sql_pairs(&conn, "1");
        let out = dir.path().join(format!("{what}.pftrace"));
        let summary = common::convert_to(input, &out, &Options::default());
        let t = validate_file(&out);
        assert_eq!(
            summary.events_of(Category::Sched),
            pairs.len() as u64,
            "{what}: sched events vs SQL pairs"
        );
        assert!(
            t.of_category("sched").next().is_none(),
            "{what}: no scheduling slices"
        );
        assert_eq!(rows_of(&t), keys(&pairs), "{what}: sched rows vs SQL pairs");
        // SystemInfo names the recorded kernel, so prev_state decodes as written.
        let release: Option<String> = conn
            .query_row(
                "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'SoftwareReleaseVersion'",
                [],
                |r| r.get(0),
            )
            .ok();
        assert_eq!(t.kernel_release, release, "{what}: SystemInfo release");

        // Threads: described once, under their process; states as recorded.
        let by_key: HashMap<(i64, i64, i64), &Pair> = pairs
            .iter()
            .map(|p| ((p.start, p.cpu, p.tid()), p))
            .collect();
        for r in t.sched_rows() {
            let p = by_key[&(r.ts, i64::from(r.cpu), i64::from(r.tid))];
            let th = t.thread_with_tid(r.tid).expect("described");
            assert_eq!(i64::from(th.pid), p.pid(), "{what}: pid of tid {}", r.tid);
            let want = if p.state == Some(5) { "X" } else { "S" };
            assert_eq!(r.end_state.as_deref(), Some(want), "{what}: {r:?}");
        }

        // trace_processor: the same rows (in trace time: the session start is where the
        // validator's zero is), each thread's utid on its tid and pid, thread states.
        let zero = t.session_starts.first().map_or(0, |s| s.start);
        let Some(got) = tp_query(
            &out,
            "SELECT s.ts, s.ts + s.dur, s.cpu, t.tid, p.pid, s.end_state \
             FROM sched s JOIN thread t USING (utid) LEFT JOIN process p USING (upid) \
             WHERE s.utid != 0 ORDER BY 1, 3;",
        ) else {
            return;
        };
        let mut tp: Vec<(i64, i64, i64, i64)> = Vec::new();
        let mut pids = BTreeMap::new();
        for row in &got {
            let n = |i: usize| row[i].parse::<i64>().unwrap_or_else(|_| panic!("{row:?}"));
            tp.push((n(0) - zero, n(1) - zero, n(2), n(3)));
            pids.insert(n(3), n(4));
        }
        tp.sort();
        assert_eq!(
            tp,
            keys(&pairs),
            "{what}: trace_processor's sched vs SQL pairs"
        );
        for p in &pairs {
            assert_eq!(pids[&p.tid()], p.pid(), "{what}: tid {} pid", p.tid());
        }
        let states: BTreeMap<String, i64> = tp_query(
            &out,
            "SELECT state, count(*) FROM thread_state WHERE utid != 0 GROUP BY 1;",
        )
        .unwrap()
        .into_iter()
        .map(|r| (r[0].clone(), r[1].parse().unwrap()))
        .collect();
        assert_eq!(
            states.get("Running").copied(),
            Some(pairs.len() as i64),
            "{what}: {states:?}"
        );
        assert!(states.contains_key("S"), "{what}: {states:?}");
        if pairs.iter().any(|p| p.state == Some(5)) {
            assert!(states.contains_key("X"), "{what}: {states:?}");
        }
        if let Some(Err(report)) = common::tpcheck(&out) {
            panic!("{what}: tpcheck --strict failed:\n{report}");
        }
    });
}

/// JSON keeps today's scheduling: one slice per pair, named after its thread, with tid, pid
/// and cpu args, on a track per CPU ("CPU 3").
#[test]
fn json_keeps_a_slice_per_pair_on_cpu_tracks() {
    let dir = tempfile::tempdir().unwrap();
    for input in sched_exports().into_iter().take(4) {
        let what = name(&input);
        let pairs = sql_pairs(&open(&input), "1");
        let out = dir.path().join(format!("{what}.json"));
        let summary = common::convert_to(&input, &out, &common::json_options());
        assert_eq!(summary.events_of(Category::Sched), pairs.len() as u64);
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let events = v["traceEvents"].as_array().expect("traceEvents");
        let mut names = HashMap::new();
        for e in events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        {
            names.insert(
                (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap()),
                e["args"]["name"].as_str().unwrap().to_string(),
            );
        }
        // The session marker sits at the JSON's zero where rows precede the session start.
        let zero = events
            .iter()
            .find(|e| e["cat"] == "session")
            .and_then(|e| e["ts"].as_f64())
            .unwrap_or(0.0);
        let ns = |x: &serde_json::Value| (x.as_f64().unwrap() * 1000.0).round() as i64;
        let mut got = Vec::new();
        for e in events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "sched")
        {
            let track_tid = e["tid"].as_i64().unwrap();
            let track = &names[&(e["pid"].as_i64().unwrap(), track_tid)];
            let cpu = e["args"]["cpu"].as_i64().unwrap();
            // "CPU 3", or "CPU" with tid 3, which Perfetto's UI shows as "CPU 3".
            assert!(
                *track == format!("CPU {cpu}") || track == "CPU" && track_tid == cpu,
                "{what}: {track} {track_tid}: {e}"
            );
            let tid = e["args"]["tid"].as_i64().unwrap();
            assert!(
                e["name"].as_str().unwrap().ends_with(&format!(" {tid}")),
                "{what}: {e}"
            );
            let start = ns(&e["ts"]) - (zero * 1000.0).round() as i64;
            got.push((start, start + ns(&e["dur"]), cpu, tid));
        }
        got.sort();
        let want = keys(&pairs);
        assert_eq!(got.len(), want.len(), "{what}");
        // Microsecond floats: equal to the nanosecond where JSON keeps three decimals.
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g.0 - w.0).abs() <= 1 && (g.1 - w.1).abs() <= 2 && g.2 == w.2 && g.3 == w.3,
                "{what}: {g:?} vs {w:?}"
            );
        }
    }
}

/// Scheduling that no report's unnamed thread reads "Thread N N": in JSON the slice is "name
/// tid" or "Thread tid"; in protobuf the thread's descriptor names it.
#[test]
fn unnamed_threads_are_named_once() {
    let Some(input) = common::corpus_file(
        "RajaATAli__SC23_Programming-Your-GPU-with-OpenMP_Tutorial__report3.sqlite",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    common::convert_to(&input, &json, &common::json_options());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut n = 0;
    for e in v["traceEvents"].as_array().unwrap() {
        if e["cat"] != "sched" {
            continue;
        }
        let words: Vec<&str> = e["name"].as_str().unwrap().split(' ').collect();
        assert!(
            !(words.len() == 3 && words[0] == "Thread" && words[1] == words[2]),
            "{e}"
        );
        n += 1;
    }
    assert!(n > 0);
    let pf = dir.path().join("out.pftrace");
    common::convert_to(&input, &pf, &Options::default());
    let t = validate_file(&pf);
    assert!(t.sched_rows().count() > 0);
    for r in t.sched_rows() {
        let th = t.thread_with_tid(r.tid).unwrap();
        let name = th.name.as_deref().unwrap();
        assert!(
            name == format!("Thread {}", r.tid) || !name.starts_with("Thread "),
            "{name}"
        );
    }
}

/// Merged reports keep their CPUs and threads apart: the same report twice gives twice its
/// rows, each report on a machine of its own (`TracePacket.machine_id`) with its real CPU
/// numbers and tids, each under its own process on its machine.
#[test]
fn merged_reports_keep_cpus_and_threads_apart() {
    let exports = sched_exports();
    let Some(input) = exports
        .iter()
        .find(|p| name(p).starts_with("Sh1mwww"))
        .or(exports.first())
    else {
        return;
    };
    let conn = open(input);
    let pairs = sql_pairs(&conn, "1");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("merged.pftrace");
    let inputs = vec![
        (input.clone(), "one".to_string()),
        (input.clone(), "two".to_string()),
    ];
    let (summary, _) = merge_exports(&inputs, &out, Align::Start, &Options::default(), 2).unwrap();
    assert_eq!(summary.events_of(Category::Sched), 2 * pairs.len() as u64);
    let t = validate_file(&out);
    let rows: Vec<_> = t.sched_rows().collect();
    assert_eq!(rows.len(), 2 * pairs.len());
    let zero = t.session_start("one");
    let of_machine = |m: u32| {
        let mut v: Vec<_> = rows
            .iter()
            .filter(|r| r.machine == m)
            .map(|r| {
                (
                    r.ts - zero,
                    r.end.unwrap() - zero,
                    i64::from(r.cpu),
                    i64::from(r.tid),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(of_machine(0), keys(&pairs), "the first report's rows");
    assert_eq!(
        of_machine(1),
        keys(&pairs),
        "the second's: the same CPUs and tids, on its own machine"
    );
    for r in &rows {
        let th = t.thread_on(r.machine, r.tid).unwrap();
        assert!(
            t.process_tracks()
                .filter_map(|p| p.process.as_ref())
                .any(|p| p.machine == r.machine && p.pid == th.pid),
            "{r:?} under its report's process"
        );
    }
    if let Some(Err(report)) = common::tpcheck(&out) {
        panic!("tpcheck --strict failed:\n{report}");
    }
    // What trace_processor makes of it: two machines, each with the report's CPUs and threads.
    if let Some(rows) = common::tp_query(
        &out,
        "select c.machine_id, count(*), count(distinct s.utid) \
         from sched s join cpu c using (ucpu) join thread t using (utid) where t.tid != 0 \
         group by 1 order by 1",
    ) {
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0][1..], rows[1][1..], "{rows:?}");
    }
}

/// `--pid` and `--time-range` select scheduling as before: pairs of the selected process's
/// threads, of switches inside the window.
#[test]
fn selection_still_applies() {
    let exports = sched_exports();
    let Some(input) = exports.iter().find(|p| name(p).starts_with("Sh1mwww")) else {
        if !exports.is_empty() {
            common::skip(
                "corpus",
                "the Sh1mwww llama3 export is absent from the corpus",
            );
        }
        return;
    };
    let conn = open(input);
    let (pid, lo, hi): (i64, i64, i64) = conn
        .query_row(
            "SELECT (globalTid >> 24) & 16777215, min(start), max(start) FROM SCHED_EVENTS \
             GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let (a, b) = (lo.max(0) + (hi - lo) / 4, lo.max(0) + (hi - lo) / 2);
    let dir = tempfile::tempdir().unwrap();
    for (sel, filter) in [
        (
            Selection {
                pids: vec![pid],
                ..Selection::default()
            },
            format!("((globalTid >> 24) & 16777215) = {pid}"),
        ),
        (
            Selection {
                time: Some(TimeRange {
                    start: Some(a),
                    end: Some(b),
                }),
                ..Selection::default()
            },
            format!("start >= {a} AND start <= {b}"),
        ),
    ] {
        let pairs = sql_pairs(&conn, &filter);
        assert!(!pairs.is_empty(), "{filter}");
        let out = dir.path().join("sel.pftrace");
        let summary = common::convert_to(
            input,
            &out,
            &Options {
                selection: sel,
                ..Options::default()
            },
        );
        assert_eq!(
            summary.events_of(Category::Sched),
            pairs.len() as u64,
            "{filter}"
        );
        let t = validate_file(&out);
        assert_eq!(rows_of(&t), keys(&pairs), "{filter}");
    }
}

/// A made export: every recorded reason for leaving a CPU, on a kernel (4.9) whose preemption
/// flag differs from today's; and the slices the native form cannot hold (thread id 0, a tid
/// two processes share, a CPU number from 1024) kept as slices on CPU tracks, counted once.
#[test]
fn made_rows_cover_every_state_and_every_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("made.sqlite");
    let c = Connection::open(&input).unwrap();
    let a: i64 = (100 << 24) | 101;
    let b: i64 = (100 << 24) | 102;
    let shared: i64 = (200 << 24) | 101; // another process's thread with A's tid
    let unknown: i64 = 100 << 24; // tid 0
    c.execute_batch(
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO StringIds VALUES (1, 'worker');
         CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER);
         CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT,
             nameEnum INTEGER, value TEXT);
         INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'Local', 'SoftwareReleaseVersion', 618,
             '4.9.0-generic');
         CREATE TABLE SCHED_EVENTS (start INTEGER NOT NULL, cpu INTEGER NOT NULL,
             isSchedIn INTEGER NOT NULL, globalTid INTEGER, threadState INTEGER,
             threadBlock INTEGER);",
    )
    .unwrap();
    c.execute("INSERT INTO ThreadNames VALUES (1, 0, ?1)", [b])
        .unwrap();
    // (start, cpu, in, thread, threadState, threadBlock)
    type Row = (i64, i64, i64, i64, Option<i64>, Option<i64>);
    let rows: &[Row] = &[
        (1000, 0, 1, a, None, None),
        (1500, 1, 1, b, None, None),
        (1800, 1, 0, b, Some(3), None), // Uninterruptible: D
        (2000, 0, 0, a, Some(1), None), // Running: preempted, R+
        (2000, 0, 1, b, None, None),
        (2500, 1, 1, shared, None, None), // tid shared: a slice
        (2600, 1, 0, shared, Some(5), None),
        (3000, 0, 0, b, Some(2), None), // Interruptible: S
        (4000, 1, 1, a, None, None),
        (4500, 1, 0, a, Some(4), None), // Stopped: T
        (5000, 0, 1, a, None, None),
        (6000, 0, 0, a, Some(0), Some(45)), // YieldExecution: R
        (7000, 2000, 1, a, None, None),     // CPU 2000: a slice
        (7100, 2000, 0, a, None, None),
        (100, 2, 1, unknown, None, None), // tid 0: a slice
        (200, 2, 0, unknown, None, None),
        (8000, 3, 1, b, None, None),
        (8100, 3, 0, b, Some(0), Some(21)), // PageIn: D
        (9000, 3, 0, b, None, None),        // an out without its in: skipped
    ];
    for r in rows {
        c.execute(
            "INSERT INTO SCHED_EVENTS VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![r.0, r.1, r.2, r.3, r.4, r.5],
        )
        .unwrap();
    }
    drop(c);
    let out = dir.path().join("made.pftrace");
    let summary = common::convert_to(&input, &out, &Options::default());
    assert_eq!(summary.events_of(Category::Sched), 9, "{summary:?}");
    assert_eq!(summary.skipped_total(), 1);
    let t = validate_file(&out);
    assert_eq!(t.kernel_release.as_deref(), Some("4.9.0-generic"));
    let native: Vec<(i64, u32, i32, Option<&str>)> = t
        .sched_rows()
        .map(|r| (r.ts, r.cpu, r.tid, r.end_state.as_deref()))
        .collect();
    assert_eq!(
        native,
        vec![
            (1000, 0, 101, Some("R+")),
            (2000, 0, 102, Some("S")),
            (5000, 0, 101, Some("R")),
            (1500, 1, 102, Some("D")),
            (4000, 1, 101, Some("T")),
            (8000, 3, 102, Some("D")),
        ]
    );
    assert_eq!(
        t.thread_with_tid(102).unwrap().name.as_deref(),
        Some("worker")
    );
    let mut slices: Vec<(String, i64, i64, i64)> = t
        .of_category("sched")
        .map(|s| {
            (
                t.track_name(s.track),
                s.start,
                s.end,
                s.arg_int("tid").unwrap(),
            )
        })
        .collect();
    slices.sort();
    assert_eq!(
        slices,
        vec![
            ("CPU 1".to_string(), 2500, 2600, 101),
            ("CPU 2".to_string(), 100, 200, 0),
            ("CPU 2000".to_string(), 7000, 7100, 101),
        ]
    );
    assert_eq!(t.count_by_category().get("sched"), Some(&9));
    // trace_processor decodes the 4.9 layout's states the same way.
    if let Some(rows) = tp_query(
        &out,
        "SELECT s.ts, t.tid, s.end_state FROM sched s JOIN thread t USING (utid) \
         WHERE s.utid != 0 ORDER BY s.cpu, s.ts;",
    ) {
        let got: Vec<(i64, i32, String)> = rows
            .iter()
            .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap(), r[2].clone()))
            .collect();
        let want: Vec<(i64, i32, String)> = native
            .iter()
            .map(|n| (n.0, n.2, n.3.unwrap().to_string()))
            .collect();
        assert_eq!(got, want);
        if let Some(Err(report)) = common::tpcheck(&out) {
            panic!("tpcheck --strict failed:\n{report}");
        }
    }
}
