//! Issue 8: never destroy a file, never hang, never leave litter. One test per promise, on
//! real inputs (the bundled capture, corpus exports, the benchmark export amplified). Tests that
//! need `../shared` or nsys print why they skip when those are absent.

use crate::common;

use nsys_perfetto::convert::Options;
use rusqlite::Connection;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

fn shared() -> PathBuf {
    common::manifest_dir().join("../shared")
}

fn run_in(dir: &Path, args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(BIN);
    c.current_dir(dir).args(args).env("RUST_BACKTRACE", "0");
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null()).output().expect("run the binary")
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stderr ---\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn hash_file(p: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(p).unwrap().hash(&mut h);
    h.finish()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn assert_no_panic(o: &Output) {
    assert_ne!(o.status.code(), Some(101), "panic: {}", text(o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("panicked"),
        "panic: {}",
        text(o)
    );
}

/// A failure with exactly one error line that contains `want`.
fn assert_one_line_error(o: &Output, want: &str) {
    assert_no_panic(o);
    assert!(!o.status.success(), "want a failure: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {}", text(o));
    assert!(lines[0].contains(want), "want {want:?}: {}", text(o));
}

fn fixture_copy(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &p).unwrap();
    p
}

// ---------------------------------------------------------------------------------------------
// Data loss

#[test]
fn output_naming_an_input_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let input = fixture_copy(d, "in.sqlite");
    std::os::unix::fs::symlink("in.sqlite", d.join("sym.sqlite")).unwrap();
    std::fs::hard_link(&input, d.join("hard.pftrace")).unwrap();
    let before = hash_file(&input);
    for out in ["in.sqlite", "./in.sqlite", "sym.sqlite", "hard.pftrace"] {
        let o = run_in(d, &[os("in.sqlite"), os("-o"), os(out)], &[]);
        assert_one_line_error(&o, "is the input itself");
        assert_eq!(hash_file(&input), before, "input untouched after -o {out}");
        assert!(
            std::fs::symlink_metadata(d.join("sym.sqlite"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    // A batch: out/a.pftrace, the output of a.sqlite, is itself an input (any existing file
    // named on the command line is).
    let a = fixture_copy(d, "a.sqlite");
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::copy(&a, d.join("out/a.pftrace")).unwrap();
    let other = hash_file(&d.join("out/a.pftrace"));
    let o = run_in(
        d,
        &[os("a.sqlite"), os("out/a.pftrace"), os("-o"), os("out")],
        &[],
    );
    assert_no_panic(&o);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("an input of this run (out/a.pftrace)"),
        "{}",
        text(&o)
    );
    assert_eq!(hash_file(&d.join("out/a.pftrace")), other);
    let left: Vec<String> = names(d)
        .into_iter()
        .filter(|n| n.contains(".part"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn output_naming_the_export_of_a_report_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::copy(
        common::fixture("nvtx_workload.nsys-rep"),
        d.join("r.nsys-rep"),
    )
    .unwrap();
    // No nsys needed: the check comes before any export.
    let o = run_in(d, &[os("r.nsys-rep"), os("-o"), os("r.sqlite")], &[]);
    assert_one_line_error(&o, "SQLite export goes");
    assert_eq!(names(d), vec!["r.nsys-rep"]);
}

#[test]
fn device_fifo_and_stdout_outputs_are_written_through() {
    use std::os::unix::fs::FileTypeExt;
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fixture_copy(d, "in.sqlite");
    // /dev/null stays a device (as root, replacing it would break the machine).
    let o = run_in(d, &[os("in.sqlite"), os("-o"), os("/dev/null")], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let m = std::fs::metadata("/dev/null").unwrap();
    assert!(
        m.file_type().is_char_device(),
        "/dev/null is still a device"
    );

    // A FIFO: read by a thread while the converter writes into it.
    let fifo = d.join("out.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = run_in(d, &[os("in.sqlite"), os("-o"), os("out.fifo")], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let bytes = reader.join().unwrap();
    let trace = common::validate(&bytes).expect("a valid trace through the FIFO");
    assert!(trace.slices.len() > 100);
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());

    // Standard output: the trace only; the summary goes to stderr.
    let o = run_in(d, &[os("in.sqlite"), os("-o"), os("-")], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let trace = common::validate(&o.stdout).expect("a valid trace on stdout");
    assert!(trace.slices.len() > 100);
    assert!(String::from_utf8_lossy(&o.stderr).contains("-> standard output"));
    let o = run_in(
        d,
        &[
            os("in.sqlite"),
            os("-o"),
            os("-"),
            os("--format"),
            os("json"),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("JSON on stdout");
    assert_eq!(names(d), vec!["in.sqlite", "out.fifo"]);
}

#[test]
fn fifo_input_is_refused_without_opening_it() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let fifo = d.join("pipe.sqlite");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .current_dir(d)
        .args(["pipe.sqlite", "-o", "x.pftrace"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("hangs on a FIFO input");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert_one_line_error(&o, "not a regular file");
}

#[test]
fn contradictory_format_and_empty_selection_are_errors() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fixture_copy(d, "in.sqlite");
    let o = run_in(
        d,
        &[
            os("in.sqlite"),
            os("-o"),
            os("x.json"),
            os("--format"),
            os("protobuf"),
        ],
        &[],
    );
    assert_one_line_error(&o, "contradicts");
    assert_eq!(o.status.code(), Some(2), "a usage error: {}", text(&o));
    // A merge chooses its format by the same rule, before it reads anything.
    let o = run_in(
        d,
        &[
            os("merge"),
            os("in.sqlite"),
            os("-o"),
            os("m.pftrace"),
            os("--format"),
            os("json"),
        ],
        &[],
    );
    assert_one_line_error(&o, "--format json contradicts the output name m.pftrace");
    assert_eq!(o.status.code(), Some(2), "a usage error: {}", text(&o));
    assert_eq!(names(d), vec!["in.sqlite"]);
    // A previous output stays when the selection matches nothing.
    std::fs::write(d.join("sel.pftrace"), b"previous").unwrap();
    let o = run_in(
        d,
        &[
            os("in.sqlite"),
            os("-o"),
            os("sel.pftrace"),
            os("--pid"),
            os("99999"),
        ],
        &[],
    );
    assert_one_line_error(&o, "matches no events: nothing written");
    assert_eq!(std::fs::read(d.join("sel.pftrace")).unwrap(), b"previous");
    assert_eq!(names(d), vec!["in.sqlite", "sel.pftrace"]);
}

#[test]
fn messages_name_the_users_paths() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fixture_copy(d, "in.sqlite");
    let o = run_in(
        d,
        &[os("in.sqlite"), os("-o"), os("no/such/dir/x.pftrace")],
        &[],
    );
    assert_one_line_error(&o, "the folder no/such/dir does not exist");
    assert!(!String::from_utf8_lossy(&o.stderr).contains(".part"));
    // A read-only folder (permission bits; root ignores them, so only checked as non-root).
    let ro = d.join("ro");
    std::fs::create_dir(&ro).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let o = run_in(d, &[os("in.sqlite"), os("-o"), os("ro/x.pftrace")], &[]);
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_no_panic(&o);
    if !o.status.success() {
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("ro is read-only") && e.contains("-o OUT"), "{e}");
        assert!(!e.contains(".part"), "{e}");
    }
}

/// A read-only mount (EROFS) gets the read-only-folder advice. Needs root (mount); skips
/// otherwise.
#[test]
fn read_only_mount_gets_read_only_advice() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fixture_copy(d, "in.sqlite");
    common::with_tmpfs(&d.join("mnt"), "ro,size=64k", || {
        let o = run_in(d, &[os("in.sqlite"), os("-o"), os("mnt/x.pftrace")], &[]);
        assert_one_line_error(&o, "mnt is read-only");
        assert!(String::from_utf8_lossy(&o.stderr).contains("-o OUT"));
    });
}

// ---------------------------------------------------------------------------------------------
// The export cache (needs nsys)

fn have_nsys() -> bool {
    match nsys_perfetto::report::finding::find_nsys(None) {
        Ok(_) => true,
        Err(e) => {
            common::skip("nsys", &format!("nsys not found ({e:#})"));
            false
        }
    }
}

fn set_mtime(p: &Path, secs_ago: u64) {
    let t = std::time::SystemTime::now() - Duration::from_secs(secs_ago);
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn users_own_export_is_never_touched() {
    // On SQLite exports (`--export sqlite`), which a user's own `r.sqlite` beside the report
    // competes with, whichever nsys is the newest found.
    if !have_nsys() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let cache = d.join("cache");
    std::fs::copy(common::fixture("nvtx_workload.nsys-rep"), d.join("r.qdrep")).unwrap();
    // The user's own, older r.sqlite (here: another profile's export entirely).
    let user = d.join("r.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &user).unwrap();
    set_mtime(&user, 3600);
    let before = (
        hash_file(&user),
        std::fs::metadata(&user).unwrap().modified().unwrap(),
    );
    let o = run_in(
        d,
        &[
            os("r.qdrep"),
            os("-o"),
            os("r.pftrace"),
            os("--export"),
            os("sqlite"),
        ],
        &[("XDG_CACHE_HOME", &cache)],
    );
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("left untouched"), "{err}");
    assert_eq!(
        (
            hash_file(&user),
            std::fs::metadata(&user).unwrap().modified().unwrap()
        ),
        before,
        "the user's r.sqlite is unchanged"
    );
    let cached: Vec<String> = names(&cache.join("nsys-perfetto"));
    assert!(
        cached
            .iter()
            .any(|n| n.starts_with("r-") && n.ends_with(".sqlite")),
        "{cached:?}"
    );
    assert_eq!(names(d), vec!["cache", "r.pftrace", "r.qdrep", "r.sqlite"]);

    // Newer than the report: still neither used (nothing says which report it was exported
    // from) nor touched; the cached export, which records the report's content, is reused.
    set_mtime(&d.join("r.qdrep"), 7200);
    let before = (
        hash_file(&user),
        std::fs::metadata(&user).unwrap().modified().unwrap(),
    );
    let o = run_in(
        d,
        &[
            os("r.qdrep"),
            os("-o"),
            os("r2.pftrace"),
            os("--export"),
            os("sqlite"),
        ],
        &[("XDG_CACHE_HOME", &cache)],
    );
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("sqlite: r.sqlite"), "{err}");
    assert!(
        err.contains("(reused: exported from this report's content"),
        "{err}"
    );
    assert!(err.contains("left untouched"), "{err}");
    assert_eq!(
        (
            hash_file(&user),
            std::fs::metadata(&user).unwrap().modified().unwrap()
        ),
        before
    );

    // Without a file of the user's, the export goes beside the report, marked as ours; a report
    // only touched (newer, same content) reuses it; a changed report exports again over it.
    std::fs::remove_file(&user).unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
    let o = run_in(
        d,
        &[
            os("r.qdrep"),
            os("-o"),
            os("r3.pftrace"),
            os("--export"),
            os("sqlite"),
        ],
        &[("XDG_CACHE_HOME", &cache)],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(d.join("r.sqlite").is_file());
    assert!(nsys_perfetto::provenance::owns_export(&d.join("r.sqlite")));
    set_mtime(&d.join("r.sqlite"), 9000);
    let o = run_in(
        d,
        &[
            os("r.qdrep"),
            os("-o"),
            os("r4.pftrace"),
            os("--export"),
            os("sqlite"),
        ],
        &[("XDG_CACHE_HOME", &cache)],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("sqlite: r.sqlite (reused: exported from this report's content)"),
        "{}",
        text(&o)
    );
    let left: Vec<String> = names(d)
        .into_iter()
        .filter(|n| n.contains(".part") || n.contains(".lock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The export cache judges a report by its content, not its time: a report replaced by another
/// one with an older modification time than its export (restored from a backup, `cp -p`,
/// `rsync -t`) is exported again, and its trace converted again.
#[test]
fn changed_report_with_an_old_time_is_exported_again() {
    // On SQLite exports (`--export sqlite`), whichever nsys is the newest found.
    if !have_nsys() {
        return;
    }
    let Some(corpus) = common::corpus_dir() else {
        common::skip("corpus", "../shared/corpus absent");
        return;
    };
    let other = corpus.join("quasiben__nvtx-examples__multiprocessing.qdrep");
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let cache = d.join("cache");
    let rep = d.join("r.qdrep");
    std::fs::copy(common::fixture("nvtx_workload.nsys-rep"), &rep).unwrap();
    let first = run_in(
        d,
        &[os("r.qdrep"), os("--export"), os("sqlite")],
        &[("XDG_CACHE_HOME", &cache)],
    );
    assert!(first.status.success(), "{}", text(&first));
    assert!(nsys_perfetto::provenance::owns_export(&d.join("r.sqlite")));
    let events = |o: &Output| -> String {
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        err.lines()
            .find(|l| l.trim_start().starts_with("events:"))
            .unwrap_or_else(|| panic!("no events line: {err}"))
            .to_string()
    };
    // Another report under the same name, its time an hour before the export's.
    std::fs::copy(&other, &rep).unwrap();
    set_mtime(&rep, 3600);
    let second = run_in(
        d,
        &[os("r.qdrep"), os("--export"), os("sqlite")],
        &[("XDG_CACHE_HOME", &cache)],
    );
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{err}");
    assert!(
        err.contains("exporting again: r.qdrep changed since r.sqlite was exported from it"),
        "{err}"
    );
    // What the other report holds, as its own conversion in a folder of its own says.
    let fresh_dir = d.join("fresh");
    std::fs::create_dir(&fresh_dir).unwrap();
    std::fs::copy(&other, fresh_dir.join("o.qdrep")).unwrap();
    let fresh = run_in(
        &fresh_dir,
        &[os("o.qdrep"), os("--export"), os("sqlite")],
        &[("XDG_CACHE_HOME", &cache)],
    );
    assert!(fresh.status.success(), "{}", text(&fresh));
    assert_eq!(events(&second), events(&fresh));
    assert_ne!(events(&second), events(&first));

    // The first report back, older than the export beside it: a directory conversion, which
    // converts one of the pair, takes the report (the export records other content) and its
    // trace holds the first report's events again.
    std::fs::copy(common::fixture("nvtx_workload.nsys-rep"), &rep).unwrap();
    set_mtime(&rep, 7200);
    let third = run_in(
        d,
        &[os("."), os("--export"), os("sqlite")],
        &[("XDG_CACHE_HOME", &cache)],
    );
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(third.status.success(), "{err}");
    assert!(
        err.contains(
            "./r.sqlite: not converted, ./r.qdrep gives the same output: converting the report"
        ),
        "{err}"
    );
    assert!(
        err.contains("converting again: made from other content"),
        "{err}"
    );
    assert_eq!(events(&third), events(&first));
}

#[test]
fn profile_passes_on_the_programs_failure_and_applies_selection() {
    if !have_nsys() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let o = Command::new(BIN)
        .current_dir(d)
        .args([
            "profile",
            "--types",
            "osrt",
            "-o",
            "run",
            "--",
            "sh",
            "-c",
            "cat /proc/self/status >/dev/null; exit 3",
        ])
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_no_panic(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("produced no report") || err.contains("QdstrmImporter was not found") {
        common::skip(
            "nsys-capture",
            &format!("this nsys cannot capture here: {err}"),
        );
        return;
    }
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(err.contains("the profiled program failed"), "{err}");
    assert!(err.contains("selection: types osrt"), "{err}");
    assert!(d.join("run.pftrace").is_file(), "{err}");
    // Unknown types are refused before profiling.
    let o = Command::new(BIN)
        .current_dir(d)
        .args(["profile", "--types", "bogus", "-o", "x", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!d.join("x.nsys-rep").exists() && !d.join("x.qdstrm").exists());
}

// ---------------------------------------------------------------------------------------------
// Interrupts and litter

/// The benchmark export amplified 5x (about 65 MB): long enough to interrupt.
fn big_input(dir: &Path) -> Option<PathBuf> {
    let src = shared().join("bench/ai-profiler-firstOptimization.sqlite");
    let tool = shared().join("tools/amplify_trace.py");
    if !src.is_file() || !tool.is_file() {
        common::skip(
            "corpus",
            &format!("{} or {} absent", src.display(), tool.display()),
        );
        return None;
    }
    let out = dir.join("big.sqlite");
    let ok = Command::new("python3")
        .arg(&tool)
        .arg(&src)
        .arg(&out)
        .args(["--copies", "5"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::skip("corpus", "../shared/tools/amplify_trace.py failed");
        return None;
    }
    Some(out)
}

fn our_scratch(tmp: &Path) -> Vec<String> {
    names(tmp)
        .into_iter()
        .filter(|n| n.starts_with("nsys-perfetto-"))
        .collect()
}

/// Start a conversion into `out_dir`, wait until its temporary output exists, send `sig`.
fn interrupt(input: &Path, out_dir: &Path, tmp: &Path, sig: i32) -> Output {
    let child = Command::new(BIN)
        .arg(input)
        .args(["--nvtx-gpu", "-o"])
        .arg(out_dir.join("out.pftrace"))
        .env("TMPDIR", tmp)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let started = Instant::now();
    while !names(out_dir).iter().any(|n| n.ends_with(".part"))
        && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    unsafe { libc::kill(pid, sig) };
    child.wait_with_output().unwrap()
}

#[test]
fn signals_leave_nothing_and_sigkill_litter_is_removed_next_run() {
    let t = tempfile::tempdir().unwrap();
    let Some(input) = big_input(t.path()) else {
        return;
    };
    let out_dir = t.path().join("out");
    let tmp = t.path().join("tmp");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let previous = out_dir.join("out.pftrace");
    std::fs::write(&previous, b"the previous trace").unwrap();
    let input_hash = hash_file(&input);
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let o = interrupt(&input, &out_dir, &tmp, sig);
        assert_no_panic(&o);
        // It may have finished first on a fast machine: then the output is complete.
        if o.status.success() {
            eprintln!("conversion finished before signal {sig}");
            common::validate_file(&previous);
            std::fs::write(&previous, b"the previous trace").unwrap();
            continue;
        }
        assert_eq!(o.status.code(), Some(code), "{}", text(&o));
        assert_eq!(std::fs::read(&previous).unwrap(), b"the previous trace");
        assert_eq!(names(&out_dir), vec!["out.pftrace"], "no .part left");
        assert!(our_scratch(&tmp).is_empty(), "{:?}", our_scratch(&tmp));
    }
    // SIGKILL: nothing runs, litter stays; the next run removes it (its owner is gone).
    let o = interrupt(&input, &out_dir, &tmp, libc::SIGKILL);
    assert_eq!(o.status.code(), None);
    assert_eq!(std::fs::read(&previous).unwrap(), b"the previous trace");
    let killed_litter = names(&out_dir).len() > 1 || !our_scratch(&tmp).is_empty();
    let small = fixture_copy(t.path(), "small.sqlite");
    let o = Command::new(BIN)
        .arg(&small)
        .args(["--nvtx-gpu", "-o"])
        .arg(out_dir.join("small.pftrace"))
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(our_scratch(&tmp).is_empty(), "{:?}", our_scratch(&tmp));
    let mut left = names(&out_dir);
    left.retain(|n| n.ends_with(".part"));
    assert!(left.is_empty(), "dead run's temporaries removed: {left:?}");
    assert_eq!(std::fs::read(&previous).unwrap(), b"the previous trace");
    assert_eq!(hash_file(&input), input_hash, "input untouched");
    eprintln!("SIGKILL left litter that the next run removed: {killed_litter}");
}

#[test]
fn closed_stderr_does_not_panic_and_the_batch_is_done() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    for n in ["a.sqlite", "b.sqlite", "c.sqlite"] {
        fixture_copy(d, n);
    }
    // stderr (and stdout) a pipe whose reader is gone: every message gets EPIPE.
    let mut child = Command::new(BIN)
        .arg(d)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_ne!(status.code(), Some(101), "panicked on a closed stderr");
    assert!(status.success(), "{status}");
    for n in ["a.pftrace", "b.pftrace", "c.pftrace"] {
        common::validate_file(&d.join(n));
    }
}

// ---------------------------------------------------------------------------------------------
// Valid but unusual inputs

fn mutated(dir: &Path, name: &str, sql: &str) -> PathBuf {
    let p = fixture_copy(dir, name);
    Connection::open(&p).unwrap().execute_batch(sql).unwrap();
    p
}

fn convert(input: &Path) -> (nsys_perfetto_model::summary::Summary, common::Trace) {
    let out = input.with_extension("pftrace");
    let s = common::convert_to(input, &out, &Options::default());
    let trace = common::validate_file(&out);
    (s, trace)
}

/// Recreate `table` with `first` as an extra first column (filled by `value`), optionally
/// `WITHOUT ROWID`, keeping its rows in rowid order.
fn rebuild(p: &Path, table: &str, first: &str, value: &str, without_rowid: bool) {
    let c = Connection::open(p).unwrap();
    let cols: Vec<String> = c
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let quoted: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
    c.execute_batch(&format!(
        "ALTER TABLE {table} RENAME TO old; \
         CREATE TABLE {table} ({first}, {}){}; \
         INSERT INTO {table} SELECT {value}, {} FROM old ORDER BY rowid; DROP TABLE old;",
        quoted.join(", "),
        if without_rowid { " WITHOUT ROWID" } else { "" },
        quoted.join(", ")
    ))
    .unwrap();
}

fn rows(p: &Path, table: &str) -> u64 {
    Connection::open(p)
        .unwrap()
        .query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap() as u64
}

#[test]
fn a_missing_column_is_counted_by_table_and_column() {
    let t = tempfile::tempdir().unwrap();
    for (table, col) in [
        ("OSRT_API", "end"),
        ("NVTX_EVENTS", "eventType"),
        ("SCHED_EVENTS", "cpu"),
        ("OSRT_API", "start"),
    ] {
        let p = mutated(
            t.path(),
            &format!("{table}-{col}.sqlite"),
            &format!("ALTER TABLE {table} DROP COLUMN \"{col}\";"),
        );
        let (s, _) = convert(&p);
        let n = rows(&p, table);
        let key = (
            table.to_string(),
            format!("table not converted: no `{col}` column"),
        );
        assert_eq!(
            s.skipped.get(&key),
            Some(&n),
            "{table}.{col}: {:?}",
            s.skipped
        );
        assert!(
            s.render()
                .contains(&format!("{n} in {table}: table not converted"))
        );
    }
}

#[test]
fn call_stacks_without_string_ids() {
    let t = tempfile::tempdir().unwrap();
    let p = mutated(t.path(), "nostr.sqlite", "DROP TABLE StringIds;");
    let (s, trace) = convert(&p);
    assert_eq!(
        s.events_of(nsys_perfetto_model::category::Category::Osrt),
        rows(&p, "OSRT_API")
    );
    assert!(
        trace
            .slices
            .iter()
            .any(|sl| sl.arg_str("callchain").is_some_and(|c| c.contains('?')))
    );
}

#[test]
fn wal_changes_are_read_and_no_shm_is_left() {
    let t = tempfile::tempdir().unwrap();
    let src = fixture_copy(t.path(), "src.sqlite");
    let dir = t.path().join("wal");
    std::fs::create_dir(&dir).unwrap();
    {
        let c = Connection::open(&src).unwrap();
        c.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; DELETE FROM OSRT_API;",
        )
        .unwrap();
        // Copied while the writer is open: the deletion is committed, but only in the log.
        std::fs::copy(&src, dir.join("w.sqlite")).unwrap();
        let mut wal = src.as_os_str().to_owned();
        wal.push("-wal");
        std::fs::copy(&wal, dir.join("w.sqlite-wal")).unwrap();
    }
    let w = dir.join("w.sqlite");
    assert!(nsys_perfetto_read::connection::has_pending_wal(&w));
    let (hw, hl) = (hash_file(&w), hash_file(&dir.join("w.sqlite-wal")));
    let (s, _) = convert(&w);
    assert_eq!(
        s.events_of(nsys_perfetto_model::category::Category::Osrt),
        0,
        "stale read"
    );
    assert_eq!(names(&dir), vec!["w.pftrace", "w.sqlite", "w.sqlite-wal"]);
    // The workflows open the export as the conversion does: no `-shm` left either.
    for command in ["stats", "analyze"] {
        let o = run_in(&dir, &[command.as_ref(), "w.sqlite".as_ref()], &[]);
        assert!(o.status.success(), "{command}: {}", text(&o));
        assert_eq!(
            names(&dir),
            vec!["w.pftrace", "w.sqlite", "w.sqlite-wal"],
            "{command}"
        );
    }
    assert_eq!(
        (hash_file(&w), hash_file(&dir.join("w.sqlite-wal"))),
        (hw, hl)
    );
}

#[test]
fn non_utf8_file_names_convert() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9 %3F?#.sqlite");
    let p = t.path().join(name);
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &p).unwrap();
    let o = run_in(t.path(), &[name], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = t
        .path()
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9 %3F?#.pftrace"));
    let trace = common::validate_file(&out);
    assert!(trace.slices.len() > 100);
}

#[test]
fn quoted_names_without_rowid_and_a_rowid_column() {
    let t = tempfile::tempdir().unwrap();
    // A timed table whose name holds a double quote: named in the notes with its rows.
    let p = mutated(
        t.path(),
        "quote.sqlite",
        "CREATE TABLE \"we\"\"ird\" (start INTEGER, \"end\" INTEGER); \
         INSERT INTO \"we\"\"ird\" VALUES (1, 2), (3, 4);",
    );
    let (s, _) = convert(&p);
    assert!(
        s.notes
            .iter()
            .any(|n| n == "we\"ird: 2 rows not converted (not supported yet)")
    );

    // Event tables declared WITHOUT ROWID, and ones with a real column named rowid.
    let p = fixture_copy(t.path(), "norowid.sqlite");
    for table in ["OSRT_API", "NVTX_EVENTS", "SCHED_EVENTS"] {
        rebuild(&p, table, "k INTEGER PRIMARY KEY", "rowid", true);
    }
    let (s, _) = convert(&p);
    let base = convert(&fixture_copy(t.path(), "base.sqlite")).0;
    assert_eq!(s.events, base.events, "WITHOUT ROWID: the same events");

    let p = fixture_copy(t.path(), "rowidcol.sqlite");
    rebuild(&p, "OSRT_API", "rowid INTEGER", "7", false);
    rebuild(&p, "NVTX_EVENTS", "oid TEXT", "'x'", false);
    let (s, _) = convert(&p);
    assert_eq!(s.events, base.events, "a rowid column: the same events");
}

/// CUDA tables (flows) declared WITHOUT ROWID or with a `rowid` column, on a corpus export with
/// kernels and launches: a valid trace, every row converted, arrows only where rowids are real.
#[test]
fn gpu_tables_without_real_rowids_keep_every_row() {
    let Some(corpus) = common::corpus_dir() else {
        common::skip("corpus", "../shared/corpus absent");
        return;
    };
    let src = corpus.join("martisu1631998__kmeans-parallel__report2.sqlite");
    if !src.is_file() {
        common::skip("corpus", &format!("{} absent", src.display()));
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let base = t.path().join("base.sqlite");
    std::fs::copy(&src, &base).unwrap();
    let (b, _) = convert(&base);
    assert!(b.flows > 0);

    let p = t.path().join("shadow.sqlite");
    std::fs::copy(&src, &p).unwrap();
    rebuild(
        &p,
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "rowid INTEGER",
        "NULL",
        false,
    );
    rebuild(
        &p,
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "rowid INTEGER",
        "1",
        false,
    );
    let (s, _) = convert(&p);
    assert_eq!(s.events, b.events);
    assert_eq!(s.flows, b.flows, "_rowid_ stands in for the shadowed rowid");

    let p = t.path().join("norowid.sqlite");
    std::fs::copy(&src, &p).unwrap();
    rebuild(
        &p,
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "k INTEGER PRIMARY KEY",
        "rowid",
        true,
    );
    let (s, _) = convert(&p);
    assert_eq!(s.events, b.events, "every kernel still converted");
    assert!(s.flows < b.flows, "kernels without rowid draw no arrows");
}

#[test]
fn check_option_refuses_a_damaged_file() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let p = fixture_copy(d, "dmg.sqlite");
    // Damage a b-tree page in the middle of the file (not the header or the schema page).
    let mut bytes = std::fs::read(&p).unwrap();
    let page = 4096;
    let mid = (bytes.len() / page / 2) * page;
    for b in &mut bytes[mid + 8..mid + 200] {
        *b = 0xA5;
    }
    std::fs::write(&p, &bytes).unwrap();
    let o = run_in(
        d,
        &[os("dmg.sqlite"), os("--check"), os("-o"), os("x.pftrace")],
        &[],
    );
    assert_one_line_error(&o, "damaged SQLite database");
    assert_eq!(names(d), vec!["dmg.sqlite"]);
    let good = fixture_copy(d, "good.sqlite");
    let o = run_in(d, &[good.as_os_str(), os("--check")], &[]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A stand-in nsys whose `export` writes a little and then hangs (with a child process in its
/// group): the export must be bounded by --export-timeout, stopped by Ctrl-C, and leave no
/// temporary or lock file and no process behind. Needs no real nsys.
fn hanging_nsys(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("fake-nsys");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\n\
             if [ \"$1\" = --version ]; then echo 'NVIDIA Nsight Systems version 2022.4.2.1-df9881f'; exit 0; fi\n\
             for a; do out=$prev; prev=$a; done\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n\
             echo partial > \"$out\"\n\
             sleep 300 &\n\
             echo $! > {pids}\n\
             wait\n",
            pids = dir.join("sleep.pid").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn sleep_pid_gone(dir: &Path) -> bool {
    let pid = std::fs::read_to_string(dir.join("sleep.pid")).unwrap_or_default();
    let pid = pid.trim();
    // Gone, or a zombie waiting for its (killed) parent's reaper.
    pid.is_empty()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
            .unwrap_or(true)
}

#[test]
fn a_hanging_export_is_bounded_and_interruptible() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("reports");
    std::fs::create_dir(&d).unwrap();
    std::fs::copy(
        common::fixture("nvtx_workload.nsys-rep"),
        d.join("r.nsys-rep"),
    )
    .unwrap();
    let nsys = hanging_nsys(t.path());
    let cache = t.path().join("cache");

    let started = Instant::now();
    let o = Command::new(BIN)
        .current_dir(&d)
        .arg("r.nsys-rep")
        .arg("--nsys")
        .arg(&nsys)
        .args(["--export-timeout", "2"])
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(30), "bounded");
    assert_one_line_error(&o, "did not finish within 2 s and was stopped");
    assert_eq!(
        names(&d),
        vec!["r.nsys-rep"],
        "no .part, no lock, no export"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(sleep_pid_gone(t.path()), "nsys's process group is stopped");

    // Ctrl-C while nsys exports: nsys stopped, temporaries and lock removed, exit 130.
    let _ = std::fs::remove_file(t.path().join("sleep.pid"));
    let child = Command::new(BIN)
        .current_dir(&d)
        .arg("r.nsys-rep")
        .arg("--nsys")
        .arg(&nsys)
        .env("XDG_CACHE_HOME", &cache)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !t.path().join("sleep.pid").exists() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        names(&d).iter().any(|n| n.ends_with(".part")),
        "{:?}",
        names(&d)
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert_eq!(names(&d), vec!["r.nsys-rep"], "no .part, no lock left");
    std::thread::sleep(Duration::from_millis(200));
    assert!(sleep_pid_gone(t.path()), "nsys's process group is stopped");
}

/// Ctrl-C while `serve` converts a report (nsys exporting, in its own process group, stopped
/// by neither the server nor the terminal): the server stops and removes its folder, and the
/// interrupt handling every command shares stops nsys too. Needs no real nsys.
#[test]
fn ctrl_c_during_serve_stops_the_server_and_its_conversions() {
    use std::io::{BufRead, BufReader, Write};
    let t = tempfile::tempdir().unwrap();
    let nsys = hanging_nsys(t.path());
    let mut child = Command::new(BIN)
        .args(["serve", "--port", "0", "--nsys"])
        .arg(&nsys)
        .env("TMPDIR", t.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let (mut url, mut temp) = (None, None);
    let mut line = String::new();
    while (url.is_none() || temp.is_none()) && err.read_line(&mut line).unwrap() > 0 {
        if let Some(rest) = line.split("open http://").nth(1) {
            url = rest.split('/').next().map(str::to_string);
        }
        if let Some(rest) = line.split("temporary files:").nth(1) {
            temp = Some(PathBuf::from(rest.trim()));
        }
        line.clear();
    }
    let (addr, temp) = (url.expect("serve's address"), temp.expect("serve's folder"));
    // Keep reading stderr, so that the server's last messages do not fail on a full pipe.
    let rest = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut all);
        all
    });
    let body = std::fs::read(common::fixture("nvtx_workload.nsys-rep")).unwrap();
    let mut upload = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        upload,
        "POST /api/convert?name=r.nsys-rep HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    upload.write_all(&body).unwrap();
    let started = Instant::now();
    while !t.path().join("sleep.pid").exists() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        t.path().join("sleep.pid").exists(),
        "nsys export did not start"
    );
    assert!(!sleep_pid_gone(t.path()));

    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "serve did not stop on Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let messages = rest.join().unwrap();
    assert!(status.success(), "{status}: {messages}");
    assert!(messages.contains("stopped; removed"), "{messages}");
    assert!(!temp.exists(), "{} left behind", temp.display());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        sleep_pid_gone(t.path()),
        "nsys's process group is stopped: {messages}"
    );
}

/// Ctrl-C while `open` converts a report into its own temporary folder (a selection asks for
/// one; nsys exporting, stopped by the interrupt): the folder goes with the other temporaries.
/// Needs no real nsys.
#[test]
fn ctrl_c_during_open_removes_its_folder() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("reports");
    let tmp = t.path().join("tmp");
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    std::fs::copy(
        common::fixture("nvtx_workload.nsys-rep"),
        d.join("r.nsys-rep"),
    )
    .unwrap();
    let nsys = hanging_nsys(t.path());
    let child = Command::new(BIN)
        .current_dir(&d)
        .args(["open", "r.nsys-rep", "--types", "kernel", "--no-browser"])
        .arg("--nsys")
        .arg(&nsys)
        .env("TMPDIR", &tmp)
        .env("XDG_CACHE_HOME", t.path().join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !t.path().join("sleep.pid").exists() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        our_scratch(&tmp)
            .iter()
            .any(|n| n.starts_with("nsys-perfetto-open-")),
        "{:?}",
        our_scratch(&tmp)
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(our_scratch(&tmp).is_empty(), "{:?}", our_scratch(&tmp));
    assert_eq!(names(&d), vec!["r.nsys-rep"], "no .part, no lock left");
    std::thread::sleep(Duration::from_millis(200));
    assert!(sleep_pid_gone(t.path()), "nsys's process group is stopped");
}

/// A full `$TMPDIR` (a 16 kB tmpfs; needs root, skips otherwise) while the flow links of a big
/// input are computed (sorted runs spill there; small runs make this input spill): the error
/// names the folder, nothing is left anywhere.
#[test]
fn a_full_tmpdir_is_named() {
    let t = tempfile::tempdir().unwrap();
    let tmp = t.path().join("tmp");
    common::with_tmpfs(&tmp, "size=16k", || {
        let Some(input) = big_input(t.path()) else {
            return;
        };
        let out = t.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let o = Command::new(BIN)
            .arg(&input)
            .arg("-o")
            .arg(out.join("x.pftrace"))
            .env("TMPDIR", &tmp)
            .env("NSYS_PERFETTO_RUN_RECORDS", "1024")
            .output()
            .unwrap();
        assert_one_line_error(&o, &format!("the temporary folder {}", tmp.display()));
        assert!(String::from_utf8_lossy(&o.stderr).contains("TMPDIR"));
        assert!(names(&out).is_empty(), "{:?}", names(&out));
        assert!(names(&tmp).is_empty(), "{:?}", names(&tmp));
    });
}

/// A report whose export does not fit beside it, or in `$TMPDIR` with `--no-cache` (a 256 kB
/// tmpfs holding the 148 kB report, not its export; needs root, skips otherwise): one line
/// saying which folder has no room and what to do (not that the report is damaged), no output,
/// nothing left but the report.
#[test]
fn a_full_folder_for_the_export_is_named() {
    if !have_nsys() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let full = t.path().join("full");
    common::with_tmpfs(&full, "size=256k", || {
        let cache = t.path().join("cache");
        // Beside the report.
        let report = full.join("r.nsys-rep");
        std::fs::copy(common::fixture("nvtx_workload.nsys-rep"), &report).unwrap();
        let o = run_in(
            t.path(),
            &[report.as_os_str(), os("-o"), os("r.pftrace")],
            &[("XDG_CACHE_HOME", &cache)],
        );
        assert_one_line_error(&o, &format!("no room left in {}", full.display()));
        assert!(text(&o).contains("--no-cache"), "{}", text(&o));
        assert!(!text(&o).contains("damaged"), "{}", text(&o));
        assert_eq!(names(&full), ["r.nsys-rep"]);
        // In $TMPDIR, for a report elsewhere.
        std::fs::remove_file(&report).unwrap();
        let report = t.path().join("r.nsys-rep");
        std::fs::copy(common::fixture("nvtx_workload.nsys-rep"), &report).unwrap();
        let o = run_in(
            t.path(),
            &[
                os("--no-cache"),
                report.as_os_str(),
                os("-o"),
                os("r.pftrace"),
            ],
            &[("XDG_CACHE_HOME", &cache), ("TMPDIR", &full)],
        );
        assert_one_line_error(&o, &format!("no room left in {} ", full.display()));
        assert!(text(&o).contains("set TMPDIR"), "{}", text(&o));
        assert!(names(&full).is_empty(), "{:?}", names(&full));
        assert_eq!(names(t.path()), ["full", "r.nsys-rep"]);
    });
}

/// A damaged report whose header names a capture version this nsys reads is not told it "may
/// come from a newer nsys".
#[test]
fn a_damaged_report_is_not_blamed_on_a_newer_nsys() {
    if !have_nsys() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let mut bytes = std::fs::read(common::fixture("nvtx_workload.nsys-rep")).unwrap();
    let n = bytes.len();
    for b in &mut bytes[200..n - 4096] {
        *b ^= 0x5A;
    }
    std::fs::write(d.join("bad.nsys-rep"), &bytes).unwrap();
    let cap = nsys_perfetto::report::version::capture_version(&d.join("bad.nsys-rep")).unwrap();
    let o = run_in(
        d,
        &[os("bad.nsys-rep"), os("-o"), os("x.pftrace")],
        &[("XDG_CACHE_HOME", &d.join("cache"))],
    );
    assert_no_panic(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.success() {
        // nsys read the damaged report anyway: then what it wrote is a whole, valid trace.
        common::validate_file(&d.join("x.pftrace"));
        return;
    }
    if cap.is_some() {
        assert!(!err.contains("newer nsys"), "{err}");
        assert!(err.contains("looks damaged"), "{err}");
    }
    let left: Vec<String> = names(d)
        .into_iter()
        .filter(|n| n.contains(".part") || n.contains(".lock") || n.ends_with(".sqlite"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
