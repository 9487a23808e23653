//! Capturing a report with `nsys profile` (and `QdstrmImporter` where nsys could not import).

use super::finding::find_nsys;
use super::process::{nsys_message, run_bounded};
use anyhow::{Context, Result, anyhow, bail};
use nsys_perfetto_write::output::formats::{FORMATS, OutputFormat};
use std::ffi::{OsStr, OsString};
use std::fs::{self};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
        let known = ["nsys-rep", "qdrep", "sqlite", "qdstrm"]
            .into_iter()
            .chain(FORMATS.iter().map(|s| s.extension));
        return match o.extension().and_then(OsStr::to_str) {
            Some(e) if known.clone().any(|k| e.eq_ignore_ascii_case(k)) => o.with_extension(""),
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
        // The report, its export and the trace it is converted to.
        [
            "nsys-rep",
            "qdrep",
            "qdstrm",
            OutputFormat::default().extension(),
            "sqlite",
        ]
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
        let _defer = nsys_perfetto_model::cleanup::defer();
        let started = Instant::now();
        let mut grace_until: Option<Instant> = None;
        loop {
            if let Some(s) =
                nsys_perfetto_model::cleanup::wait_exit(&mut child, Duration::from_millis(50))?
            {
                break s;
            }
            if grace_until.is_none()
                && let Some(sig) = nsys_perfetto_model::cleanup::interrupted()
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
            nsys_perfetto_model::say!(
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
        nsys_perfetto_model::say!(
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
