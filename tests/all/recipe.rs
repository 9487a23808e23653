//! `recipe` against NVIDIA's `nsys recipe` (nsys 2023.4.4), table by table, row by row, on the
//! corpus's multi-report sets: the goldens of `tests/data/nsys_recipe/SET/RECIPE/TABLE.csv.gz`
//! (made by `gen.sh` there, from the recipes' Parquet tables) against `recipe NAME --csv
//! --output DIR` over the same reports, and over their SQLite, Arrow and Parquet exports made by
//! nsys 2023.4 (the version the recipes export with: nsys 2022.4's exports lack the MPI tables
//! that `mpi_sum` reads). A golden folder holding `NODATA` says the recipe found no data in the
//! set: `recipe` must say so too and write nothing.

use crate::common::{corpus_dir, csv_fields, manifest_dir, skip};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
}

fn goldens() -> PathBuf {
    manifest_dir().join("tests/data/nsys_recipe")
}

/// nsys 2023.4 (the recipes' version), when installed.
fn nsys_2023_4() -> Option<PathBuf> {
    use nsys_perfetto::report::finding::{Nsys, nsys_candidates};
    let found = nsys_candidates(None)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|(p, s)| Nsys::probe(&p, s).ok())
        .find(|n| n.version.is_some_and(|v| (v.year, v.release) == (2023, 4)))
        .map(|n| n.path);
    if found.is_none() {
        skip("nsys", "nsys 2023.4 is not installed");
    }
    found
}

/// Copies of a set's reports in `dir/reports`, as the golden's script gives them to the recipe.
fn set_reports(set: &str, dir: &Path) -> Option<Vec<PathBuf>> {
    let sources: Vec<PathBuf> = match set {
        "fixture_mpi" => (0..4)
            .map(|i| manifest_dir().join(format!("tests/fixtures/mpi/reports/rank_{i}.nsys-rep")))
            .collect(),
        _ => {
            let Some(corpus) = corpus_dir() else {
                skip("corpus", "../shared/corpus is absent");
                return None;
            };
            let names: &[&str] = match set {
                "gpubootcamp_mpi" => &[
                    "openhackathons-org__gpubootcamp__mpi_report1.qdrep",
                    "openhackathons-org__gpubootcamp__mpi_report2.qdrep",
                ],
                "ai_profiler" => &[
                    "openhackathons-org__AI-Profiler__baseline.nsys-rep",
                    "openhackathons-org__AI-Profiler__baseline_nvtx.nsys-rep",
                    "openhackathons-org__AI-Profiler__firstOptimization.nsys-rep",
                ],
                "cardiac" => &[
                    "mabdullahsoyturk__cardiac-simulation__report1.qdrep",
                    "mabdullahsoyturk__cardiac-simulation__report2.qdrep",
                ],
                _ => panic!("unknown set {set}"),
            };
            names.iter().map(|n| corpus.join(n)).collect()
        }
    };
    let out = dir.join("reports");
    std::fs::create_dir_all(&out).unwrap();
    for s in &sources {
        if !s.is_file() {
            skip("corpus", &format!("{} is absent", s.display()));
            return None;
        }
        std::fs::copy(s, out.join(s.file_name().unwrap())).unwrap();
    }
    Some(
        sources
            .iter()
            .map(|s| out.join(s.file_name().unwrap()))
            .collect(),
    )
}

/// `nsys export --type KIND` of each report into `dir/KIND/STEM{suffix}`; returns `dir/KIND`.
fn export_all(nsys: &Path, reports: &[PathBuf], dir: &Path, kind: &str, suffix: &str) -> PathBuf {
    let out = dir.join(kind);
    std::fs::create_dir_all(&out).unwrap();
    for r in reports {
        let stem = r.file_stem().unwrap().to_str().unwrap();
        let o = Command::new(nsys)
            .args(["export", "--type", kind, "--force-overwrite", "true", "-o"])
            .arg(out.join(format!("{stem}{suffix}")))
            .arg(r)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "nsys export --type {kind} {}: {}",
            r.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    out
}

fn gunzip(path: &Path) -> String {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// CSV records (a quoted field may hold a line break: NVTX texts do).
fn records(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.split_inclusive('\n') {
        cur.push_str(line);
        if cur.matches('"').count().is_multiple_of(2) {
            out.push(csv_fields(cur.trim_end_matches(['\n', '\r'])));
            cur.clear();
        }
    }
    out
}

/// Whether two cells agree: the same text, or numbers within a relative 1e-9. The recipes'
/// means and standard deviations of the describe family come from pandas' own summation
/// (Welford's running variance), ours from a two-pass sum: the last binary digits differ
/// (seen: 16th significant digit). Everything rounded by the recipes (`round(1)`) and every
/// count, total, min and max compare exactly at this tolerance.
fn same_cell(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
        _ => false,
    }
}

fn assert_same_table(golden: &str, ours: &str, what: &str) {
    let (g, o) = (records(golden), records(ours));
    assert_eq!(g.first(), o.first(), "{what}: columns");
    assert_eq!(
        g.len(),
        o.len(),
        "{what}: rows\nrecipe:\n{golden}\nours:\n{ours}"
    );
    for (i, (gr, or)) in g.iter().zip(&o).enumerate() {
        assert!(
            gr.len() == or.len() && gr.iter().zip(or).all(|(a, b)| same_cell(a, b)),
            "{what}: row {i} differs\nrecipe: {gr:?}\nours:   {or:?}"
        );
    }
}

/// The Parquet table holds the golden's columns, as pandas writes a DataFrame (the index last,
/// `__index_level_0__` when unnamed, restored by the `pandas` metadata), as many rows, and its
/// first row's values.
fn assert_parquet_holds(path: &Path, golden: &[Vec<String>]) {
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let f = std::fs::File::open(path).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let schema = builder.schema().clone();
    let batches: Vec<_> = builder.build().unwrap().map(|b| b.unwrap()).collect();
    let order: Vec<usize> = (1..golden[0].len()).chain([0]).collect();
    let want: Vec<&str> = order
        .iter()
        .map(|&i| match golden[0][i].as_str() {
            "" => "__index_level_0__",
            n => n,
        })
        .collect();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, want, "{}: columns", path.display());
    let index = &want[want.len() - 1];
    assert!(
        schema
            .metadata()
            .get("pandas")
            .is_some_and(|m| m.contains(&format!("\"index_columns\":[\"{index}\"]"))),
        "{}: pandas metadata",
        path.display()
    );
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, golden.len() - 1, "{}: rows", path.display());
    let first = &batches[0];
    for (c, &g) in order.iter().enumerate() {
        let want = &golden[1][g];
        let col = first.column(c);
        let got = if col.is_null(0) {
            String::new()
        } else if let Some(a) = col.as_any().downcast_ref::<arrow_array::Int64Array>() {
            a.value(0).to_string()
        } else if let Some(a) = col.as_any().downcast_ref::<arrow_array::Float64Array>() {
            a.value(0).to_string()
        } else if let Some(a) = col.as_any().downcast_ref::<arrow_array::StringArray>() {
            a.value(0).to_string()
        } else {
            panic!("{}: column {c} of an unexpected type", path.display())
        };
        assert!(
            same_cell(want, &got),
            "{}: first row, column {}: {want:?} against {got:?}",
            path.display(),
            golden[0][g]
        );
    }
}

/// A file that is not an export fails the run: one line naming it, nothing written; so does an
/// unknown recipe.
#[test]
fn bad_input_fails_in_one_line_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("rank_9.sqlite");
    std::fs::write(&bad, "not a database").unwrap();
    let out = tmp.path().join("out");
    let o = bin()
        .args(["recipe", "nvtx_sum", "--output"])
        .arg(&out)
        .arg(manifest_dir().join("tests/fixtures/mpi/rank_0.sqlite"))
        .arg(&bad)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("rank_9.sqlite") && said.contains("not an SQLite database"),
        "{said}"
    );
    assert!(!out.exists(), "a failed run wrote {}", out.display());
    let o = bin()
        .args(["recipe", "kern_sum", "x.sqlite"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && said.contains("unknown recipe \"kern_sum\""),
        "{said}"
    );
}

/// Every recipe with goldens for `set`, over `inputs` (a folder), against the goldens;
/// returns how many outcomes matched (a table, or no data where the recipe found none).
fn check_set(set: &str, inputs: &Path, out: &Path, what: &str) -> usize {
    let mut tables = 0;
    let mut recipes: Vec<PathBuf> = std::fs::read_dir(goldens().join(set))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    recipes.sort();
    for dir in recipes {
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        if nsys_perfetto::workflow::recipe::Recipe::parse(&name).is_none() {
            continue;
        }
        let dest = out.join(format!("{what}_{name}"));
        let o = bin()
            .args(["recipe", &name, "--csv", "--output"])
            .arg(&dest)
            .arg(inputs)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{set} {what} {name}: {said}");
        if dir.join("NODATA").exists() {
            assert!(
                said.contains("no data") && !dest.exists(),
                "{set} {what} {name}: the recipe found no data, ours: {said}"
            );
            tables += 1;
            continue;
        }
        let mut golden: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        golden.sort();
        for g in golden {
            let table = g.file_name().unwrap().to_str().unwrap();
            let table = table.strip_suffix(".csv.gz").unwrap();
            let ours = std::fs::read_to_string(dest.join(format!("{table}.csv")))
                .unwrap_or_else(|e| panic!("{set} {what} {name}: no {table}.csv: {e}"));
            let golden = gunzip(&g);
            assert_same_table(&golden, &ours, &format!("{set} {what} {name} {table}"));
            assert_parquet_holds(&dest.join(format!("{table}.parquet")), &records(&golden));
            tables += 1;
        }
    }
    tables
}

/// The set's reports, and (`formats`) their SQLite, Arrow and Parquet exports, each against the
/// goldens.
fn check(set: &str, formats: &[(&str, &str)]) {
    let Some(nsys) = nsys_2023_4() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let Some(reports) = set_reports(set, tmp.path()) else {
        return;
    };
    let out = tmp.path().join("out");
    let from_reports = check_set(set, &tmp.path().join("reports"), &out, "reports");
    assert!(from_reports > 0, "{set}: no recipe checked");
    for (kind, suffix) in formats {
        let dir = export_all(&nsys, &reports, tmp.path(), kind, suffix);
        let n = check_set(set, &dir, &out, kind);
        assert_eq!(n, from_reports, "{set}: {kind} gave other tables");
    }
}

const ALL_FORMATS: &[(&str, &str)] = &[
    ("sqlite", ".sqlite"),
    ("arrowdir", "_arwdir"),
    ("parquetdir", "_pqtdir"),
];

#[test]
fn gpubootcamp_mpi_ranks_equal_the_recipes() {
    check("gpubootcamp_mpi", ALL_FORMATS);
}

#[test]
fn four_rank_fixture_equals_the_recipes() {
    check("fixture_mpi", ALL_FORMATS);
}

#[test]
fn ai_profiler_trio_equals_the_recipes() {
    check("ai_profiler", &[("sqlite", ".sqlite")]);
}

#[test]
fn cardiac_pair_has_no_data_as_in_the_recipes() {
    check("cardiac", &[]);
}
