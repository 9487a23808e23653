//! Many inputs in one run: directories, glob patterns (expanded by us, as no shell runs here),
//! outputs made from the same input with the same options reused (and only those), --force, -o
//! with a directory, an SQLite export beside its report, and one bad file among good ones. No
//! nsys needed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

/// Small corpus exports.
const GOOD: &[&str] = &[
    "martisu1631998__kmeans-parallel__report2.sqlite",
    "quasiben__nvtx-examples__multiprocessing.sqlite",
    "lockfuehrer__beast_ressoruces__report1@381153b.sqlite",
];

fn corpus() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    if GOOD.iter().all(|f| d.join(f).is_file()) {
        Some(d)
    } else {
        crate::common::skip("corpus", &format!("corpus files absent in {}", d.display()));
        None
    }
}

/// A temp dir with the good exports and `broken.sqlite` (not a database).
fn setup() -> Option<(tempfile::TempDir, PathBuf)> {
    let src = corpus()?;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("in");
    std::fs::create_dir(&dir).unwrap();
    for f in GOOD {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("broken.sqlite"), "not a database at all\n").unwrap();
    // Not a profile: ignored in directories.
    std::fs::write(dir.join("notes.txt"), "x").unwrap();
    Some((tmp, dir))
}

fn run<I, S>(args: I) -> (Output, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let o = Command::new(BIN)
        .args(args)
        .env("NSYS", "/nonexistent/nsys")
        .env(
            "XDG_CACHE_HOME",
            std::env::temp_dir().join("nsys-perfetto-tests-cache"),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    (o, err)
}

fn out_of(dir: &Path, f: &str) -> PathBuf {
    dir.join(f).with_extension("pftrace")
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[test]
fn directory_with_a_bad_file() {
    let Some((_tmp, dir)) = setup() else { return };
    let (o, err) = run([&dir]);
    assert!(
        !o.status.success(),
        "a failed file makes the run fail:\n{err}"
    );
    for f in GOOD {
        let out = out_of(&dir, f);
        assert!(
            std::fs::metadata(&out).is_ok_and(|m| m.len() > 0),
            "{f} not converted:\n{err}"
        );
    }
    assert!(!dir.join("broken.pftrace").exists());
    assert!(!dir.join("notes.pftrace").exists());
    assert!(
        err.lines()
            .any(|l| l.starts_with("error: [1/4] ") && l.contains("broken.sqlite")),
        "{err}"
    );
    assert_eq!(err.matches(" -> ").count(), 3, "{err}");
    assert!(err.contains("total: 3 converted, 1 failed"), "{err}");

    // Again: the outputs were made from the same input with the same options, and are left
    // alone; the broken file still fails.
    let before: Vec<SystemTime> = GOOD.iter().map(|f| mtime(&out_of(&dir, f))).collect();
    std::thread::sleep(Duration::from_millis(20));
    let (o, err) = run([&dir]);
    assert!(!o.status.success());
    assert!(
        err.contains("total: 0 converted, 3 reused, 1 failed"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert!(err.contains("same input and options"), "{err}");
    let after: Vec<SystemTime> = GOOD.iter().map(|f| mtime(&out_of(&dir, f))).collect();
    assert_eq!(before, after);

    // --force converts them again.
    let (_, err) = run([dir.as_os_str(), "--force".as_ref()]);
    assert!(err.contains("total: 3 converted, 1 failed"), "{err}");
    let forced: Vec<SystemTime> = GOOD.iter().map(|f| mtime(&out_of(&dir, f))).collect();
    assert!(forced.iter().zip(&before).all(|(a, b)| a > b));

    // --quiet: only the error.
    let (o, err) = run([dir.as_os_str(), "--force".as_ref(), "--quiet".as_ref()]);
    assert!(!o.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
}

#[test]
fn globs_are_expanded() {
    let Some((_tmp, dir)) = setup() else { return };
    // Two of the good ones start with 'm' or 'l', not the broken one.
    let pattern = dir.join("[ml]*.sqlite");
    let (o, err) = run([&pattern]);
    assert!(o.status.success(), "{err}");
    assert!(out_of(&dir, GOOD[0]).is_file());
    assert!(!out_of(&dir, GOOD[1]).is_file());
    assert!(out_of(&dir, GOOD[2]).is_file());
    assert!(err.contains("total: 2 converted, 0 failed"), "{err}");

    // A pattern in a directory component, and '?'.
    let parent = dir.parent().unwrap();
    let pattern = parent.join("i?").join("quasiben*");
    let (o, err) = run([&pattern]);
    assert!(o.status.success(), "{err}");
    assert!(out_of(&dir, GOOD[1]).is_file(), "{err}");

    // A pattern that matches nothing is an error, and the other inputs still run.
    let none = dir.join("*.nsys-rep");
    let (o, err) = run([none.as_os_str(), dir.join(GOOD[0]).as_os_str()]);
    assert!(!o.status.success());
    assert!(err.contains("no files match"), "{err}");
    assert!(err.contains("1 reused, 1 failed"), "{err}");
}

#[test]
fn single_file_always_converts_and_o_directory() {
    let Some((tmp, dir)) = setup() else { return };
    let input = dir.join(GOOD[0]);
    for _ in 0..2 {
        let (o, err) = run([&input]);
        assert!(o.status.success(), "{err}");
        assert!(
            err.contains(" -> "),
            "a single file is always converted:\n{err}"
        );
        assert!(!err.contains("total:"), "{err}");
    }

    // -o names one file: with several inputs it must be a directory.
    let (o, err) = run([
        dir.join(GOOD[0]).as_os_str(),
        dir.join(GOOD[1]).as_os_str(),
        "-o".as_ref(),
        tmp.path().join("x.pftrace").as_os_str(),
    ]);
    assert!(!o.status.success());
    assert!(err.contains("give an existing directory"), "{err}");
    let outdir = tmp.path().join("out");
    std::fs::create_dir(&outdir).unwrap();
    let (o, err) = run([
        dir.join(GOOD[0]).as_os_str(),
        dir.join(GOOD[1]).as_os_str(),
        "-o".as_ref(),
        outdir.as_os_str(),
    ]);
    assert!(o.status.success(), "{err}");
    assert!(out_of(&outdir, GOOD[0]).is_file());
    assert!(out_of(&outdir, GOOD[1]).is_file());

    // Missing input: an error of its own.
    let (o, err) = run([tmp.path().join("nope.sqlite")]);
    assert!(!o.status.success());
    assert!(err.contains("no such file or directory"), "{err}");
}

#[test]
fn export_beside_its_report_is_converted_once() {
    let Some(src) = corpus() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let stem = "quasiben__nvtx-examples__multiprocessing";
    for ext in ["qdrep", "sqlite"] {
        std::fs::copy(
            src.join(format!("{stem}.{ext}")),
            dir.join(format!("{stem}.{ext}")),
        )
        .unwrap();
    }
    // The export is newer than the report: it is converted, the report is not (no nsys needed).
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(dir.join(format!("{stem}.qdrep")))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let (o, err) = run([dir]);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("{stem}.qdrep: not converted")),
        "{err}"
    );
    assert!(err.contains(&format!("{stem}.sqlite -> ")), "{err}");
    assert!(err.contains("1 converted, 1 superseded, 0 failed"), "{err}");
    assert!(dir.join(format!("{stem}.pftrace")).is_file());

    // The report alone: the export beside it was not written by nsys-perfetto, so nothing
    // says which report it was exported from: it is neither used nor touched, and without nsys
    // the report cannot be converted (the other input still is).
    let export = dir.join(format!("{stem}.sqlite"));
    let before = std::fs::read(&export).unwrap();
    std::fs::copy(src.join(GOOD[0]), dir.join(GOOD[0])).unwrap();
    let (o, err) = run([
        dir.join(format!("{stem}.qdrep")).as_os_str(),
        dir.join(GOOD[0]).as_os_str(),
        "--force".as_ref(),
    ]);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("nsys"), "{err}");
    assert!(err.contains("1 converted, 1 failed"), "{err}");
    assert_eq!(std::fs::read(&export).unwrap(), before);
}

#[test]
fn report_without_nsys_says_what_to_do() {
    let Some(src) = corpus() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let rep = tmp.path().join("r.qdrep");
    std::fs::copy(
        src.join("quasiben__nvtx-examples__multiprocessing.qdrep"),
        &rep,
    )
    .unwrap();
    let o = Command::new(BIN)
        .arg(&rep)
        .args(["--nsys", "/nonexistent/nsys"])
        .env("XDG_CACHE_HOME", tmp.path().join("cache"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--nsys /nonexistent/nsys: no such file"),
        "{err}"
    );
    assert!(!tmp.path().join("r.sqlite").exists());
    assert!(!tmp.path().join("r.pftrace").exists());
}
