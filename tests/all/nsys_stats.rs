//! `stats` against nsys' own `nsys stats` (nsys 2023.4.4), report by report, row by row:
//! - on every corpus SQLite export, against the goldens of `tests/data/nsys_stats/` (made by
//!   `gen.sh` there: nsys 2023.4.4's `--format csv` output of each report, per export);
//! - live, where nsys 2023.4 is installed, on small exports and on a report (`.qdrep`), which
//!   `stats` exports first as a conversion does;
//! - the command line: `--report`, `--base`/`--mangled`, CSV and JSON, bad report names.

use crate::common::{corpus_dir, manifest_dir, skip};
use nsys_perfetto::report::{self, finding::Nsys};
use nsys_perfetto::workflow::reports::csv;
use nsys_perfetto::workflow::stats::query::stats_with;
use nsys_perfetto::workflow::stats::{ReportChoice, StatsOptions};
use nsys_perfetto_read::reports::{KernelNames, REPORTS, ReportName, report_name};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
}

/// A golden file: report (with its `:base`/`:mangled` option) -> nsys' CSV, or `None` where
/// nsys skipped the report.
fn golden(path: &Path) -> BTreeMap<String, Option<String>> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let mut out: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in text.split_inclusive('\n') {
        if let Some(name) = line.strip_prefix("### ") {
            cur = Some(name.trim().to_string());
            out.insert(name.trim().to_string(), Some(String::new()));
        } else if let Some(c) = &cur {
            let e = out.get_mut(c).unwrap();
            if line.trim_end() == "#SKIPPED" {
                *e = None;
            } else if let Some(t) = e {
                t.push_str(line);
            }
        }
    }
    out
}

/// Our CSV of each report (by nsys' name) with kernels named as asked.
/// The goldens (`*.txt.gz`) in `dir`, sorted.
fn golden_files(dir: &Path) -> Vec<PathBuf> {
    let mut goldens: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".txt.gz"))
        .collect();
    goldens.sort();
    goldens
}

fn ours(path: &Path, names: KernelNames, reports: &[ReportName]) -> BTreeMap<String, String> {
    let quiet = nsys_perfetto::report::export::ExportOptions {
        quiet: true,
        ..Default::default()
    };
    let opened = nsys_perfetto::input::open(path, &quiet, true).unwrap();
    let st = stats_with(
        &opened.export,
        path,
        &StatsOptions {
            top: 0,
            raw_names: true,
        },
        &ReportChoice {
            reports: reports.to_vec(),
            kernel_names: names,
            kinds: Some(Vec::new()),
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    st.reports
        .iter()
        .map(|r| (r.name.to_string(), csv(r)))
        .collect()
}

/// Compare one report: equal CSV text where nsys ran it; no rows where nsys found none; where
/// nsys skipped it (it lacks a table it wants, e.g. `ENUM_CUDA_MEMCPY_OPER` in old exports,
/// whose copy kinds we label ourselves) anything. Returns whether rows were compared.
fn check(file: &str, report: &str, nsys: Option<&String>, ours: Option<&String>) -> bool {
    let Some(nsys) = nsys else {
        return false;
    };
    if nsys.is_empty() {
        // nsys ran the query and found no rows (it then writes an empty file).
        let rows = ours.map_or(0, |o| o.lines().count().saturating_sub(1));
        assert_eq!(
            rows, 0,
            "{file} {report}: nsys found no rows, we have\n{ours:?}"
        );
        return false;
    }
    let ours = ours.unwrap_or_else(|| panic!("{file} {report}: nsys has rows, we have no report"));
    if nsys != ours {
        let (n, o): (Vec<&str>, Vec<&str>) = (nsys.lines().collect(), ours.lines().collect());
        let first = n
            .iter()
            .zip(&o)
            .position(|(a, b)| a != b)
            .unwrap_or(n.len().min(o.len()));
        panic!(
            "{file} {report}: {} rows in nsys, {} ours; first difference at line {first}:\n  nsys: {:?}\n  ours: {:?}",
            n.len(),
            o.len(),
            n.get(first),
            o.get(first)
        );
    }
    nsys.lines().count() > 1
}

#[test]
fn stats_equal_nsys_stats_on_every_export() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let dir = manifest_dir().join("tests/data/nsys_stats");
    let goldens = golden_files(&dir);
    // Every SQLite export of the corpus has its golden.
    let mut exports: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".sqlite"))
        .collect();
    exports.sort();
    let named: Vec<String> = goldens
        .iter()
        .map(|g| {
            let n = g.file_name().unwrap().to_string_lossy();
            format!("{}.sqlite", n.trim_end_matches(".txt.gz"))
        })
        .collect();
    assert_eq!(
        exports, named,
        "one golden per corpus export (tests/data/nsys_stats/gen.sh)"
    );
    let kernel_reports: Vec<ReportName> = REPORTS
        .iter()
        .copied()
        .filter(|r| r.name.starts_with("cuda_gpu_kern") || r.name == "cuda_kern_exec_sum")
        .collect();
    // The NVTX projection reports have their own goldens (the test below).
    let main_reports: Vec<ReportName> = REPORTS
        .iter()
        .copied()
        .filter(|r| !matches!(r.name, "nvtx_gpu_proj_sum" | "nvtx_kern_sum"))
        .collect();
    let mut compared: BTreeMap<String, u32> = BTreeMap::new();
    for (g, export) in goldens.iter().zip(&exports) {
        let gold = golden(g);
        let path = corpus.join(export);
        for (names, suffix, reports) in [
            (KernelNames::Demangled, "", main_reports.clone()),
            (KernelNames::Base, ":base", kernel_reports.clone()),
            (KernelNames::Mangled, ":mangled", kernel_reports.clone()),
        ] {
            let got = ours(&path, names, &reports);
            for r in &reports {
                let key = format!("{}{suffix}", r.name);
                let Some(nsys) = gold.get(&key) else {
                    continue;
                };
                if check(export, &key, nsys.as_ref(), got.get(r.name)) {
                    *compared.entry(key).or_default() += 1;
                }
            }
        }
    }
    eprintln!("reports with rows compared, by report: {compared:?}");
    // The corpus has rows for these; each must have been compared somewhere.
    for r in [
        "cuda_gpu_kern_sum",
        "cuda_gpu_kern_sum:base",
        "cuda_gpu_kern_sum:mangled",
        "cuda_api_sum",
        "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum",
        "nvtx_sum",
        "osrt_sum",
        "um_cpu_page_faults_sum",
        "openacc_sum",
        "cuda_gpu_kern_gb_sum",
        "cuda_kern_exec_sum",
    ] {
        assert!(
            compared.get(r).is_some_and(|n| *n > 0),
            "{r} never compared: {compared:?}"
        );
    }
    assert!(compared.values().sum::<u32>() >= 150, "{compared:?}");
}

/// The NVTX projection reports (`nvtx_gpu_proj_sum`, `nvtx_kern_sum` and its `:base` and
/// `:mangled` forms) against their goldens in `tests/data/nsys_stats/nvtx/` (`gen.sh --nvtx`):
/// kernels and memory operations matched to the NVTX ranges around the API calls that launched
/// them, range nesting levels and children, on every corpus export.
#[test]
fn nvtx_projection_reports_equal_nsys_stats_on_every_export() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let dir = manifest_dir().join("tests/data/nsys_stats/nvtx");
    let goldens = golden_files(&dir);
    let exports = std::fs::read_dir(&corpus)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".sqlite"))
        .count();
    assert_eq!(
        goldens.len(),
        exports,
        "one golden per corpus export (tests/data/nsys_stats/gen.sh --nvtx)"
    );
    let proj = report_name("nvtx_gpu_proj_sum").unwrap();
    let kern = report_name("nvtx_kern_sum").unwrap();
    let mut compared: BTreeMap<String, u32> = BTreeMap::new();
    for g in &goldens {
        let gold = golden(g);
        let n = g.file_name().unwrap().to_string_lossy();
        let export = format!("{}.sqlite", n.trim_end_matches(".txt.gz"));
        let path = corpus.join(&export);
        for (names, suffix, reports) in [
            (KernelNames::Demangled, "", vec![proj, kern]),
            (KernelNames::Base, ":base", vec![kern]),
            (KernelNames::Mangled, ":mangled", vec![kern]),
        ] {
            let got = ours(&path, names, &reports);
            for r in &reports {
                let key = format!("{}{suffix}", r.name);
                let nsys = gold
                    .get(&key)
                    .unwrap_or_else(|| panic!("{export}: no {key} in {}", g.display()));
                if check(&export, &key, nsys.as_ref(), got.get(r.name)) {
                    *compared.entry(key).or_default() += 1;
                }
            }
        }
    }
    eprintln!("NVTX projection reports with rows compared: {compared:?}");
    // 11 corpus exports have CUDA work inside NVTX ranges.
    for r in [
        "nvtx_gpu_proj_sum",
        "nvtx_kern_sum",
        "nvtx_kern_sum:base",
        "nvtx_kern_sum:mangled",
    ] {
        assert!(
            compared.get(r).is_some_and(|n| *n >= 10),
            "{r} compared on too few exports: {compared:?}"
        );
    }
}

/// nsys 2023.4 (the goldens' version), when installed.
fn nsys_2023_4() -> Option<Nsys> {
    let found = report::finding::nsys_candidates(None)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|(p, s)| Nsys::probe(&p, s).ok())
        .find(|n| n.version.is_some_and(|v| (v.year, v.release) == (2023, 4)));
    if found.is_none() {
        skip("nsys", "nsys 2023.4 is not installed");
    }
    found
}

/// `nsys stats --format csv -r REPORTS` on `input` (a copy in a temp dir), by report.
fn nsys_stats(nsys: &Nsys, input: &Path, reports: &[&str]) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    let dir = input.parent().unwrap();
    for r in reports {
        let prefix = dir.join("out");
        let mut cmd = Command::new(&nsys.path);
        cmd.args(["stats", "--force-overwrite=true"]);
        if input.extension().is_some_and(|e| e != "sqlite") {
            // A report: export it again each time (the export would be older than the input).
            cmd.arg("--force-export=true");
        }
        let said = cmd
            .args(["--format", "csv", "-r", r, "-o"])
            .arg(&prefix)
            .arg(input)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&said.stdout).into_owned()
            + &String::from_utf8_lossy(&said.stderr);
        let file = dir.join(format!("out_{}.csv", r.replace(':', "_")));
        let v = if said.contains("SKIPPED") {
            None
        } else {
            Some(
                std::fs::read_to_string(&file)
                    .unwrap_or_else(|e| panic!("nsys stats -r {r}: {e}; it said {said}")),
            )
        };
        let _ = std::fs::remove_file(&file);
        out.insert(r.to_string(), v);
    }
    out
}

/// Our CLI's CSV of each report, run on `input` with `args`.
fn cli_stats(input: &Path, reports: &[&str], args: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for r in reports {
        let o = bin()
            .args(["stats", "--csv", "--raw-names", "-r", r])
            .args(args)
            .arg(input)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "stats -r {r} {}: {}",
            input.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        let text = String::from_utf8(o.stdout).unwrap();
        if !text.is_empty() {
            out.insert(r.to_string(), text);
        }
    }
    out
}

const LIVE: [&str; 8] = [
    "cuda_gpu_kern_sum",
    "cuda_api_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
    "nvtx_sum",
    "osrt_sum",
    "cuda_gpu_kern_gb_sum",
    "cuda_kern_exec_sum",
];

#[test]
fn stats_equal_nsys_stats_live() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let Some(nsys) = nsys_2023_4() else {
        return;
    };
    let mut rows = 0;
    // Two small exports: CUDA with NVTX domains (MPI), and PyTorch on a GPU.
    for name in [
        "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
        "GindaChen__nsys-ai__mock.sqlite",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join(name);
        std::fs::copy(corpus.join(name), &input).unwrap();
        let theirs = nsys_stats(&nsys, &input, &LIVE);
        let ours = cli_stats(&input, &LIVE, &[]);
        for r in LIVE {
            if check(name, r, theirs[r].as_ref(), ours.get(r)) {
                rows += 1;
            }
        }
    }
    assert!(rows >= 6, "{rows} reports with rows compared");
}

/// The NVTX projection reports live, on an export with nested NVTX ranges around kernel
/// launches and memory copies (nvFuser's), with kernels by each of their names.
#[test]
fn nvtx_projection_reports_equal_nsys_stats_live() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let Some(nsys) = nsys_2023_4() else {
        return;
    };
    let name = "NVIDIA__Fuser__report1@64ee035.sqlite";
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join(name);
    std::fs::copy(corpus.join(name), &input).unwrap();
    let reports = ["nvtx_gpu_proj_sum", "nvtx_kern_sum"];
    let theirs = nsys_stats(&nsys, &input, &reports);
    let ours = cli_stats(&input, &reports, &[]);
    for r in reports {
        assert!(
            check(name, r, theirs[r].as_ref(), ours.get(r)),
            "{r}: no rows"
        );
    }
    // nsys' `:base` option and our `--base` name kernels alike.
    let theirs = nsys_stats(&nsys, &input, &["nvtx_kern_sum:base"]);
    let ours = cli_stats(&input, &["nvtx_kern_sum"], &["--base"]);
    assert!(
        check(
            name,
            "nvtx_kern_sum:base",
            theirs["nvtx_kern_sum:base"].as_ref(),
            ours.get("nvtx_kern_sum")
        ),
        "nvtx_kern_sum:base: no rows"
    );
}

/// A report (.qdrep) works as an export does: `stats` exports it with nsys and prints what
/// nsys stats prints for it.
#[test]
fn stats_of_a_report_equal_nsys_stats() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let Some(nsys) = nsys_2023_4() else {
        return;
    };
    let name = "martisu1631998__kmeans-parallel__report2.qdrep";
    let tmp = tempfile::tempdir().unwrap();
    let theirs_dir = tmp.path().join("nsys");
    let ours_dir = tmp.path().join("ours");
    std::fs::create_dir_all(&theirs_dir).unwrap();
    std::fs::create_dir_all(&ours_dir).unwrap();
    std::fs::copy(corpus.join(name), theirs_dir.join(name)).unwrap();
    std::fs::copy(corpus.join(name), ours_dir.join(name)).unwrap();
    let reports = ["cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum"];
    let theirs = nsys_stats(&nsys, &theirs_dir.join(name), &reports);
    let ours = cli_stats(
        &ours_dir.join(name),
        &reports,
        &["--nsys", nsys.path.to_str().unwrap()],
    );
    let mut rows = 0;
    for r in reports {
        if check(name, r, theirs[r].as_ref(), ours.get(r)) {
            rows += 1;
        }
    }
    assert_eq!(rows, 3, "every report compared with rows");
}

/// The command line: one report alone is nsys' CSV exactly; several are marked; `--base`;
/// JSON carries the same rows; a bad report name is one line and a failure.
#[test]
fn stats_report_options() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let input = corpus.join("GindaChen__nsys-ai__mock.sqlite");
    let gold =
        golden(&manifest_dir().join("tests/data/nsys_stats/GindaChen__nsys-ai__mock.txt.gz"));
    let run = |args: &[&str]| {
        let o = bin().arg("stats").args(args).arg(&input).output().unwrap();
        (
            o.status.success(),
            String::from_utf8(o.stdout).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    let (ok, out, _) = run(&["--csv", "--report", "cuda_api_sum"]);
    assert!(ok);
    assert_eq!(Some(&out), gold["cuda_api_sum"].as_ref());
    let (ok, out, _) = run(&["--csv", "-r", "cuda_gpu_kern_sum:base"]);
    assert!(ok);
    assert_eq!(Some(&out), gold["cuda_gpu_kern_sum:base"].as_ref());
    let (ok, out2, _) = run(&["--csv", "-r", "cuda_gpu_kern_sum", "--base"]);
    assert!(ok);
    assert_eq!(out, out2);
    // Several: each under a `### NAME` line.
    let (ok, out, _) = run(&["--csv", "-r", "cuda_api_sum,cuda_gpu_mem_time_sum"]);
    assert!(ok);
    let expect = format!(
        "### cuda_api_sum\n{}### cuda_gpu_mem_time_sum\n{}",
        gold["cuda_api_sum"].as_ref().unwrap(),
        gold["cuda_gpu_mem_time_sum"].as_ref().unwrap()
    );
    assert_eq!(out, expect);
    // The table: nsys' title and name, units on every time column, the demangled names.
    let (ok, out, _) = run(&["--unit", "us"]);
    assert!(ok);
    assert!(
        out.contains("CUDA GPU Kernel Summary (cuda_gpu_kern_sum): 2 rows"),
        "{out}"
    );
    assert!(
        out.contains("Total Time (us)") && out.contains("StdDev (us)"),
        "{out}"
    );
    assert!(out.contains("void at::native::reduce_kernel<"), "{out}");
    assert!(out.contains("[CUDA memcpy Device-to-Host]"), "{out}");
    // JSON: the same rows, under nsys' column headers.
    let (ok, out, _) = run(&["--json", "-r", "cuda_api_sum"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rep = &v["reports"][0];
    assert_eq!(rep["report"], "cuda_api_sum");
    assert_eq!(rep["columns"][8], "Name");
    assert_eq!(rep["columns"][7], "StdDev (ns)");
    let rows = rep["rows"].as_array().unwrap();
    assert_eq!(
        rows.len() + 1,
        gold["cuda_api_sum"].as_ref().unwrap().lines().count()
    );
    assert_eq!(rows[0][8], "cudaLaunchKernel");
    assert_eq!(rows[0][2], 2);
    // Bad names: one line naming the report, a failure, nothing on stdout.
    for bad in ["nope", "cuda_api_sum:base", "cuda_gpu_kern_sum:weird"] {
        let (ok, out, err) = run(&["--csv", "-r", bad]);
        assert!(!ok, "{bad}");
        assert!(out.is_empty(), "{bad}: {out}");
        assert_eq!(err.trim().lines().count(), 1, "{bad}: {err}");
        assert!(err.contains(bad.split(':').next().unwrap()), "{bad}: {err}");
    }
}

/// Every GPU metric carries the trace's unit: clocks in Hz, the rest in percent of peak (never
/// above 100) or counted; the table has the column.
#[test]
fn gpu_metrics_carry_units() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let input = corpus.join("als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite");
    let st =
        nsys_perfetto::workflow::stats::query::stats(&input, &StatsOptions::default()).unwrap();
    assert_eq!(st.gpu_metrics.len(), 18);
    for m in &st.gpu_metrics {
        match m.unit {
            "Hz" => assert!(m.metric.contains("Clock"), "{}", m.metric),
            "%" => assert!(m.max <= 100.0, "{} max {}", m.metric, m.max),
            "count" => assert!(m.metric.contains("BAR1"), "{}", m.metric),
            u => panic!("{}: unit {u:?}", m.metric),
        }
    }
    let o = bin().arg("stats").arg(&input).output().unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    let line = out
        .lines()
        .find(|l| l.ends_with("GPC Clock Frequency"))
        .unwrap();
    assert!(line.contains(" Hz "), "{line}");
}

/// One name for one thing: each event is found under nsys' name (what `stats` prints) and
/// under the trace's, by `extract` and by `--nvtx-filter`.
#[test]
fn every_name_form_finds_the_same_events() {
    use nsys_perfetto::workflow::Pattern;
    use nsys_perfetto::workflow::extract::extract;
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    // MPI traced as the NVTX domain "MPI"; a kernel `saxpy`; HtoD and DtoH copies.
    let input = corpus.join("hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite");
    use nsys_perfetto_model::category::Kind;
    let of_kind = |p: &str, kind: Kind| -> (u64, i64) {
        let x = extract(&input, &[Pattern::exact(p)]).unwrap();
        x.rows
            .iter()
            .filter(|r| r.kind == Some(kind))
            .fold((0, 0), |(c, t), r| (c + r.count, t + r.total))
    };
    let total = |p: &str| of_kind(p, Kind::Api);
    for (a, b, kind) in [
        ("MPI:MPI_Init", "MPI_Init", Kind::Nvtx),
        (
            "saxpy(double *, double *, double *, double, int)",
            "saxpy",
            Kind::Kernel,
        ),
        ("[CUDA memcpy Host-to-Device]", "Memcpy HtoD", Kind::Memory),
        ("[CUDA memcpy Device-to-Host]", "Memcpy DtoH", Kind::Memory),
    ] {
        let (x, y) = (of_kind(a, kind), of_kind(b, kind));
        assert!(x.0 > 0, "{a}: nothing found");
        assert_eq!(x, y, "{a} vs {b}");
    }
    // This export records `cudaMalloc` and `cudaMalloc_v3020` alike: nsys (and the trace) show
    // both as `cudaMalloc`; the recorded symbol still finds its own calls.
    let conn = rusqlite::Connection::open(&input).unwrap();
    let count = |names: &str| -> u64 {
        conn.query_row(
            &format!(
                "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s \
                 ON s.id = r.nameId WHERE s.value IN ({names})"
            ),
            [],
            |r| r.get::<_, i64>(0).map(|n| n as u64),
        )
        .unwrap()
    };
    assert_eq!(
        total("cudaMalloc").0,
        count("'cudaMalloc', 'cudaMalloc_v3020'")
    );
    assert_eq!(total("cudaMalloc_v3020").0, count("'cudaMalloc_v3020'"));
    assert!(count("'cudaMalloc_v3020'") > 0);
    // stats prints nsys' forms.
    let o = bin()
        .args([
            "stats",
            "--csv",
            "-r",
            "nvtx_sum,cuda_gpu_mem_time_sum,cuda_api_sum",
        ])
        .arg(&input)
        .output()
        .unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    for name in [
        "MPI:MPI_Init",
        "[CUDA memcpy Host-to-Device]",
        ",cudaMalloc\n",
    ] {
        assert!(out.contains(name), "{name} not in\n{out}");
    }
    // --nvtx-filter: the trace keeps the same ranges under either form.
    let tmp = tempfile::tempdir().unwrap();
    let nvtx = |filter: &str| {
        let out = tmp
            .path()
            .join(format!("{}.json", filter.replace(':', "_")));
        let o = bin()
            .arg("-q")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .args(["--format", "json", "--nvtx-filter", filter])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "MPI_Init" && e["cat"] == "nvtx")
            .count()
    };
    let bare = nvtx("MPI_Init");
    assert!(bare > 0);
    assert_eq!(nvtx("MPI:MPI_Init"), bare);
    assert_eq!(nvtx("MPI:MPI_Fin"), 0);
}

/// An NVTX range that ends before it starts cannot be indexed (nsys fails on it too): the NVTX
/// projection reports say so in one line naming the file, exit non-zero and print nothing.
#[test]
fn nvtx_projection_reports_reject_a_range_ending_before_it_starts() {
    let Some(corpus) = corpus_dir() else {
        skip("corpus", "../shared/corpus is absent");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("backwards.sqlite");
    std::fs::copy(
        corpus.join("quasiben__nvtx-examples__workflow.sqlite"),
        &input,
    )
    .unwrap();
    let conn = rusqlite::Connection::open(&input).unwrap();
    let n = conn
        .execute(
            "UPDATE NVTX_EVENTS SET \"end\" = start - 1000 WHERE rowid = \
             (SELECT min(rowid) FROM NVTX_EVENTS WHERE eventType = 59)",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(conn);
    for r in ["nvtx_gpu_proj_sum", "nvtx_kern_sum"] {
        let o = bin()
            .args(["stats", "--csv", "-r", r])
            .arg(&input)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{r}: {err}");
        assert!(
            o.stdout.is_empty(),
            "{r}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{r}: {err}");
        assert!(
            err.contains("backwards.sqlite") && err.contains(r),
            "{r}: {err}"
        );
    }
}
