//! Finding nsys: an explicit path, `NSYS`, `PATH`, the usual install places, and the one that
//! reads a given report.

use super::process::{PROBE_TIMEOUT, run_bounded};
use super::version::Version;
use anyhow::{Result, anyhow, bail};
use std::ffi::OsStr;
use std::fs::{self};
use std::path::{Path, PathBuf};
use std::process::Command;

/// How an nsys was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsysSource {
    /// `--nsys PATH`
    Flag,
    /// the `NSYS` environment variable
    Env,
    /// a directory of `PATH`
    Path,
    /// one of the usual install places
    InstallDir,
}

/// An nsys executable and its version (`None` when `nsys --version` said nothing we parse).
#[derive(Debug, Clone)]
pub struct Nsys {
    pub path: PathBuf,
    pub version: Option<Version>,
    pub source: NsysSource,
}

impl Nsys {
    /// Probe `path` with `nsys --version`.
    pub fn probe(path: &Path, source: NsysSource) -> Result<Nsys> {
        let out = run_bounded(
            Command::new(path).arg("--version"),
            &format!("nsys --version ({})", path.display()),
            Some(PROBE_TIMEOUT),
            false,
        )?;
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        Ok(Nsys {
            path: path.to_path_buf(),
            version: Version::parse(&text),
            source,
        })
    }

    /// `nsys 2022.4.2.1 at /usr/bin/nsys`
    pub fn describe(&self) -> String {
        match &self.version {
            Some(v) => format!("nsys {v} at {}", self.path.display()),
            None => format!("nsys (unknown version) at {}", self.path.display()),
        }
    }

    /// `QdstrmImporter` of this nsys: in `host-linux-x64` beside or above the directory of the
    /// nsys binary (its real path, then the path as found), else Debian's
    /// `/usr/lib/nsight-systems/host-linux-x64`.
    pub fn importer(&self) -> Option<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for p in [fs::canonicalize(&self.path).ok(), Some(self.path.clone())]
            .into_iter()
            .flatten()
        {
            let mut d = p.parent();
            for _ in 0..3 {
                let Some(dir) = d else { break };
                dirs.push(dir.join("host-linux-x64"));
                d = dir.parent();
            }
        }
        dirs.push(PathBuf::from("/usr/lib/nsight-systems/host-linux-x64"));
        dirs.into_iter()
            .map(|d| d.join("QdstrmImporter"))
            .find(|p| is_executable(p))
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `--nsys` or `NSYS` may name the binary or an install directory (with `nsys` or `bin/nsys`).
fn explicit_nsys(p: &Path, what: &str) -> Result<PathBuf> {
    if p.is_dir() {
        for c in [p.join("nsys"), p.join("bin/nsys")] {
            if is_executable(&c) {
                return Ok(c);
            }
        }
        bail!(
            "{what}{}: a directory without nsys or bin/nsys",
            p.display()
        );
    }
    if is_executable(p) {
        return Ok(p.to_path_buf());
    }
    // A bare name such as NSYS=nsys-2024: look it up on PATH.
    if p.components().count() == 1
        && let Some(found) = search_path(p.as_os_str())
    {
        return Ok(found);
    }
    if p.exists() {
        bail!("{what}{}: not an executable file", p.display());
    }
    bail!("{what}{}: no such file", p.display());
}

fn search_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// Subdirectories of `parent` whose names start with `prefix`, newest version first.
fn versioned_dirs(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<(Option<Version>, String, PathBuf)> = fs::read_dir(parent)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    name.starts_with(prefix)
                        .then(|| (Version::parse(&name), name, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    dirs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    dirs.into_iter().map(|(_, _, p)| p).collect()
}

/// The usual install places, most preferred first.
pub fn install_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in versioned_dirs(Path::new("/opt/nvidia/nsight-systems"), "") {
        out.push(d.join("bin"));
    }
    for d in versioned_dirs(Path::new("/opt/nvidia/nsight-systems-cli"), "") {
        out.push(d.join("bin"));
    }
    // /usr/local/cuda (the default toolkit) first, then versioned ones, newest first.
    out.push(PathBuf::from("/usr/local/cuda/bin"));
    for d in versioned_dirs(Path::new("/usr/local"), "cuda-") {
        out.push(d.join("bin"));
    }
    out.push(PathBuf::from("/usr/lib/nsight-systems/bin"));
    out
}

/// Every nsys in the search order, without duplicates (by real path). With an explicit path
/// (`--nsys`, else `NSYS`), only that one: the user chose it.
pub fn nsys_candidates(explicit: Option<&Path>) -> Result<Vec<(PathBuf, NsysSource)>> {
    if let Some(p) = explicit {
        return Ok(vec![(explicit_nsys(p, "--nsys ")?, NsysSource::Flag)]);
    }
    if let Some(p) = std::env::var_os("NSYS").filter(|s| !s.is_empty()) {
        return Ok(vec![(
            explicit_nsys(Path::new(&p), "NSYS=")?,
            NsysSource::Env,
        )]);
    }
    let mut out: Vec<(PathBuf, NsysSource)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut add = |p: PathBuf, s: NsysSource| {
        if is_executable(&p) && seen.insert(fs::canonicalize(&p).unwrap_or_else(|_| p.clone())) {
            out.push((p, s));
        }
    };
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path).filter(|d| !d.as_os_str().is_empty()) {
            add(d.join("nsys"), NsysSource::Path);
        }
    }
    for d in install_dirs() {
        add(d.join("nsys"), NsysSource::InstallDir);
    }
    Ok(out)
}

fn not_found() -> anyhow::Error {
    anyhow!(
        "nsys not found (looked at --nsys, NSYS, PATH, /opt/nvidia/nsight-systems/*/bin, \
         /usr/local/cuda*/bin, /usr/lib/nsight-systems/bin): {INSTALL_HINT}; or export the \
         report where nsys is (`nsys export --type sqlite REPORT`) and convert the .sqlite"
    )
}

/// The nsys to use: the first of [`nsys_candidates`].
pub fn find_nsys(explicit: Option<&Path>) -> Result<Nsys> {
    let (path, source) = nsys_candidates(explicit)?
        .into_iter()
        .next()
        .ok_or_else(not_found)?;
    Nsys::probe(&path, source)
}

/// The nsys to read a report captured by `capture`: the newest one found that can read it
/// (a newer nsys exports faster, as Arrow from 2023 on, and knows more of the report's
/// tables), the first in the search order among equals or where no version is known. With an
/// explicit nsys (`--nsys`, `NSYS`), only that one. Errors say which versions were found and
/// what to install.
pub fn nsys_for_report(
    explicit: Option<&Path>,
    capture: Option<&Version>,
    report: Option<&Path>,
) -> Result<Nsys> {
    let candidates = nsys_candidates(explicit)?;
    // Probed side by side: each is a process start of its own, and the newest may come last.
    let probed = nsys_perfetto_model::parallel::parallel_map(
        &candidates,
        candidates.len(),
        |_, (path, source)| (*source, Nsys::probe(path, *source)),
    );
    let mut first: Option<Nsys> = None;
    let mut others: Vec<Nsys> = Vec::new();
    let mut best: Option<Nsys> = None;
    for (source, probe) in probed {
        let n = match probe {
            Ok(n) => n,
            // The user's own nsys (PATH, the first found) that does not run is an error to
            // show, not one to step over.
            Err(e) if first.is_none() && others.is_empty() && source != NsysSource::InstallDir => {
                return Err(e);
            }
            Err(_) => continue,
        };
        let fits = match (capture, &n.version) {
            (Some(c), Some(v)) => v.can_read(c),
            _ => true,
        };
        if fits {
            let newer = match &best {
                None => true,
                Some(b) => n.version.is_some() && n.version > b.version,
            };
            if newer {
                best = Some(n);
            }
            continue;
        }
        if first.is_none() {
            first = Some(n);
        } else {
            others.push(n);
        }
    }
    if let Some(best) = best {
        return Ok(best);
    }
    let Some(first) = first else {
        return Err(not_found());
    };
    let c = capture.expect("only a known capture version rules an nsys out");
    let mut msg = format!(
        "captured with nsys {}; found {}, which cannot read reports of newer releases",
        c,
        first.describe()
    );
    for o in &others {
        msg.push_str(&format!(" (also {})", o.describe()));
    }
    msg.push_str(&format!(
        ". Install nsys {} or newer (https://developer.nvidia.com/nsight-systems) and pass \
         --nsys PATH, or export the report with the nsys that captured it (`nsys export --type \
         sqlite {}`) and convert the .sqlite",
        c.release_str(),
        report
            .map(|r| r.display().to_string())
            .unwrap_or_else(|| "REPORT".into())
    ));
    Err(anyhow!(msg))
}

/// Where to get Nsight Systems, said in every "not found" message.
pub const INSTALL_HINT: &str = "install Nsight Systems (https://developer.nvidia.com/nsight-systems; \
Debian: the nsight-systems package from non-free; Ubuntu/RHEL with NVIDIA's CUDA repository: \
nsight-systems-cli) and pass --nsys PATH or set NSYS if it is not on PATH";
