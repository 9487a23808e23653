//! Our outputs in Perfetto's real web UI, in headless Chromium: the official v52 build on its
//! WASM engine (`../shared/tools/perfetto-ui/uiload.py`) and v58.2 on the native
//! `trace_processor_shell` (`../shared/tools/perfetto-ui/v58/run.sh`), on a sample of the
//! corpus: every schema era (nsys 2020 without export metadata, 2022, 2023 with GPU metrics and
//! CPU samples, 2024, 2026 with two GPUs), the bundled fixture and a merged MPI job, as
//! `.pftrace` and (for most) `.json`. Each trace must load with no error dialog, no import error,
//! no crashed track and no console error, show the same slices in both UIs, and show the layout
//! the README describes: one top-level group per GPU in device order, NVTX-on-GPU tracks above
//! the streams, streams in stream-id order, a group per process, the CPUs' scheduling on top.
//!
//! Needs `../shared/tools/perfetto-ui/setup.sh` (Chromium, chromedriver, the v52 UI under
//! `$PERFETTO_UI_HOME`): without it the checks skip as `ui` (`NSYS_PERFETTO_REQUIRE=ui` makes
//! that a failure; `.ci/run` sets it). `NSYS_PERFETTO_UI_SHOTS=DIR` keeps v58's screenshots
//! (the README's pictures come from there).

use crate::common::{self, skip};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

/// `../shared/tools/perfetto-ui`.
pub fn ui_tools() -> PathBuf {
    common::manifest_dir().join("../shared/tools/perfetto-ui")
}

/// Where setup.sh put the UI, Chromium's driver venv and the v52 build (`$PERFETTO_UI_HOME`).
pub fn ui_home() -> PathBuf {
    std::env::var_os("PERFETTO_UI_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/perfetto-ui")
        })
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// The v52 UI build directory when everything the browser checks need is set up; otherwise a
/// recorded `ui` skip naming what is missing and `None`.
pub fn ui_ready() -> Option<PathBuf> {
    let tools = ui_tools();
    let home = ui_home();
    let missing = if !tools.join("uiload.py").is_file() {
        format!("{} not found", tools.join("uiload.py").display())
    } else if !on_path("chromium") || !on_path("chromedriver") {
        "chromium and chromedriver are not on PATH".to_string()
    } else if !home.join("ui/index.html").is_file() {
        format!("no Perfetto UI build in {}", home.join("ui").display())
    } else if !home.join("venv/bin/python").is_file() {
        format!("no selenium venv in {}", home.join("venv").display())
    } else {
        return Some(home.join("ui"));
    };
    skip(
        "ui",
        &format!("{missing}: run ../shared/tools/perfetto-ui/setup.sh (as root; it installs them)"),
    );
    None
}

/// Take the machine-wide turn on the ports v58 and the native engine use (9001: the trace
/// processor, 10000: the UI), and wait until nothing else (another worktree's run) holds them.
/// The turn is a lock on the shared UI tools' directory, which every run on this machine sees
/// and none writes: no lock file is left behind.
fn fixed_ports_turn() -> std::fs::File {
    let lock = std::fs::File::open(ui_tools()).unwrap_or_else(|e| {
        panic!("{}: {e}", ui_tools().display());
    });
    lock.lock().unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let free = [9001u16, 10000]
            .iter()
            .all(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok());
        if free {
            return lock;
        }
        assert!(
            std::time::Instant::now() < end,
            "ports 9001 and 10000 stayed busy for 5 minutes (another Perfetto UI run?)"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// One trace of the sample and what it is.
struct Sample {
    trace: PathBuf,
    json: bool,
    merged: bool,
}

/// Convert with the CLI, as a user does.
fn cli(args: &[&str]) {
    let out = Command::new(BIN).arg("-q").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "nsys-perfetto {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The sample, converted into `dir`: `None` (a recorded skip) without the corpus.
fn sample(dir: &Path) -> Option<Vec<Sample>> {
    let Some(corpus) = common::corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return None;
    };
    let fixture = common::fixture("nvtx_workload.sqlite");
    // (export, also as JSON)
    let inputs: Vec<(PathBuf, bool)> = vec![
        (fixture, true),
        // nsys 2020.3, no export metadata
        (
            corpus.join("lockfuehrer__beast_ressoruces__report1@381153b.sqlite"),
            true,
        ),
        // nsys 2022.2: MPI as an NVTX domain, scheduling
        (
            corpus.join("hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite"),
            false,
        ),
        // nsys 2023.4: GPU metrics, CPU samples with call stacks
        (
            corpus.join("als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite"),
            false,
        ),
        // nsys 2024.6: NVTX, scheduling
        (corpus.join("NVIDIA__Fuser__report1@8fa9ec2.sqlite"), false),
        // nsys 2026.2: two GPUs, NVTX on the GPU
        (corpus.join("GindaChen__nsys-ai__h100_2gpu_1s.sqlite"), true),
    ];
    let mut out = Vec::new();
    for (input, json) in inputs {
        let stem = input.file_stem().unwrap().to_string_lossy().to_string();
        let stem = stem.replace('@', "_");
        let trace = dir.join(format!("{stem}.pftrace"));
        cli(&[input.to_str().unwrap(), "-o", trace.to_str().unwrap()]);
        out.push(Sample {
            trace,
            json: false,
            merged: false,
        });
        if json {
            let trace = dir.join(format!("{stem}.json"));
            cli(&[input.to_str().unwrap(), "-o", trace.to_str().unwrap()]);
            out.push(Sample {
                trace,
                json: true,
                merged: false,
            });
        }
    }
    let ranks: Vec<String> = (0..4)
        .map(|r| {
            common::fixture(&format!("mpi/rank_{r}.sqlite"))
                .display()
                .to_string()
        })
        .collect();
    let trace = dir.join("mpi_job.pftrace");
    let mut args = vec!["merge", "--util-map", "--stragglers"];
    args.extend(ranks.iter().map(String::as_str));
    args.extend(["-o", trace.to_str().unwrap()]);
    let st = Command::new(BIN).args(&args).arg("-q").output().unwrap();
    assert!(
        st.status.success(),
        "merge: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    out.push(Sample {
        trace,
        json: false,
        merged: true,
    });
    Some(out)
}

/// A group of the UI's track tree: its title and its children's titles, in the UI's order.
#[derive(Debug, Clone)]
struct Group {
    title: String,
    children: Vec<String>,
}

/// What one UI reported for one trace.
#[derive(Debug)]
struct Loaded {
    raw: Value,
    groups: Vec<Group>,
}

fn groups_of(v: &Value) -> Vec<Group> {
    let title = |g: &Value| {
        g.get("title")
            .or_else(|| g.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    v["groups"]
        .as_array()
        .map(|gs| {
            gs.iter()
                .map(|g| Group {
                    title: title(g),
                    children: g["children"]
                        .as_array()
                        .map(|c| {
                            c.iter()
                                .map(|k| match k.as_str() {
                                    Some(s) => s.to_string(),
                                    None => title(k),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Run a loader script over the traces; one JSON line per trace, by trace path.
fn run_loader(mut cmd: Command, what: &str) -> Vec<(PathBuf, Loaded)> {
    let out = cmd
        .envs(common::BROWSER_ENV)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut loaded = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let raw: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"));
        let trace = PathBuf::from(raw["trace"].as_str().unwrap());
        // uiload.py reports each repetition under "runs"; one run here.
        let groups = groups_of(raw.get("runs").map_or(&raw, |r| &r[0]));
        loaded.push((trace, Loaded { raw, groups }));
    }
    assert!(
        !loaded.is_empty(),
        "{what} printed no result (exit {:?}): {}\n{}",
        out.status.code(),
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    loaded
}

/// The device number of a GPU group's title: "GPU 1 · NVIDIA H100" (protobuf), or JSON's
/// "NVIDIA H100 · GPU 1" (the UI appends the pid, which is the device number) -> 1.
fn gpu_number(title: &str) -> Option<u32> {
    let rest = match title.strip_prefix("GPU ") {
        Some(rest) => rest,
        None => title.rsplit_once(" · GPU ")?.1,
    };
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// A stream track's id: "Stream 7" -> 7 (not its "Stream 7 · sync" twin).
fn stream_id(title: &str) -> Option<u64> {
    let rest = title.strip_prefix("Stream ")?;
    rest.parse().ok()
}

/// The layout the README describes, as the UI drew it, for a protobuf trace: the expectations
/// come from the trace itself (decoded by the test validator).
fn check_pftrace_layout(ui: &str, trace: &Path, merged: bool, groups: &[Group]) {
    let t = common::validate_file(trace);
    let titles: Vec<&str> = groups.iter().map(|g| g.title.as_str()).collect();
    let ctx = format!("{ui}: {}: groups {titles:?}", trace.display());
    // One top-level group per GPU, in device order.
    let mut gpus: Vec<u32> = t
        .tracks
        .values()
        .filter(|k| k.parent.is_none() && k.process.is_none() && k.thread.is_none())
        .filter_map(|k| k.name.as_deref().and_then(gpu_number))
        .collect();
    gpus.sort_unstable();
    let shown: Vec<u32> = titles.iter().filter_map(|t| gpu_number(t)).collect();
    if !merged {
        assert_eq!(shown, gpus, "{ctx}: the GPU groups, in device order");
    }
    for g in groups.iter().filter(|g| gpu_number(&g.title).is_some()) {
        let streams: Vec<u64> = g.children.iter().filter_map(|c| stream_id(c)).collect();
        let mut sorted = streams.clone();
        sorted.sort_unstable();
        assert_eq!(
            streams, sorted,
            "{ctx}: streams of {} in stream-id order: {:?}",
            g.title, g.children
        );
        let first_stream = g.children.iter().position(|c| c.starts_with("Stream "));
        let last_nvtx = g.children.iter().rposition(|c| c.starts_with("NVTX · "));
        if let (Some(s), Some(n)) = (first_stream, last_nvtx) {
            assert!(
                n < s,
                "{ctx}: NVTX tracks above the streams in {}: {:?}",
                g.title,
                g.children
            );
        }
    }
    // A group per process, named after it.
    for p in t.tracks.values().filter_map(|k| k.process.as_ref()) {
        let Some(name) = p.name.as_deref() else {
            continue;
        };
        assert!(
            titles.iter().any(|t| t.starts_with(name)),
            "{ctx}: no group for process {name:?} (pid {})",
            p.pid
        );
    }
    // The CPUs' scheduling at the top, when the export recorded it.
    if !t.sched.is_empty() {
        assert_eq!(titles.first().copied(), Some("CPU Scheduling"), "{ctx}");
    }
    // Perfetto's zero at the session start: the "Session" track.
    assert!(
        groups
            .iter()
            .any(|g| g.children.iter().any(|c| c.starts_with("Session"))),
        "{ctx}: no Session track"
    );
}

/// Titles of a JSON trace's groups match its protobuf twin's GPUs and processes.
fn check_json_layout(ui: &str, trace: &Path, groups: &[Group], twin: Option<&[Group]>) {
    let titles: Vec<&str> = groups.iter().map(|g| g.title.as_str()).collect();
    let ctx = format!("{ui}: {}: groups {titles:?}", trace.display());
    assert!(
        titles.iter().any(|t| t.starts_with("Session")),
        "{ctx}: no Session group"
    );
    if let Some(twin) = twin {
        let gpus = |gs: &[Group]| {
            let mut v: Vec<u32> = gs.iter().filter_map(|g| gpu_number(&g.title)).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(
            gpus(groups),
            gpus(twin),
            "{ctx}: the GPUs of the .pftrace twin"
        );
    }
}

fn check_loaded(ui: &str, s: &Sample, l: &Loaded) {
    let r = l.raw.get("runs").map_or(&l.raw, |r| &r[0]);
    let ctx = format!("{ui}: {}", s.trace.display());
    assert_eq!(
        l.raw["ok"],
        Value::Bool(true),
        "{ctx}: not loaded cleanly: {}",
        l.raw
    );
    assert!(
        r.get("error").is_none(),
        "{ctx}: error dialog: {}",
        r["error"]
    );
    for key in ["import_errors", "console_errors", "crashed_tracks"] {
        if let Some(v) = r.get(key) {
            assert_eq!(v.as_array().map_or(0, Vec::len), 0, "{ctx}: {key}: {v}");
        }
    }
    assert!(
        r["slices"].as_u64().unwrap_or(0) > 0,
        "{ctx}: no slices: {r}"
    );
    assert!(!l.groups.is_empty(), "{ctx}: no track groups");
    if s.merged {
        let text: Vec<&str> = l
            .groups
            .iter()
            .flat_map(|g| {
                std::iter::once(g.title.as_str()).chain(g.children.iter().map(String::as_str))
            })
            .collect();
        for rank in 0..4 {
            assert!(
                text.iter().any(|t| t.contains(&format!("rank {rank}"))),
                "{ctx}: rank {rank} not shown: {text:?}"
            );
        }
        // Each rank on a machine of its own: the process drawn with the pid the report
        // recorded, and (v58, which orders processes by the sort hint a protobuf can give it)
        // in rank order; v52 lists them by activity.
        let process =
            regex::Regex::new(r"^rank (\d) · vm · \.\./mpi_nvtx (\d+)( \(.*\))?$").unwrap();
        let shown: Vec<(u32, i64)> = l
            .groups
            .iter()
            .filter_map(|g| {
                let c = process.captures(&g.title)?;
                Some((c[1].parse().unwrap(), c[2].parse().unwrap()))
            })
            .collect();
        let recorded: Vec<(u32, i64)> = (0..4)
            .map(|r| {
                let db =
                    rusqlite::Connection::open(common::fixture(&format!("mpi/rank_{r}.sqlite")))
                        .unwrap();
                let pid = db
                    .query_row(
                        "SELECT pid FROM PROCESSES WHERE name = '../mpi_nvtx'",
                        [],
                        |row| row.get(0),
                    )
                    .unwrap();
                (r, pid)
            })
            .collect();
        let mut sorted = shown.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, recorded, "{ctx}: the ranks' processes and pids");
        if ui == "v58" {
            assert_eq!(shown, recorded, "{ctx}: the processes in rank order");
        }
        // `--stragglers`: every rank of the fixture is late somewhere; its "Stragglers" track
        // sits in its own "Analysis" group, named by its label, the groups in rank order in
        // v58 (the fixture has no kernels, so `--util-map` draws no counter).
        let analysis: Vec<&Group> = l
            .groups
            .iter()
            .filter(|g| g.title.starts_with("Analysis · "))
            .collect();
        let mut titles: Vec<&str> = analysis.iter().map(|g| g.title.as_str()).collect();
        if ui != "v58" {
            titles.sort_unstable();
        }
        let expected: Vec<String> = (0..4)
            .map(|r| format!("Analysis · rank {r} · vm"))
            .collect();
        assert_eq!(titles, expected, "{ctx}: the ranks' Analysis groups");
        for g in analysis {
            assert!(
                g.children.iter().any(|c| c == "Stragglers")
                    && !g.children.iter().any(|c| c.contains("utilization")),
                "{ctx}: {g:?}"
            );
        }
    }
}

fn find<'a>(loaded: &'a [(PathBuf, Loaded)], trace: &Path) -> &'a Loaded {
    &loaded
        .iter()
        .find(|(p, _)| p == trace)
        .unwrap_or_else(|| panic!("no result for {}", trace.display()))
        .1
}

/// Every sample trace in both UIs; the layout checks in each.
#[test]
fn corpus_sample_loads_cleanly_in_perfettos_ui() {
    let Some(_ui) = ui_ready() else { return };
    let run58 = ui_tools().join("v58/run.sh");
    let tp = common::manifest_dir().join("../shared/tools/perfetto/bin/trace_processor_shell");
    if !run58.is_file() || !tp.is_file() {
        skip(
            "ui",
            &format!("{} or {} not found", run58.display(), tp.display()),
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(samples) = sample(dir.path()) else {
        return;
    };
    let traces: Vec<&Path> = samples.iter().map(|s| s.trace.as_path()).collect();

    // The two UIs side by side (each loads one trace at a time in its own fresh browser).
    let (v52, v58) = std::thread::scope(|scope| {
        let v52 = scope.spawn(|| {
            let mut cmd = Command::new("python3");
            cmd.arg(ui_tools().join("uiload.py"))
                .arg("--timeout")
                .arg("120")
                .args(&traces);
            run_loader(cmd, "uiload.py (v52)")
        });
        // v58 serves on the fixed ports 9001 and 10000: one run at a time on this machine.
        let lock = fixed_ports_turn();
        let mut cmd = Command::new("bash");
        cmd.arg(&run58).arg("--depth").arg("2");
        if let Some(shots) = std::env::var_os("NSYS_PERFETTO_UI_SHOTS") {
            cmd.arg("--shots")
                .arg(shots)
                .arg("--expand")
                .arg("^GPU|^Context");
        }
        cmd.args(&traces);
        let v58 = run_loader(cmd, "v58/run.sh");
        drop(lock);
        (v52.join().unwrap(), v58)
    });

    for s in &samples {
        let (a, b) = (find(&v52, &s.trace), find(&v58, &s.trace));
        check_loaded("v52", s, a);
        check_loaded("v58", s, b);
        let slices = |l: &Loaded| l.raw.get("runs").map_or(&l.raw, |r| &r[0])["slices"].as_u64();
        assert_eq!(
            slices(a),
            slices(b),
            "{}: v52 and v58 slice counts",
            s.trace.display()
        );
        if s.json {
            let twin = s.trace.with_extension("pftrace");
            let twin = samples
                .iter()
                .any(|t| t.trace == twin)
                .then(|| find(&v58, &twin));
            check_json_layout(
                "v52",
                &s.trace,
                &a.groups,
                twin.map(|t| t.groups.as_slice()),
            );
            check_json_layout(
                "v58",
                &s.trace,
                &b.groups,
                twin.map(|t| t.groups.as_slice()),
            );
        } else {
            check_pftrace_layout("v52", &s.trace, s.merged, &a.groups);
            check_pftrace_layout("v58", &s.trace, s.merged, &b.groups);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Offline sites: `open --ui DIR` and `serve --ui DIR` serve a local Perfetto UI build.

/// One HTTP/1.1 request (`Connection: close`): status, headers (lower-case names), body.
fn http(method: &str, port: u16, path: &str, host: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, raw[end + 4..].to_vec())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// A made UI build (an index.html naming Perfetto, a version folder with a .wasm) inside `dir`,
/// with a file beside it that must never be served.
fn made_ui(dir: &Path) -> PathBuf {
    let ui = dir.join("ui");
    std::fs::create_dir_all(ui.join("v1.0")).unwrap();
    std::fs::write(
        ui.join("index.html"),
        "<title>Perfetto UI</title> made for the test",
    )
    .unwrap();
    std::fs::write(ui.join("v1.0/engine.wasm"), b"\0asm").unwrap();
    std::fs::write(dir.join("secret.txt"), "not for the browser").unwrap();
    ui
}

/// A running `nsys-perfetto` (killed when dropped) and its stderr, read as it comes.
struct Running {
    child: std::process::Child,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Running {
    fn start(args: &[&str]) -> (Running, std::process::ChildStdout) {
        let mut child = Command::new(BIN)
            .args(args)
            .env_remove("BROWSER")
            .env_remove("DISPLAY")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let out = child.stdout.take().unwrap();
        (Running { child, stderr: rx }, out)
    }

    /// Ctrl-C, then the exit status and everything it printed on stderr.
    fn interrupt(mut self) -> (std::process::ExitStatus, String) {
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status();
        let st = self.child.wait().unwrap();
        let text: Vec<String> = self.stderr.try_iter().collect();
        (st, text.join("\n"))
    }
}

impl Drop for Running {
    /// Ctrl-C first (so that `open --native` stops its trace processor), then a kill.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .arg("-INT")
                .arg(self.child.id().to_string())
                .status();
            let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::time::Instant::now() < end && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_listening(port: u16) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < end, "nothing listens on {port}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `tests/ui/browser.py MODE ARGS...` in headless Chromium: its JSON answer.
fn browser(args: &[&str]) -> Value {
    let out = Command::new("python3")
        .arg(common::manifest_dir().join("tests/ui/browser.py"))
        .args(args)
        .env("UI_TOOLS", ui_tools())
        .envs(common::BROWSER_ENV)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "browser.py {args:?}: {e}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn assert_shown(what: &str, r: &Value, process: &str) {
    assert!(r.get("error").is_none(), "{what}: {r}");
    assert_eq!(
        r["slices"].as_u64(),
        Some(784),
        "{what}: the fixture's slices: {r}"
    );
    let groups = r["groups"].as_array().unwrap();
    assert!(
        groups
            .iter()
            .any(|g| g.as_str().is_some_and(|t| t.starts_with(process))),
        "{what}: no group for {process}: {r}"
    );
}

#[test]
fn open_ui_serves_a_local_build_with_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let ui = made_ui(dir.path());
    let trace = dir.path().join("w x.pftrace");
    cli(&[
        common::fixture("nvtx_workload.sqlite").to_str().unwrap(),
        "-o",
        trace.to_str().unwrap(),
    ]);
    let port = common::free_port();
    let p = port.to_string();
    let (run, stdout) = Running::start(&[
        "open",
        "--ui",
        ui.to_str().unwrap(),
        "--no-browser",
        "--port",
        &p,
        "--timeout",
        "120",
        trace.to_str().unwrap(),
    ]);
    let mut link = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut link).unwrap();
    let origin = format!("http://127.0.0.1:{port}");
    assert_eq!(
        link.trim(),
        format!("{origin}/#!/?url={origin}/nsys-perfetto/w%20x.pftrace"),
        "the link: the UI and the trace from this server"
    );
    let host = format!("127.0.0.1:{port}");
    let (st, h, body) = http("GET", port, "/", &host);
    assert_eq!(
        (st, header(&h, "content-type")),
        (200, Some("text/html; charset=utf-8"))
    );
    assert!(String::from_utf8_lossy(&body).contains("made for the test"));
    let (st, h, body) = http("GET", port, "/v1.0/engine.wasm", &host);
    assert_eq!(
        (st, header(&h, "content-type")),
        (200, Some("application/wasm"))
    );
    assert_eq!(body, b"\0asm");
    for bad in [
        "/../secret.txt",
        "/v1.0/%2e%2e/../secret.txt",
        "/v1.0",
        "/nope.js",
    ] {
        assert_eq!(
            http("GET", port, bad, &host).0,
            404,
            "{bad} must not be served"
        );
    }
    assert_eq!(
        http("GET", port, "/", "evil.example:80").0,
        403,
        "DNS rebinding"
    );
    assert_eq!(http("POST", port, "/", &host).0, 405);
    let (st, _, body) = http("GET", port, "/nsys-perfetto/w%20x.pftrace", &host);
    assert_eq!(
        (st, body),
        (200, std::fs::read(&trace).unwrap()),
        "the trace"
    );
    // It serves on after the fetch (the UI loads more of its files): Ctrl-C stops it.
    assert_eq!(http("GET", port, "/", &host).0, 200);
    let (st, err) = run.interrupt();
    assert!(st.success(), "{st}: {err}");
    assert!(err.contains("fetched the trace"), "{err}");

    // A --ui that is no UI build: one line naming it, before anything is converted.
    let profile = dir.path().join("copy.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &profile).unwrap();
    for (bad, says) in [
        (dir.path().join("none"), "no such directory"),
        (ui.join("v1.0"), "not a Perfetto UI build"),
    ] {
        let out = Command::new(BIN)
            .args(["open", "--no-browser", "--ui"])
            .arg(&bad)
            .arg(&profile)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains(&bad.display().to_string()), "{err}");
        assert!(
            !dir.path().join("copy.pftrace").exists(),
            "converted anyway"
        );
    }

    // The real UI (v52, its WASM engine) loads the trace from this server.
    let Some(real) = ui_ready() else { return };
    let port = common::free_port();
    let p = port.to_string();
    let (run, stdout) = Running::start(&[
        "open",
        "--ui",
        real.to_str().unwrap(),
        "--no-browser",
        "--port",
        &p,
        "--timeout",
        "180",
        trace.to_str().unwrap(),
    ]);
    let mut link = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut link).unwrap();
    let r = browser(&["url", link.trim()]);
    assert_shown("open --ui", &r, "./nvtx_workload");
    let (st, err) = run.interrupt();
    assert!(
        st.success() && err.contains("fetched the trace"),
        "{st}: {err}"
    );
}

#[test]
fn serve_ui_serves_a_local_build_beside_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let ui = made_ui(dir.path());
    let port = common::free_port();
    let p = port.to_string();
    let (run, _out) = Running::start(&["serve", "--port", &p, "--ui", ui.to_str().unwrap()]);
    wait_listening(port);
    let host = format!("127.0.0.1:{port}");
    let (st, h, _) = http("GET", port, "/perfetto", &host);
    assert_eq!((st, header(&h, "location")), (301, Some("/perfetto/")));
    let (st, _, body) = http("GET", port, "/perfetto/", &host);
    assert!(st == 200 && String::from_utf8_lossy(&body).contains("made for the test"));
    let (st, h, _) = http("GET", port, "/perfetto/v1.0/engine.wasm", &host);
    assert_eq!(
        (st, header(&h, "content-type")),
        (200, Some("application/wasm"))
    );
    assert_eq!(http("GET", port, "/perfetto/../secret.txt", &host).0, 404);
    let (st, _, body) = http("GET", port, "/", &host);
    assert!(st == 200 && String::from_utf8_lossy(&body).contains("Open in Perfetto"));
    let (_, _, body) = http("GET", port, "/api/info", &host);
    let info: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        info["perfetto_url"], "/perfetto",
        "the page opens the local UI"
    );
    drop(run);

    // The page, in a real browser: upload, convert, "Open in Perfetto" hands the trace to the
    // local v52 UI (postMessage), which shows it.
    let Some(real) = ui_ready() else { return };
    let port = common::free_port();
    let p = port.to_string();
    let (run, _out) = Running::start(&["serve", "--port", &p, "--ui", real.to_str().unwrap()]);
    wait_listening(port);
    let r = browser(&[
        "page",
        &format!("http://127.0.0.1:{port}"),
        common::fixture("nvtx_workload.sqlite").to_str().unwrap(),
    ]);
    assert_shown("serve --ui", &r, "./nvtx_workload");
    assert!(
        r["location"]
            .as_str()
            .unwrap_or("")
            .starts_with(&format!("http://127.0.0.1:{port}/perfetto/")),
        "{r}"
    );
    assert!(
        r["handoff"]
            .as_str()
            .unwrap_or("")
            .contains("handed to the Perfetto UI"),
        "{r}"
    );
    drop(run);
}

#[test]
fn open_native_ui_serves_the_local_build_beside_the_trace_processor() {
    let tp = common::manifest_dir().join("../shared/tools/perfetto/bin/trace_processor_shell");
    if !tp.is_file() {
        skip("tpcheck", &format!("{} not found", tp.display()));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ui = made_ui(dir.path());
    let trace = dir.path().join("w.pftrace");
    cli(&[
        common::fixture("nvtx_workload.sqlite").to_str().unwrap(),
        "-o",
        trace.to_str().unwrap(),
    ]);
    let (tp_port, ui_port) = (common::free_port(), common::free_port());
    let (a, b) = (tp_port.to_string(), ui_port.to_string());
    let (run, stdout) = Running::start(&[
        "open",
        "--native",
        "--ui",
        ui.to_str().unwrap(),
        "--trace-processor",
        tp.to_str().unwrap(),
        "--no-browser",
        "--port",
        &a,
        "--ui-port",
        &b,
        "--timeout",
        "60",
        trace.to_str().unwrap(),
    ]);
    let mut link = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut link).unwrap();
    assert_eq!(
        link.trim(),
        format!("http://127.0.0.1:{ui_port}/#!/?rpc_port={tp_port}"),
        "the local UI, told where the trace processor is"
    );
    let (st, _, body) = http("GET", ui_port, "/", &format!("127.0.0.1:{ui_port}"));
    assert!(st == 200 && String::from_utf8_lossy(&body).contains("made for the test"));
    assert_eq!(http("GET", ui_port, "/../secret.txt", "localhost").0, 404);
    wait_listening(tp_port);
    let (st, err) = run.interrupt();
    assert!(st.success(), "{st}: {err}");
    assert!(
        err.contains(&format!(
            "ssh -L {ui_port}:127.0.0.1:{ui_port} -L {tp_port}"
        )),
        "{err}"
    );

    // The v58.2 UI (built without its WASM engine) on the native engine, as an offline site
    // with a big trace would run it: on the ports it expects, one user of them at a time.
    if ui_ready().is_none() {
        return;
    }
    let tarball = ui_tools().join("v58/perfetto-ui-v58.2.tar.gz");
    if !tarball.is_file() {
        skip("ui", &format!("{} not found", tarball.display()));
        return;
    }
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let lock = fixed_ports_turn();
    let (run, stdout) = Running::start(&[
        "open",
        "--native",
        "--ui",
        dir.path().join("dist").to_str().unwrap(),
        "--trace-processor",
        tp.to_str().unwrap(),
        "--no-browser",
        "--timeout",
        "180",
        trace.to_str().unwrap(),
    ]);
    let mut link = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut link).unwrap();
    assert_eq!(link.trim(), "http://127.0.0.1:10000/#!/");
    wait_listening(9001);
    let r = browser(&["native", link.trim()]);
    assert_shown("open --native --ui (v58.2)", &r, "./nvtx_workload");
    assert_eq!(r["engine_mode"], "HTTP_RPC", "{r}");
    let (st, err) = run.interrupt();
    drop(lock);
    assert!(st.success(), "{st}: {err}");
}

/// Whether v58/run.sh's groups tree (`--depth` levels) has this path of names from a top-level
/// group down.
fn tree_path(groups: &Value, path: &[&str]) -> bool {
    let Some(list) = groups.as_array() else {
        return false;
    };
    list.iter().any(|g| {
        let name = g["name"].as_str().unwrap_or("");
        match path.split_first() {
            Some((first, [])) => name == *first,
            Some((first, rest)) => name == *first && tree_path(&g["children"], rest),
            None => false,
        }
    })
}

/// `input` converted to `out` with `--gpu perfetto`.
fn convert_native(input: &Path, out: &Path) {
    cli(&[
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--gpu",
        "perfetto",
    ]);
}

/// `traces` loaded in UI v58.2 with the GPU compute tab and GpuByProcess enabled (as `open
/// --gpu-compute` asks), `depth` levels of groups read with those matching `expand` expanded,
/// the longest kernel selected; each asserted to load with no crashed track, console error or
/// import error.
fn load_gpu_compute_v58(depth: &str, expand: &str, traces: &[PathBuf]) -> Vec<(PathBuf, Loaded)> {
    let plugins = nsys_perfetto::open::GPU_COMPUTE_PLUGINS
        .strip_prefix("&enablePlugins=")
        .unwrap();
    let lock = fixed_ports_turn();
    let mut cmd = Command::new("bash");
    cmd.arg(ui_tools().join("v58/run.sh"))
        .args(["--depth", depth, "--expand", expand, "--select-kernel"])
        .args(["--enable-plugins", plugins])
        .args(traces);
    let loaded = run_loader(cmd, "v58/run.sh");
    drop(lock);
    for trace in traces {
        let r = &find(&loaded, trace).raw;
        assert_eq!(r["ok"], true, "{r}");
        for empty in ["crashed_tracks", "console_errors", "import_errors"] {
            assert_eq!(r[empty], Value::Array(vec![]), "{empty}: {r}");
        }
    }
    loaded
}

/// `--gpu perfetto` in UI v58.2 with the GPU compute tab and GpuByProcess enabled (as
/// `open --gpu-compute` asks): no crashed track, error dialog or console error; the compute tab
/// lists the trace's kernels; each process nests its stream
/// under GPU › CUDA; the GPU group holds each GPU's hardware queues.
#[test]
fn gpu_model_in_ui_v58() {
    let Some(_ui) = ui_ready() else { return };
    let Some(corpus) = common::corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("h100_2gpu.pftrace");
    convert_native(
        &corpus.join("GindaChen__nsys-ai__h100_2gpu_1s.sqlite"),
        &trace,
    );
    let loaded = load_gpu_compute_v58(
        "5",
        "GPU|Hardware|CUDA|python",
        std::slice::from_ref(&trace),
    );
    let r = &find(&loaded, &trace).raw;
    assert!(
        r.get("error").is_none() && r["kernel_dialog"].is_null(),
        "{r}"
    );
    assert_eq!(r["gpu_slices"], 4368, "{r}");
    assert_eq!(r["compute_tab_registered"], true, "{r}");
    let tab = r["compute_tab_text"].as_str().unwrap_or("");
    // run.sh keeps the tab's first 1,500 characters: its result list (one entry per kernel
    // launch, by demangled name), before the summary table (duration, registers, grid size:
    // docs/ui-gpu-compute.png).
    for text in [
        "0 - void at::native::vectorized_gather_kernel",
        "sm80_xmma_gemm",
    ] {
        assert!(tab.contains(text), "compute tab lacks {text}: {tab}");
    }
    let groups = &r["groups"];
    for (process, stream) in [("python3 111", "Stream #7"), ("python3 112", "Stream #15")] {
        assert!(
            tree_path(groups, &[process, "GPU", "CUDA", stream]),
            "GpuByProcess: {process} > GPU > CUDA > {stream}: {groups}"
        );
    }
    for (gpu, stream) in [
        ("GPU 0 Hardware Queues", "Stream 7"),
        ("GPU 1 Hardware Queues", "Stream 15"),
    ] {
        assert!(
            tree_path(groups, &["GPU", "Hardware Queues", gpu, stream]),
            "GPU > Hardware Queues > {gpu} > {stream}: {groups}"
        );
    }
}

/// `--gpu perfetto` in UI v52 (its older engine): the traces load with no import error (the
/// launching calls' `gpu_correlation`/`gpu_api` extensions are declared in the trace, so v52
/// reads them as args instead of counting unknown extension fields), no error dialog or console
/// error, and v52 imports every slice trace_processor v58.2 does, the GPU slices shown under
/// GPU › Render Stage. Its engine predates interned GPU counter descriptors, so it shows no GPU
/// metrics (dropped without error; docs/tables.md).
#[test]
fn gpu_model_in_ui_v52() {
    let Some(_ui) = ui_ready() else { return };
    let Some(corpus) = common::corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut traces = Vec::new();
    for name in [
        "GindaChen__nsys-ai__h100_2gpu_1s.sqlite",
        "als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite",
    ] {
        let trace = dir.path().join(name).with_extension("pftrace");
        convert_native(&corpus.join(name), &trace);
        traces.push(trace);
    }
    let mut cmd = Command::new("python3");
    cmd.arg(ui_tools().join("uiload.py"))
        .args(["--timeout", "120"])
        .args(&traces);
    let loaded = run_loader(cmd, "uiload.py (v52)");
    for trace in &traces {
        let l = find(&loaded, trace);
        let run = &l.raw["runs"][0];
        assert_eq!(l.raw["ok"], true, "{}", l.raw);
        for empty in ["import_errors", "console_errors"] {
            assert_eq!(run[empty], Value::Array(vec![]), "{empty}: {}", l.raw);
        }
        let Some(slices) = common::tp_query(trace, "SELECT count(*) FROM slice") else {
            return;
        };
        assert_eq!(
            run["slices"].to_string(),
            slices[0][0],
            "{}",
            trace.display()
        );
        assert!(
            l.groups
                .iter()
                .any(|g| g.title == "GPU" && g.children == ["Render Stage"]),
            "{}: {:?}",
            trace.display(),
            l.groups
        );
    }
}

/// GpuByProcess's levels and the GPU compute tab's columns in UI v58.2, on `--gpu perfetto`
/// traces: a process with two contexts on one GPU (`tests/all/contexts.rs`'s exports) nests
/// each stream under its context (process › GPU › CUDA › Context #N › Stream #7), a process on
/// two GPUs under its device (› Device #N › Stream #N); the compute tab lists every kernel of
/// the report of one RTX 3090 with its demangled name, duration, registers and grid size (x·y·z),
/// as trace_processor has them, in time order, and the selected kernel's grid and block.
#[test]
fn gpu_by_process_levels_and_compute_columns_in_ui_v58() {
    let Some(_ui) = ui_ready() else { return };
    let Some(corpus) = common::corpus_dir() else {
        skip("corpus", "../shared/corpus not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut traces = Vec::new();
    for scripts in [
        &["contexts_shared_gpu.sql", "contexts_one_process.sql"][..],
        &["contexts_one_process.sql"][..],
    ] {
        let Some(input) = crate::contexts::made(dir.path(), scripts) else {
            return;
        };
        traces.push(input.with_extension("pftrace"));
        convert_native(&input, traces.last().unwrap());
    }
    let kernels = dir.path().join("rtx3090.pftrace");
    convert_native(
        &corpus.join("als244__ResourceEstimation__reports_report2.export-2023.4.4.sqlite"),
        &kernels,
    );
    traces.push(kernels.clone());
    let loaded = load_gpu_compute_v58("7", "GPU|CUDA|python|Device|Context", &traces);

    let groups = &find(&loaded, &traces[0]).raw["groups"];
    for context in ["Context #1", "Context #2"] {
        let path = ["python3 111", "GPU", "CUDA", context, "Stream #7"];
        assert!(tree_path(groups, &path), "{path:?}: {groups}");
    }
    let groups = &find(&loaded, &traces[1]).raw["groups"];
    for (device, stream) in [("Device #0", "Stream #7"), ("Device #1", "Stream #15")] {
        let path = ["python3 111", "GPU", "CUDA", device, stream];
        assert!(tree_path(groups, &path), "{path:?}: {groups}");
    }

    // The summary table's rows: ID, demangled name, duration, compute and memory throughput
    // (none: nsys records no per-kernel counters), registers, grid size.
    let r = &find(&loaded, &kernels).raw;
    let tab = r["compute_tab_text"].as_str().unwrap_or("");
    let table = tab
        .split_once("Grid Size")
        .unwrap_or_else(|| panic!("no summary table: {tab}"))
        .1;
    let cells: Vec<&str> = table
        .split(['\t', '\n'])
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let want = common::tp_query(
        &kernels,
        "SELECT extract_arg(arg_set_id, 'kernel_demangled_name'), dur, \
         extract_arg(arg_set_id, 'registers_per_thread'), \
         extract_arg(arg_set_id, 'launch.grid_size.x') * extract_arg(arg_set_id, \
         'launch.grid_size.y') * extract_arg(arg_set_id, 'launch.grid_size.z') \
         FROM gpu_slice WHERE render_stage_category = 2 ORDER BY ts",
    )
    .unwrap();
    assert_eq!(want.len(), 4, "{want:?}");
    assert_eq!(cells.len(), 7 * want.len(), "{cells:?}");
    for (i, (row, k)) in cells.chunks(7).zip(&want).enumerate() {
        let dur = format!("{:.2} usecond", k[1].parse::<f64>().unwrap() / 1000.0);
        let expected = [&i.to_string(), &k[0], &dur, "—", "—", &k[2], &k[3]];
        assert_eq!(row, expected, "row {i}: {cells:?}");
    }
    // The longest kernel, selected: its grid and block, and its duration.
    let selected = common::tp_query(
        &kernels,
        "SELECT printf('(%d, %d, %d)x(%d, %d, %d)', \
         extract_arg(arg_set_id, 'launch.grid_size.x'), extract_arg(arg_set_id, 'launch.grid_size.y'), \
         extract_arg(arg_set_id, 'launch.grid_size.z'), extract_arg(arg_set_id, 'launch.workgroup_size.x'), \
         extract_arg(arg_set_id, 'launch.workgroup_size.y'), extract_arg(arg_set_id, 'launch.workgroup_size.z')), \
         printf('%.2f usecond', dur / 1000.0) \
         FROM gpu_slice WHERE render_stage_category = 2 ORDER BY dur DESC LIMIT 1",
    )
    .unwrap();
    let text = r["kernel_tab_text"].as_str().unwrap_or("");
    for shown in &selected[0] {
        assert!(
            text.contains(shown.as_str()),
            "selected kernel lacks {shown}: {text}"
        );
    }
}
