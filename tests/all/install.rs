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
