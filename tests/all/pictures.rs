//! `merge --util-map --stragglers`: the pictures of a whole job, checked in trace_processor
//! against the `cuda_gpu_time_util_map` recipe's table (the same code's output through
//! `recipe`) and against the ranges' starts read by SQL from the inputs.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A series of counter values and what names it: (machine or file, group or pid, name or
/// device, values).
type Series = (String, String, String, Vec<f64>);

fn merge_with_pictures(inputs: &[PathBuf], out: &Path, extra: &[&str]) {
    run_ok(
        bin()
            .args(["merge", "-q", "--util-map", "--stragglers", "-o"])
            .arg(out)
            .args(inputs)
            .args(extra),
    );
    if let Some(r) = common::tpcheck(out) {
        let report = r.unwrap_or_else(|e| panic!("tpcheck --strict failed:\n{e}"));
        assert!(report.contains("0 import error"), "{report}");
    }
}

/// Per utilization counter track: (machine, its group's name, its name, values in time order).
fn util_tracks(trace: &Path) -> Option<Vec<Series>> {
    let rows = common::tp_query(
        trace,
        "SELECT t.machine_id, g.name, t.name, group_concat(c.value, ';') FROM counter_track t \
         JOIN track g ON g.id = t.parent_id JOIN (SELECT * FROM counter ORDER BY ts) c \
         ON c.track_id = t.id WHERE t.name LIKE 'GPU time utilization%' \
         GROUP BY t.id ORDER BY t.machine_id, t.name",
    )?;
    Some(
        rows.into_iter()
            .map(|r| {
                let values = r[3].split(';').map(|v| v.parse().unwrap()).collect();
                (r[0].clone(), r[1].clone(), r[2].clone(), values)
            })
            .collect(),
    )
}

/// The recipe's `analysis` rows per (file, PID, device): the non-empty bins' values.
fn recipe_util(inputs: &[PathBuf], bins: &str) -> Vec<Series> {
    let csv = run_ok(
        bin()
            .args(["recipe", "cuda_gpu_time_util_map", "--csv", "--bins", bins])
            .args(inputs),
    );
    let mut out: Vec<Series> = Vec::new();
    for line in csv.lines().skip(1) {
        let f = common::csv_fields(line);
        let (value, pid, device, file) = (&f[2], &f[3], &f[4], &f[5]);
        if out
            .last()
            .is_none_or(|(fl, p, d, _)| (fl, p, d) != (file, pid, device))
        {
            out.push((file.clone(), pid.clone(), device.clone(), Vec::new()));
        }
        if !value.is_empty() {
            out.last_mut().unwrap().3.push(value.parse().unwrap());
        }
    }
    out
}

/// Per rank (input order), the wall-clock starts of the ranges named `name` (NVTX ranges and
/// MPI calls with a positive duration), in order.
fn starts(inputs: &[PathBuf], name: &str) -> Vec<Vec<i64>> {
    inputs
        .iter()
        .map(|p| {
            let c = rusqlite::Connection::open(p).unwrap();
            let utc: i64 = c
                .query_row(
                    "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            let mut stmt = c
                .prepare(
                    "SELECT e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId \
                     WHERE coalesce(s.value, e.text) = ?1 AND e.\"end\" > e.start ORDER BY 1",
                )
                .unwrap();
            stmt.query_map([name], |r| r.get::<_, i64>(0))
                .unwrap()
                .map(|s| utc + s.unwrap())
                .collect()
        })
        .collect()
}

/// The straggler slice of `name`'s occurrence `k`: (machine, lag_ns, earliest_rank, dur).
fn straggler(trace: &Path, name: &str, k: usize) -> Option<Vec<Vec<String>>> {
    common::tp_query(
        trace,
        &format!(
            "SELECT t.machine_id, extract_arg(s.arg_set_id, 'debug.lag_ns'), \
             extract_arg(s.arg_set_id, 'debug.earliest_rank'), s.dur FROM slice s \
             JOIN track t ON s.track_id = t.id WHERE t.name = 'Stragglers' \
             AND s.name = 'late: {name}' AND extract_arg(s.arg_set_id, 'debug.occurrence') = {k}"
        ),
    )
}

/// Which rank of `per_rank` starts occurrence `k` last, and by how much after the first.
fn expected_straggler(per_rank: &[Vec<i64>], k: usize) -> (usize, usize, i64) {
    let at: Vec<(usize, i64)> = per_rank
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.get(k).map(|t| (i, *t)))
        .collect();
    let first = at.iter().min_by_key(|(i, t)| (*t, *i)).unwrap();
    let last = at
        .iter()
        .max_by_key(|(i, t)| (*t, std::cmp::Reverse(*i)))
        .unwrap();
    (last.0, first.0, last.1 - first.1)
}

/// The 4-rank fixture records no GPU work: the recipe finds no kernels and the merge draws
/// no utilization track; the stragglers of "barrier" (each rank's five steps) are the ranks the
/// inputs' NVTX rows say, by the lag they say, on the late rank's machine.
#[test]
fn fixture_stragglers_name_the_last_rank() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<PathBuf> = (0..4)
        .map(|r| common::fixture(&format!("mpi/rank_{r}.sqlite")))
        .collect();
    let out = dir.path().join("job.pftrace");
    merge_with_pictures(&inputs, &out, &[]);
    assert!(recipe_util(&inputs, "30").is_empty());
    let Some(util) = util_tracks(&out) else {
        return;
    };
    assert!(util.is_empty(), "{util:?}");
    let per_rank = starts(&inputs, "barrier");
    assert!(per_rank.iter().all(|s| s.len() == 5), "{per_rank:?}");
    for k in 0..5 {
        let (last, first, lag) = expected_straggler(&per_rank, k);
        let rows = straggler(&out, "barrier", k).unwrap();
        // The fixture's ranks are merged in rank order: machine N is rank N.
        assert_eq!(
            rows,
            [vec![
                last.to_string(),
                lag.to_string(),
                format!("rank {first} · vm"),
                lag.to_string()
            ]],
            "barrier #{k}"
        );
    }
}

/// The corpus's two gpubootcamp MPI ranks (exported to SQLite with nsys): one utilization
/// counter track per rank, in its "Analysis · rank N" group, holding the recipe's values bin by bin
/// (then a 0 where the rank's last bin ends), with 30 and with 12 bins, in `.pftrace` and in
/// JSON; the stragglers of
/// "Jacobi solve" are the ones the inputs' NVTX rows say.
#[test]
fn gpubootcamp_utilization_equals_the_recipe() {
    let Some(corpus) = common::corpus_dir() else {
        common::skip("corpus", "../shared/corpus not found");
        return;
    };
    if nsys_perfetto::report::finding::find_nsys(None).is_err() {
        common::skip(
            "nsys",
            "nsys not found (needed to export the .qdrep reports)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let opts = nsys_perfetto::report::export::ExportOptions {
        cache_dir: Some(dir.path().join("cache")),
        quiet: true,
        format: nsys_perfetto::report::export::ExportFormat::Sqlite,
        ..Default::default()
    };
    let mut exports = Vec::new();
    for n in [1, 2] {
        let name = format!("openhackathons-org__gpubootcamp__mpi_report{n}.qdrep");
        let copy = dir.path().join(&name);
        std::fs::copy(corpus.join(&name), &copy).unwrap();
        let e = nsys_perfetto::report::export::export_report(&copy, &opts).unwrap();
        let sqlite = dir.path().join(format!("rank_{n}.sqlite"));
        std::fs::copy(e.path(), &sqlite).unwrap();
        exports.push(sqlite);
    }
    for bins in ["30", "12"] {
        let out = dir.path().join(format!("job{bins}.pftrace"));
        merge_with_pictures(&exports, &out, &["--bins", bins]);
        let Some(util) = util_tracks(&out) else {
            return;
        };
        let recipe = recipe_util(&exports, bins);
        assert_eq!(util.len(), 2, "{util:?}");
        assert_eq!(recipe.len(), 2, "{recipe:?}");
        let labels = ["rank 3", "rank 7"];
        for (i, ((machine, group, name, values), (file, pid, device, rvalues))) in
            util.iter().zip(&recipe).enumerate()
        {
            assert_eq!(machine, &i.to_string());
            assert_eq!(group, &format!("Analysis · {}", labels[i]));
            assert_eq!(file, &format!("rank_{}", i + 1));
            assert_eq!(
                name,
                &format!("GPU time utilization · pid {pid} · GPU {device}")
            );
            assert_eq!(values.len(), rvalues.len() + 1, "{name}: {values:?}");
            assert_eq!(&values[..rvalues.len()], rvalues.as_slice(), "rank {i}");
            assert_eq!(values.last(), Some(&0.0));
            assert!(rvalues.iter().any(|v| *v > 90.0), "{rvalues:?}");
        }
        // A time window keeps the bins that overlap it: 6-8 s holds 5 to 6 bins of 417 ms.
        if bins == "30" {
            let window = dir.path().join("window.pftrace");
            merge_with_pictures(&exports, &window, &["--time-range", "6s..8s"]);
            let kept = util_tracks(&window).unwrap();
            assert_eq!(kept.len(), 2, "{kept:?}");
            for ((_, _, name, part), (_, _, _, whole)) in kept.iter().zip(&util) {
                assert!((5..=6).contains(&part.len()), "{name}: {part:?}");
                assert!(
                    whole.windows(part.len()).any(|w| w == part.as_slice()),
                    "{name}: {part:?} in {whole:?}"
                );
            }
        }
        // JSON takes counters too: the same values, named with their unit.
        if bins == "30" {
            let json = dir.path().join("job.json");
            merge_with_pictures(&exports, &json, &[]);
            let rows = common::tp_query(
                &json,
                "SELECT t.name, group_concat(c.value, ';') FROM counter_track t \
                 JOIN (SELECT * FROM counter ORDER BY ts) c ON c.track_id = t.id \
                 WHERE t.name LIKE 'GPU time utilization%' GROUP BY t.id ORDER BY t.name",
            )
            .unwrap();
            let theirs: Vec<(String, String)> = util
                .iter()
                .map(|(_, _, name, values)| {
                    let v: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
                    (format!("{name} %"), v.join(";"))
                })
                .collect();
            let ours: Vec<(String, String)> = rows
                .iter()
                .map(|r| {
                    let v: Vec<String> = r[1]
                        .split(';')
                        .map(|v| format!("{:.1}", v.parse::<f64>().unwrap()))
                        .collect();
                    (r[0].clone(), v.join(";"))
                })
                .collect();
            assert_eq!(ours, theirs);
        }
        let per_rank = starts(&exports, "Jacobi solve");
        for k in 0..2 {
            let (last, first, lag) = expected_straggler(&per_rank, k);
            let rows = straggler(&out, "Jacobi solve", k).unwrap();
            assert_eq!(
                rows,
                [vec![
                    last.to_string(),
                    lag.to_string(),
                    labels[first].to_string(),
                    lag.to_string()
                ]],
                "Jacobi solve #{k}"
            );
        }
    }
}

/// The pictures need every rank: a part (made alone) and a merge of parts refuse them in one
/// line, writing nothing.
#[test]
fn parts_refuse_pictures() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("rank_0.part.pftrace");
    let out = bin()
        .args(["merge", "--part", "--util-map", "-o"])
        .arg(&part)
        .arg(common::fixture("mpi/rank_0.sqlite"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--util-map and --stragglers need every rank"),
        "{err}"
    );
    assert!(!part.exists());
}
