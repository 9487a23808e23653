//! Nsight Systems reports (`.nsys-rep`, `.qdrep`) and the `nsys` tool itself: find `nsys`, read
//! which nsys version captured a report, export the report to SQLite (cached, locked, atomic),
//! and capture new reports with `nsys profile`.
//!
//! The converter reads SQLite exports only; everything here exists to get one from a report.
//!
//! # Library API
//!
//! * [`find_nsys`] / [`nsys_for_report`]: the `nsys` to use, found from an explicit path, then
//!   the `NSYS` environment variable, then `PATH`, then the usual install places
//!   (`/opt/nvidia/nsight-systems/*/bin`, `/opt/nvidia/nsight-systems-cli/*/bin`,
//!   `/usr/local/cuda*/bin`, `/usr/lib/nsight-systems/bin`). [`nsys_for_report`] skips an `nsys`
//!   that is too old for the report when a newer one is installed.
//! * [`capture_version`]: the nsys version that captured a report, from the file alone.
//! * [`export_report`]: the export of a report (Arrow where the nsys found writes it, else
//!   SQLite), reusing a cached one (see below).
//! * [`profile`]: run a command under `nsys profile` and return the `.nsys-rep` it produced,
//!   importing the `.qdstrm` with `QdstrmImporter` when nsys could not do it itself.
//!
//! A full "profile and convert" is
//! ```no_run
//! # use nsys_perfetto::{convert, report};
//! # use std::ffi::OsString;
//! # fn main() -> anyhow::Result<()> {
//! let popts = report::ProfileOptions { output: Some("/tmp/run".into()), ..Default::default() };
//! let rep = report::profile(&popts, &[OsString::from("./app")])?;
//! let exported = report::export_report(&rep, &report::ExportOptions::default())?;
//! let opts = convert::Options::default();
//! let out = convert::default_output(&rep, opts.format);
//! convert::convert_sqlite(exported.path(), &out, &opts)?;
//! # Ok(()) }
//! ```
//!
//! # The export cache
//!
//! By default the export of `DIR/X.nsys-rep` is `DIR/X.sqlite`, the name `nsys export` and
//! `nsys stats` use, so all three share it. When `DIR` cannot be written (no write permission
//! bit on it, even for root, or creating a file there fails), the export goes to
//! `$XDG_CACHE_HOME/nsys-perfetto/` (else `~/.cache/nsys-perfetto/`), named after the report and
//! a hash of its absolute path. The same happens when `DIR/X.sqlite` exists but was not written
//! by this tool (its SQLite `application_id` is not ours, see [`owns_export`]): a user's file is
//! left alone, never replaced nor reused (nothing says which report content it was exported
//! from). An export is reused only when it records (table [`EXPORT_RECORD_TABLE`]) that it was
//! made from this report's content (see [`crate::provenance::FileId`]: a report rewritten with
//! its old modification time is exported again) by an nsys that reads reports of the report's
//! capture version, and it opens as an nsys SQLite export; otherwise it is exported again and
//! the line describing the export says why. nsys writes to a hidden temporary name that is renamed into
//! place only when nsys succeeded and the file opens as an export, so a failed or interrupted
//! export never leaves a half-written `X.sqlite`. A lock file (`.X.sqlite.lock`, an advisory
//! `flock`, released by the kernel if the process dies) makes a second conversion of the same
//! report wait for the first and then reuse its export.
//!
//! [`ExportOptions::no_cache`] neither reuses nor leaves an export: nsys exports into a temporary
//! directory that is deleted when the [`Exported`] is dropped. [`ExportOptions::keep_sqlite`]
//! with `no_cache` exports afresh and then stores the result in the cache place.
//!
//! # Known nsys problems handled here
//!
//! * Debian's packaged nsys cannot find its importer: `nsys profile` leaves `NAME.qdstrm` and no
//!   report. [`profile`] then runs `QdstrmImporter` from nsys's `host-linux-x64` directory.
//! * nsys 2022.4's agent can spin forever after the program exits when it collects CPU context
//!   switches or CPU samples through perf events (seen on this project's CI kernel: every capture
//!   with the default `--cpuctxsw=process-tree` hung, with or without fork+exec in the program;
//!   with context switches and sampling off, captures finish in seconds, fork+exec included).
//!   [`ProfileOptions`] turns both off by default and offers a timeout, after which nsys, its
//!   agent and the profiled program are killed.

use crate::nsys;
use crate::provenance::{
    EXPORT_APPLICATION_ID, EXPORT_RECORD_FILE, EXPORT_RECORD_TABLE, owns_export, recorded_report,
};
use anyhow::{Context, Result, anyhow, bail};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where to get Nsight Systems, said in every "not found" message.
pub const INSTALL_HINT: &str = "install Nsight Systems (https://developer.nvidia.com/nsight-systems; \
Debian: the nsight-systems package from non-free; Ubuntu/RHEL with NVIDIA's CUDA repository: \
nsight-systems-cli) and pass --nsys PATH or set NSYS if it is not on PATH";

/// True for the report files nsys writes: `.nsys-rep` (2021.4 on) and `.qdrep` (before).
pub fn is_report(path: &Path) -> bool {
    path.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| e.eq_ignore_ascii_case("nsys-rep") || e.eq_ignore_ascii_case("qdrep"))
}

// ---------------------------------------------------------------------------------------------
// Versions

/// An nsys version such as 2022.4.2.1 (year, release, patch, build).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub year: u32,
    pub release: u32,
    pub patch: u32,
    pub build: Option<u32>,
}

impl Version {
    /// Parse the first version in `s`: `2022.4.2.1-df9881f`, `2025@5@1@121-...`,
    /// `NVIDIA Nsight Systems version 2022.4.2.1-df9881f`, `nsight-systems/2020.3.2`.
    pub fn parse(s: &str) -> Option<Version> {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i].is_ascii_digit()
                && (i == 0 || !b[i - 1].is_ascii_digit())
                && let Some(v) = Self::parse_at(&b[i..])
            {
                return Some(v);
            }
            i += 1;
        }
        None
    }

    /// A version starting exactly at `b`: a 4-digit year from 2000, then at least release and
    /// patch, separated by `.` or `@`.
    fn parse_at(b: &[u8]) -> Option<Version> {
        let mut parts: Vec<u32> = Vec::new();
        let mut i = 0;
        loop {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() && i - start < 9 {
                i += 1;
            }
            if i == start {
                break;
            }
            parts.push(std::str::from_utf8(&b[start..i]).ok()?.parse().ok()?);
            if parts.len() == 4 || i >= b.len() || !(b[i] == b'.' || b[i] == b'@') {
                break;
            }
            if !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                break;
            }
            i += 1;
        }
        let year = *parts.first()?;
        if parts.len() < 3 || !(2000..2100).contains(&year) {
            return None;
        }
        Some(Version {
            year,
            release: parts[1],
            patch: parts[2],
            build: parts.get(3).copied(),
        })
    }

    /// `2025.5`: the release, which decides what an nsys can read.
    pub fn release_str(&self) -> String {
        format!("{}.{}", self.year, self.release)
    }

    /// Whether an nsys of this version can read a report captured by `capture`: nsys reads the
    /// reports of its own release and older ones, not newer ones.
    pub fn can_read(&self, capture: &Version) -> bool {
        (self.year, self.release) >= (capture.year, capture.release)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.year, self.release, self.patch)?;
        if let Some(b) = self.build {
            write!(f, ".{b}")?;
        }
        Ok(())
    }
}

const REPORT_MAGIC: &[u8] = b"NVIDIA Tegra Profiler Report ";
const TRAILER_MAGIC: &[u8] = b"U3w[END]";

/// The nsys version that captured a report, read from the file: newer reports name it in their
/// header (`NVIDIA Tegra Profiler Report 2025@5@1@121-...`); older ones (header `... Report 1.`)
/// in their "UI Data" section, found through the section table at the end of the file. `None`
/// when the file is a report but names no version we can find. Errors when it is not a report.
pub fn capture_version(report: &Path) -> Result<Option<Version>> {
    let mut f = File::open(report).map_err(|e| anyhow!("cannot read: {e}"))?;
    let mut head = [0u8; 96];
    let n = read_up_to(&mut f, &mut head)?;
    let head = &head[..n];
    if !head.starts_with(REPORT_MAGIC) {
        bail!("not an Nsight Systems report (no report header)");
    }
    let rest = &head[REPORT_MAGIC.len()..];
    let line_end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
    if let Some(v) = Version::parse_at(&rest[..line_end]) {
        return Ok(Some(v));
    }
    if let Some(v) = version_from_sections(&mut f)? {
        return Ok(Some(v));
    }
    // A damaged or unusual section table: look near the end, where the section lives.
    let len = f.metadata()?.len();
    let from = len.saturating_sub(4 << 20);
    f.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::new();
    f.take(4 << 20).read_to_end(&mut tail)?;
    Ok(find_build_version(&tail))
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Reports end with a section table: `[protobuf table][u64 LE table offset]U3w[END]`, the table
/// a repeated message {1: name, 2: offset, 3: size}. The "UI Data" section holds the build
/// string (`2020.3.2.6-87e152c`).
fn version_from_sections(f: &mut File) -> Result<Option<Version>> {
    let len = f.metadata()?.len();
    if len < 16 {
        return Ok(None);
    }
    f.seek(SeekFrom::Start(len - 16))?;
    let mut end = [0u8; 16];
    f.read_exact(&mut end)?;
    if &end[8..] != TRAILER_MAGIC {
        return Ok(None);
    }
    let toc_at = u64::from_le_bytes(end[..8].try_into().expect("8 bytes"));
    if toc_at >= len - 16 || len - 16 - toc_at > 1 << 20 {
        return Ok(None);
    }
    f.seek(SeekFrom::Start(toc_at))?;
    let mut toc = vec![0u8; (len - 16 - toc_at) as usize];
    f.read_exact(&mut toc)?;
    let mut sections = Vec::new();
    for (field, value) in pb_fields(&toc) {
        if let (1, PbValue::Bytes(entry)) = (field, value) {
            let (mut name, mut off, mut size) = (&[][..], 0u64, 0u64);
            for (ef, ev) in pb_fields(entry) {
                match (ef, ev) {
                    (1, PbValue::Bytes(b)) => name = b,
                    (2, PbValue::Int(v)) => off = v,
                    (3, PbValue::Int(v)) => size = v,
                    _ => {}
                }
            }
            sections.push((name, off, size));
        }
    }
    // "UI Data" first; any other small section after it.
    sections.sort_by_key(|(name, _, _)| *name != b"UI Data");
    for (_, off, size) in sections {
        if size == 0 || size > 1 << 20 || off.saturating_add(size) > len {
            continue;
        }
        f.seek(SeekFrom::Start(off))?;
        let mut sec = vec![0u8; size as usize];
        f.read_exact(&mut sec)?;
        if let Some(v) = find_build_version(&sec) {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

enum PbValue<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

/// The top-level fields of a protobuf message; stops at the first malformed byte.
fn pb_fields(mut b: &[u8]) -> Vec<(u64, PbValue<'_>)> {
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&c, rest) = b.split_first()?;
            *b = rest;
            v |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return Some(v);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let Some(key) = varint(&mut b) else { break };
        let value = match key & 7 {
            0 => match varint(&mut b) {
                Some(v) => PbValue::Int(v),
                None => break,
            },
            2 => {
                let Some(n) = varint(&mut b) else { break };
                if n as usize > b.len() {
                    break;
                }
                let (v, rest) = b.split_at(n as usize);
                b = rest;
                PbValue::Bytes(v)
            }
            1 if b.len() >= 8 => {
                b = &b[8..];
                continue;
            }
            5 if b.len() >= 4 => {
                b = &b[4..];
                continue;
            }
            _ => break,
        };
        out.push((key >> 3, value));
    }
    out
}

/// The last nsys build string in `b`: `YYYY.R.P.B-hhhhhhh` (7 hex digits of the commit).
fn find_build_version(b: &[u8]) -> Option<Version> {
    let mut found = None;
    let mut i = 0;
    while i + 4 < b.len() {
        if b[i] == b'2' && b[i + 1] == b'0' && (i == 0 || !b[i - 1].is_ascii_digit()) {
            let mut j = i;
            let mut dots = 0;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                dots += usize::from(b[j] == b'.');
                j += 1;
            }
            let hex = b.get(j + 1..j + 8);
            if dots == 3
                && b.get(j) == Some(&b'-')
                && hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
                && let Some(v) = Version::parse_at(&b[i..j])
            {
                found = Some(v);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// Child processes: bounded, visible, stoppable

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
/// on Ctrl-C or SIGTERM ([`crate::cleanup`]); stopped after `timeout`. While it runs, stderr
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
    let mut child =
        crate::cleanup::spawn_group(cmd).map_err(|e| anyhow!("cannot run {what}: {e}"))?;
    let pid = child.id();
    let started = Instant::now();
    let terminal = !quiet && std::io::stderr().is_terminal();
    let mut said = 0u64;
    let clear = |drawn: bool| {
        if drawn {
            crate::term::err(format_args!("\r\x1b[2K"));
        }
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => {
                crate::cleanup::kill_group(pid);
                let _ = child.wait();
                crate::cleanup::forget_group(pid);
                clear(terminal && said > 0);
                bail!("cannot wait for {what}: {e}");
            }
        }
        let secs = started.elapsed().as_secs();
        if let Some(limit) = timeout
            && started.elapsed() >= limit
        {
            crate::cleanup::kill_group(pid);
            let _ = child.wait();
            crate::cleanup::forget_group(pid);
            clear(terminal && said > 0);
            bail!(
                "{what} did not finish within {} s and was stopped",
                limit.as_secs()
            );
        }
        if terminal && secs >= 1 && secs > said {
            crate::term::err(format_args!("\r\x1b[2Kwaiting for {what}: {secs} s"));
            said = secs;
        } else if !quiet && !terminal && secs >= 10 && (said == 0 || secs >= said + 30) {
            crate::say!("waiting for {what}: {secs} s so far");
            said = secs;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    crate::cleanup::forget_group(pid);
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

// ---------------------------------------------------------------------------------------------
// Finding nsys

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

/// The nsys to read a report captured by `capture`: the first candidate, unless it is too old
/// and a later one is new enough. Errors say which versions were found and what to install.
pub fn nsys_for_report(
    explicit: Option<&Path>,
    capture: Option<&Version>,
    report: Option<&Path>,
) -> Result<Nsys> {
    let candidates = nsys_candidates(explicit)?;
    let mut first: Option<Nsys> = None;
    let mut others: Vec<Nsys> = Vec::new();
    for (path, source) in candidates {
        let n = match Nsys::probe(&path, source) {
            Ok(n) => n,
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
            return Ok(n);
        }
        if first.is_none() {
            first = Some(n);
        } else {
            others.push(n);
        }
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

// ---------------------------------------------------------------------------------------------
// Export with cache and lock

/// How [`export_report`] gets the export of a report (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// The nsys to use (a binary or an install directory); default: searched.
    pub nsys: Option<PathBuf>,
    /// Neither reuse a cached export nor leave one behind (unless `keep_sqlite`).
    pub no_cache: bool,
    /// With `no_cache`: export afresh, then keep the result in the cache place.
    pub keep_sqlite: bool,
    /// The cache directory for reports in read-only folders; default
    /// `$XDG_CACHE_HOME/nsys-perfetto`, else `~/.cache/nsys-perfetto`.
    pub cache_dir: Option<PathBuf>,
    /// Print nothing (the "waiting for another conversion" line, nsys progress).
    pub quiet: bool,
    /// Stop `nsys export` after this long (`--export-timeout`); default: no limit.
    pub timeout: Option<Duration>,
    /// The export's format (`--export`).
    pub format: ExportFormat,
}

/// The format reports are exported to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExportFormat {
    /// Arrow (`nsys export --type arrowdir`) where the nsys found writes it, else SQLite: the
    /// Arrow export costs nsys less and reads faster.
    #[default]
    Auto,
    Sqlite,
    Arrow,
}

impl ExportFormat {
    /// The formats whose exports may stand for a report, in the order they are looked for.
    fn reusable(self) -> &'static [Format] {
        match self {
            ExportFormat::Auto => &[Format::Arrow, Format::Sqlite],
            ExportFormat::Sqlite => &[Format::Sqlite],
            ExportFormat::Arrow => &[Format::Arrow],
        }
    }
}

/// A format an export is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Sqlite,
    Arrow,
}

impl Format {
    fn nsys_type(self) -> &'static str {
        match self {
            Format::Sqlite => "sqlite",
            Format::Arrow => "arrowdir",
        }
    }

    /// What follows the report's name in the export's name.
    fn suffix(self) -> &'static str {
        match self {
            Format::Sqlite => ".sqlite",
            Format::Arrow => nsys::arrow::NSYS_DIR_SUFFIX,
        }
    }

    /// The format of the export at `path`: a directory is an Arrow export.
    fn of(path: &Path) -> Format {
        if fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            Format::Arrow
        } else {
            Format::Sqlite
        }
    }
}

/// Whether `nsys` may write Arrow exports: nsys 2022 and older cannot (a version it does not
/// say is tried, and falls back to SQLite when it refuses).
fn writes_arrow(nsys: &Nsys) -> bool {
    nsys.version.as_ref().is_none_or(|v| v.year >= 2023)
}

/// How the export came about.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportKind {
    /// An existing export made from the report's content was used.
    Reused,
    /// nsys exported it now, in this many seconds.
    Exported { seconds: f64 },
}

/// A report's export. With `no_cache`, it lives in a temporary directory that is deleted when
/// this is dropped.
#[derive(Debug)]
pub struct Exported {
    path: PathBuf,
    pub kind: ExportKind,
    /// The nsys that exported it (None when reused).
    pub nsys: Option<Nsys>,
    /// The nsys version that captured the report, when known.
    pub capture: Option<Version>,
    /// Whether the file stays after this is dropped.
    pub kept: bool,
    /// Why the export is not where it would usually be (a user's own `X.sqlite` beside the
    /// report, left untouched).
    pub note: Option<String>,
    _temp: Option<tempfile::TempDir>,
}

impl Exported {
    /// The export: an SQLite file or an Arrow directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One line for the user: where the export is and how it came about.
    pub fn describe(&self) -> String {
        let what = match (&self.kind, &self.nsys) {
            (ExportKind::Reused, _) => "reused: exported from this report's content".to_string(),
            (ExportKind::Exported { seconds }, Some(n)) => {
                format!("exported by {} in {seconds:.1} s", n.describe())
            }
            (ExportKind::Exported { seconds }, None) => format!("exported in {seconds:.1} s"),
        };
        let note = self
            .note
            .as_ref()
            .map(|n| format!("; {n}"))
            .unwrap_or_default();
        let format = Format::of(&self.path).nsys_type();
        if self.kept {
            format!("{format}: {} ({what}{note})", self.path.display())
        } else {
            format!("{format}: temporary, deleted after conversion ({what}{note})")
        }
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/nsys-perfetto`, else `~/.cache/nsys-perfetto`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| Path::new(x).is_absolute()) {
        return Some(PathBuf::from(x).join("nsys-perfetto"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/nsys-perfetto"))
}

/// FNV-1a: a stable hash for cache names (std's hasher may change between Rust releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn stem_of(report: &Path) -> String {
    report
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "report".into())
}

/// Where the SQLite export of `report` lives beside it: `DIR/X.sqlite`.
pub fn sibling_export(report: &Path) -> PathBuf {
    sibling(report, Format::Sqlite)
}

/// Where the export of `report` in `format` lives beside it: `DIR/X.sqlite`, `DIR/X_arwdir`.
fn sibling(report: &Path, format: Format) -> PathBuf {
    report.with_file_name(format!("{}{}", stem_of(report), format.suffix()))
}

/// Where the SQLite export of `report` lives in `cache_dir`: `X-<hash of the absolute
/// path>.sqlite`.
pub fn cached_export(report: &Path, cache_dir: &Path) -> PathBuf {
    cached(report, cache_dir, Format::Sqlite)
}

fn cached(report: &Path, cache_dir: &Path, format: Format) -> PathBuf {
    let abs = fs::canonicalize(report).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|d| d.join(report))
            .unwrap_or_else(|_| report.to_path_buf())
    });
    let hash = fnv1a(abs.as_os_str().as_encoded_bytes());
    cache_dir.join(format!(
        "{}-{hash:016x}{}",
        stem_of(report),
        format.suffix()
    ))
}

/// Whether `dir` was made read-only: its permission bits let nobody write. Root could write
/// anyway; nsys-perfetto does not, in such a folder.
pub fn read_only_dir(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o222 == 0)
}

/// Whether files may be created in `dir` (and it is not [`read_only_dir`]).
fn writable_dir(dir: &Path) -> bool {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() && !read_only_dir(dir) => tempfile::Builder::new()
            .prefix(".nsys-perfetto-probe-")
            .tempfile_in(dir)
            .is_ok(),
        _ => false,
    }
}

/// What an export was made from, as recorded in it.
#[derive(Debug, Clone)]
struct ExportRecord {
    report: Option<crate::provenance::FileId>,
    report_name: String,
    nsys: Option<Version>,
}

/// The record of an export this tool wrote (`None` for an export of the user's, or one that
/// records nothing).
fn read_record(export: &Path) -> Option<ExportRecord> {
    let values = crate::provenance::export_record(export)?;
    Some(ExportRecord {
        report: crate::provenance::FileId::from_text(values.get("report")?),
        report_name: values.get("report_name").cloned().unwrap_or_default(),
        nsys: values.get("nsys").and_then(|v| Version::parse(v)),
    })
}

/// For an export this tool wrote: whether it records being exported from `report`'s present
/// content (`None` for a file of the user's, which records nothing).
pub fn export_is_of(export: &Path, report: &Path) -> Option<bool> {
    if !owns_export(export) {
        return None;
    }
    Some(recorded_report(export).is_some_and(|id| id.matches(report)))
}

/// Whether the export at `path` stands for `report`'s content: `Ok` when it may be reused,
/// `Err(None)` when there is none or it is a file of the user's (said elsewhere), `Err(reason)`
/// when an export of this tool's must be made again.
fn reusable_export(
    path: &Path,
    report: &Path,
    capture: Option<&Version>,
) -> std::result::Result<(), Option<String>> {
    if !owns_export(path) {
        return Err(None);
    }
    let record = read_record(path).filter(|r| r.report.is_some());
    let shown = path.display();
    let Some(record) = record else {
        return Err(Some(format!(
            "{shown} records no report it was exported from (an earlier nsys-perfetto wrote it)"
        )));
    };
    if !record.report.as_ref().is_some_and(|id| id.matches(report)) {
        let name = report.file_name().map(|n| n.to_string_lossy().to_string());
        return Err(Some(
            if name.as_deref() == Some(record.report_name.as_str()) {
                format!(
                    "{} changed since {shown} was exported from it",
                    report.display()
                )
            } else {
                format!(
                    "{shown} was exported from another report ({})",
                    record.report_name
                )
            },
        ));
    }
    if let (Some(c), Some(v)) = (capture, &record.nsys)
        && !v.can_read(c)
    {
        return Err(Some(format!(
            "{shown} was exported by nsys {v}, which cannot read reports of nsys {c}"
        )));
    }
    if nsys::open_schema(path).is_err() {
        return Err(Some(format!("{shown} does not open as an nsys export")));
    }
    Ok(())
}

fn parent_dir(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Mark an export this tool just wrote (still under its temporary name) as its own, and record
/// what it was made from (see [`EXPORT_RECORD_TABLE`]; nothing when the report's identity could
/// not be taken, so it is not reused).
fn mark_owned(export: &Path, record: &ExportRecord) -> Result<()> {
    let rows = record.report.as_ref().map(|id| {
        [
            ("tool", crate::provenance::TOOL.to_string()),
            ("report", id.to_text()),
            ("report_name", record.report_name.clone()),
            (
                "nsys",
                record.nsys.map(|v| v.to_string()).unwrap_or_default(),
            ),
        ]
    });
    if Format::of(export) == Format::Arrow {
        let values: std::collections::HashMap<&str, String> = rows.into_iter().flatten().collect();
        fs::write(
            export.join(EXPORT_RECORD_FILE),
            serde_json::to_string(&values)?,
        )?;
        return Ok(());
    }
    let conn = rusqlite::Connection::open_with_flags(
        export,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.execute_batch(&format!(
        "PRAGMA application_id = {}",
        EXPORT_APPLICATION_ID as i32
    ))?;
    if let Some(rows) = rows {
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {EXPORT_RECORD_TABLE} (key TEXT PRIMARY KEY, value TEXT \
             NOT NULL)"
        ))?;
        for (k, v) in rows {
            conn.execute(
                &format!("INSERT OR REPLACE INTO {EXPORT_RECORD_TABLE} VALUES (?1, ?2)"),
                [k, v.as_str()],
            )?;
        }
    }
    Ok(())
}

/// Whether a file the tool did not write is at `sibling`.
fn is_users_file(sibling: &Path) -> bool {
    fs::symlink_metadata(sibling).is_ok() && !owns_export(sibling)
}

/// Why the user's own `X.sqlite` beside the report is passed over; `how` the cache is used.
fn users_file_note(sibling: &Path, how: &str) -> String {
    format!(
        "{} was not written by nsys-perfetto, so nothing says which report content it was \
         exported from: left untouched, {how} the cache instead",
        sibling.display()
    )
}

/// Where an export of `report` may be written: beside it when the folder is writable and no
/// file the user made is there, else in the cache directory. The note says why, when the user's
/// own `X.sqlite` is passed over.
fn export_target(
    report: &Path,
    sibling: &Path,
    cached: Option<&PathBuf>,
) -> Result<(PathBuf, Option<String>)> {
    let user_file = is_users_file(sibling);
    if writable_dir(&parent_dir(report)) && !user_file {
        return Ok((sibling.to_path_buf(), None));
    }
    let note = user_file.then(|| users_file_note(sibling, "exported into"));
    let Some(c) = cached else {
        bail!(
            "{} cannot be used for the export ({}) and there is no cache directory (set \
             XDG_CACHE_HOME or HOME)",
            sibling.display(),
            if user_file {
                "a file this tool did not write is there"
            } else {
                "the folder is read-only"
            }
        );
    };
    let dir = parent_dir(c);
    fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
    Ok((c.clone(), note))
}

/// The export of `report`, reused from the cache when it records this report's content, else
/// exported by nsys: as Arrow where that nsys writes it (unless `opts.format` says SQLite), else
/// as SQLite. Errors are one line that says what to do (see [`nsys_for_report`]).
///
/// An export beside the report that this tool did not write (no marker, see [`owns_export`])
/// is never used and left untouched: the export then goes to the cache directory.
pub fn export_report(report: &Path, opts: &ExportOptions) -> Result<Exported> {
    let meta = fs::metadata(report).map_err(|e| anyhow!("cannot read: {e}"))?;
    if meta.is_dir() {
        bail!("is a directory, not a report");
    }
    if !meta.is_file() {
        bail!("not a regular file (a FIFO, device or socket): give a report file");
    }
    let capture = capture_version(report)?;
    let cache_dir = opts.cache_dir.clone().or_else(default_cache_dir);
    let reused = |p: &Path, note: Option<String>| Exported {
        path: p.to_path_buf(),
        kind: ExportKind::Reused,
        nsys: None,
        capture,
        kept: true,
        note,
        _temp: None,
    };

    // Why an export of this tool's was not reused: said with the new export.
    let mut again: Option<String> = None;
    if !opts.no_cache {
        for &format in opts.format.reusable() {
            let sibling = sibling(report, format);
            let cached = cache_dir.as_deref().map(|d| cached(report, d, format));
            for p in std::iter::once(&sibling).chain(cached.iter()) {
                match reusable_export(p, report, capture.as_ref()) {
                    Ok(()) => {
                        let note = (p != &sibling && is_users_file(&sibling))
                            .then(|| users_file_note(&sibling, "the export reused from"));
                        return Ok(reused(p, note));
                    }
                    Err(Some(why)) => {
                        again.get_or_insert(why);
                    }
                    Err(None) => {}
                }
            }
        }
    }

    let nsys = nsys_for_report(opts.nsys.as_deref(), capture.as_ref(), Some(report))?;
    // Taken before nsys reads the report: a report changed meanwhile is not recorded as read.
    let record = ExportRecord {
        report: crate::provenance::FileId::of(report),
        report_name: report
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        nsys: nsys.version,
    };
    let format = match opts.format {
        ExportFormat::Sqlite => Format::Sqlite,
        ExportFormat::Arrow => Format::Arrow,
        ExportFormat::Auto if writes_arrow(&nsys) => Format::Arrow,
        ExportFormat::Auto => Format::Sqlite,
    };
    let exported = export_as(report, opts, &nsys, &record, capture, format, again.clone());
    match exported {
        // An nsys that cannot write Arrow after all: SQLite, as it always could.
        Err(e) if opts.format == ExportFormat::Auto && format == Format::Arrow => {
            let why = crate::errors::error_line(&e);
            let mut sqlite =
                export_as(report, opts, &nsys, &record, capture, Format::Sqlite, again)?;
            let note = format!("the Arrow export failed ({why}): exported as SQLite");
            sqlite.note = Some(match sqlite.note.take() {
                Some(n) => format!("{note}; {n}"),
                None => note,
            });
            Ok(sqlite)
        }
        e => e,
    }
}

/// Export `report` in `format` (see [`export_report`]), in its cache place or, with
/// `no_cache`, in a temporary directory.
fn export_as(
    report: &Path,
    opts: &ExportOptions,
    nsys: &Nsys,
    record: &ExportRecord,
    capture: Option<Version>,
    format: Format,
    again: Option<String>,
) -> Result<Exported> {
    if opts.no_cache && !opts.keep_sqlite {
        let temp = crate::cleanup::create(
            || {
                tempfile::Builder::new()
                    .prefix(&crate::cleanup::prefix("nsys-perfetto-export-"))
                    .tempdir()
            },
            |d| d.path().to_path_buf(),
        )
        .context("cannot create a temporary directory")?;
        let target = temp
            .path()
            .join(format!("{}{}", stem_of(report), format.suffix()));
        let seconds = run_export(
            nsys,
            report,
            &target,
            capture.as_ref(),
            record,
            opts,
            format,
        )?;
        return Ok(Exported {
            path: target,
            kind: ExportKind::Exported { seconds },
            nsys: Some(nsys.clone()),
            capture,
            kept: false,
            note: None,
            _temp: Some(temp),
        });
    }

    let sibling = sibling(report, format);
    let cache_dir = opts.cache_dir.clone().or_else(default_cache_dir);
    let cached = cache_dir.as_deref().map(|d| cached(report, d, format));
    let (target, note) = export_target(report, &sibling, cached.as_ref())?;
    if let Some(n) = &note
        && !opts.quiet
    {
        crate::say!("note: {}: {n}", report.display());
    }
    let _lock = ExportLock::acquire(&target, report, opts.quiet)?;
    // Another conversion may have exported it while we waited.
    let (kind, nsys, note) =
        if !opts.no_cache && reusable_export(&target, report, capture.as_ref()).is_ok() {
            (ExportKind::Reused, None, note)
        } else {
            let note = match (note, again) {
                (Some(n), Some(a)) => Some(format!("{n}; exporting again: {a}")),
                (n, None) => n,
                (None, Some(a)) => Some(format!("exporting again: {a}")),
            };
            let seconds = run_export(
                nsys,
                report,
                &target,
                capture.as_ref(),
                record,
                opts,
                format,
            )?;
            (ExportKind::Exported { seconds }, Some(nsys.clone()), note)
        };
    Ok(Exported {
        path: target,
        kind,
        nsys,
        capture,
        kept: true,
        note,
        _temp: None,
    })
}

/// `nsys export` into a hidden temporary beside `target`, renamed into place when nsys
/// succeeded and the result opens as an nsys export, then marked as this tool's. Nothing is left
/// behind on failure, timeout or interrupt. Never replaces a file the tool did not write.
fn run_export(
    nsys: &Nsys,
    report: &Path,
    target: &Path,
    capture: Option<&Version>,
    record: &ExportRecord,
    opts: &ExportOptions,
    format: Format,
) -> Result<f64> {
    let started = Instant::now();
    let dir = parent_dir(target);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    if fs::symlink_metadata(target).is_ok() && !owns_export(target) {
        bail!(
            "{} exists and was not written by nsys-perfetto: not replacing it",
            target.display()
        );
    }
    remove_stale_parts(&dir, &name);
    // The temporary: a file for SQLite; for Arrow, a directory nsys writes its files into.
    let prefix = format!(".{name}.{}.", std::process::id());
    let builder = || {
        let mut b = tempfile::Builder::new();
        b.prefix(&prefix).suffix(".part");
        b
    };
    let tmp: Part = match format {
        Format::Sqlite => Part::File(
            crate::cleanup::create(
                || builder().tempfile_in(&dir).map(|t| t.into_temp_path()),
                |t| t.to_path_buf(),
            )
            .map_err(|e| crate::errors::write_error(&dir, &e))?,
        ),
        Format::Arrow => Part::Dir(
            crate::cleanup::create(|| builder().tempdir_in(&dir), |t| t.path().to_path_buf())
                .map_err(|e| crate::errors::write_error(&dir, &e))?,
        ),
    };
    let tmp_path = tmp.path().to_path_buf();
    let out = run_bounded(
        Command::new(&nsys.path)
            .args([
                "export",
                "--type",
                format.nsys_type(),
                "--force-overwrite",
                "true",
                "--output",
            ])
            .arg(&tmp_path)
            .arg(report),
        &format!("nsys export ({})", nsys.path.display()),
        opts.timeout,
        opts.quiet,
    );
    let done = (|| -> Result<()> {
        let out = out?;
        if !out.status.success() {
            let msg = nsys_message(&out.stderr, &out.stdout);
            let mut text = format!(
                "nsys export failed ({}, {}): {msg}",
                nsys.describe(),
                out.status
            );
            let readable = match (capture, &nsys.version) {
                (Some(c), Some(v)) => v.can_read(c),
                _ => false,
            };
            if readable {
                text.push_str(&format!(
                    "; the report looks damaged: it names nsys {} as its capture version, which \
                     this nsys reads",
                    capture.expect("known")
                ));
            } else if msg.contains("Version number is invalid")
                || msg.contains("ProtobufParseException")
            {
                text.push_str(&format!(
                    "; the report may come from a newer nsys: {INSTALL_HINT}"
                ));
            }
            bail!(text);
        }
        nsys::open_schema(&tmp_path).map_err(|e| {
            anyhow!(
                "nsys export ({}) reported success but wrote no usable export: {e}",
                nsys.describe()
            )
        })?;
        mark_owned(&tmp_path, record)
            .map_err(|e| anyhow!("cannot mark the export as this tool's: {e}"))?;
        Ok(())
    })();
    let result = done.and_then(|()| tmp.persist(target));
    crate::cleanup::forget(&tmp_path);
    result?;
    Ok(started.elapsed().as_secs_f64())
}

/// An export being written, removed when dropped unless persisted.
enum Part {
    File(tempfile::TempPath),
    Dir(tempfile::TempDir),
}

impl Part {
    fn path(&self) -> &Path {
        match self {
            Part::File(p) => p,
            Part::Dir(d) => d.path(),
        }
    }

    /// Move it to `target`, replacing the export of this tool's there (checked by the caller).
    fn persist(self, target: &Path) -> Result<()> {
        let cannot = |e: std::io::Error| anyhow!("cannot create {}: {e}", target.display());
        match self {
            Part::File(p) => p.persist(target).map_err(|e| cannot(e.error)),
            Part::Dir(d) => {
                if fs::symlink_metadata(target).is_ok_and(|m| m.is_dir()) {
                    fs::remove_dir_all(target).map_err(cannot)?;
                }
                fs::rename(d.path(), target).map_err(cannot)?;
                // Renamed away: nothing is left for the guard to delete.
                let _ = d.keep();
                Ok(())
            }
        }
    }
}

/// Temporaries of exports that died (killed, power cut). Called with the lock held, or for a
/// private temporary directory, so no live export is writing them.
fn remove_stale_parts(dir: &Path, name: &str) {
    let prefix = format!(".{name}.");
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(&prefix) && n.ends_with(".part") {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = fs::remove_dir_all(e.path());
                } else {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }
}

/// nsys's own message, trimmed: its error lines (stderr, else stdout), without progress bars.
fn nsys_message(stderr: &[u8], stdout: &[u8]) -> String {
    let pick = |b: &[u8]| -> String {
        let text = String::from_utf8_lossy(b);
        let lines: Vec<&str> = text
            .split(['\n', '\r'])
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.contains("[=") && !l.contains("%]"))
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

/// An exclusive `flock` on `.X.sqlite.lock` beside the export. The kernel drops it when the
/// process dies, so a lock is never stale. The holder removes the file before unlocking; a
/// waiter that then gets a lock on the removed file notices (different inode) and retries.
struct ExportLock {
    path: PathBuf,
    _file: File,
}

impl ExportLock {
    fn acquire(target: &Path, report: &Path, quiet: bool) -> Result<ExportLock> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let path = parent_dir(target).join(format!(".{name}.lock"));
        let mut said = false;
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .with_context(|| format!("cannot create lock file {}", path.display()))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    if !quiet && !said {
                        crate::say!(
                            "{}: waiting for another conversion exporting it (lock {})",
                            report.display(),
                            path.display()
                        );
                        said = true;
                    }
                    file.lock()
                        .with_context(|| format!("cannot lock {}", path.display()))?;
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(anyhow!("cannot lock {}: {e}", path.display()));
                }
            }
            let held = file.metadata()?;
            match fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    crate::cleanup::register(&path);
                    return Ok(ExportLock { path, _file: file });
                }
                _ => continue,
            }
        }
    }
}

impl Drop for ExportLock {
    fn drop(&mut self) {
        // Remove while still holding the lock; closing the file then unlocks.
        let _ = fs::remove_file(&self.path);
        crate::cleanup::forget(&self.path);
    }
}

// ---------------------------------------------------------------------------------------------
// Profiling

/// CPU sampling in `nsys profile --sample`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sample {
    /// `--sample=cpu`: CPU IP/backtrace sampling (perf events).
    Cpu,
    /// `--sample=none`
    #[default]
    None,
}

/// What [`profile`] runs. `Default` gives nsys's default trace set without CPU sampling and
/// context switches, no timeout, and `report`-style naming after the command.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// The nsys to use (binary or install directory); default: searched.
    pub nsys: Option<PathBuf>,
    /// The report's path without extension (`/tmp/run` gives `/tmp/run.nsys-rep`). An extension
    /// `.nsys-rep`, `.qdrep`, `.pftrace`, `.json` or `.sqlite` is dropped. Default: the
    /// command's file name in the current directory, numbered (`app-2`) if taken.
    pub output: Option<PathBuf>,
    /// `--trace`: comma-separated APIs, e.g. `cuda,nvtx,osrt`.
    pub trace: String,
    pub sample: Sample,
    /// `--cpuctxsw=process-tree` instead of `none`: context switches (perf events).
    pub cpuctxsw: bool,
    /// More arguments for `nsys profile`, before the command.
    pub nsys_args: Vec<OsString>,
    /// Kill nsys, its agent and the program after this long.
    pub timeout: Option<Duration>,
    /// Send nsys's and the program's output to a log instead of the terminal, and show it only
    /// when profiling failed.
    pub quiet: bool,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            nsys: None,
            output: None,
            trace: "cuda,nvtx,osrt".into(),
            sample: Sample::None,
            cpuctxsw: false,
            nsys_args: Vec::new(),
            timeout: None,
            quiet: false,
        }
    }
}

/// The report's base path (no extension) for `profile`.
pub fn profile_base(output: Option<&Path>, command: &[OsString]) -> PathBuf {
    if let Some(o) = output {
        let known = ["nsys-rep", "qdrep", "pftrace", "json", "sqlite", "qdstrm"];
        return match o.extension().and_then(OsStr::to_str) {
            Some(e) if known.iter().any(|k| e.eq_ignore_ascii_case(k)) => o.with_extension(""),
            _ => o.to_path_buf(),
        };
    }
    let name = command
        .first()
        .and_then(|c| Path::new(c).file_name())
        .map(|n| n.to_string_lossy().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "report".into());
    let taken = |base: &str| {
        ["nsys-rep", "qdrep", "qdstrm", "pftrace", "sqlite"]
            .iter()
            .any(|e| Path::new(&format!("{base}.{e}")).exists())
    };
    if !taken(&name) {
        return PathBuf::from(name);
    }
    (2..)
        .map(|n| format!("{name}-{n}"))
        .find(|b| !taken(b))
        .map(PathBuf::from)
        .expect("some number is free")
}

fn with_suffix(base: &Path, ext: &str) -> PathBuf {
    let mut s = base.as_os_str().to_os_string();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Run `command` under `nsys profile` and return the report (`BASE.nsys-rep`, or `BASE.qdrep`
/// from nsys before 2021.4). When nsys leaves only `BASE.qdstrm` (it could not find its
/// importer), runs `QdstrmImporter` itself and removes the `.qdstrm`. An existing report of the
/// same name is overwritten.
pub fn profile_run(opts: &ProfileOptions, command: &[OsString]) -> Result<Profiled> {
    if command.is_empty() {
        bail!("no command to profile");
    }
    let nsys = find_nsys(opts.nsys.as_deref())?;
    let base = profile_base(opts.output.as_deref(), command);
    if let Some(d) = base.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let outputs: Vec<PathBuf> = ["nsys-rep", "qdrep", "qdstrm"]
        .iter()
        .map(|e| with_suffix(&base, e))
        .collect();
    for p in &outputs {
        // Stale results would pass for this run's.
        let _ = fs::remove_file(p);
    }

    let mut cmd = Command::new(&nsys.path);
    cmd.arg("profile")
        .arg(format!("--trace={}", opts.trace))
        .arg(format!(
            "--sample={}",
            match opts.sample {
                Sample::Cpu => "cpu",
                Sample::None => "none",
            }
        ))
        .arg(format!(
            "--cpuctxsw={}",
            if opts.cpuctxsw {
                "process-tree"
            } else {
                "none"
            }
        ))
        .arg("--force-overwrite=true")
        .arg("--output")
        .arg(&base)
        .args(&opts.nsys_args)
        .args(command)
        .stdin(Stdio::inherit());
    let log = if opts.quiet {
        let f = tempfile::tempfile().context("cannot create a log file")?;
        cmd.stdout(f.try_clone()?).stderr(f.try_clone()?);
        Some(f)
    } else {
        None
    };
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow!("cannot run {}: {e}", nsys.path.display()))?;
    let pid = child.id();
    let status = {
        // nsys gets a terminal's Ctrl-C itself (same process group) and writes the report; a
        // SIGTERM sent to us only is passed on as SIGINT. After a grace period, or the timeout,
        // nsys, its agent and the program are killed.
        let _defer = crate::cleanup::defer();
        let started = Instant::now();
        let mut grace_until: Option<Instant> = None;
        loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if grace_until.is_none()
                && let Some(sig) = crate::cleanup::interrupted()
            {
                if sig != libc::SIGINT {
                    // SAFETY: kill(2) on our own child.
                    unsafe { libc::kill(pid as i32, libc::SIGINT) };
                }
                grace_until = Some(Instant::now() + PROFILE_GRACE);
            }
            if grace_until.is_some_and(|g| Instant::now() >= g) {
                kill_nsys_tree(pid);
                let _ = child.kill();
                break child.wait()?;
            }
            if let Some(limit) = opts.timeout
                && started.elapsed() >= limit
            {
                kill_nsys_tree(pid);
                let _ = child.kill();
                let _ = child.wait();
                for p in &outputs {
                    let _ = fs::remove_file(p);
                }
                bail!(
                    "nsys profile did not finish within {} s and was stopped ({}); nsys \
                     2022.4 can hang after the program exits when it collects CPU samples \
                     or context switches (--sample cpu, --cpuctxsw)",
                    limit.as_secs(),
                    nsys.describe()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let log_text = || -> String {
        let Some(mut f) = log.as_ref().and_then(|f| f.try_clone().ok()) else {
            return String::new();
        };
        let mut s = Vec::new();
        let _ = f.seek(SeekFrom::Start(0));
        let _ = f.read_to_end(&mut s);
        let s = String::from_utf8_lossy(&s);
        let tail: Vec<&str> = s.lines().rev().take(20).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    };

    let non_empty = |p: &Path| fs::metadata(p).is_ok_and(|m| m.len() > 0);
    let [rep, qdrep, qdstrm] = [&outputs[0], &outputs[1], &outputs[2]];
    let report = if non_empty(rep) {
        rep.clone()
    } else if non_empty(qdrep) {
        qdrep.clone()
    } else if non_empty(qdstrm) {
        let importer = nsys.importer().ok_or_else(|| {
            anyhow!(
                "{} left {} but no report, and QdstrmImporter was not found (looked in \
                 host-linux-x64 beside {} and in /usr/lib/nsight-systems/host-linux-x64): run \
                 `QdstrmImporter -i {}` from your nsys installation",
                nsys.describe(),
                qdstrm.display(),
                nsys.path.display(),
                qdstrm.display()
            )
        })?;
        import_qdstrm(&importer, qdstrm, rep)?;
        let _ = fs::remove_file(qdstrm);
        if !opts.quiet {
            crate::say!(
                "note: nsys could not import its capture itself; imported {} with {}",
                qdstrm.display(),
                importer.display()
            );
        }
        rep.clone()
    } else {
        let mut msg = format!(
            "nsys profile ({}) produced no report ({})",
            nsys.describe(),
            status
        );
        let log = log_text();
        if !log.is_empty() {
            msg.push_str(":\n");
            msg.push_str(&log);
        }
        bail!(msg);
    };
    Ok(Profiled { report, status })
}

/// How long nsys may take to write its report after an interrupt before it is killed.
pub const PROFILE_GRACE: Duration = Duration::from_secs(30);

/// What [`profile_run`] produced.
#[derive(Debug)]
pub struct Profiled {
    pub report: PathBuf,
    /// nsys profile's exit status: nsys passes on the profiled program's exit code.
    pub status: std::process::ExitStatus,
}

/// Run `command` under `nsys profile` and return the report (see [`profile_run`]); a failing
/// program's exit status is only noted on stderr.
pub fn profile(opts: &ProfileOptions, command: &[OsString]) -> Result<PathBuf> {
    let p = profile_run(opts, command)?;
    if !p.status.success() && !opts.quiet {
        crate::say!(
            "note: nsys profile exited with {}; converting the report it wrote anyway",
            p.status
        );
    }
    Ok(p.report)
}

/// Turn a `.qdstrm` capture into a report with nsys's `QdstrmImporter`.
pub fn import_qdstrm(importer: &Path, qdstrm: &Path, report: &Path) -> Result<()> {
    let out = run_bounded(
        Command::new(importer)
            .arg("--force-overwrite")
            .arg("--input-file")
            .arg(qdstrm)
            .arg("--output-file")
            .arg(report),
        &format!("QdstrmImporter ({})", importer.display()),
        None,
        false,
    )?;
    let ok = out.status.success() && fs::metadata(report).is_ok_and(|m| m.len() > 0);
    if !ok {
        let _ = fs::remove_file(report);
        bail!(
            "{} failed to import {} ({}): {}",
            importer.display(),
            qdstrm.display(),
            out.status,
            nsys_message(&out.stderr, &out.stdout)
        );
    }
    Ok(())
}

/// Kill (SIGKILL) nsys `pid`, its descendants (the launcher and the program) and its agent.
/// The agent detaches into its own session; it is recognised by the session name nsys gives it,
/// `--session-name=profile-<program>-<nsys pid>`. Linux only (reads /proc).
fn kill_nsys_tree(pid: u32) {
    let mut procs: Vec<(u32, u32, String)> = Vec::new();
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok())
                .unwrap_or(0);
            let cmdline = fs::read(e.path().join("cmdline"))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            procs.push((p, ppid, cmdline));
        }
    }
    let agent_tag = format!("-{pid} ");
    let mut doomed: Vec<u32> = procs
        .iter()
        .filter(|(_, _, c)| {
            c.contains("--start-agent")
                && c.split_whitespace().any(|a| {
                    a.starts_with("--session-name=profile-")
                        && format!("{a} ").ends_with(&agent_tag)
                })
        })
        .map(|(p, _, _)| *p)
        .collect();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for (p, pp, _) in &procs {
            if *pp == parent && !doomed.contains(p) {
                doomed.push(*p);
                frontier.push(*p);
            }
        }
    }
    for p in doomed {
        let _ = Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let v = Version::parse("NVIDIA Nsight Systems version 2022.4.2.1-df9881f").unwrap();
        assert_eq!(v.to_string(), "2022.4.2.1");
        let h = Version::parse_at(b"2025@5@1@121-255136380782v0.").unwrap();
        assert_eq!(h.to_string(), "2025.5.1.121");
        assert!(!v.can_read(&h));
        assert!(h.can_read(&v));
        let same = Version::parse("2022.4.1").unwrap();
        assert!(v.can_read(&same) && same.can_read(&v));
        assert_eq!(
            Version::parse("nsight-systems/2020.3.2")
                .unwrap()
                .to_string(),
            "2020.3.2"
        );
        assert!(Version::parse("1.2.3").is_none());
        assert!(Version::parse_at(b"1.\n").is_none());
    }

    #[test]
    fn build_strings() {
        let b = b"xx\x122020.3.2.6-87e152c:\x122020.3.2.6-87e152c\xa2\x01(87e1";
        assert_eq!(find_build_version(b).unwrap().to_string(), "2020.3.2.6");
        assert!(find_build_version(b"2020.3.2 and 12020.1.1.1-abcdefg").is_none());
    }

    #[test]
    fn profile_names() {
        let cmd = [OsString::from("./bin/app"), OsString::from("-x")];
        assert_eq!(
            profile_base(Some(Path::new("/tmp/wl.nsys-rep")), &cmd),
            PathBuf::from("/tmp/wl")
        );
        assert_eq!(
            profile_base(Some(Path::new("/tmp/wl")), &cmd),
            PathBuf::from("/tmp/wl")
        );
        assert_eq!(
            profile_base(Some(Path::new("run.v2")), &cmd),
            PathBuf::from("run.v2")
        );
    }

    #[test]
    fn cache_names_are_stable() {
        let p = cached_export(Path::new("/nonexistent/dir/r.nsys-rep"), Path::new("/c"));
        assert_eq!(
            p,
            PathBuf::from(format!(
                "/c/r-{:016x}.sqlite",
                fnv1a(b"/nonexistent/dir/r.nsys-rep")
            ))
        );
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
