//! Runs after the other test binaries (cargo runs them in name order): prints every check that
//! was skipped during this `cargo test` (from the log `common::skip` writes) and their count,
//! past libtest's output capture, then clears the log for the next run. (After a run of one
//! binary alone, `--test all`, the log keeps its lines until the next full `cargo test`.)

use std::io::Write as _;
use std::path::PathBuf;

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
