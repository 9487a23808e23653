//! `merge`: several reports in one trace. Checked fact by fact against what the reports hold:
//! the MPI fixture (tests/fixtures/mpi: 4 ranks of a known program, see its README) and the
//! corpus's MPI rank reports of a real GPU job (exported with nsys when it is installed).

use crate::common;

use crate::common::{Slice, Trace, validate_file};
use nsys_perfetto::convert::merge::Align;
use nsys_perfetto::convert::{self, Options};
use nsys_perfetto::merge::{self, MergeOptions};
use nsys_perfetto_model::select::Selection;
use nsys_perfetto_write::output::formats::OutputFormat;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const RANKS: i64 = 4;
const STEPS: usize = 5;

fn mpi_fixture(rank: i64) -> PathBuf {
    common::fixture(&format!("mpi/rank_{rank}.sqlite"))
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
}

/// Which merged source a track belongs to: processes and threads are on their source's machine
/// (`TracePacket.machine_id`, the source's index); GPU groups carry it in bits 56..61 of their
/// uuid (`WellKnown::Gpu`).
fn source_of_track(t: &Trace, uuid: u64) -> Option<usize> {
    t.ancestry(uuid).into_iter().find_map(|tr| {
        if let Some(th) = &tr.thread {
            return Some(th.machine as usize);
        }
        if let Some(p) = &tr.process {
            return Some(p.machine as usize);
        }
        (tr.uuid >> 62 == 3).then_some(((tr.uuid >> 56) & 0x3F) as usize)
    })
}

/// The name of the process a slice's track is under (pids repeat across machines: the
/// process of the thread's machine).
fn process_name(t: &Trace, s: &Slice) -> String {
    t.process_of(s.track)
        .and_then(|p| p.name.clone())
        .or_else(|| {
            let th = t.thread_of(s.track)?;
            t.process_tracks()
                .find(|tr| {
                    tr.process
                        .as_ref()
                        .is_some_and(|p| p.pid == th.pid && p.machine == th.machine)
                })
                .and_then(|tr| tr.process.as_ref()?.name.clone())
        })
        .unwrap_or_default()
}

/// The pid of the profiled program ("../mpi_nvtx") as the report records it.
fn program_pid(sqlite: &Path) -> i32 {
    let c = rusqlite::Connection::open(sqlite).unwrap();
    c.query_row(
        "SELECT pid FROM PROCESSES WHERE name = '../mpi_nvtx'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

fn utc_start(sqlite: &Path) -> i64 {
    let c = rusqlite::Connection::open(sqlite).unwrap();
    c.query_row(
        "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// Categories and flows of each input converted on its own, summed.
fn sum_of_singles(
    inputs: &[PathBuf],
    dir: &Path,
    sel: &Selection,
) -> (BTreeMap<String, u64>, usize) {
    let mut cats = BTreeMap::new();
    let mut flows = 0;
    for (i, input) in inputs.iter().enumerate() {
        let out = dir.join(format!("single{i}.pftrace"));
        let opts = Options {
            selection: sel.clone(),
            ..Default::default()
        };
        convert::convert_export(input, &out, &opts).unwrap();
        let t = validate_file(&out);
        for (k, v) in t.count_by_category() {
            *cats.entry(k).or_default() += v;
        }
        flows += t.flows.len();
    }
    (cats, flows)
}

fn merge_lib(inputs: &[PathBuf], out: &Path, align: Align, sel: &Selection) -> merge::Merged {
    let opts = MergeOptions {
        align,
        jobs: 2,
        ..Default::default()
    };
    let sources = merge::prepare(inputs, &opts).unwrap();
    let conv = Options {
        selection: sel.clone(),
        ..Default::default()
    };
    merge::merge(&sources, out, &opts, &conv).unwrap()
}

fn tpcheck_ok(trace: &Path) {
    if let Some(r) = common::tpcheck(trace) {
        let report = r.unwrap_or_else(|e| panic!("tpcheck --strict failed:\n{e}"));
        assert!(report.contains("0 import error"), "{report}");
    }
}

#[test]
fn mpi_fixture_ranks_line_up() {
    let dir = tempfile::tempdir().unwrap();
    // Inputs out of rank order: the merge orders sources by rank.
    let inputs: Vec<PathBuf> = [2, 0, 3, 1].into_iter().map(mpi_fixture).collect();
    let out = dir.path().join("job.pftrace");
    let merged = merge_lib(&inputs, &out, Align::WallClock, &Selection::default());
    let t = validate_file(&out);
    tpcheck_ok(&out);

    // Named from the recorded environment (OMPI_COMM_WORLD_RANK), on the recorded host.
    let host = "vm";
    let labels: Vec<String> = (0..RANKS).map(|r| format!("rank {r} · {host}")).collect();
    assert_eq!(merged.labels, labels);
    let mut markers: Vec<&str> = t.session_starts.iter().map(|s| &*s.name).collect();
    markers.sort_unstable();
    assert_eq!(
        markers,
        labels
            .iter()
            .map(|l| format!("Session start · {l}"))
            .collect::<Vec<_>>()
    );

    // Each report at its wall-clock start: marker distances are the recorded clock differences.
    let utc: Vec<i64> = (0..RANKS).map(|r| utc_start(&mpi_fixture(r))).collect();
    let min_utc = *utc.iter().min().unwrap();
    for r in 0..RANKS as usize {
        assert_eq!(merged.sources[r].offset_ns, utc[r] - min_utc);
        assert_eq!(
            t.session_start(&labels[r]) - t.session_start(&labels[0]),
            utc[r] - utc[0]
        );
    }
    let spread = merged.spread_ns().unwrap();
    assert_eq!(spread, utc.iter().max().unwrap() - min_utc);
    eprintln!(
        "offsets (ms): {:?}, spread {:.1} ms",
        merged
            .sources
            .iter()
            .map(|s| s.offset_ns as f64 / 1e6)
            .collect::<Vec<_>>(),
        spread as f64 / 1e6
    );

    // Every process is "rank N · host · program", with the pid it had, on its report's machine
    // (rank N's report is machine N: the reports in rank order), which is named by its label
    // and asks for the processes in that order; each rank's ranges are on its own process.
    let pname = regex::Regex::new(r"^rank (\d) · vm · \.\./mpi_nvtx$").unwrap();
    let mut seen = Vec::new();
    for p in t.process_tracks() {
        let info = p.process.as_ref().unwrap();
        let name = info.name.clone().unwrap_or_default();
        let rank: u32 = pname
            .captures(&name)
            .unwrap_or_else(|| panic!("process name {name:?}"))[1]
            .parse()
            .unwrap();
        assert_eq!(info.machine, rank, "{name}");
        assert_eq!(info.pid, program_pid(&mpi_fixture(rank as i64)), "{name}");
        assert_eq!(info.sort_index, Some(rank as i32), "{name}");
        assert_eq!(p.sibling_order_rank, Some(rank as i32), "{name}");
        seen.push(rank);
    }
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 3]);
    for r in 0..RANKS as u32 {
        assert_eq!(t.machine_names.get(&r), Some(&labels[r as usize]));
    }
    assert_eq!(t.explicit_process_order, [0, 1, 2, 3]);
    // The program's threads keep their own tids, on their process's machine.
    for th in t.thread_tracks().filter_map(|tr| tr.thread.as_ref()) {
        assert!(th.tid > 0 && th.tid < 1 << 22, "{th:?}");
    }
    let mut barrier_ends: Vec<Vec<i64>> = vec![Vec::new(); RANKS as usize];
    let mut barrier_durs: Vec<Vec<i64>> = vec![Vec::new(); RANKS as usize];
    for r in 0..RANKS {
        // The program's ranges are in the default domain ("NVTX" tracks); nsys' MPI tracing
        // adds its own in the "MPI" domain.
        let in_domain = |domain: &'static str, name: &str| -> Vec<&Slice> {
            t.of_category("nvtx")
                .filter(|s| &*s.name == name && t.track_name(s.track) == domain)
                .filter(|s| {
                    pname
                        .captures(&process_name(&t, s))
                        .is_some_and(|c| c[1] == *r.to_string())
                })
                .collect()
        };
        let of_rank = |name: &str| in_domain("NVTX", name);
        for (name, n) in [
            ("compute", STEPS),
            ("barrier", STEPS),
            ("allreduce", STEPS),
            ("MPI_Init", 1),
            ("MPI_Finalize", 1),
        ] {
            assert_eq!(of_rank(name).len(), n, "rank {r}: {name}");
        }
        for (name, n) in [
            ("MPI_Barrier", STEPS),
            ("MPI_Allreduce", STEPS),
            ("MPI_Init", 1),
            ("MPI_Finalize", 1),
        ] {
            assert_eq!(in_domain("MPI", name).len(), n, "rank {r}: MPI {name}");
        }
        // nsys' MPI_Barrier lies within the program's "barrier" range.
        for (mpi, ours) in in_domain("MPI", "MPI_Barrier")
            .iter()
            .zip(of_rank("barrier"))
        {
            assert!(ours.start <= mpi.start && mpi.end <= ours.end, "rank {r}");
        }
        let mut b = of_rank("barrier");
        b.sort_by_key(|s| s.start);
        barrier_ends[r as usize] = b.iter().map(|s| s.end).collect();
        barrier_durs[r as usize] = b.iter().map(|s| s.dur()).collect();
        // The compute step spins for 2 + 1.5 r ms of wall-clock time (longer when the four
        // ranks share fewer cores).
        for c in of_rank("compute") {
            let want = 2_000_000 + 1_500_000 * r;
            assert!(c.dur() >= want, "rank {r}: compute lasted {} ns", c.dur());
        }
    }
    // Rank 0 marks each step.
    let marks: Vec<&Slice> = t.of_category("nvtx.mark").collect();
    assert_eq!(marks.len(), STEPS);
    // All ranks leave each barrier together: their ends line up once every report sits at its
    // own wall clock (the reports started up to `spread`, 280 ms, apart). The fixture's 4 ranks
    // shared 2 cores, so a rank may wait a scheduler time slice to run again after the barrier:
    // ends within 10 ms (measured: 2.3 to 6.4 ms).
    let tolerance = 10_000_000;
    for step in 0..STEPS {
        let ends: Vec<i64> = barrier_ends.iter().map(|e| e[step]).collect();
        let gap = ends.iter().max().unwrap() - ends.iter().min().unwrap();
        eprintln!(
            "step {step}: barrier ends within {:.3} ms",
            gap as f64 / 1e6
        );
        assert!(gap < tolerance, "step {step}: barrier ends {ends:?}");
        // In session time (each report from its own start) they would not line up.
        let session: Vec<i64> = ends
            .iter()
            .zip(&labels)
            .map(|(e, l)| e - t.session_start(l))
            .collect();
        let session_gap = session.iter().max().unwrap() - session.iter().min().unwrap();
        assert!(session_gap > 10 * tolerance, "step {step}: {session:?}");
    }
    eprintln!("barrier durations (ns) per rank: {barrier_durs:?}");

    // Exact: the merge holds what each rank converts to on its own.
    let (cats, flows) = sum_of_singles(&inputs, dir.path(), &Selection::default());
    assert_eq!(t.count_by_category(), cats);
    assert_eq!(t.flows.len(), flows);
    let per: u64 = merged
        .summary
        .per_source
        .iter()
        .map(|s| s.total_events())
        .sum();
    assert_eq!(per, merged.summary.total_events());
}

#[test]
fn align_start_puts_every_session_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (0..RANKS).map(mpi_fixture).collect();
    let out = dir.path().join("runs.pftrace");
    let merged = merge_lib(&inputs, &out, Align::Start, &Selection::default());
    let t = validate_file(&out);
    let first = t.session_starts[0].start;
    assert!(t.session_starts.iter().all(|s| s.start == first));
    assert!(merged.sources.iter().all(|s| s.offset_ns == 0));
    // Each rank's MPI_Init starts at its own session time, no longer shifted by the spread.
    for (r, src) in merged.sources.iter().enumerate() {
        assert_eq!(
            src.trace_offset_ns, merged.sources[0].trace_offset_ns,
            "rank {r}"
        );
    }
}

#[test]
fn selection_applies_to_every_report() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (0..RANKS).map(mpi_fixture).collect();
    let sel = Selection {
        types: nsys_perfetto_model::category::EventType::parse_list(&["nvtx".to_string()]).unwrap(),
        nvtx_filter: Some(nsys_perfetto_model::select::NameFilter::parse("barrier").unwrap()),
        ..Default::default()
    };
    let out = dir.path().join("barriers.pftrace");
    merge_lib(&inputs, &out, Align::WallClock, &sel);
    let t = validate_file(&out);
    let (cats, _) = sum_of_singles(&inputs, dir.path(), &sel);
    assert_eq!(t.count_by_category(), cats);
    assert_eq!(
        t.count_by_category(),
        BTreeMap::from([("nvtx".to_string(), (RANKS as u64) * STEPS as u64)])
    );
}

#[test]
fn json_merge_keeps_sources_apart() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (0..RANKS).map(mpi_fixture).collect();
    let out = dir.path().join("job.json");
    let opts = MergeOptions {
        jobs: 2,
        ..Default::default()
    };
    let sources = merge::prepare(&inputs, &opts).unwrap();
    let conv = Options {
        format: OutputFormat::Json,
        ..Default::default()
    };
    let merged = merge::merge(&sources, &out, &opts, &conv).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut names: Vec<String> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .filter(|n| n.starts_with("rank "))
        .collect();
    names.sort();
    let pids: std::collections::BTreeSet<String> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .filter(|e| e["args"]["name"].as_str().unwrap().starts_with("rank "))
        .map(|e| e["pid"].to_string())
        .collect();
    assert_eq!(pids.len(), names.len(), "one pid per process: {names:?}");
    assert_eq!(names.len() as i64, RANKS, "{names:?}");
    let begins = events
        .iter()
        .filter(|e| e["cat"] == "nvtx" && (e["ph"] == "B" || e["ph"] == "X"))
        .count() as u64;
    assert_eq!(
        begins,
        merged
            .summary
            .events_of(nsys_perfetto_model::category::Category::Nvtx)
    );
    let markers = events.iter().filter(|e| e["cat"] == "session").count();
    assert_eq!(markers as i64, RANKS);
}

#[test]
fn cli_merge_prints_offsets_and_refuses_an_input_as_output() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = common::fixture("mpi");
    let out = dir.path().join("job.pftrace");
    let o = bin()
        .args(["merge", "-j", "2"])
        .arg(fixtures.join("rank_*.sqlite"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("merged 4 reports"), "{err}");
    for r in 0..RANKS {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("] rank {r} · vm: "))
                    && l.contains("offset +")
                    && l.contains("rank from environment")),
            "{err}"
        );
    }
    assert!(err.contains("session starts spread over"), "{err}");
    validate_file(&out);

    // --label: a capture group of the file name.
    let out2 = dir.path().join("labelled.pftrace");
    let o = bin()
        .arg("merge")
        .arg(fixtures.join("rank_0.sqlite"))
        .arg(fixtures.join("rank_1.sqlite"))
        .args(["--label", r"rank_(\d+)", "--align", "start", "-o"])
        .arg(&out2)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("start at 0"), "{err}");
    let t = validate_file(&out2);
    assert_eq!(t.session_starts.len(), 2);

    // The output may not be one of the inputs.
    let copy = dir.path().join("rank_0.sqlite");
    std::fs::copy(fixtures.join("rank_0.sqlite"), &copy).unwrap();
    let o = bin()
        .arg("merge")
        .arg(&copy)
        .arg(fixtures.join("rank_1.sqlite"))
        .arg("-o")
        .arg(&copy)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("is one of the inputs"), "{err}");
}

/// The corpus's MPI rank reports (a Jacobi solver, one GPU per rank), exported through the
/// report path: the merge is exactly the sum of the two conversions, arrows stay in their
/// report, and Perfetto imports it without an error. The reports are copied into a temporary
/// folder first, so their exports go there (not into the corpus, nor the user's cache).
#[test]
fn corpus_mpi_reports_merge_exactly() {
    let Some(corpus) = common::corpus_dir() else {
        crate::common::skip("corpus", "../shared/corpus not found");
        return;
    };
    if nsys_perfetto::report::finding::find_nsys(None).is_err() {
        crate::common::skip(
            "nsys",
            "nsys not found (needed to export the .qdrep reports)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reports: Vec<PathBuf> = [1, 2]
        .iter()
        .map(|n| {
            let name = format!("openhackathons-org__gpubootcamp__mpi_report{n}.qdrep");
            let copy = dir.path().join(&name);
            std::fs::copy(corpus.join(&name), &copy).unwrap();
            copy
        })
        .collect();
    let opts = MergeOptions {
        jobs: 2,
        export: nsys_perfetto::report::export::ExportOptions {
            cache_dir: Some(dir.path().join("cache")),
            ..Default::default()
        },
        ..Default::default()
    };
    let sources = merge::prepare(&reports, &opts).unwrap();
    // Ranks from what the reports record, in rank order.
    let ranks: Vec<Option<i64>> = sources.iter().map(|s| s.identity.rank).collect();
    assert_eq!(ranks, [Some(3), Some(7)]);
    let out = dir.path().join("jacobi.pftrace");
    let merged = merge::merge(&sources, &out, &opts, &Options::default()).unwrap();
    let t = validate_file(&out);
    tpcheck_ok(&out);
    let exports: Vec<PathBuf> = sources
        .iter()
        .map(|s| s.profile.export().to_path_buf())
        .collect();
    let (cats, flows) = sum_of_singles(&exports, dir.path(), &Selection::default());
    assert_eq!(t.count_by_category(), cats);
    assert_eq!(t.flows.len(), flows);
    assert!(flows > 0);
    assert_eq!(merged.summary.flows as usize, flows);
    for f in &t.flows {
        let a = source_of_track(&t, t.slices[f.source].track);
        let b = source_of_track(&t, t.slices[f.destination].track);
        assert!(
            a.is_some() && a == b,
            "flow {} joins sources {a:?} and {b:?}",
            f.id
        );
    }
    // GPUs are named after their report (these record no host name): "rank 3 · GPU 3 · Tesla
    // V100-SXM2-16GB"; each report's GPU groups are its own.
    let gpus: Vec<(usize, String)> = t
        .tracks
        .values()
        .filter(|tr| tr.uuid >> 62 == 3)
        .map(|tr| {
            (
                ((tr.uuid >> 56) & 0x3F) as usize,
                tr.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(!gpus.is_empty());
    for (src, name) in &gpus {
        let rank = [3, 7][*src];
        assert!(
            name.starts_with(&format!("rank {rank} · GPU ")) && name.contains("V100"),
            "{gpus:?}"
        );
    }
    assert!(gpus.iter().any(|(_, n)| n.starts_with("rank 3 · GPU 3 ·")));
    assert!(gpus.iter().any(|(_, n)| n.starts_with("rank 7 · GPU 7 ·")));

    // The same merge as JSON: the same events per category.
    let json = dir.path().join("jacobi.json");
    let conv = Options {
        format: OutputFormat::Json,
        ..Default::default()
    };
    let mj = merge::merge(&sources, &json, &opts, &conv).unwrap();
    assert_eq!(mj.summary.events, merged.summary.events);
    assert_eq!(mj.summary.flows, merged.summary.flows);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut flow_ids: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        match e["ph"].as_str() {
            Some("s") => flow_ids.entry(e["id"].to_string()).or_default().0 += 1,
            Some("f") => flow_ids.entry(e["id"].to_string()).or_default().1 += 1,
            _ => {}
        }
    }
    assert_eq!(flow_ids.len(), flows);
    assert!(flow_ids.values().all(|&c| c == (1, 1)));
    for (id, _) in flow_ids {
        // Exactly representable as a double: JSON readers that hold numbers as doubles agree.
        let n: u64 = id.parse().unwrap();
        assert!(n < 1 << 53, "flow id {n}");
    }

    // The distributed path on a real GPU job (CPU samples, scheduling, arrows): each export
    // made into a part by a process of its own, then merged, holds what the merge holds.
    let parts = parts_made_apart(&exports, dir.path(), &[]);
    let from_parts = dir.path().join("from_parts.pftrace");
    assert!(
        bin()
            .args(["merge", "-q", "-o"])
            .arg(&from_parts)
            .args(&parts)
            .status()
            .unwrap()
            .success()
    );
    let p = validate_file(&from_parts);
    assert_eq!(p.count_by_category(), cats);
    assert_eq!(p.flows.len(), flows);
    assert_eq!(markers(&p), markers(&t));
    if let (Some(a), Some(b)) = (
        common::content_digest(&out),
        common::content_digest(&from_parts),
    ) {
        assert!(
            a.iter()
                .any(|l| l.starts_with("samples\t") && !l.starts_with("samples\t0"))
        );
        assert_eq!(a, b);
    }
}

/// Batch conversion on several cores (`-j 2`) converts what one core does, and prints each
/// file's lines whole, in input order.
#[test]
fn batch_jobs_convert_like_one_job() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (0..RANKS).map(mpi_fixture).collect();
    let mut counts = Vec::new();
    for jobs in ["1", "2"] {
        let out = dir.path().join(format!("j{jobs}"));
        std::fs::create_dir(&out).unwrap();
        let o = bin()
            .args(&inputs)
            .args(["-j", jobs, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let tags: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with('['))
            .map(|l| l.split(']').next().unwrap())
            .collect();
        assert_eq!(tags, ["[1/4", "[2/4", "[3/4", "[4/4"], "{err}");
        assert!(err.contains("total: 4 converted, 0 failed"), "{err}");
        counts.push(
            (0..RANKS)
                .map(|r| validate_file(&out.join(format!("rank_{r}.pftrace"))).count_by_category())
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(counts[0], counts[1]);
}

/// A report whose recorded environment names no rank is ranked by the names its threads had:
/// here the one NVTX gave a thread that `ThreadNames` names otherwise (the name the trace
/// shows), so the rank comes only from the report's full list of thread names.
#[test]
fn rank_from_a_thread_named_by_nvtx() {
    let Some(corpus) = common::corpus_dir() else {
        crate::common::skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for rank in [3, 11] {
        let f = dir.path().join(format!("job_{}.sqlite", 20 - rank));
        std::fs::copy(
            corpus.join("hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite"),
            &f,
        )
        .unwrap();
        let c = rusqlite::Connection::open(&f).unwrap();
        // The thread NVTX named "MPI Rank 0" also has a ThreadNames row: it is named after
        // the program there, and the NVTX name is the rank to find.
        let named: i64 = c
            .query_row(
                "SELECT count(*) FROM NVTX_EVENTS n JOIN ThreadNames t USING (globalTid) \
                 WHERE n.eventType = 39 AND n.text = 'MPI Rank 0'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(named, 1);
        c.execute_batch(&format!(
            "UPDATE TARGET_INFO_SYSTEM_ENV SET value = '' WHERE name = 'DeviceEnvironment';
             UPDATE StringIds SET value = 'saxpy' WHERE id IN (SELECT nameId FROM ThreadNames
               WHERE globalTid IN (SELECT globalTid FROM NVTX_EVENTS WHERE eventType = 39));
             UPDATE NVTX_EVENTS SET text = 'MPI Rank {rank}' WHERE eventType = 39;"
        ))
        .unwrap();
        files.push(f);
    }
    let sources = merge::prepare(&files, &MergeOptions::default()).unwrap();
    let got: Vec<(Option<i64>, Option<&str>)> = sources
        .iter()
        .map(|s| (s.identity.rank, s.identity.rank_from))
        .collect();
    assert_eq!(
        got,
        [
            (Some(3), Some("thread name")),
            (Some(11), Some("thread name"))
        ]
    );
}

/// More reports than a JSON merge holds (64): 70 copies of the fixture's 4 ranks, merged on 2
/// workers. Each report is on its own machine, named by its label, and the merge holds exactly
/// what each copy converts to on its own: per report (its summary), per machine (trace_processor's
/// slices) and in all (our reading of the file); JSON refuses in one line.
#[test]
fn more_reports_than_json_holds_merge_exactly() {
    const COPIES: usize = 70;
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (0..COPIES)
        .map(|k| {
            let copy = dir.path().join(format!("copy_{k:02}.sqlite"));
            std::fs::copy(mpi_fixture(k as i64 % RANKS), &copy).unwrap();
            copy
        })
        .collect();
    let singles: Vec<_> = (0..RANKS)
        .map(|r| {
            convert::convert_export(
                &mpi_fixture(r),
                &dir.path().join(format!("single{r}.pftrace")),
                &Options::default(),
            )
            .unwrap()
        })
        .collect();
    let out = dir.path().join("job.pftrace");
    let merged = merge_lib(&inputs, &out, Align::WallClock, &Selection::default());
    assert_eq!(merged.labels.len(), COPIES);
    assert_eq!(merged.summary.per_source.len(), COPIES);
    // Sources in rank order (ranks 0..3 from the environment; a copy's label names its file:
    // "rank 2 · vm · copy_06").
    let rank_of = |label: &str| -> usize { label[5..6].parse().unwrap() };
    let mut total = 0;
    let mut last_rank = 0;
    for (label, part) in merged.labels.iter().zip(&merged.summary.per_source) {
        let rank = rank_of(label);
        assert!(rank >= last_rank, "{label}: not in rank order");
        last_rank = rank;
        let k: usize = label.rsplit("copy_").next().unwrap().parse().unwrap();
        assert_eq!(k % RANKS as usize, rank, "{label}");
        assert_eq!(part.events, singles[rank].events, "{label}");
        assert_eq!(part.flows, singles[rank].flows, "{label}");
        total += part.total_events();
    }
    assert_eq!(total, merged.summary.total_events());
    let t = validate_file(&out);
    let mut want = BTreeMap::new();
    for label in &merged.labels {
        let rank = rank_of(label);
        let single = validate_file(&dir.path().join(format!("single{rank}.pftrace")));
        for (cat, n) in single.count_by_category() {
            *want.entry(cat).or_insert(0) += n;
        }
    }
    assert_eq!(t.count_by_category(), want);
    assert_eq!(t.machine_names.len(), COPIES);
    for (m, label) in merged.labels.iter().enumerate() {
        assert_eq!(t.machine_names.get(&(m as u32)), Some(label));
    }
    tpcheck_ok(&out);
    // trace_processor: a machine per report, each with its copy's slices (every session marker
    // is on the host's "Session" track, machine 0).
    if let Some(rows) = common::tp_query(
        &out,
        "select m.id, m.name, (select count(*) from slice s join thread_track tt on s.track_id = tt.id \
         join thread using(utid) where thread.machine_id = m.id) from machine m order by m.id",
    ) {
        assert_eq!(rows.len(), COPIES);
        for (m, row) in rows.iter().enumerate() {
            assert_eq!(row[0], m.to_string());
            assert_eq!(row[1], merged.labels[m]);
            let rank = rank_of(&row[1]);
            let want = common::tp_query(
                &dir.path().join(format!("single{rank}.pftrace")),
                "select count(*) from slice s join thread_track tt on s.track_id = tt.id",
            )
            .unwrap();
            assert_eq!(row[2], want[0][0], "machine {m}");
        }
    }
    // JSON has no machines: at most 64 reports, said in one line, nothing written.
    let json = dir.path().join("job.json");
    let err = bin()
        .args(["merge", "-q", "-o"])
        .arg(&json)
        .args(&inputs)
        .output()
        .unwrap();
    assert!(!err.status.success());
    let msg = String::from_utf8_lossy(&err.stderr);
    assert!(msg.contains("a JSON merge holds at most 64"), "{msg}");
    assert_eq!(msg.trim().lines().count(), 1, "{msg}");
    assert!(!json.exists());
}

/// Each session marker's name and time.
fn markers(t: &Trace) -> Vec<(String, i64)> {
    t.session_starts
        .iter()
        .map(|s| (s.name.to_string(), s.start))
        .collect()
}

/// Run `nsys-perfetto merge --part` as a node would, one process per report, all at once.
fn parts_made_apart(inputs: &[PathBuf], dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let mut running = Vec::new();
    let mut parts = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let part = dir.join(format!("node{i}.part.pftrace"));
        let child = bin()
            .args(["merge", "--part", "-q"])
            .args(extra)
            .arg(input)
            .arg("-o")
            .arg(&part)
            .spawn()
            .unwrap();
        running.push(child);
        parts.push(part);
    }
    for mut c in running {
        assert!(c.wait().unwrap().success());
    }
    parts
}

/// The distributed path: each report made into a part by a process of its own (standing in for
/// the node where the report was written), then the parts merged without the reports. The
/// result holds what a merge of the reports holds, in trace_processor's terms (bench/content.py's
/// digest), with the same machines; parts made with other options are refused by name.
#[test]
fn parts_made_apart_merge_as_the_reports_do() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = [3, 1, 0, 2].into_iter().map(mpi_fixture).collect();
    let parts = parts_made_apart(&inputs, dir.path(), &[]);
    let from_parts = dir.path().join("from_parts.pftrace");
    let out = bin()
        .args(["merge", "-o"])
        .arg(&from_parts)
        .args(&parts)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("merged 4 parts"), "{text}");
    let job = dir.path().join("job.pftrace");
    let merged = merge_lib(&inputs, &job, Align::WallClock, &Selection::default());
    tpcheck_ok(&from_parts);
    let (a, b) = (validate_file(&job), validate_file(&from_parts));
    assert_eq!(a.count_by_category(), b.count_by_category());
    assert_eq!(a.machine_names, b.machine_names);
    assert_eq!(
        b.machine_names.values().cloned().collect::<Vec<_>>(),
        merged.labels
    );
    assert_eq!(markers(&a), markers(&b));
    if let (Some(a), Some(b)) = (
        common::content_digest(&job),
        common::content_digest(&from_parts),
    ) {
        assert_eq!(a, b);
    }
    // Made with other options: refused, naming the part.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let odd = parts_made_apart(&inputs[..1], &other, &["--types", "nvtx"]);
    let out = bin()
        .args(["merge", "-o"])
        .arg(dir.path().join("mixed.pftrace"))
        .arg(&parts[1])
        .arg(&odd[0])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(text.contains("made with other options"), "{text}");
    assert!(!dir.path().join("mixed.pftrace").exists());
    // Parts and reports together: refused, naming the report.
    let out = bin()
        .args(["merge", "-o"])
        .arg(dir.path().join("mixed.pftrace"))
        .arg(&parts[0])
        .arg(&inputs[1])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        text.contains(&format!("{}: not a part", inputs[1].display())),
        "{text}"
    );
}

/// The distributed path moves every kind of absolute time a part holds (scheduling bundles,
/// clock snapshots) to where a merge of the reports puts it: two corpus reports with CPU
/// scheduling, placed apart by their earliest rows (`--align start`).
#[test]
fn parts_with_scheduling_merge_as_the_reports_do() {
    let Some(corpus) = common::corpus_dir() else {
        return;
    };
    let inputs: Vec<PathBuf> = [
        "RajaATAli__SC23_Programming-Your-GPU-with-OpenMP_Tutorial__report3.sqlite",
        "NVIDIA__Fuser__report1@8fa9ec2.sqlite",
    ]
    .iter()
    .map(|n| corpus.join(n))
    .collect();
    if let Some(missing) = inputs.iter().find(|p| !p.exists()) {
        common::skip("corpus", &format!("{} not found", missing.display()));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let parts = parts_made_apart(&inputs, dir.path(), &["--align", "start"]);
    let from_parts = dir.path().join("from_parts.pftrace");
    assert!(
        bin()
            .args(["merge", "-q", "-o"])
            .arg(&from_parts)
            .args(&parts)
            .status()
            .unwrap()
            .success()
    );
    let job = dir.path().join("job.pftrace");
    merge_lib(&inputs, &job, Align::Start, &Selection::default());
    // Both reports record rank 0: their arrows' ids repeat, each on its own machine, which
    // trace_processor keeps apart (our reading of the file, one namespace, would not).
    tpcheck_ok(&from_parts);
    let sched = "select count(*), sum(ts), sum(dur) from sched where utid != 0";
    if let (Some(a), Some(b)) = (
        common::tp_query(&job, sched),
        common::tp_query(&from_parts, sched),
    ) {
        assert_eq!(a, b);
        assert_ne!(a[0][0], "0", "the reports hold scheduling");
    }
    if let (Some(a), Some(b)) = (
        common::content_digest(&job),
        common::content_digest(&from_parts),
    ) {
        assert_eq!(a, b);
    }
}

/// `--ranks`: a subset of a job's ranks, from the reports or from their parts, holds exactly
/// those ranks' reports, each as it converts alone.
#[test]
fn a_rank_subset_merges_those_ranks_only() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (0..RANKS).map(mpi_fixture).collect();
    let parts = parts_made_apart(&inputs, dir.path(), &[]);
    let (cats, flows) = sum_of_singles(
        &[mpi_fixture(1), mpi_fixture(3)],
        dir.path(),
        &Selection::default(),
    );
    for (name, given) in [("reports", &inputs), ("parts", &parts)] {
        let out = dir.path().join(format!("{name}.pftrace"));
        let run = bin()
            .args(["merge", "--ranks", "1,3-3", "-o"])
            .arg(&out)
            .args(given)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{name}: {text}");
        assert!(text.contains(&format!("merged 2 {name}")), "{text}");
        let t = validate_file(&out);
        assert_eq!(t.count_by_category(), cats, "{name}");
        assert_eq!(t.flows.len(), flows, "{name}");
        let machines: Vec<&str> = t.machine_names.values().map(|n| &n[..6]).collect();
        assert_eq!(machines, ["rank 1", "rank 3"], "{name}");
    }
    let run = bin()
        .args(["merge", "--ranks", "9", "-o"])
        .arg(dir.path().join("none.pftrace"))
        .args(&inputs)
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("--ranks 9"));
}
