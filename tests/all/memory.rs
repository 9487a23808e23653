//! Memory follows what the trace holds, not what the export carries: 100 MB of strings nothing
//! refers to must not be read into memory. The conversion runs as the CLI, a process of its own,
//! so the peak RSS read (the child's, from `wait4`) is that conversion's alone, whatever the
//! other tests of this binary do meanwhile.

use crate::common::{self, fixture};
use std::process::{Command, Stdio};

/// Run `cmd` to its end; its exit status and its peak RSS in kB.
fn run_measured(cmd: &mut Command) -> (i32, i64) {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 writes the child's status and resource use into the values we pass. The
    // child is reaped here: `child` is dropped without waiting for it again.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut usage), pid);
        usage
    };
    drop(child);
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
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
    let (code, peak_kb) = run_measured(
        Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
            .arg(&input)
            .arg("-o")
            .arg(&out),
    );
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
