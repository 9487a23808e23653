//! The command line says what it does and what to do next (issue 28, items 2 and 3): `extract`'s
//! repeatable `-e`, a bare call listing the commands, `--types help`, a trace given as input, the
//! busy-port advice of `open`, damaged inputs, empty selections with the capture's span, merges
//! of one report and of runs aligned at zero, what GENERIC_EVENTS rows became, `sweep` without
//! `-e`, and units on GPU metrics. Every file is copied into a temporary folder first.

use crate::common::{self, skip};

use nsys_perfetto::workflow::Pattern;
use nsys_perfetto::workflow::sweep::{self, SweepOptions};
use nsys_perfetto_model::category::EventType;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the binary")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A writable copy of `src` in `dir`, named `name`.
fn copy(src: &Path, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(src, &p).unwrap();
    let mut perms = std::fs::metadata(&p).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&p, perms).unwrap();
    p
}

fn fixture_copy(dir: &Path, name: &str) -> PathBuf {
    copy(&common::fixture("nvtx_workload.sqlite"), dir, name)
}

fn corpus_copy(dir: &Path, corpus_name: &str, name: &str) -> Option<PathBuf> {
    Some(copy(&common::corpus_file(corpus_name)?, dir, name))
}

/// `dir`, created.
fn mkdir(dir: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One line on stderr, a failing exit, and the line.
fn one_line_failure(o: &Output) -> String {
    let err = stderr(o);
    assert!(!o.status.success(), "should fail: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn extract_takes_one_pattern_per_e_before_or_after_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    fixture_copy(d, "w.sqlite");
    let names = |o: &Output| -> Vec<(String, String)> {
        let out = stdout(o);
        let mut v: Vec<(String, String)> = out
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f.len() == 7).then(|| (f[1].to_string(), f[2].to_string()))
            })
            .collect();
        v.sort();
        v
    };
    // `-e` used to swallow the file name: "required arguments were not provided: <PROFILE>".
    let before = run_in(d, &["extract", "-e", "work", "w.sqlite", "--csv"]);
    assert!(before.status.success(), "{}", stderr(&before));
    let after = run_in(d, &["extract", "w.sqlite", "-e", "work", "--csv"]);
    assert!(after.status.success(), "{}", stderr(&after));
    assert_eq!(names(&before), names(&after));
    assert!(names(&before).contains(&("work".into(), "nvtx".into())));
    let two = run_in(
        d,
        &[
            "extract",
            "-e",
            "work",
            "-e",
            "nothing_x",
            "w.sqlite",
            "--csv",
        ],
    );
    assert!(two.status.success(), "{}", stderr(&two));
    let got = names(&two);
    assert!(got.contains(&("work".into(), "nvtx".into())), "{got:?}");
    assert!(
        got.contains(&("nothing_x".into(), String::new())),
        "{got:?}"
    );
    // The file read as a pattern would have been a missing profile.
    assert!(!stderr(&two).contains("error"), "{}", stderr(&two));
}

#[test]
fn a_bare_call_lists_the_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let o = run_in(tmp.path(), &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("Usage: nsys-perfetto [OPTIONS] <INPUT>..."),
        "{err}"
    );
    for cmd in [
        "profile",
        "stats",
        "extract",
        "sweep",
        "open",
        "serve",
        "merge",
        "completions",
        "man",
    ] {
        assert!(
            err.lines()
                .any(|l| l.trim_start().starts_with(&format!("{cmd} "))),
            "{cmd} listed: {err}"
        );
    }
    assert!(err.lines().all(|l| l.len() <= 100), "short lines: {err}");
    assert!(!err.contains("required arguments"), "{err}");
    // `--help` lists them as briefly; a command's own help keeps its whole description.
    let help = stdout(&run_in(tmp.path(), &["--help"]));
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(commands.len() >= 9, "{help}");
    assert!(commands.iter().all(|l| l.len() <= 100), "{commands:#?}");
    let open = stdout(&run_in(tmp.path(), &["open", "--help"]));
    assert!(open.contains("--native for traces too large"), "{open}");
}

#[test]
fn types_help_lists_each_type_once_and_help_points_there() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        &["--types", "help"][..],
        &["--types=help"],
        &["merge", "--types", "help"],
        &["open", "--types", "help"],
        &["profile", "--types", "help"],
    ] {
        let o = run_in(tmp.path(), args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        for t in EventType::ALL {
            let lines: Vec<&str> = out
                .lines()
                .filter(|l| l.split_whitespace().next() == Some(t.name()))
                .collect();
            assert_eq!(lines.len(), 1, "{args:?}: {} once in {out}", t.name());
            assert!(lines[0].ends_with(t.about()), "{}", lines[0]);
        }
    }
    // The list lives there only: no --help repeats it.
    for args in [
        &["--help"][..],
        &["profile", "--help"],
        &["open", "--help"],
        &["merge", "--help"],
    ] {
        let o = run_in(tmp.path(), args);
        assert!(o.status.success(), "{args:?}");
        let out = stdout(&o);
        assert!(out.contains("--types help"), "{args:?}: {out}");
        assert!(
            !out.contains("cpu-counters") && !out.contains("openacc"),
            "{args:?} repeats the type list: {out}"
        );
    }
}

#[test]
fn a_trace_given_as_input_points_to_open() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    fixture_copy(d, "w.sqlite");
    for (out, flag) in [("w.pftrace", None), ("w.json", Some("--format=json"))] {
        let mut args = vec!["w.sqlite", "-q", "-o", out];
        args.extend(flag);
        assert!(run_in(d, &args).status.success());
        let before = std::fs::read(d.join(out)).unwrap();
        let o = run_in(d, &[out]);
        let err = one_line_failure(&o);
        assert!(
            err.contains(&format!("{out} is already a Perfetto trace"))
                && err.contains(&format!("`nsys-perfetto open {out}`")),
            "{err}"
        );
        assert!(!err.contains("-o "), "no -o was given: {err}");
        assert_eq!(std::fs::read(d.join(out)).unwrap(), before, "untouched");
        let o = run_in(d, &["stats", out]);
        let err = one_line_failure(&o);
        assert!(err.contains("nsys-perfetto open"), "{err}");
    }
    // Among several inputs (a pattern, or the shell's `*`), traces are passed over with a
    // note, not a failure, and do not stand in for the export that gives the same name.
    for args in [&["*"][..], &["w.json", "w.sqlite", "w.pftrace", "--force"]] {
        let o = run_in(d, args);
        let err = stderr(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        for t in ["w.pftrace", "w.json"] {
            assert!(
                err.contains(&format!("not converted: {t} is already a Perfetto trace")),
                "{args:?}: {err}"
            );
        }
        assert!(!err.contains("gives the same output"), "{args:?}: {err}");
    }
    // A trace's name on an SQLite export is still converted.
    copy(&d.join("w.sqlite"), d, "export.json");
    let o = run_in(d, &["export.json", "-o", "x.pftrace"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn open_busy_port_gives_advice_open_can_follow() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    fixture_copy(d, "w.sqlite");
    assert!(run_in(d, &["w.sqlite", "-q"]).status.success());
    let o = run_in(d, &["open", "w.pftrace", "--no-browser", "--port", &port]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(&format!("port {port} is busy")), "{err}");
    // `open` has no port to choose: the advice is to free the one the UI needs.
    assert!(!err.contains("choose another port"), "{err}");
    assert!(err.contains("stop it and run this again"), "{err}");
    assert!(
        err.contains(&format!("ss -ltnp 'sport = :{port}'")),
        "{err}"
    );
    drop(busy);
}

#[test]
fn a_truncated_export_is_called_damaged_with_the_next_step() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bytes = std::fs::read(common::fixture("nvtx_workload.sqlite")).unwrap();
    std::fs::write(d.join("cut.sqlite"), &bytes[..bytes.len() / 3]).unwrap();
    for args in [
        &["cut.sqlite", "-o", "cut.pftrace"][..],
        &["stats", "cut.sqlite"],
        &["extract", "-e", "x", "cut.sqlite"],
    ] {
        let o = run_in(d, args);
        let err = one_line_failure(&o);
        assert!(err.contains("cut.sqlite"), "{err}");
        assert!(
            err.contains("damaged or truncated") && err.contains("copy it again"),
            "{args:?}: {err}"
        );
        assert_eq!(err.matches("damaged or truncated").count(), 1, "{err}");
    }
    assert!(!d.join("cut.pftrace").exists());
}

/// `0.067335s`, as the span is printed (6 decimals below 0.1 s, trailing zeros dropped).
fn secs6(ns: i64) -> String {
    let s = format!("{:.6}", ns as f64 / 1e9);
    format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
}

#[test]
fn an_empty_selection_says_so_and_gives_the_capture_span() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let input = fixture_copy(d, "w.sqlite");
    // The span of every timed table the fixture holds, by SQL.
    let c = rusqlite::Connection::open(&input).unwrap();
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for (t, end) in [
        ("NVTX_EVENTS", "coalesce(\"end\", start)"),
        ("OSRT_API", "\"end\""),
        ("PROFILER_OVERHEAD", "\"end\""),
        ("SCHED_EVENTS", "start"),
    ] {
        let (a, b): (i64, i64) = c
            .query_row(
                &format!("SELECT min(start), max({end}) FROM {t}"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        lo = lo.min(a);
        hi = hi.max(b);
    }
    drop(c);
    assert!(
        hi < 100_000_000,
        "the spans below are printed to 6 decimals"
    );
    let span = format!("the capture spans {}..{}", secs6(lo), secs6(hi));
    let o = run_in(d, &["w.sqlite", "--time-range", "500s..600s"]);
    let err = one_line_failure(&o);
    assert!(err.contains("no events in 500s..600s"), "{err}");
    assert!(err.contains(&span), "{span} in {err}");
    let o = run_in(d, &["w.sqlite", "--pid", "999999"]);
    let err = one_line_failure(&o);
    assert!(
        err.contains("the selection (--pid 999999) matches no events: nothing written"),
        "{err}"
    );
    assert!(err.contains(&span), "{span} in {err}");
    assert!(!d.join("w.pftrace").exists());
}

#[test]
fn a_merge_of_one_report_counts_its_events_and_says_one_was_given() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let input = fixture_copy(d, "w.sqlite");
    let (summary, _) = common::convert(&input, &mkdir(d.join("alone")));
    let o = run_in(d, &["merge", "w.sqlite", "-o", "m.pftrace"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("merged 1 report -> m.pftrace"), "{err}");
    let line = err.lines().find(|l| l.contains("[1]")).unwrap();
    assert!(
        line.contains(&format!(", {} events,", summary.total_events())),
        "{line} (the conversion has {} events)",
        summary.total_events()
    );
    assert!(summary.total_events() > 0);
    assert!(err.contains("one report given"), "{err}");
    assert!(!err.contains("spread"), "{err}");
}

#[test]
fn runs_aligned_at_zero_show_no_wall_clock_spread() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    fixture_copy(d, "a.sqlite");
    let b = fixture_copy(d, "b.sqlite");
    // The second run 300 days later.
    rusqlite::Connection::open(&b)
        .unwrap()
        .execute_batch(
            "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + 300 * 86400 * 1000000000",
        )
        .unwrap();
    let o = run_in(
        d,
        &[
            "merge",
            "a.sqlite",
            "b.sqlite",
            "--align",
            "start",
            "-o",
            "s.pftrace",
        ],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("spread"), "no spread at zero: {err}");
    assert!(err.contains("every report starts at 0"), "{err}");
    let o = run_in(d, &["merge", "a.sqlite", "b.sqlite", "-o", "w.pftrace"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("spread over 300.0 days"), "{err}");
}

/// `79564` as `79,564`.
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn generic_events_say_what_their_rows_became() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let Some(input) = corpus_copy(
        d,
        "als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite",
        "g.sqlite",
    ) else {
        return;
    };
    // An nsys 2022 export: the GPU metrics only in GENERIC_EVENTS.
    let c = rusqlite::Connection::open(&input).unwrap();
    c.execute_batch("DROP TABLE GPU_METRICS; DROP TABLE TARGET_INFO_GPU_METRICS;")
        .unwrap();
    let rows: i64 = c
        .query_row("SELECT count(*) FROM GENERIC_EVENTS", [], |r| r.get(0))
        .unwrap();
    drop(c);
    let (summary, _) = common::convert(&input, &mkdir(d.join("lib")));
    let values = summary.events_of(nsys_perfetto_model::category::Category::GpuMetric);
    assert!(values > rows as u64);
    let note = format!(
        "GENERIC_EVENTS: {} rows -> {} GPU metric values",
        grouped(rows as u64),
        grouped(values)
    );
    assert!(
        summary.notes.contains(&note),
        "{note} in {:?}",
        summary.notes
    );
    let o = run_in(d, &["g.sqlite"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains(&note), "{err}");
    assert!(!err.contains("not converted"), "{err}");
}

#[test]
fn gpu_metrics_in_stats_carry_their_units() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    if corpus_copy(
        d,
        "als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite",
        "g.sqlite",
    )
    .is_none()
    {
        return;
    }
    let o = run_in(d, &["stats", "g.sqlite", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let metrics = v["gpu_metrics"].as_array().unwrap();
    assert!(!metrics.is_empty());
    let unit = |name: &str| {
        metrics
            .iter()
            .find(|m| m["metric"] == name)
            .map(|m| m["unit"].as_str().unwrap().to_string())
    };
    assert_eq!(unit("GPC Clock Frequency").as_deref(), Some("Hz"));
    assert_eq!(unit("SM Active").as_deref(), Some("%"));
    assert_eq!(unit("PCIe Read Requests to BAR1").as_deref(), Some("count"));
    let o = run_in(d, &["stats", "g.sqlite"]);
    let table = stdout(&o);
    let gpc = table
        .lines()
        .find(|l| l.ends_with("GPC Clock Frequency"))
        .unwrap();
    assert!(gpc.contains(" Hz "), "{gpc}");
    let bar = table
        .lines()
        .find(|l| l.ends_with("PCIe Read Requests to BAR1"))
        .unwrap();
    assert!(bar.contains(" count "), "{bar}");
}

#[test]
fn sweep_without_e_says_what_it_tabulates_or_why_it_cannot() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let opts = |d: &Path| SweepOptions {
        values: vec!["1".into(), "2".into()],
        iterations: 1,
        patterns: Vec::<Pattern>::new(),
        output: format!("{}/run_$p", d.display()),
        command: vec!["./app".into(), "$p".into()],
        export: Default::default(),
        traces: false,
    };
    // Nothing to choose from: OS runtime calls only.
    let bare = fixture_copy(d, "osrt_only.sqlite");
    rusqlite::Connection::open(&bare)
        .unwrap()
        .execute_batch("DROP TABLE NVTX_EVENTS;")
        .unwrap();
    let mut runs = 0;
    let mut profile = |_: &[String], _: &Path| -> anyhow::Result<PathBuf> {
        runs += 1;
        Ok(bare.clone())
    };
    let err = sweep::sweep(&opts(d), &mut profile, &mut |_| {}).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("no -e pattern given"), "{msg}");
    assert!(msg.contains("-e PATTERN"), "{msg}");
    assert_eq!(runs, 1, "stops before profiling the other values");

    // Kernels and NVTX ranges: the default, said so.
    let with_nvtx = fixture_copy(d, "nvtx.sqlite");
    let mut said = Vec::new();
    let sw = sweep::sweep(
        &opts(d),
        &mut |_: &[String], _: &Path| Ok(with_nvtx.clone()),
        &mut |l| said.push(l.to_string()),
    )
    .unwrap();
    assert!(!sw.rows.is_empty());
    assert!(
        said.iter().any(
            |l| l.contains("no -e pattern given: tabulating the 10 kernels and 10 NVTX ranges")
        ),
        "{said:?}"
    );
}

/// The report exported by the nsys found here (nsys 2022 writes GPU metrics to GENERIC_EVENTS
/// alone, 2023.4 to both tables): no GENERIC_EVENTS row is called "not converted".
#[test]
fn generic_events_of_a_real_export_are_accounted_for() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let Some(report) = corpus_copy(
        d,
        "als244__ResourceEstimation__reports_report2.nsys-rep",
        "r.nsys-rep",
    ) else {
        return;
    };
    let nsys = match nsys_perfetto::report::finding::find_nsys(None) {
        Ok(n) => n,
        Err(e) => {
            skip("nsys", &format!("nsys not found ({e:#})"));
            return;
        }
    };
    let export = d.join("r.sqlite");
    let o = Command::new(&nsys.path)
        .args(["export", "--type", "sqlite", "-o"])
        .arg(&export)
        .arg(&report)
        .output()
        .unwrap();
    assert!(export.is_file(), "{}", stderr(&o));
    let c = rusqlite::Connection::open(&export).unwrap();
    let count = |t: &str| -> Option<u64> {
        c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| {
            r.get::<_, i64>(0)
        })
        .ok()
        .map(|n| n as u64)
    };
    let (generic, metrics) = (count("GENERIC_EVENTS").unwrap(), count("GPU_METRICS"));
    drop(c);
    let (summary, _) = common::convert(&export, &mkdir(d.join("lib")));
    let values = summary.events_of(nsys_perfetto_model::category::Category::GpuMetric);
    assert!(values > 0);
    match metrics {
        // nsys 2022: every row became values.
        None => assert!(
            summary.notes.contains(&format!(
                "GENERIC_EVENTS: {} rows -> {} GPU metric values",
                grouped(generic),
                grouped(values)
            )),
            "{:?}",
            summary.notes
        ),
        // Both tables: the twins are counted as skipped, nothing is "not converted".
        Some(_) => assert_eq!(
            summary
                .skipped
                .iter()
                .filter(|((t, _), _)| t == "GENERIC_EVENTS")
                .map(|(_, n)| n)
                .sum::<u64>(),
            generic
        ),
    }
    assert!(
        !summary
            .notes
            .iter()
            .any(|n| n.contains("GENERIC_EVENTS") && n.contains("not converted")),
        "{:?}",
        summary.notes
    );
}
