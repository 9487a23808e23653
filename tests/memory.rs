//! Memory follows what the trace holds, not what the export carries: 100 MB of strings nothing
//! refers to must not be read into memory. One test per binary, so the peak RSS it reads is its
//! own conversion's.

mod common;

use common::fixture;

fn peak_rss_kb() -> i64 {
    // SAFETY: getrusage writes into the struct we pass and reads nothing else.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u.ru_maxrss
    }
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
    let before = peak_rss_kb();
    let (summary, out) = common::convert(&input, dir.path());
    let after = peak_rss_kb();
    assert!(summary.total_events() > 1000);
    let t = common::validate_file(&out);
    // Slices, and threads' times on CPUs as Perfetto's own scheduling (`sched` rows).
    assert_eq!(
        (t.slices.len() + t.sched_rows().count()) as u64,
        summary.total_events()
    );
    // The strings are 100 MB; the conversion of the fixture itself needs a few MB.
    assert!(
        after - before < 40_000,
        "peak RSS grew by {} kB converting an export with 100 MB of unused strings",
        after - before
    );
}
