//! `analyze` against nsys' own `nsys analyze` (2023.4.4): on every corpus export, the findings of
//! each rule equal nsys' (the goldens of `tests/data/nsys_analyze`, made by its `gen.sh` with
//! `rows=-1`), row for row; nsys run live on a small export with non-default options (time
//! window, NVTX range, process, gap, threshold, chunks); the CLI's output forms and bad input.

use crate::common::{corpus_dir, csv_fields, manifest_dir, skip};
use nsys_perfetto_read::rules::{self, Options, Outcome, RULES, Rule, RuleReport};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

fn goldens() -> PathBuf {
    manifest_dir().join("tests/data/nsys_analyze")
}

/// One row of nsys' CSV as a comparable key: start, duration and the rule's columns that the
/// two tools print alike (labels of old exports and green contexts aside).
type Row = (i64, i64, Vec<String>);

/// The columns compared besides start and duration.
fn compared(rule: Rule) -> &'static [&'static str] {
    match rule {
        Rule::CudaApiSync => &["PID", "TID", "API Name"],
        Rule::CudaMemcpySync | Rule::CudaMemcpyAsync => &[
            "Bytes",
            "PID",
            "Device ID",
            "Context ID",
            "Stream ID",
            "API Name",
        ],
        Rule::CudaMemsetSync => &[
            "Bytes",
            "PID",
            "Device ID",
            "Context ID",
            "Stream ID",
            "API Name",
        ],
        // The context of a gap or chunk is any one row's of its process and device (SQLite's
        // choice of row for a bare column): not compared.
        Rule::GpuGaps => &["PID", "Device ID"],
        Rule::GpuTimeUtil => &["In-Use (%)", "PID", "Device ID"],
    }
}

/// A name as both tools show it: nsys prints the runtime's version suffix, which the trace (and
/// `analyze`) leave out.
fn api_name(s: &str) -> String {
    nsys_perfetto_read::api::display_name(s)
        .unwrap_or(s)
        .to_string()
}

fn number(s: &str) -> i64 {
    s.parse::<i64>()
        .ok()
        .or_else(|| s.parse::<f64>().ok().map(|f| f.round() as i64))
        .unwrap_or_else(|| panic!("not a number: {s:?}"))
}

/// nsys' CSV (`Row#` first for the GPU rules; "Duration (ns)" and "Start (ns)" headers).
fn parse_nsys(rule: Rule, text: &str) -> Vec<Row> {
    let mut lines = text.lines().filter(|l| !l.is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let header: Vec<&str> = header.split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name || h.starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("{rule:?}: no column {name} in {header:?}"))
    };
    let (dur, start) = (col("Duration"), col("Start"));
    let cols: Vec<usize> = compared(rule)
        .iter()
        .map(|c| col(c.trim_end_matches(" (%)")))
        .collect();
    lines
        .map(|l| {
            // Names hold no commas in these rules' columns, except quoted API names: split
            // quoted fields properly.
            let f = csv_fields(l);
            (
                number(&f[start]),
                number(&f[dur]),
                cols.iter()
                    .zip(compared(rule))
                    .map(|(&i, c)| normalize(c, &f[i]))
                    .collect(),
            )
        })
        .collect()
}

fn normalize(column: &str, v: &str) -> String {
    match column {
        "API Name" => api_name(v),
        "In-Use (%)" => format!("{:.1}", v.parse::<f64>().unwrap_or(f64::NAN)),
        _ => v.to_string(),
    }
}

fn ours(report: &RuleReport) -> Vec<Row> {
    report
        .findings()
        .iter()
        .map(|f| {
            (
                f.start,
                f.duration,
                compared(report.rule)
                    .iter()
                    .map(|c| {
                        let v = f
                            .value(report.rule, c)
                            .unwrap_or_else(|| panic!("{:?} has no {c}", report.rule));
                        match (c, v) {
                            // nsys prints bytes in MB, to 3 decimals.
                            (&"Bytes", rules::Value::Int(b)) => format!("{:.3}", *b as f64 / 1e6),
                            _ => normalize(c, &v.text()),
                        }
                    })
                    .collect(),
            )
        })
        .collect()
}

/// `RULE[@k=v,k=v]` (a golden's file stem) as the rule and its options.
fn options_of(stem: &str) -> (Rule, Options) {
    let (rule, opts) = stem.split_once('@').unwrap_or((stem, ""));
    let rule = Rule::parse(rule).unwrap();
    let mut o = Options {
        rules: vec![rule],
        ..Options::default()
    };
    for kv in opts.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap();
        let v: i64 = v.parse().unwrap();
        match k {
            "gap" => o.gap_ms = v,
            "threshold" => o.threshold = v,
            "chunks" => o.chunks = v,
            "start" => o.start = Some(v),
            "end" => o.end = Some(v),
            "process" => o.process = Some(v),
            other => panic!("option {other} of {stem}"),
        }
    }
    (rule, o)
}

fn sorted(mut v: Vec<Row>) -> Vec<Row> {
    v.sort();
    v
}

/// Compare one rule's result with nsys' (`Some(csv)`, or `None` when nsys skipped the rule).
fn check(what: &str, report: &RuleReport, nsys: Option<&str>) -> usize {
    match (nsys, &report.outcome) {
        (None, Outcome::Skipped(_)) => 0,
        (None, Outcome::Findings(f)) => {
            panic!(
                "{what}: nsys skips the rule, analyze found {} rows",
                f.len()
            )
        }
        (Some(_), Outcome::Skipped(why)) => panic!("{what}: nsys ran the rule, analyze: {why}"),
        (Some(csv), Outcome::Findings(_)) => {
            let theirs = sorted(parse_nsys(report.rule, csv));
            let mine = sorted(ours(report));
            if theirs != mine {
                let only_theirs: Vec<_> = theirs
                    .iter()
                    .filter(|r| !mine.contains(r))
                    .take(5)
                    .collect();
                let only_mine: Vec<_> = mine
                    .iter()
                    .filter(|r| !theirs.contains(r))
                    .take(5)
                    .collect();
                panic!(
                    "{what}: nsys {} rows, analyze {}; only nsys: {only_theirs:?}; only analyze: \
                     {only_mine:?}",
                    theirs.len(),
                    mine.len()
                );
            }
            theirs.len()
        }
    }
}

/// Every corpus export against the committed goldens, every rule and option set nsys was run
/// with; every export has goldens.
#[test]
fn every_corpus_export_equals_nsys_analyze() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let mut exports: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .collect();
    exports.sort();
    assert!(exports.len() >= 30, "{} exports", exports.len());
    let mut per_rule: BTreeMap<String, usize> = BTreeMap::new();
    for export in &exports {
        let name = export.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = goldens().join(&name);
        assert!(
            dir.is_dir(),
            "no nsys goldens for {name}: run tests/data/nsys_analyze/gen.sh"
        );
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 8, "{name}: {files:?}");
        for file in files {
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            let (rule, opts) = options_of(&stem);
            let reports = rules::analyze::analyze_export(export, &opts)
                .unwrap_or_else(|e| panic!("{name} {stem}: {e:#}"));
            let nsys = (file.extension().unwrap() == "csv")
                .then(|| std::fs::read_to_string(&file).unwrap());
            let n = check(&format!("{name} {stem}"), &reports[0], nsys.as_deref());
            assert_eq!(reports[0].rule, rule);
            *per_rule.entry(stem).or_default() += n;
        }
    }
    eprintln!("nsys analyze findings matched per rule: {per_rule:?}");
    // The goldens hold findings of every rule but cuda_memset_sync (no corpus export has a
    // synchronous memset of pinned or managed memory): a comparison of empty lists proves little.
    for rule in RULES {
        if rule != Rule::CudaMemsetSync {
            assert!(per_rule[rule.name()] > 0, "{rule:?}: {per_rule:?}");
        }
    }
}

/// nsys 2023.4 or newer (the one with these rules), when installed.
fn nsys_2023() -> Option<PathBuf> {
    let candidates = nsys_perfetto::report::finding::nsys_candidates(None).unwrap_or_default();
    let fixed = PathBuf::from("/opt/nvidia/nsight-systems/2023.4.4/bin/nsys");
    candidates
        .into_iter()
        .map(|(p, _)| p)
        .chain(fixed.is_file().then_some(fixed))
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| {
                    let v = String::from_utf8_lossy(&o.stdout).to_string();
                    v.split_whitespace().any(|w| {
                        let mut parts = w.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
                        matches!((parts.next(), parts.next()), (Some(y), Some(m)) if y > 2023 || y == 2023 && m >= 4)
                    })
                })
        })
}

/// nsys analyze run now on a copy of `export` with `rule:rows=-1:OPTIONS`: its CSV, or `None`
/// when it skipped the rule.
fn nsys_analyze(nsys: &Path, export: &Path, spec: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.sqlite");
    std::fs::copy(export, &input).unwrap();
    // To standard output: a file name would hold the options (an NVTX range's '/N').
    let out = Command::new(nsys)
        .current_dir(dir.path())
        .args(["analyze", "--format", "csv", "-o", "-", "-r", spec])
        .arg(&input)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.to_lowercase().contains("error"),
        "nsys analyze {spec}: {log}{err}"
    );
    if log.contains("SKIPPED") {
        return None;
    }
    let csv: Vec<&str> = log
        .lines()
        .skip_while(|l| !(l.starts_with("Row#,") || l.starts_with("Duration")))
        .collect();
    Some(csv.join("\n"))
}

/// nsys live, with the options the goldens leave at their defaults.
#[test]
fn options_equal_nsys_analyze_live() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let Some(nsys) = nsys_2023() else {
        skip("nsys", "nsys 2023.4 or newer not found");
        return;
    };
    // Small exports with synchronizing calls, memcpys, GPU gaps and NVTX ranges (whose names
    // hold no ':', which nsys' option syntax would split).
    let fuser = corpus.join("NVIDIA__Fuser__report1@8fa9ec2.sqlite");
    let llama = corpus.join("Sh1mwww__llama3-inference__real_inference_simulation.sqlite");
    let bounds = |export: &Path| -> (i64, i64, i64) {
        let (conn, _) = nsys_perfetto_read::schema::open_schema(export).unwrap();
        let (lo, hi): (i64, i64) = conn
            .query_row(
                "SELECT min(start), max(\"end\") FROM CUPTI_ACTIVITY_KIND_KERNEL",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let pid: i64 = conn
            .query_row(
                "SELECT (globalTid >> 24) & 0xFFFFFF FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (lo, hi, pid)
    };
    let (lo, hi, pid) = bounds(&fuser);
    let mid = lo + (hi - lo) / 3;
    let (llo, lhi, lpid) = bounds(&llama);
    let lmid = llo + (lhi - llo) / 2;
    let d = Options::default;
    let specs: Vec<(&Path, String, Options)> = vec![
        (
            &fuser,
            format!("cuda_api_sync:rows=-1:start={mid}"),
            Options {
                start: Some(mid),
                ..d()
            },
        ),
        (
            &fuser,
            format!("cuda_memcpy_sync:rows=-1:start={lo}:end={mid}"),
            Options {
                start: Some(lo),
                end: Some(mid),
                ..d()
            },
        ),
        (
            &fuser,
            format!("cuda_memcpy_async:rows=-1:end={mid}"),
            Options {
                end: Some(mid),
                ..d()
            },
        ),
        (
            &fuser,
            "gpu_gaps:rows=-1:gap=0".into(),
            Options { gap_ms: 0, ..d() },
        ),
        (
            &fuser,
            format!("gpu_gaps:rows=-1:gap=0:start={mid}"),
            Options {
                gap_ms: 0,
                start: Some(mid),
                ..d()
            },
        ),
        (
            &fuser,
            "gpu_time_util:rows=-1:threshold=95:chunks=7".into(),
            Options {
                threshold: 95,
                chunks: 7,
                ..d()
            },
        ),
        (
            &llama,
            format!("cuda_api_sync:rows=-1:process={lpid}:end={lmid}"),
            Options {
                process: Some(lpid),
                end: Some(lmid),
                ..d()
            },
        ),
        (
            &llama,
            format!("cuda_api_sync:rows=-1:process={pid}"),
            Options {
                process: Some(pid),
                ..d()
            },
        ),
        (
            &llama,
            format!("cuda_api_sync:rows=-1:thread={lpid}"),
            Options {
                thread: Some(lpid),
                ..d()
            },
        ),
        (
            &llama,
            "cuda_api_sync:rows=-1:nvtx=token_0_processing".into(),
            Options {
                nvtx: Some("token_0_processing".into()),
                ..d()
            },
        ),
        (
            &llama,
            "gpu_gaps:rows=-1:gap=0:nvtx=layer_0_computation/3".into(),
            Options {
                gap_ms: 0,
                nvtx: Some("layer_0_computation/3".into()),
                ..d()
            },
        ),
        (
            &llama,
            format!("gpu_gaps:rows=-1:gap=0:nvtx=token_0_processing:start={llo}"),
            Options {
                gap_ms: 0,
                nvtx: Some("token_0_processing".into()),
                start: Some(llo),
                ..d()
            },
        ),
        (
            &llama,
            "gpu_time_util:rows=-1:threshold=100:chunks=1000".into(),
            Options {
                threshold: 100,
                chunks: 1000,
                ..d()
            },
        ),
        (
            &llama,
            format!("gpu_time_util:rows=-1:threshold=90:chunks=13:start={lmid}:end={lhi}"),
            Options {
                threshold: 90,
                chunks: 13,
                start: Some(lmid),
                end: Some(lhi),
                ..d()
            },
        ),
        (&llama, "cuda_memset_sync:rows=-1".into(), d()),
    ];
    let mut total = 0;
    for (export, spec, mut opts) in specs {
        let rule = Rule::parse(spec.split(':').next().unwrap()).unwrap();
        opts.rules = vec![rule];
        let theirs = nsys_analyze(&nsys, export, &spec);
        let reports = rules::analyze::analyze_export(export, &opts)
            .unwrap_or_else(|e| panic!("{spec}: {e:#}"));
        total += check(&spec, &reports[0], theirs.as_deref());
    }
    assert!(total > 100, "{total} findings compared");
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// The CLI: --rule, --top, --csv (columns a script reads), the table, JSON, and --top 0.
#[test]
fn cli_output_forms() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let export = corpus.join("NVIDIA__Fuser__report1@8fa9ec2.sqlite");
    let e = export.to_str().unwrap();
    let all = rules::analyze::analyze_export(
        &export,
        &Options {
            gap_ms: 0,
            ..Options::default()
        },
    )
    .unwrap();
    let gaps = all
        .iter()
        .find(|r| r.rule == Rule::GpuGaps)
        .unwrap()
        .findings();
    assert!(gaps.len() > 3, "{} gaps", gaps.len());

    let out = run(&[
        "analyze", e, "--rule", "gpu_gaps", "--gap", "0", "--csv", "--top", "3",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(&header[..3], ["rule", "start_ns", "duration_ns"]);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3);
    for (row, g) in rows.iter().zip(gaps) {
        assert_eq!(row[0], "gpu_gaps");
        assert_eq!(row[1], g.start.to_string());
        assert_eq!(row[2], g.duration.to_string());
    }
    // Longest first.
    assert!(gaps.windows(2).all(|w| w[0].duration >= w[1].duration));

    let out = run(&[
        "analyze",
        e,
        "-r",
        "gpu_gaps,cuda_api_sync",
        "--gap",
        "0",
        "--csv",
        "--top",
        "0",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    let syncs = all
        .iter()
        .find(|r| r.rule == Rule::CudaApiSync)
        .unwrap()
        .findings()
        .len();
    assert_eq!(text.lines().count(), 1 + gaps.len() + syncs);
    assert!(
        text.lines()
            .skip(1)
            .all(|l| l.starts_with("gpu_gaps,") || l.starts_with("cuda_api_sync,"))
    );

    // The table: every rule by nsys' name, with its advice or nsys' no-result message.
    let out = run(&["analyze", e]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for rule in RULES {
        assert!(
            text.contains(&format!("{} ({})", rule.name(), rule.title())),
            "{text}"
        );
    }
    assert!(text.contains("Suggestion"), "{text}");

    let out = run(&["analyze", e, "--json", "-r", "gpu_time_util"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["rule"], "gpu_time_util");
    assert!(v[0]["findings"][0]["start_ns"].is_i64(), "{v}");
}

/// Bad input: one line naming the file (or the option), a non-zero exit, nothing written.
#[test]
fn bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.sqlite");
    std::fs::write(&junk, b"not a database at all, not even close").unwrap();
    let out_file = dir.path().join("out.csv");
    for (args, needle) in [
        (
            vec![
                "analyze",
                junk.to_str().unwrap(),
                "-o",
                out_file.to_str().unwrap(),
            ],
            "junk.sqlite",
        ),
        (
            vec![
                "analyze",
                dir.path().join("missing.sqlite").to_str().unwrap(),
            ],
            "missing.sqlite",
        ),
        (
            vec!["analyze", junk.to_str().unwrap(), "--rule", "gpu_gapz"],
            "gpu_gapz",
        ),
        (
            vec!["analyze", junk.to_str().unwrap(), "--chunks", "0"],
            "--chunks",
        ),
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
        assert!(!out_file.exists());
    }
    if let Some(corpus) = corpus_dir() {
        let e = corpus.join("NVIDIA__Fuser__report1@8fa9ec2.sqlite");
        let out = run(&[
            "analyze",
            e.to_str().unwrap(),
            "--nvtx",
            "no such range at all",
            "-o",
            out_file.to_str().unwrap(),
        ]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("no such range at all") && err.contains("Fuser"),
            "{err}"
        );
        assert!(!out_file.exists());
    }
}

/// The reading crate refuses a chunk count out of range in words for any caller, naming no
/// command-line flag (the command line says `--chunks` itself, checked above).
#[test]
fn the_library_refuses_chunks_out_of_range_in_its_own_words() {
    let export = crate::common::fixture("nvtx_workload.sqlite");
    for chunks in [0, 1001] {
        let opts = Options {
            chunks,
            ..Options::default()
        };
        let e = rules::analyze::analyze_export(&export, &opts).unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            format!(
                "gpu_time_util's chunks per process and GPU must be between 1 and 1000, not {chunks}"
            )
        );
    }
}

/// Convert with `--analyze` into `dir`.
fn convert_analyzed(
    input: &Path,
    dir: &Path,
    format: nsys_perfetto_write::output::formats::OutputFormat,
    selection: nsys_perfetto_model::select::Selection,
) -> (nsys_perfetto_model::summary::Summary, PathBuf) {
    let out = dir.join(format!(
        "{}.{}",
        input.file_stem().unwrap().to_string_lossy(),
        format.extension()
    ));
    let opts = nsys_perfetto::convert::Options {
        format,
        analyze: true,
        selection,
        ..Default::default()
    };
    (crate::common::convert_to(input, &out, &opts), out)
}

/// `--analyze`: an "Analysis" group with one track per rule that found something, one slice
/// per finding at its time, named by its rule, with the rule's explanation and advice, and an
/// arrow from the CUDA call it blames; the trace imports into Perfetto without an error.
#[test]
fn findings_on_the_timeline() {
    use nsys_perfetto_model::category::Category;
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut blamed = 0;
    let mut rules_seen = std::collections::BTreeSet::new();
    for name in [
        // Synchronizing calls and pageable async memcpys.
        "quasiben__nvtx-examples__cudf.sqlite",
        // Synchronous memcpys, GPU gaps.
        "bwyogatama__Mordred-Deprecated__report1@84a0fd9.sqlite",
        // Two GPUs, two processes.
        "GindaChen__nsys-ai__mfu_2gpu_before.sqlite",
        "NVIDIA__Fuser__report1@8fa9ec2.sqlite",
    ] {
        let input = corpus.join(name);
        let findings = rules::analyze::analyze_export(&input, &Options::default()).unwrap();
        let (summary, out) = convert_analyzed(
            &input,
            dir.path(),
            nsys_perfetto_write::output::formats::OutputFormat::Protobuf,
            Default::default(),
        );
        let trace = crate::common::validate_file(&out);
        let mut want: Vec<(String, i64, i64)> = findings
            .iter()
            .flat_map(|r| {
                r.findings()
                    .iter()
                    .map(move |f| (r.rule.name().to_string(), f.start, f.duration))
            })
            .collect();
        want.sort();
        assert_eq!(
            summary.events_of(Category::Analysis) as usize,
            want.len(),
            "{name}"
        );
        let slices: Vec<(usize, &crate::common::Slice)> = trace
            .slices
            .iter()
            .enumerate()
            .filter(|(_, s)| &*s.category == "analysis")
            .collect();
        let mut got: Vec<(String, i64, i64)> = slices
            .iter()
            .map(|(_, s)| (s.name.to_string(), s.start, s.dur()))
            .collect();
        got.sort();
        assert_eq!(
            got, want,
            "{name}: the Analysis slices are not the findings"
        );
        for report in &findings {
            let rule = report.rule;
            let mut of_rule: Vec<&(usize, &crate::common::Slice)> = slices
                .iter()
                .filter(|(_, s)| &*s.name == rule.name())
                .collect();
            of_rule.sort_by_key(|(_, s)| (s.start, -s.dur()));
            if of_rule.is_empty() {
                continue;
            }
            rules_seen.insert(rule);
            for &&(i, s) in &of_rule {
                // On its rule's track (or an overlap lane beside it) in the top-level group.
                let ancestry: Vec<String> = trace
                    .ancestry(s.track)
                    .iter()
                    .map(|t| trace.track_name(t.uuid))
                    .collect();
                assert!(
                    ancestry.iter().any(|n| *n == rule.track_name())
                        && ancestry.last().is_some_and(|n| n == "Analysis"),
                    "{name}: {rule:?} slice on {ancestry:?}"
                );
                assert_eq!(s.arg_str("explanation"), Some(rule.explanation()));
                assert_eq!(
                    s.arg_str("advice"),
                    Some(rule.advice(&Options::default()).as_str())
                );
                let finding = report
                    .findings()
                    .iter()
                    .find(|f| f.start == s.start && f.duration == s.dur())
                    .unwrap();
                match &finding.blame {
                    // A synchronizing call: the finding is the call itself, at its time and on
                    // its thread's id.
                    Some(b) if rule == Rule::CudaApiSync => {
                        assert!(trace.flow_into(i).is_none(), "{name}");
                        assert_eq!(
                            (finding.start, finding.duration),
                            (b.start, b.end - b.start)
                        );
                        assert_eq!(s.arg_int("blamed_call_tid"), Some(b.global_tid & 0xFF_FFFF));
                    }
                    Some(b) => {
                        let flow = trace.flow_into(i).unwrap_or_else(|| {
                            panic!("{name}: {rule:?} at {} has no arrow", s.start)
                        });
                        let call = &trace.slices[flow.source];
                        assert_eq!(&*call.category, "cuda.api", "{name}");
                        assert_eq!(
                            call.start, b.start,
                            "{name}: {rule:?} blames the wrong call"
                        );
                        assert_eq!(call.end, b.end, "{name}");
                        assert_eq!(
                            trace.thread_of(call.track).map(|t| t.tid as i64),
                            Some(b.global_tid & 0xFF_FFFF),
                            "{name}"
                        );
                        blamed += 1;
                    }
                    None => assert!(trace.flow_into(i).is_none(), "{name}"),
                }
            }
        }
        if let Some(r) = crate::common::tpcheck(&out) {
            r.unwrap_or_else(|e| panic!("{name}: tpcheck --strict: {e}"));
        }
    }
    assert!(blamed > 300, "{blamed} arrows checked");
    for rule in [
        Rule::CudaApiSync,
        Rule::CudaMemcpySync,
        Rule::CudaMemcpyAsync,
        Rule::GpuGaps,
        Rule::GpuTimeUtil,
    ] {
        assert!(
            rules_seen.contains(&rule),
            "{rule:?} drawn nowhere: {rules_seen:?}"
        );
    }
}

/// `--analyze` with a selection that leaves the CUDA calls out: the findings stay, with no
/// arrow from a call that is not there; JSON carries them too.
#[test]
fn findings_with_a_selection_and_in_json() {
    use nsys_perfetto_model::category::Category;
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let input = corpus.join("quasiben__nvtx-examples__cudf.sqlite");
    let n: usize = rules::analyze::analyze_export(&input, &Options::default())
        .unwrap()
        .iter()
        .map(|r| r.findings().len())
        .sum();
    let dir = tempfile::tempdir().unwrap();
    let selection = nsys_perfetto_model::select::Selection {
        types: nsys_perfetto_model::category::EventType::parse_list(&["kernel", "memcpy"]).unwrap(),
        ..Default::default()
    };
    let (summary, out) = convert_analyzed(
        &input,
        dir.path(),
        nsys_perfetto_write::output::formats::OutputFormat::Protobuf,
        selection,
    );
    assert_eq!(summary.events_of(Category::Analysis) as usize, n);
    let trace = crate::common::validate_file(&out);
    assert!(
        trace
            .slices
            .iter()
            .filter(|s| &*s.category == "analysis")
            .all(|s| s.flow_in.is_empty())
    );
    let (summary, out) = convert_analyzed(
        &input,
        dir.path(),
        nsys_perfetto_write::output::formats::OutputFormat::Json,
        Default::default(),
    );
    assert_eq!(summary.events_of(Category::Analysis) as usize, n);
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let analysis = events
        .iter()
        .filter(|e| e["cat"] == "analysis" && (e["ph"] == "X" || e["ph"] == "B"))
        .count();
    assert_eq!(analysis, n);
}

/// The CLI flag: `--analyze` on a conversion.
#[test]
fn cli_analyze_flag() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.pftrace");
    let input = corpus.join("NVIDIA__Fuser__report1@8fa9ec2.sqlite");
    let o = run(&[
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--analyze",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let trace = crate::common::validate_file(&out);
    let n = trace
        .slices
        .iter()
        .filter(|s| &*s.category == "analysis")
        .count();
    assert!(n >= 2, "{n} findings");
    let o = run(&[
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
        "--force",
    ]);
    assert!(o.status.success());
    let trace = crate::common::validate_file(&out);
    assert_eq!(
        trace
            .slices
            .iter()
            .filter(|s| &*s.category == "analysis")
            .count(),
        0
    );
}

/// One HTTP/1.1 request to `serve` (closing the connection): the status and the body.
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        !head.to_lowercase().contains("transfer-encoding: chunked"),
        "{head}"
    );
    (status, raw[split + 4..].to_vec())
}

/// `serve`: the page's "Analysis" checkbox sends `analyze=1`, and the API then adds the findings.
#[test]
fn serve_checkbox_adds_the_findings() {
    use std::io::BufRead;
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let input = corpus.join("NVIDIA__Fuser__report1@8fa9ec2.sqlite");
    let n: usize = rules::analyze::analyze_export(&input, &Options::default())
        .unwrap()
        .iter()
        .map(|r| r.findings().len())
        .sum();
    assert!(n > 0);
    // Its temporary files in a folder of the test's: the server is killed at the end.
    let temp = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--port", "0", "--temp-dir"])
        .arg(temp.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    for _ in 0..20 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
            addr = Some(
                url.trim_start_matches("http://")
                    .trim_end_matches('/')
                    .to_string(),
            );
            break;
        }
    }
    // Its stderr stays read (a full pipe would block it) until the end.
    let drain = std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).unwrap_or(0) > 0 {
            sink.clear();
        }
    });
    let result = std::panic::catch_unwind(|| {
        let addr = addr.expect("serve printed its address");
        let (status, page) = http(&addr, "GET", "/", b"");
        assert_eq!(status, 200);
        let page = String::from_utf8(page).unwrap();
        assert!(page.contains("id=\"analyze\""), "no checkbox");
        assert!(
            page.contains("analyze: opts.analyze"),
            "the checkbox is not sent"
        );
        let body = std::fs::read(&input).unwrap();
        for (query, want) in [("&analyze=1", n), ("", 0)] {
            let (status, reply) = http(
                &addr,
                "POST",
                &format!("/api/convert?name=fuser.sqlite{query}"),
                &body,
            );
            let v: serde_json::Value = serde_json::from_slice(&reply).unwrap();
            assert_eq!(status, 200, "{v}");
            assert_eq!(
                v["summary"]["events"]["analysis"].as_u64().unwrap_or(0) as usize,
                want,
                "{query}: {v}"
            );
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = drain.join();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A report (.nsys-rep) is analyzed through its SQLite export, as a conversion exports it: the
/// findings equal those of the export nsys 2023.4.4 made of the same report.
#[test]
fn reports_are_analyzed_through_their_export() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let Some(nsys) = nsys_2023() else {
        skip("nsys", "nsys 2023.4 or newer not found");
        return;
    };
    let stem = "PhilippRue__SiScLab_23_24__exercise_3_GPU_demonstrators_matmul_out_test";
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("matmul.nsys-rep");
    std::fs::copy(corpus.join(format!("{stem}.nsys-rep")), &report).unwrap();
    let export = corpus.join(format!("{stem}.export-2023.4.4.sqlite"));
    let args = ["--top", "0", "--csv", "--gap", "0"];
    let from_report = Command::new(BIN)
        .arg("analyze")
        .arg(&report)
        .args(args)
        .arg("--nsys")
        .arg(&nsys)
        .output()
        .unwrap();
    assert!(
        from_report.status.success(),
        "{}",
        String::from_utf8_lossy(&from_report.stderr)
    );
    let from_export = Command::new(BIN)
        .arg("analyze")
        .arg(&export)
        .args(args)
        .output()
        .unwrap();
    assert!(from_export.status.success());
    let text = String::from_utf8(from_report.stdout).unwrap();
    assert!(text.lines().count() > 2, "{text}");
    assert_eq!(text, String::from_utf8(from_export.stdout).unwrap());
}
