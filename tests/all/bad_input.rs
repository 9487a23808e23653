//! Bad input through the command line: a missing path, a directory, an empty file, a text file,
//! an SQLite database that is not an nsys export, a truncated and a corrupted copy of a real
//! export. Each must fail with one line on stderr naming the file and the problem, a non-zero
//! exit code (not a panic), and leave no output or temporary file behind. Invalid UTF-8 in
//! strings must convert, lossily.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

struct Run {
    code: Option<i32>,
    stderr: String,
    stdout: String,
}

fn run(args: &[&Path]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the binary");
    Run {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// Files in `dir` other than `keep`.
fn leftovers(dir: &Path, keep: &[&Path]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !keep.iter().any(|k| k == p))
        .collect();
    v.sort();
    v
}

/// Convert `input` into `out_dir/out.pftrace` and expect a clean, one-line failure that names
/// the file and contains one of `reasons` (case-insensitive).
fn expect_failure(input: &Path, out_dir: &Path, reasons: &[&str]) {
    let output = out_dir.join("out.pftrace");
    let r = run(&[input, Path::new("-o"), &output]);
    let name = input.file_name().unwrap().to_string_lossy().into_owned();
    let ctx = format!(
        "input {}: exit {:?}\n--- stderr ---\n{}--- stdout ---\n{}",
        input.display(),
        r.code,
        r.stderr,
        r.stdout
    );
    assert!(
        !r.stderr.contains("panicked"),
        "panic instead of an error: {ctx}"
    );
    assert!(
        r.code.is_some() && r.code != Some(0) && r.code != Some(101),
        "want a non-zero exit that is not a panic (101): {ctx}"
    );
    let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "want exactly one line on stderr: {ctx}");
    assert!(
        lines[0].contains(&name),
        "the error names the file {name:?}: {ctx}"
    );
    let lower = lines[0].to_lowercase();
    assert!(
        reasons.iter().any(|w| lower.contains(&w.to_lowercase())),
        "the error says what is wrong (one of {reasons:?}): {ctx}"
    );
    let left = leftovers(out_dir, &[input]);
    assert!(
        left.is_empty(),
        "nothing left behind in the output directory: {left:?}\n{ctx}"
    );
}

fn fixture_bytes() -> Vec<u8> {
    std::fs::read(common::fixture("nvtx_workload.sqlite")).unwrap()
}

#[test]
fn missing_path() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("no-such-report.sqlite");
    expect_failure(
        &input,
        dir.path(),
        &["no such file", "not found", "cannot read"],
    );
}

// A directory with nothing to convert: one error line, no batch total.
#[test]
fn directory() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("report-dir.sqlite");
    std::fs::create_dir(&input).unwrap();
    let out = tempfile::tempdir().unwrap();
    expect_failure(&input, out.path(), &["directory"]);
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("empty.sqlite");
    std::fs::write(&input, b"").unwrap();
    expect_failure(&input, dir.path(), &["not an sqlite", "empty"]);
}

#[test]
fn text_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("notes.sqlite");
    std::fs::write(&input, "this is a text file, not a database\n".repeat(100)).unwrap();
    expect_failure(&input, dir.path(), &["not an sqlite"]);
}

/// A file not named as an export is told what the tool reads.
#[test]
fn text_file_of_another_name() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("notes.txt");
    std::fs::write(&input, "this is a text file\n").unwrap();
    expect_failure(&input, dir.path(), &["not an nsys report or export"]);
}

#[test]
fn sqlite_that_is_not_an_nsys_export() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("inventory.sqlite");
    {
        let c = rusqlite::Connection::open(&input).unwrap();
        c.execute_batch(
            "CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, start INTEGER, \"end\" INTEGER);
             INSERT INTO items(name, start, \"end\") VALUES ('a', 1, 2), ('b', 3, 4);",
        )
        .unwrap();
    }
    expect_failure(
        &input,
        dir.path(),
        &["not an nsight systems export", "not an nsys"],
    );
}

#[test]
fn truncated_export() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("truncated.sqlite");
    let b = fixture_bytes();
    std::fs::write(&input, &b[..b.len() / 2]).unwrap();
    expect_failure(
        &input,
        dir.path(),
        &["damaged", "malformed", "truncated", "corrupt"],
    );
}

/// Page size from the SQLite header (1 means 65536).
fn page_size(b: &[u8]) -> usize {
    match u16::from_be_bytes([b[16], b[17]]) {
        1 => 65536,
        n => n as usize,
    }
}

/// The root page of a table, read from the intact original.
fn root_page(db: &Path, table: &str) -> usize {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    c.query_row(
        "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [table],
        |r| r.get::<_, i64>(0),
    )
    .unwrap() as usize
}

#[test]
fn corrupted_export() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("corrupted.sqlite");
    let mut b = fixture_bytes();
    let ps = page_size(&b);
    let pages = b.len() / ps;
    // Garbage over the NVTX table's root page and over the middle third of the file.
    let mut garbage = 0x9E37_79B9u32;
    let mut scribble = |page: usize, b: &mut Vec<u8>| {
        for x in &mut b[(page - 1) * ps..page * ps] {
            garbage ^= garbage << 13;
            garbage ^= garbage >> 17;
            garbage ^= garbage << 5;
            *x = garbage as u8;
        }
    };
    scribble(
        root_page(&common::fixture("nvtx_workload.sqlite"), "NVTX_EVENTS"),
        &mut b,
    );
    for page in pages / 3..2 * pages / 3 {
        scribble(page.max(2), &mut b);
    }
    std::fs::write(&input, &b).unwrap();
    expect_failure(&input, dir.path(), &["damaged", "malformed", "corrupt"]);
}

#[test]
fn corrupted_export_default_output_path() {
    // Without -o the output goes next to the input: nothing may be left there either.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("corrupted2.sqlite");
    let mut b = fixture_bytes();
    let ps = page_size(&b);
    let root = root_page(&common::fixture("nvtx_workload.sqlite"), "NVTX_EVENTS");
    for x in &mut b[(root - 1) * ps..root * ps] {
        *x = 0xA5;
    }
    std::fs::write(&input, &b).unwrap();
    let r = run(&[&input]);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(
        r.code.is_some_and(|c| c != 0 && c != 101),
        "{:?} {}",
        r.code,
        r.stderr
    );
    assert_eq!(r.stderr.trim_end().lines().count(), 1, "{}", r.stderr);
    let left = leftovers(dir.path(), &[&input]);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn one_bad_input_among_good_ones() {
    // Each input gets its own line; the good one converts, the run still fails.
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &good).unwrap();
    let bad = dir.path().join("bad.sqlite");
    std::fs::write(&bad, b"nope").unwrap();
    let r = run(&[&bad, &good, Path::new("-q")]);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(r.code.is_some_and(|c| c != 0 && c != 101), "{:?}", r.code);
    let errors: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(errors.len(), 1, "one line for the bad input: {}", r.stderr);
    assert!(errors[0].contains("bad.sqlite"), "{}", r.stderr);
    let out = dir.path().join("good.pftrace");
    assert!(out.is_file(), "the good input still converts");
    common::validate_file(&out);
    let left = leftovers(dir.path(), &[&good, &bad, &out]);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn invalid_utf8_is_converted_lossily() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad-utf8.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &input).unwrap();
    {
        let c = rusqlite::Connection::open(&input).unwrap();
        // A registered NVTX string, an NVTX text, a domain name and a thread name.
        c.execute_batch(
            "UPDATE StringIds SET value = CAST(X'80FF' AS TEXT) WHERE value = 'forward';
             UPDATE NVTX_EVENTS SET text = CAST(X'7072658066657463FF68' AS TEXT) WHERE text = 'prefetch';
             UPDATE NVTX_EVENTS SET text = CAST(X'547261696E6572C3' AS TEXT) WHERE text = 'Trainer' AND eventType = 75;
             UPDATE StringIds SET value = CAST(X'776F726B65722D30FE' AS TEXT) WHERE value = 'worker-0';",
        )
        .unwrap();
        let n: i64 = c
            .query_row(
                "SELECT count(*) FROM StringIds WHERE value = CAST(X'80FF' AS TEXT)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "the fixture has the registered string 'forward'");
    }
    let out_dir = tempfile::tempdir().unwrap();
    let output = out_dir.path().join("out.pftrace");
    let r = run(&[&input, Path::new("-o"), &output, Path::new("-q")]);
    assert_eq!(r.code, Some(0), "invalid UTF-8 converts: {}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    let t = common::validate_file(&output);
    let names: std::collections::BTreeMap<&str, usize> =
        t.slices.iter().fold(Default::default(), |mut m, s| {
            *m.entry(&*s.name).or_default() += 1;
            m
        });
    assert_eq!(
        names.get("\u{FFFD}\u{FFFD}"),
        Some(&150),
        "forward, lossily: {names:?}"
    );
    assert_eq!(
        names.get("pre\u{FFFD}fetc\u{FFFD}h"),
        Some(&1),
        "prefetch, lossily: {names:?}"
    );
    assert!(
        t.tracks
            .values()
            .any(|tr| tr.name.as_deref() == Some("Trainer\u{FFFD}")),
        "domain name, lossily"
    );
    assert!(
        t.thread_tracks()
            .any(|tr| tr.thread.as_ref().unwrap().name.as_deref() == Some("worker-0\u{FFFD}")),
        "thread name, lossily"
    );
}
