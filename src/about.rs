//! What the tool says about itself and its installation: `--version` with the nsys installs it
//! finds, shell completions and man pages.

use crate::report::{self, finding::NsysSource, version::Version};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `nsys --version` may take: a broken install (a wrapper waiting for a licence
/// prompt, a hung network mount) must not make `--version` hang.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The outcome of asking one nsys for its version.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    Version(Version),
    /// It ran but printed no version we parse.
    Unknown,
    /// It did not answer within the timeout (it was killed).
    TimedOut,
    Failed(String),
}

/// Run `path --version`, killing it after `timeout`.
pub fn probe_version(path: &Path, timeout: Duration) -> Probe {
    let mut child = match Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Probe::Failed(e.to_string()),
    };
    // Read both pipes on threads so that a chatty child cannot block on a full pipe.
    let mut readers = Vec::new();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        readers.push(std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = pipe.take(1 << 20).read_to_end(&mut s);
            s
        }));
    }
    let start = Instant::now();
    loop {
        match nsys_perfetto_model::cleanup::wait_exit(&mut child, Duration::from_millis(50)) {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < timeout => {}
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                // The readers end when the pipes close; a grandchild holding them open would
                // keep them alive, so they are not joined.
                return Probe::TimedOut;
            }
            Err(e) => return Probe::Failed(e.to_string()),
        }
    }
    let mut text = String::new();
    for r in readers {
        if let Ok(bytes) = r.join() {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    Version::parse(&text).map_or(Probe::Unknown, Probe::Version)
}

/// Every nsys the tool would consider (see [`report::finding::nsys_candidates`]), probed in parallel,
/// in search order. An error when `NSYS` names something unusable.
pub fn nsys_installs(timeout: Duration) -> anyhow::Result<Vec<(PathBuf, NsysSource, Probe)>> {
    let candidates = report::finding::nsys_candidates(None)?;
    Ok(nsys_perfetto_model::parallel::parallel_map(
        &candidates,
        candidates.len(),
        |_, (p, s)| (p.clone(), *s, probe_version(p, timeout)),
    ))
}

/// The text of `nsys-perfetto --version`: the version, then the nsys installs found.
pub fn long_version(timeout: Duration) -> String {
    let mut s = format!("nsys-perfetto {}\n", env!("CARGO_PKG_VERSION"));
    match nsys_installs(timeout) {
        Err(e) => s.push_str(&format!("nsys: {e:#}\n")),
        Ok(v) if v.is_empty() => s.push_str(
            "nsys: none found (looked at NSYS, PATH, /opt/nvidia/nsight-systems/*/bin, \
             /usr/local/cuda*/bin, /usr/lib/nsight-systems/bin); .sqlite exports convert \
             without it\n",
        ),
        Ok(v) => {
            s.push_str("nsys installs found (reports use the newest that can read them; --nsys or NSYS picks one):\n");
            for (path, source, probe) in v {
                let version = match probe {
                    Probe::Version(v) => v.to_string(),
                    Probe::Unknown => "version unknown".into(),
                    Probe::TimedOut => {
                        format!("no answer to --version within {} s", timeout.as_secs_f64())
                    }
                    Probe::Failed(e) => format!("cannot run: {e}"),
                };
                let from = match source {
                    NsysSource::Flag => "--nsys",
                    NsysSource::Env => "NSYS",
                    NsysSource::Path => "PATH",
                    NsysSource::InstallDir => "install directory",
                };
                s.push_str(&format!("  {version}  {} ({from})\n", path.display()));
            }
        }
    }
    s
}
