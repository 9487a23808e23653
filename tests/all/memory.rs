//! Memory follows what the trace holds, not what the export carries: 100 MB of strings nothing
//! refers to must not be read into memory. The conversion runs as the CLI, a process of its own,
//! so the peak RSS read is that conversion's alone, whatever the other tests of this binary do
//! meanwhile.

use crate::common::{self, fixture, skip};
use std::process::Command;

/// Run `args` through a small Python process that waits for it; its exit status and its peak
/// RSS in kB, or `None` (a recorded skip) without python3. Not a child of this test binary:
/// Linux counts in a process's peak RSS the memory of the process it was started from, and
/// this binary holds other tests' data; Python's few MB are all a grandchild inherits.
fn run_measured(args: &[&std::ffi::OsStr]) -> Option<(i32, i64)> {
    const WAIT: &str = "import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)";
    let out = match Command::new("python3")
        .arg("-c")
        .arg(WAIT)
        .args(args)
        .output()
    {
        Ok(out) if out.status.success() => out,
        Ok(out) => panic!("python3: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            skip(
                "tpcheck",
                &format!("cannot run python3 to measure memory: {e}"),
            );
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace().map(|f| f.parse::<i64>().unwrap());
    Some((fields.next()? as i32, fields.next()?))
}

#[test]
fn unreferenced_strings_stay_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("strings.sqlite");
    std::fs::copy(fixture("nvtx_workload.sqlite"), &input).unwrap();
    {
        let conn = rusqlite::Connection::open(&input).unwrap();
        let max: i64 = conn
            .query_row("SELECT max(id) FROM StringIds", [], |r| r.get(0))
            .unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        let filler = "x".repeat(1000);
        for i in 1..=100_000i64 {
            tx.execute(
                "INSERT INTO StringIds VALUES (?1, ?2)",
                rusqlite::params![max + i, format!("{filler}{i}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let out = dir.path().join("strings.pftrace");
    let Some((code, peak_kb)) = run_measured(&[
        env!("CARGO_BIN_EXE_nsys-perfetto").as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]) else {
        return;
    };
    assert_eq!(code, 0, "the conversion failed");
    // What was converted is the fixture's events, all of them.
    let (summary, plain) = common::convert(&fixture("nvtx_workload.sqlite"), dir.path());
    assert!(summary.total_events() > 1000);
    let t = common::validate_file(&out);
    assert_eq!(
        (t.slices.len() + t.sched_rows().count()) as u64,
        summary.total_events()
    );
    assert_eq!(t.slices.len(), common::validate_file(&plain).slices.len());
    // The strings are 100 MB; the whole process converting the fixture needs a few MB.
    assert!(
        peak_kb < 40_000,
        "peak RSS {peak_kb} kB converting an export with 100 MB of unused strings"
    );
}
