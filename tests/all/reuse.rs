//! An existing trace is reused only when it was made by this version from the same input
//! content with the same options (the record inside it, `nsys_perfetto::provenance`); otherwise
//! it is converted again and a line says why. `open`, directories and several inputs alike.
//! (The export cache's side, which needs nsys: `safety::changed_report_with_an_old_time_is_
//! exported_again`.)

use crate::common;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

fn run_in(dir: &Path, args: &[&str]) -> (Output, String) {
    let o = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env("NSYS", "/nonexistent/nsys")
        .env("XDG_CACHE_HOME", dir.join(".cache"))
        .env("RUST_BACKTRACE", "0")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("BROWSER")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_ne!(o.status.code(), Some(101), "panic: {err}");
    (o, err)
}

/// A folder with the fixture export as `w.sqlite`.
fn setup() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("w.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &input).unwrap();
    (t, input)
}

/// Slices and instants in a trace (what the UI would show).
fn slices(trace: &Path) -> usize {
    common::validate_file(trace).slices.len()
}

/// What a default conversion of `input` holds, converted on its own in a fresh folder.
fn full_slices(input: &Path) -> usize {
    let d = tempfile::tempdir().unwrap();
    let (_, out) = common::convert(input, d.path());
    slices(&out)
}

/// The case: after `nsys-perfetto w.sqlite --types nvtx`, `open w.sqlite` served the
/// filtered trace ("up to date") instead of the whole profile.
#[test]
fn open_after_a_filtered_conversion_converts_again() {
    let (t, input) = setup();
    let d = t.path();
    let (o, err) = run_in(d, &["w.sqlite", "--types", "nvtx"]);
    assert!(o.status.success(), "{err}");
    let filtered = slices(&d.join("w.pftrace"));
    let full = full_slices(&input);
    assert!(filtered < full, "{filtered} vs {full}");

    let port = common::free_port().to_string();
    let open = [
        "open",
        "w.sqlite",
        "--no-browser",
        "--timeout",
        "1",
        "--port",
        &port,
    ];
    let (_, err) = run_in(d, &open);
    assert!(
        err.contains(
            "w.sqlite: converting again: made with other options (--types nvtx; now the \
             default options)"
        ),
        "{err}"
    );
    assert!(err.contains("w.sqlite -> w.pftrace"), "{err}");
    assert_eq!(slices(&d.join("w.pftrace")), full, "{err}");

    // Now it matches: served as it is.
    let before = std::fs::read(d.join("w.pftrace")).unwrap();
    let (_, err) = run_in(d, &open);
    assert!(
        err.contains("w.sqlite: reused w.pftrace: same input and options"),
        "{err}"
    );
    assert!(!err.contains(" -> "), "{err}");
    assert_eq!(std::fs::read(d.join("w.pftrace")).unwrap(), before);
}

/// Directory conversion: a trace made with other options is converted again, one made with the
/// same is reused; JSON likewise.
#[test]
fn directory_reuses_only_traces_made_with_the_same_options() {
    let (t, input) = setup();
    let d = t.path();
    let (o, err) = run_in(d, &[".", "--types", "nvtx"]);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("total: 1 converted, 0 failed"), "{err}");
    // The same options again: reused.
    let (o, err) = run_in(d, &[".", "--types", "nvtx"]);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("./w.sqlite: reused ./w.pftrace: same input and options"),
        "{err}"
    );
    assert!(
        err.contains("total: 0 converted, 1 reused, 0 failed"),
        "{err}"
    );
    // Other options: converted again, saying which options the old one was made with.
    let (o, err) = run_in(d, &["."]);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "converting again: made with other options (--types nvtx; now the default options)"
        ),
        "{err}"
    );
    assert!(err.contains("total: 1 converted, 0 failed"), "{err}");
    assert_eq!(slices(&d.join("w.pftrace")), full_slices(&input));

    // JSON: the record is the last key of otherData; a time range is an option.
    let args = [
        ".",
        "--format",
        "json",
        "-o",
        "out",
        "--time-range",
        "0s..0.05s",
    ];
    std::fs::create_dir(d.join("out")).unwrap();
    let (o, err) = run_in(d, &args);
    assert!(o.status.success(), "{err}");
    let (_, err) = run_in(d, &args);
    assert!(err.contains("1 reused"), "{err}");
    let (_, err) = run_in(d, &[".", "--format", "json", "-o", "out"]);
    assert!(
        err.contains(
            "made with other options (--time-range 0s..0.05s --format json; now --format json)"
        ),
        "{err}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("out/w.json")).unwrap()).unwrap();
    let record = json["otherData"]["nsys-perfetto-provenance"]
        .as_str()
        .expect("a record");
    assert!(record.contains("\"input_name\":\"w.sqlite\""), "{record}");
}

/// Several inputs: an input rewritten in place with its old size and modification time is
/// converted again (file times alone would call its trace up to date).
#[test]
fn several_inputs_see_content_changed_under_the_same_time_and_size() {
    let (t, input) = setup();
    let d = t.path();
    let second = d.join("v.sqlite");
    std::fs::copy(&input, &second).unwrap();
    let (o, err) = run_in(d, &["w.sqlite", "v.sqlite"]);
    assert!(o.status.success(), "{err}");
    let meta = std::fs::metadata(&input).unwrap();
    let (size, mtime) = (meta.len(), meta.modified().unwrap());
    {
        let conn = rusqlite::Connection::open(&input).unwrap();
        let n = conn
            .execute(
                "UPDATE NVTX_EVENTS SET text = upper(text) WHERE text = 'step'",
                [],
            )
            .unwrap();
        assert!(n > 0);
    }
    std::fs::File::options()
        .write(true)
        .open(&input)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_eq!(std::fs::metadata(&input).unwrap().len(), size);
    let (o, err) = run_in(d, &["w.sqlite", "v.sqlite"]);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("converting again: made from other content (w.sqlite changed since)"),
        "{err}"
    );
    assert!(
        err.contains("v.sqlite: reused v.pftrace: same input and options"),
        "{err}"
    );
    assert!(
        err.contains("total: 1 converted, 1 reused, 0 failed"),
        "{err}"
    );
    let t = common::validate_file(&d.join("w.pftrace"));
    assert!(t.slices.iter().any(|s| &*s.name == "STEP"));
    assert!(!t.slices.iter().any(|s| &*s.name == "step"));
}

/// A trace the tool did not write is never reused, however new it is; one it wrote is
/// recognised after a copy elsewhere (same bytes, other inode and times).
#[test]
fn only_the_tools_own_traces_are_reused() {
    let (t, _input) = setup();
    let d = t.path();
    let (_, err) = run_in(d, &["."]);
    let theirs = d.join("w.pftrace");
    // A trace from elsewhere (here: the same events without a record), newer than the input.
    let bytes = std::fs::read(&theirs).unwrap();
    let cut = bytes.len()
        - nsys_perfetto_write::output::pftrace::file::record_packet(
            &nsys_perfetto::provenance::read(&theirs).unwrap().to_text(),
        )
        .len();
    std::fs::write(&theirs, &bytes[..cut]).unwrap();
    assert!(common::validate(&bytes[..cut]).is_ok(), "{err}");
    let (o, err) = run_in(d, &["."]);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("converting again: ./w.pftrace carries no record of what it was made from"),
        "{err}"
    );
    // Copied with its trace into another folder: the same content, reused there.
    let other = d.join("copy");
    std::fs::create_dir(&other).unwrap();
    for f in ["w.sqlite", "w.pftrace"] {
        std::fs::copy(d.join(f), other.join(f)).unwrap();
    }
    let (_, err) = run_in(&other, &["."]);
    assert!(err.contains("1 reused"), "{err}");
}
