//! What installing and first use rely on: `--version` naming the nsys installs (and never
//! hanging on a broken one), shell completions, man pages.

use nsys_perfetto::about::{Probe, probe_version};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nsys-perfetto"))
}

fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn version_probe_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let hang = script(tmp.path(), "nsys", "exec sleep 30");
    let t = Instant::now();
    assert_eq!(
        probe_version(&hang, Duration::from_millis(300)),
        Probe::TimedOut
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let ok = script(
        tmp.path(),
        "nsys-ok",
        "echo 'NVIDIA Nsight Systems version 2023.4.4.54-234433681190v0'",
    );
    match probe_version(&ok, Duration::from_secs(10)) {
        Probe::Version(v) => assert_eq!(v.to_string(), "2023.4.4.54"),
        p => panic!("{p:?}"),
    }
}

#[test]
fn version_names_the_nsys_found() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = script(
        tmp.path(),
        "nsys",
        "echo 'NVIDIA Nsight Systems version 2024.1.1.59-241133802077v0'",
    );
    let out = bin().arg("--version").env("NSYS", &fake).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("nsys-perfetto {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(
        text.contains(&format!("2024.1.1.59  {} (NSYS)", fake.display())),
        "{text}"
    );
}

#[test]
fn completions_and_man_pages() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef nsys-perfetto"),
        ("fish", "complete -c nsys-perfetto"),
    ] {
        let out = bin().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(marker), "{shell}: {marker}");
        for sub in ["stats", "extract", "sweep", "profile"] {
            assert!(text.contains(sub), "{shell}: {sub}");
        }
    }
    let out = bin().arg("man").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH nsys-perfetto 1"), "{page}");
    assert!(
        page.contains("\\-\\-time\\-range"),
        "options are documented"
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["man", "--dir"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    for f in [
        "nsys-perfetto.1",
        "nsys-perfetto-stats.1",
        "nsys-perfetto-sweep.1",
    ] {
        assert!(tmp.path().join(f).is_file(), "{f}");
    }
}

/// A report goes to the newest nsys that can read it, wherever it comes in the search order:
/// with an older nsys first on PATH, the newer one behind it exports.
#[test]
fn reports_go_to_the_newest_nsys() {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("rank_0.nsys-rep");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mpi/reports/rank_0.nsys-rep"),
        &report,
    )
    .unwrap();
    let mut dirs = Vec::new();
    for (name, version) in [("older", "2099.1.1.1"), ("newer", "2099.5.1.1")] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        // Says its version; any other command is an export that fails, leaving a mark.
        let body = format!(
            "case \"$1\" in --version) echo \"NVIDIA Nsight Systems version {version}-0\";; \
             *) : > \"{}\"; exit 1;; esac",
            dir.join("exported").display()
        );
        script(&dir, "nsys", &body);
        dirs.push(dir);
    }
    let path = std::env::join_paths(&dirs).unwrap();
    let out = bin()
        .arg(&report)
        .arg("-o")
        .arg(tmp.path().join("out.pftrace"))
        .arg("--no-cache")
        .env("PATH", &path)
        .env_remove("NSYS")
        .env("XDG_CACHE_HOME", tmp.path().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the fake nsys cannot export: {stderr}"
    );
    assert!(
        dirs[1].join("exported").exists(),
        "the newer nsys was not asked to export: {stderr}"
    );
    assert!(
        !dirs[0].join("exported").exists(),
        "the older nsys, first on PATH, exported: {stderr}"
    );
    assert!(!tmp.path().join("out.pftrace").exists());
}
