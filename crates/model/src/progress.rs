//! A progress bar on stderr, drawn only when stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Rows handled so far, shared by the reader threads (each adds in batches).
#[derive(Debug, Default)]
pub struct Progress {
    pub done: AtomicU64,
    pub total: AtomicU64,
    finished: AtomicBool,
}

impl Progress {
    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    pub fn finish(&self) {
        self.finished.store(true, Ordering::Relaxed);
    }

    /// Redraw every 100 ms until `finish`; does nothing when stderr is not a terminal.
    pub fn draw_until_finished(&self, label: &str) {
        self.draw_until_finished_in(label, "rows")
    }

    /// The same, counting `unit` ("rows", "files").
    pub fn draw_until_finished_in(&self, label: &str, unit: &str) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let mut err = std::io::stderr();
        while !self.finished.load(Ordering::Relaxed) {
            let done = self.done.load(Ordering::Relaxed);
            let total = self.total.load(Ordering::Relaxed).max(1);
            let frac = (done as f64 / total as f64).min(1.0);
            let width = 30;
            let filled = (frac * width as f64) as usize;
            let _ = write!(
                err,
                "\r{label} [{}{}] {:3.0}% {} / {} {unit}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                frac * 100.0,
                done,
                total
            );
            let _ = err.flush();
            std::thread::sleep(Duration::from_millis(100));
        }
        clear_line();
    }
}

/// Erase the progress line (before printing over it); nothing when stderr is not a terminal.
pub fn clear_line() {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}

/// Phase timings on stderr when NSYS_PERFETTO_TIMING is set: for benchmarking, not for users.
pub fn timing(phase: &str, since: Instant) {
    if std::env::var_os("NSYS_PERFETTO_TIMING").is_some() {
        // CPU time of this thread in ns (schedstat's first field): stable under machine load,
        // and finer than the clock ticks of `stat`.
        let cpu = std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(f64::NAN, |ns| ns as f64 / 1e9);
        crate::say!(
            "timing: {phase}: {:.3} s wall, thread cpu so far {cpu:.3} s",
            since.elapsed().as_secs_f64()
        );
    }
}
