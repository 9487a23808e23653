//! Runs after the other test binaries (cargo runs them in name order): prints every check that
//! was skipped during this `cargo test` (from the log `common::skip` writes) and their count,
//! past libtest's output capture, then clears the log for the next run. (After a run of one
//! binary alone, `--test all`, the log keeps its lines until the next full `cargo test`.) It
//! also checks that no test wrote into `../shared` or the repository (`tests/guard/mod.rs`).

use std::io::Write as _;
use std::path::PathBuf;

#[path = "guard/mod.rs"]
mod guard;

/// No test wrote into `../shared` or the repository (see `tests/guard/mod.rs`): compared with
/// what `tests/aa_guard.rs` recorded before the other binaries ran. Without that record (this
/// binary run alone), nothing to compare: said, not failed.
#[test]
fn tests_left_shared_and_the_repository_alone() {
    let file = guard::snapshot_file();
    let Ok(text) = std::fs::read_to_string(&file) else {
        let _ = writeln!(
            std::io::stderr().lock(),
            "\nfiles guard: no record from tests/aa_guard.rs (run the whole `cargo test`)"
        );
        return;
    };
    let _ = std::fs::remove_file(&file);
    let mut found = guard::changes(&guard::decode(&text), &guard::state());
    // Blessing the schema table rewrites it on purpose.
    if std::env::var_os("NSYS_PERFETTO_BLESS_SCHEMA").is_some() {
        found.retain(|l| !l.contains("repo/tests/data/"));
    }
    let n = found.len();
    found.truncate(30);
    assert!(
        n == 0,
        "{n} file(s) in ../shared or the repository changed during the tests (tests must write \
         only under temporary directories; copy inputs there and point XDG_CACHE_HOME or \
         ExportOptions::cache_dir there):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn skipped_checks() {
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("skips.log");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let mut err = std::io::stderr().lock();
    if lines.is_empty() {
        let _ = writeln!(err, "\nskipped checks: none");
    } else {
        let _ = writeln!(
            err,
            "\nskipped checks: {} (NSYS_PERFETTO_REQUIRE=corpus,nsys,tpcheck,... makes them failures)",
            lines.len()
        );
        for l in &lines {
            let _ = writeln!(err, "  {l}");
        }
    }
    let _ = std::fs::remove_file(&log);
}
