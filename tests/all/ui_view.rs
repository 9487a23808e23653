//! What Perfetto's UI shows reads like Nsight Systems: names, order and groups of what it draws,
//! checked on real corpus exports (copied into a temporary directory before any change) with
//! our validator and, where it decides, Perfetto's own trace_processor.

use crate::common::{self, corpus_file, tp_query, validate_file};
use nsys_perfetto::convert::Options;
use std::path::{Path, PathBuf};

/// A copy of a corpus export in `dir`, to change or export there (never in the corpus).
fn copy_into(src: &Path, dir: &Path) -> PathBuf {
    let to = dir.join(src.file_name().unwrap());
    std::fs::copy(src, &to).unwrap();
    to
}

const SAXPY: &str = "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite";
const MOCK: &str = "GindaChen__nsys-ai__mock.sqlite";

/// trace_processor warned "Unknown architecture. Syscall traces will not work." on every trace:
/// the SystemInfo now names the recorded machine (`CpuArchitecture` x86_64 in this export),
/// which trace_processor reads as `system_machine`.
#[test]
fn system_info_names_the_machine() {
    let Some(input) = corpus_file(SAXPY) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("saxpy.pftrace");
    common::convert_to(&input, &out, &Options::default());
    let t = validate_file(&out);
    assert!(t.kernel_release.is_some());
    let Some(rows) = tp_query(
        &out,
        "select name, str_value from metadata where name in ('system_machine', 'system_name')",
    ) else {
        return;
    };
    assert!(
        rows.contains(&vec!["system_machine".into(), "x86_64".into()]),
        "{rows:?}"
    );
    assert!(
        rows.contains(&vec!["system_name".into(), "Linux".into()]),
        "{rows:?}"
    );
}

/// A kernel whose end is a huge real (1e300) loaded as a slice that never ends (its NVTX range
/// projected onto the GPU spanned it), and so did such a row of the table-driven reader: each
/// is now a skipped row, named in the summary, and the trace ends where the profile does.
#[test]
fn impossible_times_are_skipped_rows() {
    let (Some(saxpy), Some(mock)) = (corpus_file(SAXPY), corpus_file(MOCK)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (src, table) in [
        (&saxpy, "CUPTI_ACTIVITY_KIND_KERNEL"),
        (&mock, "PROFILER_OVERHEAD"),
    ] {
        let input = copy_into(src, dir.path());
        let c = rusqlite::Connection::open(&input).unwrap();
        let (latest, rows): (i64, i64) = c
            .query_row(
                &format!("SELECT max(\"end\"), count(*) FROM {table}"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        c.execute(
            &format!(
                "UPDATE {table} SET \"end\" = 1e300 WHERE rowid = (SELECT min(rowid) FROM {table})"
            ),
            [],
        )
        .unwrap();
        drop(c);
        let out = dir.path().join(format!("{table}.pftrace"));
        let s = common::convert_to(&input, &out, &Options::default());
        let skipped: u64 = s
            .skipped
            .iter()
            .filter(|((t, _), _)| t == table)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(skipped, 1, "{table}: {:?}", s.skipped);
        assert!(
            s.render()
                .contains(&format!("1 in {table}: no start or end timestamp")),
            "{}",
            s.render()
        );
        let t = validate_file(&out);
        let end = t.slices.iter().map(|s| s.end).max().unwrap();
        // Session time: the latest kept row of the table ends within a day of the session.
        assert!(
            end < 86_400_000_000_000,
            "{table}: a slice ends at {end} ns"
        );
        assert!(latest > 0 && rows > 1);
        if let Some(r) = common::tpcheck(&out) {
            r.unwrap_or_else(|e| panic!("{table}: {e}"));
        }
    }
}

/// A corpus report exported by nsys into `dir` (copied there first), or `None` after
/// recording the skip when nsys cannot run here.
fn exported(name: &str, dir: &Path) -> Option<PathBuf> {
    let report = copy_into(&corpus_file(name)?, dir);
    if nsys_perfetto::report::finding::find_nsys(None).is_err() {
        common::skip(
            "nsys",
            "nsys not found (needed to export the corpus's .qdrep reports)",
        );
        return None;
    }
    let opts = nsys_perfetto::report::export::ExportOptions {
        quiet: true,
        cache_dir: Some(dir.join("cache")),
        ..Default::default()
    };
    let e = nsys_perfetto::report::export::export_report(&report, &opts)
        .unwrap_or_else(|e| panic!("exporting {name}: {e:#}"));
    let sqlite = e.path().to_path_buf();
    assert!(sqlite.starts_with(dir), "{}", sqlite.display());
    Some(sqlite)
}

const MPI_REPORT1: &str = "openhackathons-org__gpubootcamp__mpi_report1.qdrep";

/// An MPI rank launched through nsys (its `PROCESSES` row says "nsys-launcher") whose main
/// thread the program named "MPI Rank 3" through NVTX: the process is named by its program,
/// `jacobi`, as nsys shows it, and the NVTX name stays on the main thread.
#[test]
fn processes_are_named_by_their_program() {
    let dir = tempfile::tempdir().unwrap();
    let Some(input) = exported(MPI_REPORT1, dir.path()) else {
        return;
    };
    for json in [false, true] {
        let out = dir
            .path()
            .join(if json { "mpi.json" } else { "mpi.pftrace" });
        let opts = Options {
            format: if json {
                nsys_perfetto_write::output::formats::OutputFormat::Json
            } else {
                Default::default()
            },
            ..Default::default()
        };
        common::convert_to(&input, &out, &opts);
        let (processes, threads) = if json {
            json_names(&out)
        } else {
            let t = validate_file(&out);
            let p = t
                .process_tracks()
                .filter_map(|tr| tr.process.clone())
                .map(|p| (p.pid as i64, p.name.unwrap_or_default()))
                .collect();
            let th = t
                .thread_tracks()
                .filter_map(|tr| tr.thread.clone())
                .map(|t| (t.tid as i64, t.name.unwrap_or_default()))
                .collect();
            (p, th)
        };
        assert!(
            processes.contains(&(32938, "jacobi".to_string())),
            "json {json}: {processes:?}"
        );
        assert!(
            threads.contains(&(32938, "MPI Rank 3".to_string())),
            "json {json}: {threads:?}"
        );
    }
}

/// The (pid, name) of each `process_name` and (tid, name) of each `thread_name` metadata event
/// of a JSON trace.
/// (id, name) pairs.
type Named = Vec<(i64, String)>;

fn json_names(path: &Path) -> (Named, Named) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let (mut p, mut t) = (Vec::new(), Vec::new());
    for e in v["traceEvents"].as_array().unwrap() {
        let name = e["args"]["name"].as_str().unwrap_or_default().to_string();
        match (e["ph"].as_str(), e["name"].as_str()) {
            (Some("M"), Some("process_name")) => p.push((e["pid"].as_i64().unwrap(), name)),
            (Some("M"), Some("thread_name")) => t.push((e["tid"].as_i64().unwrap(), name)),
            _ => {}
        }
    }
    (p, t)
}

const METRICS: &str = "als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite";

/// In a GPU's group, the 18 GPU-metric counter tracks of this export came before the stream
/// with its kernels: they are now in a "GPU metrics" group of their own, the GPU's last child,
/// below its streams and their sync tracks, in the order the export lists them.
#[test]
fn gpu_metrics_are_a_group_below_the_streams() {
    let Some(input) = corpus_file(METRICS) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("metrics.pftrace");
    common::convert_to(&input, &out, &Options::default());
    let t = validate_file(&out);
    let gpu = nsys_perfetto_write::output::WellKnown::Gpu(0).uuid();
    let mut children = t.children(gpu);
    children.sort_by_key(|c| c.sibling_order_rank.unwrap_or(0));
    let names: Vec<&str> = children.iter().filter_map(|c| c.name.as_deref()).collect();
    assert_eq!(names.last(), Some(&"GPU metrics"), "{names:?}");
    assert!(names.contains(&"Stream 7"), "{names:?}");
    let ranks: Vec<i32> = children
        .iter()
        .map(|c| {
            c.sibling_order_rank
                .expect("every child of a GPU has a rank")
        })
        .collect();
    assert!(
        ranks.windows(2).all(|w| w[0] < w[1]),
        "GPU children tie: {names:?} {ranks:?}"
    );
    assert!(children.iter().all(|c| !c.counter), "{names:?}");
    let group = children.last().unwrap();
    assert_eq!(
        group.child_ordering,
        Some(nsys_perfetto_write::proto::track_descriptor::ChildTracksOrdering::Explicit as i32)
    );
    let metrics = t.children(group.uuid);
    assert_eq!(metrics.len(), 18);
    assert!(metrics.iter().all(|m| m.counter));
    let mut by_rank: Vec<(i32, &str)> = metrics
        .iter()
        .map(|m| (m.sibling_order_rank.unwrap(), m.name.as_deref().unwrap()))
        .collect();
    by_rank.sort();
    by_rank.dedup_by_key(|r| r.0);
    assert_eq!(by_rank.len(), 18, "one rank per metric: {by_rank:?}");
    if let Some(r) = common::tpcheck(&out) {
        r.unwrap();
    }
}

/// JSON tracks read "Stream 7 1073741849", "GPU 0 · NVIDIA A100-SX… 1879048190" and
/// "CPU 8 1073741835" in Perfetto's UI, which draws a JSON thread as "NAME TID" and a process
/// as "NAME PID": a stream is now the thread "Stream" with tid 7, a CPU "CPU" with tid 8, the
/// GPU the process "NVIDIA A100-SXM4-40GB · GPU" with pid 0 and its NVTX track of a thread has
/// that thread's tid, so that the UI draws "Stream 7", "CPU 8", "NVIDIA A100-SXM4-40GB · GPU 0"
/// and "NVTX · MPI Rank 0 1230493" (checked in the UI's own terms with trace_processor, which
/// the UI queries).
#[test]
fn json_tracks_read_as_nsys_names_them() {
    let Some(input) = corpus_file(SAXPY) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("saxpy.json");
    let opts = Options {
        format: nsys_perfetto_write::output::formats::OutputFormat::Json,
        ..Default::default()
    };
    common::convert_to(&input, &out, &opts);
    let (processes, _) = json_names(&out);
    assert!(
        processes.contains(&(0, "NVIDIA A100-SXM4-40GB · GPU".to_string())),
        "{processes:?}"
    );
    if let Some(r) = common::tpcheck(&out) {
        r.unwrap();
    }
    // What the UI draws: process groups "NAME PID", thread tracks "NAME TID".
    let Some(rows) = tp_query(
        &out,
        "select p.name || ' ' || p.pid, t.name || ' ' || t.tid, \
         (select count(*) from thread_track tt join slice s on s.track_id = tt.id \
          where tt.utid = t.utid) \
         from thread t join process p using (upid) where t.name is not null",
    ) else {
        return;
    };
    let shown: Vec<(&str, &str, i64)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str(), r[2].parse().unwrap()))
        .collect();
    let gpu: Vec<&(&str, &str, i64)> = shown
        .iter()
        .filter(|r| r.0 == "NVIDIA A100-SXM4-40GB · GPU 0")
        .collect();
    let kernels: i64 = gpu.iter().filter(|r| r.1 == "Stream 7").map(|r| r.2).sum();
    // The export's 5 kernels and 15 memcpys on stream 7.
    assert_eq!(kernels, 20, "{gpu:?}");
    // NVTX projected onto the GPU: drawn with its thread's tid, as the thread itself is drawn.
    assert!(
        gpu.iter()
            .any(|r| r.1 == "NVTX · MPI Rank 0 1230493" && r.2 > 0),
        "{gpu:?}"
    );
    assert!(
        shown
            .iter()
            .any(|r| r.0 == "./saxpy-mpi-cuda 1230493" && r.1 == "MPI Rank 0 1230493"),
        "{shown:?}"
    );
    let cpus: Vec<&str> = shown
        .iter()
        .filter(|r| r.0.starts_with("CPUs "))
        .map(|r| r.1)
        .collect();
    assert_eq!(cpus.len(), 15, "{cpus:?}");
    for c in &cpus {
        let n = c.strip_prefix("CPU ").expect("a CPU track");
        assert!(n.parse::<u32>().is_ok(), "CPU track drawn as {c:?}");
    }
}

/// Merged ranks: processes were listed 6, 2, 4 while GPU groups went 2, 4, 6, and read "rank 6
/// · pid 32935 33587367" (the UI appended the offset pid the merge made up). The GPUs sort by
/// report (reports in rank order), and so do the processes now: `process_sort_index` in JSON;
/// in protobuf each report is a machine of its own (`machine_id`, named by its label) whose
/// root track asks for explicit process order, each process track ranked by its report (the
/// `process_sort_index_hint` trace_processor v58 makes of it, which the UI sorts by), with the
/// pid and tids it had.
#[test]
fn merged_ranks_sort_in_rank_order() {
    let dir = tempfile::tempdir().unwrap();
    let Some(one) = exported(MPI_REPORT1, dir.path()) else {
        return;
    };
    let Some(two) = exported(
        "openhackathons-org__gpubootcamp__mpi_report2.qdrep",
        dir.path(),
    ) else {
        return;
    };
    use nsys_perfetto::merge::{self, MergeOptions};
    let opts = MergeOptions::default();
    // Given in the other order: sources are put in rank order (3, then 7).
    let sources = merge::prepare(&[two, one], &opts).unwrap();
    let ranks: Vec<Option<i64>> = sources.iter().map(|s| s.identity.rank).collect();
    assert_eq!(ranks, [Some(3), Some(7)]);
    // The pid of each rank's program as the report converted on its own shows it.
    let real_pids: Vec<i32> = sources
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let single = dir.path().join(format!("single{i}.pftrace"));
            common::convert_to(s.profile.export(), &single, &Options::default());
            let t = common::validate_file(&single);
            let jacobi: Vec<i32> = t
                .process_tracks()
                .filter_map(|p| p.process.as_ref())
                .filter(|p| p.name.as_deref() == Some("jacobi"))
                .map(|p| p.pid)
                .collect();
            assert_eq!(jacobi.len(), 1, "{jacobi:?}");
            jacobi[0]
        })
        .collect();
    assert_ne!(real_pids[0], real_pids[1]);
    let out = dir.path().join("job.pftrace");
    merge::merge(&sources, &out, &opts, &Options::default()).unwrap();
    let t = common::validate_file(&out);
    let mut procs: Vec<(i32, String, i32, u32)> = t
        .process_tracks()
        .filter_map(|p| {
            let info = p.process.as_ref()?;
            Some((
                info.sort_index.expect("a sort index"),
                info.name.clone().unwrap_or_default(),
                info.pid,
                info.machine,
            ))
        })
        .collect();
    procs.sort();
    assert_eq!(
        procs,
        [
            (0, "rank 3 · jacobi".to_string(), real_pids[0], 0),
            (1, "rank 7 · jacobi".to_string(), real_pids[1], 1),
        ]
    );
    // Threads keep their tids, each on its report's machine.
    for th in t.thread_tracks().filter_map(|tr| tr.thread.as_ref()) {
        assert!(th.machine < 2 && th.tid < 1 << 22, "{th:?}");
        assert!(
            procs.iter().any(|p| p.2 == th.pid && p.3 == th.machine),
            "{th:?}"
        );
    }
    assert_eq!(t.explicit_process_order, [0, 1]);
    // What the UI reads (trace_processor v58.2): a machine per report named by its label, the
    // real pids, and a sort hint in rank order, first of the keys the UI orders processes by.
    if let Some(rows) = tp_query(
        &out,
        "select p.pid, p.name, p.machine_id, m.name, \
         extract_arg(p.arg_set_id, 'process_sort_index_hint') as hint \
         from process p join machine m on m.id = p.machine_id \
         where p.name is not null order by hint",
    ) {
        let want = |i: usize, rank: i64| {
            vec![
                real_pids[i].to_string(),
                format!("rank {rank} · jacobi"),
                i.to_string(),
                format!("rank {rank}"),
                i.to_string(),
            ]
        };
        assert_eq!(rows, [want(0, 3), want(1, 7)]);
        // Each machine schedules on its own CPUs, numbered as recorded.
        let cpus = tp_query(
            &out,
            "select c.machine_id, min(c.cpu), max(c.cpu) from sched s \
             join cpu c using (ucpu) group by 1 order by 1",
        )
        .unwrap();
        assert_eq!(cpus.len(), 2, "{cpus:?}");
        assert_eq!(cpus[0][1..], ["20", "78"], "{cpus:?}");
    }

    let json = dir.path().join("job.json");
    let conv = Options {
        format: nsys_perfetto_write::output::formats::OutputFormat::Json,
        ..Default::default()
    };
    merge::merge(&sources, &json, &opts, &conv).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let name_of = |pid: &serde_json::Value| {
        events
            .iter()
            .find(|e| e["name"] == "process_name" && &e["pid"] == pid)
            .and_then(|e| e["args"]["name"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let mut order: Vec<(i64, String)> = events
        .iter()
        .filter(|e| e["name"] == "process_sort_index")
        .map(|e| {
            (
                e["args"]["sort_index"].as_i64().unwrap(),
                name_of(&e["pid"]),
            )
        })
        .filter(|(_, n)| n.starts_with("rank "))
        .collect();
    order.sort();
    let ranks: Vec<&str> = order.iter().map(|o| &o.1[..6]).collect();
    // GPUs first, then processes, each in rank order.
    assert_eq!(ranks, ["rank 3", "rank 7", "rank 3", "rank 7"], "{order:?}");
}
