//! What Perfetto's UI shows reads like Nsight Systems: names, order and groups of what it draws,
//! checked on real corpus exports (copied into a temporary directory before any change) with
//! our validator and, where it decides, Perfetto's own trace_processor.

use crate::common::{self, corpus_dir, tp_query, validate_file};
use nsys_perfetto::convert::{Options, convert_sqlite};
use nsys_perfetto::summary::Summary;
use std::path::{Path, PathBuf};

/// A corpus file, or `None` after recording the skip (listed, and a failure under
/// `NSYS_PERFETTO_REQUIRE=corpus`).
fn corpus_file(name: &str) -> Option<PathBuf> {
    let Some(dir) = corpus_dir() else {
        common::skip("corpus", "../shared/corpus not found");
        return None;
    };
    let p = dir.join(name);
    if p.is_file() {
        Some(p)
    } else {
        common::skip("corpus", &format!("{} is absent", p.display()));
        None
    }
}

/// A copy of a corpus export in `dir`, to change or export there (never in the corpus).
fn copy_into(src: &Path, dir: &Path) -> PathBuf {
    let to = dir.join(src.file_name().unwrap());
    std::fs::copy(src, &to).unwrap();
    to
}

fn convert(input: &Path, out: &Path, opts: &Options) -> Summary {
    convert_sqlite(input, out, opts)
        .unwrap_or_else(|e| panic!("converting {}: {e:#}", input.display()))
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
    convert(&input, &out, &Options::default());
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
        let s = convert(&input, &out, &Options::default());
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
