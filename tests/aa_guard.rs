//! Runs before the other test binaries (cargo runs them in name order): records the files of
//! `../shared` and of the repository, which `tests/zz_skips.rs` compares at the end (see
//! `tests/guard/mod.rs`), and starts the skip log afresh, so a run cut short by a failure
//! leaves no skips to the next.

use std::path::PathBuf;

#[path = "guard/mod.rs"]
mod guard;

#[test]
fn record_the_files_tests_must_leave_alone() {
    let file = guard::snapshot_file();
    std::fs::write(&file, guard::encode(&guard::state()))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    let _ = std::fs::remove_file(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("skips.log"));
}
