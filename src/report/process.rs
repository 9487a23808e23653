//! Child processes (nsys) that are bounded in time, visible while they run, and stopped with us.

use anyhow::{Context, Result, anyhow, bail};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `nsys --version` may take: a hung nsys (a licence prompt, a dead network mount)
/// must not hang the conversion.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a child process printed and how it ended.
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Run `cmd` (stdin closed, output captured) in its own process group, registered to be stopped
/// on Ctrl-C or SIGTERM ([`nsys_perfetto_model::cleanup`]); stopped after `timeout`. While it runs, stderr
/// says what it waits for: a line redrawn every second on a terminal, else a line after 10 s
/// and every 30 s (none when `quiet`).
pub fn run_bounded(
    cmd: &mut Command,
    what: &str,
    timeout: Option<Duration>,
    quiet: bool,
) -> Result<Finished> {
    use std::io::IsTerminal;
    let out = tempfile::tempfile().context("cannot create a temporary file")?;
    let err = tempfile::tempfile().context("cannot create a temporary file")?;
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(err.try_clone()?);
    let mut child = nsys_perfetto_model::cleanup::spawn_group(cmd)
        .map_err(|e| anyhow!("cannot run {what}: {e}"))?;
    let pid = child.id();
    let started = Instant::now();
    let terminal = !quiet && std::io::stderr().is_terminal();
    let mut said = 0u64;
    let clear = |drawn: bool| {
        if drawn {
            nsys_perfetto_model::term::err(format_args!("\r\x1b[2K"));
        }
    };
    let status = loop {
        match nsys_perfetto_model::cleanup::wait_exit(&mut child, Duration::from_millis(50)) {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => {
                nsys_perfetto_model::cleanup::kill_group(pid);
                let _ = child.wait();
                nsys_perfetto_model::cleanup::forget_group(pid);
                clear(terminal && said > 0);
                bail!("cannot wait for {what}: {e}");
            }
        }
        let secs = started.elapsed().as_secs();
        if let Some(limit) = timeout
            && started.elapsed() >= limit
        {
            nsys_perfetto_model::cleanup::kill_group(pid);
            let _ = child.wait();
            nsys_perfetto_model::cleanup::forget_group(pid);
            clear(terminal && said > 0);
            bail!(
                "{what} did not finish within {} s and was stopped",
                limit.as_secs()
            );
        }
        if terminal && secs >= 1 && secs > said {
            nsys_perfetto_model::term::err(format_args!("\r\x1b[2Kwaiting for {what}: {secs} s"));
            said = secs;
        } else if !quiet && !terminal && secs >= 10 && (said == 0 || secs >= said + 30) {
            nsys_perfetto_model::say!("waiting for {what}: {secs} s so far");
            said = secs;
        }
    };
    nsys_perfetto_model::cleanup::forget_group(pid);
    clear(terminal && said > 0);
    let read = |mut f: File| -> Vec<u8> {
        let mut v = Vec::new();
        let _ = f.seek(SeekFrom::Start(0));
        let _ = f.read_to_end(&mut v);
        v
    };
    Ok(Finished {
        status,
        stdout: read(out),
        stderr: read(err),
    })
}

/// A line of nsys' progress bars: `[=====73%    ]`, `Processing 96331 events: [5%     ]`.
fn is_progress(line: &str) -> bool {
    line.contains("[=")
        || line.ends_with(']')
            && line.rsplit_once('[').is_some_and(|(_, bar)| {
                let digits = bar.trim_start_matches(|c: char| c.is_ascii_digit());
                digits.len() < bar.len() && digits.starts_with('%')
            })
}

/// nsys's own message, trimmed: its error lines (stderr, else stdout), without progress bars.
pub(super) fn nsys_message(stderr: &[u8], stdout: &[u8]) -> String {
    let pick = |b: &[u8]| -> String {
        let text = String::from_utf8_lossy(b);
        let lines: Vec<&str> = text
            .split(['\n', '\r'])
            .map(str::trim)
            .filter(|l| !l.is_empty() && !is_progress(l))
            .collect();
        let mut s = lines.join(" | ");
        if s.len() > 600 {
            let mut cut = 600;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            s.push_str(" ...");
        }
        s
    };
    let e = pick(stderr);
    if !e.is_empty() {
        return e;
    }
    let o = pick(stdout);
    if o.is_empty() {
        "(no message)".into()
    } else {
        o
    }
}

#[cfg(test)]
mod tests {
    use super::nsys_message;

    #[test]
    fn progress_bars_are_left_out_of_nsys_messages() {
        // As nsys 2023.4 writes an export that fails: the bar redrawn with carriage returns.
        let stderr = b"Processing 96331 events: [1%          ]\rProcessing 96331 events: \
            [=====73%    ]\r\nFailed to de-initialize insert statement\n\
            [QuadDCommon::tag_message*] = database or disk is full\n[100%]\n";
        assert_eq!(
            nsys_message(stderr, b""),
            "Failed to de-initialize insert statement | [QuadDCommon::tag_message*] = database \
             or disk is full"
        );
        // A bracketed line that is not a bar stays.
        assert_eq!(nsys_message(b"", b"[warning]\n"), "[warning]");
        assert_eq!(nsys_message(b"", b""), "(no message)");
    }
}
