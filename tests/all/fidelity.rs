//! What Perfetto shows is what Nsight Systems recorded, where and when: checked on the real
//! exports where each disagreement was seen, and across the whole corpus where a rule fits.

use crate::common;

use crate::common::{Trace, corpus_dir, corpus_file, validate_file};
use nsys_perfetto::convert::Options;
use nsys_perfetto_model::select::Selection;
use nsys_perfetto_model::summary::Summary;
use nsys_perfetto_write::proto::{self, trace_packet};
use prost::Message;
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn run(input: &Path, selection: Selection) -> (Summary, Trace, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pftrace");
    let opts = Options {
        selection,
        ..Options::default()
    };
    let summary = crate::common::convert_to(input, &out, &opts);
    let trace = validate_file(&out);
    (summary, trace, out, dir)
}

fn open(input: &Path) -> Connection {
    Connection::open_with_flags(input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

/// The "GPU N ..." group a track sits under.
fn gpu_of(t: &Trace, track: u64) -> Option<i64> {
    t.ancestry(track).iter().find_map(|tr| {
        let name = tr.name.as_deref()?;
        let rest = name.strip_prefix("GPU ")?;
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}

/// context -> the device of that context's kernels, memcpys and memsets (contexts whose id
/// several processes use on different devices are left out: a wait names no process).
fn context_devices(conn: &Connection) -> HashMap<i64, i64> {
    let mut m: HashMap<(i64, i64), i64> = HashMap::new();
    for t in [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
    ] {
        let sql =
            format!("SELECT DISTINCT (globalPid >> 24) & 16777215, contextId, deviceId FROM {t}");
        let Ok(mut stmt) = conn.prepare(&sql) else {
            continue;
        };
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get(2)?))
            })
            .unwrap();
        for (p, c, d) in rows.flatten() {
            m.insert((p, c), d);
        }
    }
    let mut by_ctx: HashMap<i64, Option<i64>> = HashMap::new();
    for ((_, c), d) in m {
        let e = by_ctx.entry(c).or_insert(Some(d));
        if *e != Some(d) {
            *e = None;
        }
    }
    by_ctx
        .into_iter()
        .filter_map(|(c, d)| Some((c, d?)))
        .collect()
}

/// Every synchronization wait sits under the GPU its context's work runs on (the rows' own
/// deviceId is 0 in real multi-GPU exports), with that device as its arg.
fn check_sync_under_context_gpu(input: &Path, t: &Trace) -> usize {
    let devices = context_devices(&open(input));
    let mut checked = 0;
    for s in t.of_category("cuda.sync") {
        let Some(ctx) = s.arg_int("context") else {
            continue;
        };
        let Some(&want) = devices.get(&ctx) else {
            continue;
        };
        assert_eq!(
            gpu_of(t, s.track),
            Some(want),
            "{}: wait of context {ctx} at {} under the wrong GPU",
            input.display(),
            s.start
        );
        assert_eq!(s.arg_int("device"), Some(want));
        checked += 1;
    }
    checked
}

#[test]
fn sync_waits_follow_their_context() {
    let Some(input) = corpus_file("GindaChen__nsys-ai__mfu_2gpu_before.sqlite") else {
        return;
    };
    let (_, t, _, _dir) = run(&input, Selection::default());
    // The 188 waits of context 2 belong to GPU 1, where that context's kernels run.
    let on_gpu1 = t
        .of_category("cuda.sync")
        .filter(|s| s.arg_int("context") == Some(2))
        .filter(|s| gpu_of(&t, s.track) == Some(1))
        .count();
    assert_eq!(on_gpu1, 188);
    assert_eq!(check_sync_under_context_gpu(&input, &t), 366);
    // `--device 1` keeps exactly those waits.
    let sel = Selection {
        devices: vec![1],
        ..Selection::default()
    };
    let (summary, t1, _, _d1) = run(&input, sel);
    assert_eq!(t1.of_category("cuda.sync").count(), 188);
    assert_eq!(
        summary.events_of(nsys_perfetto_model::category::Category::Sync),
        188
    );
}

#[test]
fn sync_waits_follow_their_context_across_the_corpus() {
    let Some(dir) = corpus_dir() else {
        crate::common::skip("corpus", "the corpus is absent");
        return;
    };
    let mut checked = 0;
    for name in [
        "GindaChen__nsys-ai__h100_2gpu_1s.sqlite",
        "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
        "RajaATAli__SC23_Programming-Your-GPU-with-OpenMP_Tutorial__report3.sqlite",
        "VerticalResearchGroup__casio__nerf_output-file.sqlite",
    ] {
        let input = dir.join(name);
        if !input.is_file() {
            crate::common::skip("corpus", &format!("{name} is absent from the corpus"));
            continue;
        }
        let (_, t, _, _d) = run(&input, Selection::default());
        checked += check_sync_under_context_gpu(&input, &t);
        // No GPU group without work of its own.
        for tr in t.tracks.values() {
            if tr.name.as_deref().is_some_and(|n| n.starts_with("GPU ")) && tr.parent.is_none() {
                assert!(
                    !t.children(tr.uuid).is_empty(),
                    "{name}: empty group {:?}",
                    tr.name
                );
            }
        }
    }
    assert!(checked > 0);
}

/// Perfetto's zero is the session start: a "Session start" marker at nsys' zero, a REALTIME
/// snapshot with the session's wall-clock start, and rows before it kept, not skipped.
#[test]
fn time_zero_is_the_session_start() {
    let Some(dir) = corpus_dir() else {
        crate::common::skip("corpus", "the corpus is absent");
        return;
    };
    let mut with_clock = 0;
    let mut shifted = 0;
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .collect();
    names.sort();
    for input in names {
        let (summary, t, out, _d) = run(&input, Selection::default());
        let what = input.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            !summary
                .skipped
                .keys()
                .any(|(_, reason)| reason.contains("negative timestamp")),
            "{what}: rows skipped for a negative time: {:?}",
            summary.skipped
        );
        assert_eq!(t.session_starts.len(), 1, "{what}");
        let zero = t.session_starts[0].start;
        // Every event of the trace at or after the marker: the marker is the trace's start.
        let first = t
            .slices
            .iter()
            .map(|s| s.start + zero)
            .min()
            .unwrap_or(zero);
        assert!(first >= 0, "{what}");
        let conn = open(&input);
        // The earliest time any timed table holds.
        let tables: Vec<(String, String)> = conn
            .prepare(
                "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p \
                 WHERE m.type = 'table' AND p.name IN ('start', 'timestamp')",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .flatten()
            .collect();
        let earliest: Option<i64> = tables
            .iter()
            .filter_map(|(tb, col)| {
                conn.query_row(
                    &format!(
                        "SELECT min(\"{col}\") FROM \"{tb}\" WHERE typeof(\"{col}\") = 'integer'"
                    ),
                    [],
                    |r| r.get::<_, Option<i64>>(0),
                )
                .ok()
                .flatten()
            })
            .min();
        if zero > 0 {
            // Shifted by what precedes the session start, exactly: a row sits at the trace's start.
            shifted += 1;
            assert!(
                earliest.is_some_and(|e| e <= -zero),
                "{what}: {zero} {earliest:?}"
            );
            assert!(
                tables.iter().any(|(tb, col)| {
                    conn.query_row(
                        &format!("SELECT count(*) FROM \"{tb}\" WHERE \"{col}\" = ?1"),
                        [-zero],
                        |r| r.get::<_, i64>(0),
                    )
                    .unwrap_or(0)
                        > 0
                }),
                "{what}: no row at the trace's start"
            );
        } else {
            assert!(
                earliest.is_none_or(|e| e >= 0),
                "{what}: rows before the session start, yet Perfetto's zero is nsys' zero"
            );
        }
        let utc: Option<i64> = conn
            .query_row(
                "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME",
                [],
                |r| r.get(0),
            )
            .ok();
        if let Some(utc) = utc {
            with_clock += 1;
            let bytes = std::fs::read(&out).unwrap();
            let packets = proto::Trace::decode(&bytes[..]).unwrap().packet;
            let realtime = packets.iter().find_map(|p| match &p.data {
                Some(trace_packet::Data::ClockSnapshot(c)) => {
                    let boot = c.clocks.iter().find(|c| c.clock_id == Some(6))?;
                    let real = c.clocks.iter().find(|c| c.clock_id == Some(1))?;
                    Some((boot.timestamp?, real.timestamp?))
                }
                _ => None,
            });
            assert_eq!(
                realtime,
                Some((zero as u64, utc as u64)),
                "{what}: REALTIME snapshot at the session start"
            );
        }
    }
    assert!(with_clock > 0 && shifted > 0, "{with_clock} {shifted}");
}

/// Processes launched through nsys are named after the program (the main thread's name).
#[test]
fn processes_are_not_named_nsys_launcher() {
    let Some(input) = corpus_file("quasiben__nvtx-examples__cudf.sqlite") else {
        return;
    };
    let (_, t, _, _d) = run(&input, Selection::default());
    let names: Vec<String> = t
        .process_tracks()
        .filter_map(|tr| tr.process.as_ref()?.name.clone())
        .collect();
    assert!(!names.iter().any(|n| n == "nsys-launcher"), "{names:?}");
    assert!(names.iter().any(|n| n.contains("python")), "{names:?}");
}

/// CUDA API slices are named as nsys shows them; the full symbol stays an arg.
#[test]
fn api_names_without_version_suffixes() {
    let Some(input) = corpus_file("GindaChen__nsys-ai__mfu_2gpu_before.sqlite") else {
        return;
    };
    let (_, t, _, _d) = run(&input, Selection::default());
    let launches: Vec<_> = t
        .of_category("cuda.api")
        .filter(|s| &*s.name == "cudaLaunchKernel")
        .collect();
    assert!(!launches.is_empty());
    assert!(
        launches
            .iter()
            .all(|s| s.arg_str("symbol") == Some("cudaLaunchKernel_v7000"))
    );
    // Flows start at the renamed calls.
    assert!(launches.iter().any(|s| !s.flow_out.is_empty()));
}

/// Each GPU row linked to its launch says how long the GPU took to start it.
#[test]
fn launch_latency_of_linked_gpu_rows() {
    let Some(input) = corpus_file("GindaChen__nsys-ai__mfu_2gpu_before.sqlite") else {
        return;
    };
    let (_, t, _, _d) = run(&input, Selection::default());
    assert!(!t.flows.is_empty());
    for f in &t.flows {
        let (src, dst) = (&t.slices[f.source], &t.slices[f.destination]);
        assert_eq!(
            dst.arg_int("launch_latency_ns"),
            Some(dst.start - src.start),
            "{} at {}",
            dst.name,
            dst.start
        );
    }
    // Unlinked rows carry none.
    let linked: std::collections::HashSet<usize> = t.flows.iter().map(|f| f.destination).collect();
    for (i, s) in t.slices.iter().enumerate() {
        if !linked.contains(&i) {
            assert!(s.arg("launch_latency_ns").is_none());
        }
    }
}

/// Deeper nesting than trace_processor finishes (2,000 nested NVTX ranges; 1,161 CUDA API calls
/// at one timestamp): every slice still loads finished, deeper ones on extra lanes.
#[test]
fn deep_nesting_loads_finished() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("deep.sqlite");
    {
        let conn = Connection::open(&input).unwrap();
        conn.execute_batch(
            "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);
             INSERT INTO StringIds VALUES (1, 'cudaFree');
             CREATE TABLE NVTX_EVENTS(start INTEGER, \"end\" INTEGER, eventType INTEGER, \
               globalTid INTEGER, domainId INTEGER, text TEXT);
             CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER, \"end\" INTEGER, \
               globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER);",
        )
        .unwrap();
        let gt: i64 = (100 << 24) | 101;
        let tx = conn.unchecked_transaction().unwrap();
        for i in 0..2000i64 {
            tx.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?1, ?2, 59, ?3, 0, ?4)",
                rusqlite::params![1_000 + i, 1_000_000 - i, gt, format!("level {i}")],
            )
            .unwrap();
        }
        for i in 0..1161i64 {
            tx.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5000, 5000, ?1, ?2, 1, 0)",
                rusqlite::params![gt, i],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let (summary, t, out, _d) = run(&input, Selection::default());
    assert_eq!(t.of_category("nvtx").count(), 2000);
    assert_eq!(t.of_category("cuda.api").count(), 1161);
    assert_eq!(summary.skipped_total(), 0);
    let max_depth = t.slices.iter().map(|s| s.depth).max().unwrap();
    assert!(
        (max_depth as usize) < nsys_perfetto_write::layout::lanes::MAX_DEPTH,
        "depth {max_depth}"
    );
    if let Some(r) = common::tpcheck(&out) {
        r.unwrap_or_else(|e| panic!("tpcheck --strict: {e}"));
    }
}

/// Interning stays bounded: a thread with more distinct names than one sequence interns
/// (`MAX_INTERNED`) starts its sequence's incremental state over, and every slice keeps its
/// own name.
#[test]
fn interning_starts_over_past_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("names.sqlite");
    let n = nsys_perfetto_write::output::pftrace::MAX_INTERNED as i64 + 5_000;
    {
        let conn = Connection::open(&input).unwrap();
        conn.execute_batch(
            "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);
             CREATE TABLE NVTX_EVENTS(start INTEGER, \"end\" INTEGER, eventType INTEGER, \
               globalTid INTEGER, domainId INTEGER, text TEXT);",
        )
        .unwrap();
        let gt: i64 = (100 << 24) | 101;
        let tx = conn.unchecked_transaction().unwrap();
        for i in 0..n {
            tx.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?1, ?2, 59, ?3, 0, ?4)",
                rusqlite::params![10 * i, 10 * i + 5, gt, format!("range {i}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let (_, t, out, _d) = run(&input, Selection::default());
    let names: std::collections::HashSet<&str> = t.of_category("nvtx").map(|s| &*s.name).collect();
    assert_eq!(names.len() as i64, n);
    for s in t.of_category("nvtx") {
        let i: i64 = s.name.strip_prefix("range ").unwrap().parse().unwrap();
        assert_eq!(s.start, 10 * i, "{}", s.name);
    }
    // The NVTX sequence cleared its state again past the bound.
    let bytes = std::fs::read(&out).unwrap();
    let cleared = proto::Trace::decode(&bytes[..])
        .unwrap()
        .packet
        .iter()
        .filter(|p| {
            p.sequence_flags.is_some_and(|f| f & 1 != 0)
                && p.first_packet_on_sequence.is_none()
                && p.trace_packet_defaults.is_some()
        })
        .count();
    assert!(cleared >= 1, "no sequence started over");
    if let Some(r) = common::tpcheck(&out) {
        r.unwrap_or_else(|e| panic!("tpcheck --strict: {e}"));
    }
}
