//! `open` and `serve`, used as a person would: `open` with a real HTTP client (the deep link it
//! prints, the CORS header, the bytes served, the exit after the fetch, the SSH hint without a
//! display, a busy port, --native with a real trace_processor_shell); `serve` through its HTTP
//! API (conversions, bad uploads, concurrent users, temporary files removed on Ctrl-C) and in a
//! real headless Chromium driven over WebDriver: upload through the file input, the summary
//! shown, the download compared with the CLI's output, and the Open-in-Perfetto hand-off to a
//! stand-in page that speaks Perfetto's PING/PONG protocol and records the bytes it receives.
//!
//! Only loopback addresses are used; every wait is bounded. Tests that need a tool that is
//! missing (chromium + chromedriver, trace_processor_shell) print why they skip.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

// ---------------------------------------------------------------------------------------------
// Helpers: processes, ports, a minimal HTTP/1.1 client

/// A child process killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        // Ctrl-C first, so that a server removes its temporary files; then kill.
        if let Ok(None) = self.0.try_wait() {
            self.interrupt();
            if self.wait_exit(Duration::from_secs(5)).is_none() {
                let _ = self.0.kill();
            }
        }
        let _ = self.0.wait();
    }
}

impl Proc {
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    /// Wait for the exit, at most `limit`.
    fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Ok(Some(st)) = self.0.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn interrupt(&self) {
        // SAFETY: sending a signal to our own child.
        unsafe {
            libc::kill(self.pid(), libc::SIGINT);
        }
    }
}

/// Lines of a child's pipe, as they come.
fn lines_of(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Collect lines until one satisfies `pred` (returned) or `limit` passes; all lines seen go to
/// `seen`.
fn wait_line(
    rx: &Receiver<String>,
    seen: &mut Vec<String>,
    limit: Duration,
    pred: impl Fn(&str) -> bool,
) -> Option<String> {
    let end = Instant::now() + limit;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match rx.recv_timeout(left) {
            Ok(l) => {
                seen.push(l.clone());
                if pred(&l) {
                    return Some(l);
                }
            }
            Err(_) => return None,
        }
    }
}

fn drain(rx: &Receiver<String>, seen: &mut Vec<String>, limit: Duration) {
    let end = Instant::now() + limit;
    while let Ok(l) = rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
        seen.push(l);
    }
}

fn wait_until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            )
        })
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// How a request body is sent.
enum Body<'a> {
    None,
    Length(&'a [u8]),
    Chunked(&'a [u8]),
}

/// One request on a fresh connection (`Connection: close`); the reply read to its end.
fn request(method: &str, url: &str, extra: &[(&str, &str)], body: Body) -> std::io::Result<Reply> {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut s = TcpStream::connect(host)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    s.set_write_timeout(Some(Duration::from_secs(120)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (n, v) in extra {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    match body {
        Body::None => {}
        Body::Length(b) => head.push_str(&format!("Content-Length: {}\r\n", b.len())),
        Body::Chunked(_) => head.push_str("Transfer-Encoding: chunked\r\n"),
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    match body {
        Body::None => {}
        Body::Length(b) => s.write_all(b)?,
        Body::Chunked(b) => {
            for c in b.chunks(70_000) {
                s.write_all(format!("{:x}\r\n", c.len()).as_bytes())?;
                s.write_all(c)?;
                s.write_all(b"\r\n")?;
            }
            s.write_all(b"0\r\n\r\n")?;
        }
    }
    read_reply(s)
}

/// Read one reply: its head, then a body by Content-Length, chunked, or to the end (servers
/// such as chromedriver keep the connection open despite `Connection: close`).
fn read_reply(s: TcpStream) -> std::io::Result<Reply> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let mut r = BufReader::new(s);
    let mut raw = Vec::new();
    loop {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Err(bad("closed in the reply head"));
        }
        raw.extend_from_slice(&line);
        if line == b"\r\n" {
            break;
        }
    }
    let head = parse_reply(&raw)?;
    let chunked = head
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"));
    if chunked {
        r.read_to_end(&mut raw)?;
    } else if let Some(n) = head
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok())
    {
        r.take(n).read_to_end(&mut raw)?;
    } else {
        r.read_to_end(&mut raw)?;
    }
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> std::io::Result<Reply> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    });
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let i = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or_else(|| bad("bad chunk"))?;
            let size = usize::from_str_radix(
                String::from_utf8_lossy(&rest[..i])
                    .split(';')
                    .next()
                    .unwrap()
                    .trim(),
                16,
            )
            .map_err(|_| bad("bad chunk size"))?;
            rest = &rest[i + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        body = out;
    } else if let Some(n) = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.truncate(n);
    }
    Ok(Reply {
        status,
        headers,
        body,
    })
}

fn get(url: &str) -> Reply {
    request("GET", url, &[], Body::None).unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// The CLI's conversion of `input` with `args`, into `dir/name`: (bytes, stderr).
fn cli_convert(input: &Path, dir: &Path, name: &str, args: &[&str]) -> (Vec<u8>, String) {
    let out = dir.join(name);
    let o = Command::new(BIN)
        .arg(input)
        .arg("-o")
        .arg(&out)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (
        std::fs::read(&out).unwrap(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A trace's content, independent of the order in which the converter's parallel readers
/// happened to write their chunks: every slice with its track's name path, sorted.
fn content(bytes: &[u8]) -> Vec<String> {
    let t = common::validate(bytes).unwrap_or_else(|v| panic!("invalid trace: {v:?}"));
    let label = |mut uuid: u64| {
        let mut parts = Vec::new();
        for _ in 0..16 {
            let Some(tr) = t.tracks.get(&uuid) else { break };
            parts.push(format!(
                "{}|{:?}|{:?}",
                tr.name.clone().unwrap_or_default(),
                tr.process.as_ref().map(|p| (p.pid, p.name.clone())),
                tr.thread.as_ref().map(|p| (p.pid, p.tid, p.name.clone()))
            ));
            match tr.parent {
                Some(p) => uuid = p,
                None => break,
            }
        }
        parts.join(" < ")
    };
    let mut v: Vec<String> = t
        .slices
        .iter()
        .map(|s| {
            format!(
                "{} :: {} {} {}..{} {} d{} {:?}",
                label(s.track),
                s.name,
                s.category,
                s.start,
                s.end,
                s.instant,
                s.depth,
                s.args
            )
        })
        .collect();
    v.sort();
    v
}

fn fixture_copy(dir: &Path) -> PathBuf {
    let p = dir.join("nvtx_workload.sqlite");
    std::fs::copy(common::fixture("nvtx_workload.sqlite"), &p).unwrap();
    p
}

// ---------------------------------------------------------------------------------------------
// open

fn spawn_open(args: &[&str], env: &[(&str, &str)]) -> (Proc, Receiver<String>, Receiver<String>) {
    let mut cmd = Command::new(BIN);
    cmd.arg("open")
        .args(args)
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("BROWSER")
        .env_remove("SSH_CONNECTION")
        .env_remove("SSH_CLIENT")
        .env_remove("SSH_TTY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let out = lines_of(child.stdout.take().unwrap());
    let err = lines_of(child.stderr.take().unwrap());
    (Proc(child), out, err)
}

#[test]
fn open_serves_the_trace_once_with_cors_and_a_deep_link() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture_copy(dir.path());
    let port = common::free_port();
    let p = port.to_string();
    let (mut proc, out, err) = spawn_open(
        &[
            input.to_str().unwrap(),
            "--port",
            &p,
            "--range",
            "1s..1.5s",
            "--timeout",
            "60",
        ],
        &[("SSH_CONNECTION", "10.1.2.3 50000 10.1.2.4 22")],
    );
    let mut err_lines = Vec::new();
    let mut out_lines = Vec::new();
    // The link goes to stdout (for scripts), the rest to stderr.
    let link = wait_line(&out, &mut out_lines, Duration::from_secs(60), |l| {
        l.starts_with("https://")
    })
    .unwrap_or_else(|| panic!("no link printed; stderr so far: {err_lines:?}"));
    assert_eq!(
        link,
        format!(
            "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/nvtx_workload.pftrace\
             &visStart=1000000000&visEnd=1500000000"
        )
    );
    wait_line(&err, &mut err_lines, Duration::from_secs(10), |l| {
        l.contains("ssh -L")
    })
    .unwrap_or_else(|| panic!("no ssh hint: {err_lines:?}"));
    let hint = err_lines.iter().find(|l| l.contains("ssh -L")).unwrap();
    assert!(
        hint.trim()
            .starts_with(&format!("ssh -L {port}:127.0.0.1:{port} ")),
        "{hint}"
    );
    assert!(
        err_lines.iter().any(|l| l.contains("SSH session")),
        "{err_lines:?}"
    );

    let base = format!("http://127.0.0.1:{port}");
    // Only that file, read-only; neither ends the server.
    let r = get(&format!("{base}/other.pftrace"));
    assert_eq!(r.status, 404);
    let r = request(
        "PUT",
        &format!("{base}/nvtx_workload.pftrace"),
        &[],
        Body::Length(b"x"),
    )
    .unwrap();
    assert_eq!(r.status, 405);
    // The UI's preflight (Chrome's private network access) is answered.
    let r = request(
        "OPTIONS",
        &format!("{base}/nvtx_workload.pftrace"),
        &[
            ("Origin", "https://ui.perfetto.dev"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Private-Network", "true"),
        ],
        Body::None,
    )
    .unwrap();
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("Access-Control-Allow-Private-Network"),
        Some("true")
    );
    assert!(proc.0.try_wait().unwrap().is_none(), "exited too early");

    let r = get(&format!("{base}/nvtx_workload.pftrace"));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("https://ui.perfetto.dev")
    );
    let on_disk = std::fs::read(dir.path().join("nvtx_workload.pftrace")).unwrap();
    assert_eq!(r.body, on_disk, "served bytes differ from the trace");
    let (cli, _) = cli_convert(&input, dir.path(), "cli.pftrace", &[]);
    assert_eq!(
        content(&r.body),
        content(&cli),
        "served trace differs from the CLI's"
    );

    let st = proc
        .wait_exit(Duration::from_secs(10))
        .expect("open did not exit after the fetch");
    assert!(st.success(), "{st}");
    drain(&err, &mut err_lines, Duration::from_secs(2));
    assert!(
        err_lines.iter().any(|l| l.contains("fetched")),
        "{err_lines:?}"
    );

    // The conversion is reused the second time (same input, same options).
    let (mut proc, out, err) = spawn_open(
        &[input.to_str().unwrap(), "--port", &p, "--timeout", "30"],
        &[],
    );
    let mut seen = Vec::new();
    let link = wait_line(&out, &mut seen, Duration::from_secs(30), |l| {
        l.starts_with("https://")
    })
    .expect("link");
    assert!(link.ends_with("/nvtx_workload.pftrace"), "{link}");
    let mut errs = Vec::new();
    wait_line(&err, &mut errs, Duration::from_secs(10), |l| {
        l.contains("no display")
    })
    .unwrap_or_else(|| panic!("no 'no display' reason: {errs:?}"));
    assert!(
        errs.iter()
            .any(|l| l.contains("reused") && l.contains("same input and options")),
        "{errs:?}"
    );
    assert_eq!(get(&format!("{base}/nvtx_workload.pftrace")).body, on_disk);
    assert!(proc.wait_exit(Duration::from_secs(10)).unwrap().success());
}

#[test]
fn open_a_trace_as_is_and_a_deep_link_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("my run.json.gz");
    let (bytes, _) = cli_convert(
        &common::fixture("nvtx_workload.sqlite"),
        dir.path(),
        "my run.json.gz",
        &["--types", "nvtx"],
    );
    let port = common::free_port();
    let (mut proc, out, _err) = spawn_open(
        &[
            trace.to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--no-browser",
            "--at",
            "2ms",
            "--timeout",
            "30",
        ],
        &[("DISPLAY", ":0")],
    );
    let mut seen = Vec::new();
    let link = wait_line(&out, &mut seen, Duration::from_secs(30), |l| {
        l.starts_with("https://")
    })
    .expect("link");
    assert_eq!(
        link,
        format!(
            "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/my%20run.json.gz\
             &ts=2000000&visStart=1500000&visEnd=2500000"
        )
    );
    let r = get(&format!("http://127.0.0.1:{port}/my%20run.json.gz"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, bytes);
    assert!(proc.wait_exit(Duration::from_secs(10)).unwrap().success());
}

#[test]
fn open_starts_the_browser_named_by_browser() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = cli_convert(
        &common::fixture("nvtx_workload.sqlite"),
        dir.path(),
        "t.pftrace",
        &["--types", "nvtx"],
    );
    // A "browser" that records the address it was given.
    let seen = dir.path().join("browser-args");
    let browser = dir.path().join("fake-browser");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\nprintf '%s' \"$1\" > '{}'\n", seen.display()),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let port = common::free_port();
    let (mut proc, _out, err) = spawn_open(
        &[
            dir.path().join("t.pftrace").to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--timeout",
            "30",
        ],
        &[("DISPLAY", ":0"), ("BROWSER", browser.to_str().unwrap())],
    );
    let url = wait_until(Duration::from_secs(20), "the browser to be started", || {
        std::fs::read_to_string(&seen)
            .ok()
            .filter(|s| !s.is_empty())
    });
    assert_eq!(
        url,
        format!("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:{port}/t.pftrace")
    );
    // What the UI then does: fetch the trace.
    let fetched = url.split_once("url=").unwrap().1;
    assert_eq!(get(fetched).body, bytes);
    assert!(proc.wait_exit(Duration::from_secs(10)).unwrap().success());
    let mut lines = Vec::new();
    drain(&err, &mut lines, Duration::from_secs(2));
    assert!(
        lines.iter().any(|l| l.contains("opened the Perfetto UI")),
        "{lines:?}"
    );
}

#[test]
fn open_suggests_native_for_big_traces_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    // A sparse 1.2 GB file: only its size matters here.
    let big = dir.path().join("big.pftrace");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1_200_000_000)
        .unwrap();
    let port = common::free_port();
    let (mut proc, out, err) = spawn_open(
        &[
            big.to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--no-browser",
            "--timeout",
            "60",
        ],
        &[("PATH", dir.path().to_str().unwrap())],
    );
    let mut seen = Vec::new();
    wait_line(&out, &mut seen, Duration::from_secs(30), |l| {
        l.starts_with("https://")
    })
    .expect("link");
    let mut errs = Vec::new();
    wait_line(&err, &mut errs, Duration::from_secs(10), |l| {
        l.contains("--native")
    })
    .unwrap_or_else(|| panic!("no --native suggestion: {errs:?}"));
    assert!(errs.iter().any(|l| l.contains("1.2 GB")), "{errs:?}");
    proc.interrupt();
    let st = proc
        .wait_exit(Duration::from_secs(10))
        .expect("no exit on Ctrl-C");
    assert_eq!(st.code(), Some(130));
    drain(&err, &mut errs, Duration::from_secs(2));
    assert!(errs.iter().any(|l| l.contains("interrupted")), "{errs:?}");
}

#[test]
fn open_says_when_the_port_is_busy() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pftrace");
    std::fs::write(&trace, b"").unwrap();
    let o = Command::new(BIN)
        .args(["open", trace.to_str().unwrap(), "--no-browser", "--port"])
        .arg(port.to_string())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("port {port} is busy")), "{err}");
    assert!(err.contains("only accepts traces from port 9001"), "{err}");
    drop(busy);
}

fn trace_processor() -> Option<PathBuf> {
    let p = std::env::var_os("TRACE_PROCESSOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            common::manifest_dir().join("../shared/tools/perfetto/bin/trace_processor_shell")
        });
    if p.is_file() {
        Some(p)
    } else {
        common::skip(
            "tpcheck",
            &format!(
                "no trace_processor_shell at {} (set TRACE_PROCESSOR)",
                p.display()
            ),
        );
        None
    }
}

#[test]
fn open_native_starts_trace_processor_on_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = cli_convert(
        &common::fixture("nvtx_workload.sqlite"),
        dir.path(),
        "t.pftrace",
        &[],
    );
    assert!(!bytes.is_empty());
    // Without a trace processor: how to get one.
    let o = Command::new(BIN)
        .args(["open", "--native", "--no-browser"])
        .arg(dir.path().join("t.pftrace"))
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("trace_processor_shell") && err.contains("get one"),
        "{err}"
    );

    let Some(tp) = trace_processor() else { return };
    let port = common::free_port();
    let (mut proc, out, _err) = spawn_open(
        &[
            dir.path().join("t.pftrace").to_str().unwrap(),
            "--native",
            "--trace-processor",
            tp.to_str().unwrap(),
            "--port",
            &port.to_string(),
            "--timeout",
            "120",
        ],
        &[],
    );
    let mut seen = Vec::new();
    let link = wait_line(&out, &mut seen, Duration::from_secs(30), |l| {
        l.starts_with("https://")
    })
    .expect("link");
    assert_eq!(link, format!("https://ui.perfetto.dev/#!/?rpc_port={port}"));
    // trace_processor's RPC answers once the trace is loaded.
    let status = wait_until(Duration::from_secs(90), "trace_processor --httpd", || {
        request(
            "GET",
            &format!("http://127.0.0.1:{port}/status"),
            &[],
            Body::None,
        )
        .ok()
        .filter(|r| r.status == 200)
    });
    assert!(!status.body.is_empty());
    proc.interrupt();
    let st = proc
        .wait_exit(Duration::from_secs(20))
        .expect("open --native did not stop on Ctrl-C");
    assert!(st.success(), "{st}");
    // trace_processor went with it: the port is free again.
    wait_until(Duration::from_secs(10), "the port to be free", || {
        TcpListener::bind(("127.0.0.1", port)).ok()
    });
}

// ---------------------------------------------------------------------------------------------
// serve: the HTTP API

struct Serve {
    proc: Proc,
    url: String,
    temp: PathBuf,
    /// Its stderr, kept open (a closed pipe would fail its last messages).
    _err: Receiver<String>,
}

fn spawn_serve(extra: &[&str], env: &[(&str, &str)]) -> Serve {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--port", "0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let err = lines_of(child.stderr.take().unwrap());
    let proc = Proc(child);
    let mut seen = Vec::new();
    let first = wait_line(&err, &mut seen, Duration::from_secs(30), |l| {
        l.contains("open http://")
    })
    .unwrap_or_else(|| panic!("serve did not start: {seen:?}"));
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let temp = wait_line(&err, &mut seen, Duration::from_secs(10), |l| {
        l.contains("temporary files:")
    })
    .unwrap()
    .split_once("temporary files:")
    .unwrap()
    .1
    .trim()
    .into();
    Serve {
        proc,
        url,
        temp,
        _err: err,
    }
}

fn convert_api(url: &str, query: &str, body: Body) -> Reply {
    request("POST", &format!("{url}/api/convert?{query}"), &[], body).unwrap()
}

#[test]
fn serve_api_converts_like_the_cli() {
    let fixture = common::fixture("nvtx_workload.sqlite");
    let bytes = std::fs::read(&fixture).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut s = spawn_serve(&[], &[]);

    let page = get(&format!("{}/", s.url));
    assert_eq!(page.status, 200);
    assert!(page.text().contains("Open in Perfetto"));
    assert!(
        !page.text().contains("<script src") && !page.text().contains("<link "),
        "the page loads nothing from elsewhere"
    );
    let info = get(&format!("{}/api/info", s.url)).json();
    assert_eq!(info["perfetto_url"], "https://ui.perfetto.dev");

    // Default options: the summary and the content match the CLI's.
    let r = convert_api(&s.url, "name=nvtx_workload.sqlite", Body::Length(&bytes));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let (cli, cli_err) = cli_convert(&fixture, dir.path(), "cli.pftrace", &[]);
    let events_line = cli_err
        .lines()
        .find(|l| l.trim_start().starts_with("events:"))
        .unwrap();
    assert!(
        v["summary"]["text"]
            .as_str()
            .unwrap()
            .contains(events_line.trim()),
        "{events_line} not in {}",
        v["summary"]["text"]
    );
    assert_eq!(v["summary"]["events"]["nvtx"], 602);
    assert_eq!(v["summary"]["skipped_total"], 0);
    assert_eq!(v["upload_bytes"], bytes.len());
    assert_eq!(v["stats"]["sections"][0]["kind"], "nvtx");
    let trace_url = v["trace_url"].as_str().unwrap();
    assert!(
        trace_url.starts_with(&format!("{}/api/jobs/", s.url)),
        "{trace_url}"
    );
    let t = get(trace_url);
    assert_eq!(t.status, 200);
    assert!(
        t.header("Content-Disposition")
            .unwrap()
            .contains("nvtx_workload.pftrace")
    );
    assert_eq!(t.body.len() as u64, v["trace_bytes"].as_u64().unwrap());
    assert_eq!(content(&t.body), content(&cli));

    // Options, chunked upload, JSON output: byte for byte the CLI's (one reader thread writes
    // these types, so the output is deterministic).
    let r = convert_api(
        &s.url,
        "name=w.sqlite&types=nvtx,osrt&format=json",
        Body::Chunked(&bytes),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["file_name"], "w.json.gz");
    let (cli, _) = cli_convert(&fixture, dir.path(), "w.json.gz", &["--types", "nvtx,osrt"]);
    assert_eq!(get(v["trace_url"].as_str().unwrap()).body, cli);
    // A job can be deleted.
    let job = v["job"].as_str().unwrap();
    let d = request(
        "DELETE",
        &format!("{}/api/jobs/{job}", s.url),
        &[],
        Body::None,
    )
    .unwrap();
    assert_eq!(d.status, 200);
    assert_eq!(get(v["trace_url"].as_str().unwrap()).status, 404);

    // Ctrl-C: the server stops and its temporary files go.
    assert!(s.temp.is_dir());
    s.proc.interrupt();
    let st = s
        .proc
        .wait_exit(Duration::from_secs(10))
        .expect("no exit on Ctrl-C");
    assert!(st.success());
    assert!(!s.temp.exists(), "{} left behind", s.temp.display());
}

/// An upload of nsys' single-file Arrow export (`.arrows`) converts to what the CLI converts
/// it to; one that is not an Arrow stream, or is cut short, gets a clear 422.
#[test]
fn serve_converts_an_arrows_upload_like_the_cli() {
    let fixture = common::fixture("arrow/kmeans.arrows");
    let bytes = std::fs::read(&fixture).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = spawn_serve(&[], &[]);
    let info = get(&format!("{}/api/info", s.url)).json();
    assert!(
        info["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == ".arrows"),
        "{info}"
    );
    let r = convert_api(&s.url, "name=kmeans.arrows", Body::Length(&bytes));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["file_name"], "kmeans.pftrace");
    assert!(
        v["summary"]["events"]["cuda.kernel"].as_u64() > Some(0),
        "{v}"
    );
    let (cli, _) = cli_convert(&fixture, dir.path(), "cli.pftrace", &[]);
    assert_eq!(
        content(&get(v["trace_url"].as_str().unwrap()).body),
        content(&cli)
    );
    let err = |r: &Reply| r.json()["error"].as_str().unwrap_or_default().to_string();
    let r = convert_api(
        &s.url,
        "name=x.arrows",
        Body::Length(b"SQLite format 3\0 no"),
    );
    assert_eq!(r.status, 422);
    assert!(err(&r).contains("not an Arrow export"), "{}", err(&r));
    let r = convert_api(
        &s.url,
        "name=cut.arrows",
        Body::Length(&bytes[..bytes.len() / 2]),
    );
    assert_eq!(r.status, 422);
    assert!(
        err(&r).contains("truncated") || err(&r).contains("damaged"),
        "{}",
        err(&r)
    );
}

#[test]
fn serve_rejects_bad_uploads_with_a_clear_4xx() {
    let bytes = std::fs::read(common::fixture("nvtx_workload.sqlite")).unwrap();
    let s = spawn_serve(&["--max-upload", "300k"], &[]);
    let err = |r: &Reply| r.json()["error"].as_str().unwrap_or_default().to_string();

    let r = convert_api(&s.url, "name=notes.txt", Body::Length(b"hello"));
    assert_eq!(r.status, 400);
    assert!(err(&r).contains("not a profile"), "{}", err(&r));

    let r = convert_api(
        &s.url,
        "name=x.sqlite",
        Body::Length(b"hello, not a database"),
    );
    assert_eq!(r.status, 422);
    assert!(err(&r).contains("not an SQLite database"), "{}", err(&r));

    let r = convert_api(&s.url, "name=x.nsys-rep", Body::Length(&bytes[..1000]));
    assert_eq!(r.status, 422);
    assert!(
        err(&r).contains("not an Nsight Systems report"),
        "{}",
        err(&r)
    );

    // Truncated: a database cut short.
    let r = convert_api(&s.url, "name=cut.sqlite", Body::Length(&bytes[..200_000]));
    assert_eq!(r.status, 422);
    assert!(
        err(&r).contains("malformed") || err(&r).contains("damaged"),
        "{}",
        err(&r)
    );

    // Too large, announced and not announced (chunked).
    let r = convert_api(&s.url, "name=big.sqlite", Body::Length(&bytes));
    assert_eq!(r.status, 413);
    assert!(err(&r).contains("--max-upload"), "{}", err(&r));
    let r = convert_api(&s.url, "name=big.sqlite", Body::Chunked(&bytes));
    assert_eq!(r.status, 413);

    // An upload cut off mid-body.
    {
        let host = s.url.trim_start_matches("http://");
        let mut c = TcpStream::connect(host).unwrap();
        c.write_all(
            format!(
                "POST /api/convert?name=gone.sqlite HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        c.write_all(&bytes[..1000]).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut raw = Vec::new();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = c.read_to_end(&mut raw);
        let r = parse_reply(&raw).unwrap();
        assert_eq!(r.status, 400);
        assert!(err(&r).contains("did not arrive whole"), "{}", err(&r));
    }
    // A page elsewhere reaching the server through DNS rebinding names another host.
    {
        let host = s.url.trim_start_matches("http://");
        let mut c = TcpStream::connect(host).unwrap();
        c.write_all(
            b"GET /api/info HTTP/1.1\r\nHost: attacker.example:8080\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let r = read_reply(c).unwrap();
        assert_eq!(r.status, 403);
    }
    // Bad options, bad requests.
    let r = convert_api(
        &s.url,
        "name=a.sqlite&types=bogus",
        Body::Length(&bytes[..10]),
    );
    assert_eq!(r.status, 400);
    let r = convert_api(
        &s.url,
        "name=a.sqlite&format=xml",
        Body::Length(&bytes[..10]),
    );
    assert_eq!(r.status, 400);
    let r = convert_api(&s.url, "", Body::Length(&bytes[..10]));
    assert_eq!(r.status, 400);
    {
        let host = s.url.trim_start_matches("http://");
        let mut c = TcpStream::connect(host).unwrap();
        c.write_all(b"NONSENSE\r\n\r\n").unwrap();
        let mut raw = Vec::new();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.read_to_end(&mut raw);
        assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 400"));
    }
    // Still serving, and nothing left behind by the failures.
    assert_eq!(get(&format!("{}/api/info", s.url)).status, 200);
    let left: Vec<_> = std::fs::read_dir(&s.temp).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn serve_handles_concurrent_users() {
    let bytes = Arc::new(std::fs::read(common::fixture("nvtx_workload.sqlite")).unwrap());
    let s = spawn_serve(&["--jobs", "2"], &[]);
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let (url, bytes) = (s.url.clone(), bytes.clone());
            std::thread::spawn(move || {
                let body = if i % 2 == 0 {
                    Body::Length(&bytes)
                } else {
                    Body::Chunked(&bytes)
                };
                let r = convert_api(&url, &format!("name=u{i}.sqlite"), body);
                assert_eq!(r.status, 200, "{}", r.text());
                let v = r.json();
                let t = get(v["trace_url"].as_str().unwrap());
                assert_eq!(t.body.len() as u64, v["trace_bytes"].as_u64().unwrap());
                content(&t.body).len()
            })
        })
        .collect();
    let sizes: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(sizes.iter().all(|&n| n == sizes[0] && n > 0), "{sizes:?}");
}

// ---------------------------------------------------------------------------------------------
// serve in a real browser (WebDriver)

fn chromium() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| {
        names.iter().find_map(|n| {
            let p = PathBuf::from(n);
            if p.is_absolute() {
                return p.is_file().then_some(p);
            }
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join(n))
                .find(|p| p.is_file())
        })
    };
    let browser = find(&["chromium", "chromium-browser", "google-chrome"]);
    let driver = find(&["chromedriver", "/usr/lib/chromium/chromedriver"]);
    match (browser, driver) {
        (Some(b), Some(d)) => Some((b, d)),
        _ => {
            common::skip(
                "browser",
                "the browser test needs chromium and chromedriver (Debian: apt-get install \
                 chromium chromium-driver)",
            );
            None
        }
    }
}

/// A WebDriver session on a local chromedriver.
struct Driver {
    base: String,
    session: String,
    _proc: Proc,
}

impl Driver {
    fn start(browser: &Path, driver: &Path, downloads: &Path, profile: &Path) -> Option<Driver> {
        let port = common::free_port();
        let proc = Proc(
            Command::new(driver)
                .arg(format!("--port={port}"))
                .envs(common::BROWSER_ENV)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()?,
        );
        let base = format!("http://127.0.0.1:{port}");
        wait_until(Duration::from_secs(30), "chromedriver", || {
            request("GET", &format!("{base}/status"), &[], Body::None)
                .ok()
                .filter(|r| r.status == 200)
        });
        let caps = serde_json::json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1000,1150", "--hide-scrollbars", "--force-device-scale-factor=1",
                         format!("--user-data-dir={}", profile.display())],
                "prefs": {"download.default_directory": downloads, "download.prompt_for_download": false},
            },
        }}});
        let body = caps.to_string();
        let r = request(
            "POST",
            &format!("{base}/session"),
            &[("Content-Type", "application/json")],
            Body::Length(body.as_bytes()),
        )
        .ok()?;
        if r.status != 200 {
            common::skip(
                "browser",
                &format!("chromedriver could not start a session: {}", r.text()),
            );
            return None;
        }
        let session = r.json()["value"]["sessionId"].as_str()?.to_string();
        Some(Driver {
            base,
            session,
            _proc: proc,
        })
    }

    fn call(&self, method: &str, path: &str, body: serde_json::Value) -> serde_json::Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let text = body.to_string();
        let r = request(
            method,
            &url,
            &[("Content-Type", "application/json")],
            if method == "POST" {
                Body::Length(text.as_bytes())
            } else {
                Body::None
            },
        )
        .unwrap();
        let v = r.json();
        assert_eq!(r.status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    fn js(&self, script: &str) -> serde_json::Value {
        self.call(
            "POST",
            "/execute/sync",
            serde_json::json!({"script": script, "args": []}),
        )
    }

    fn element(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            serde_json::json!({"using": "css selector", "value": css}),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(|x| x.as_str())
            .unwrap()
            .to_string()
    }

    fn click(&self, css: &str) {
        let e = self.element(css);
        self.call(
            "POST",
            &format!("/element/{e}/click"),
            serde_json::json!({}),
        );
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = request(
            "DELETE",
            &format!("{}/session/{}", self.base, self.session),
            &[],
            Body::None,
        );
    }
}

/// What the stand-in received: the query it was posted with, and the bytes.
type Recorded = Option<(HashMap<String, String>, Vec<u8>)>;

/// The stand-in for ui.perfetto.dev: a page that answers PING with PONG and posts what it
/// receives back here, recorded with its title and file name.
struct StandIn {
    url: String,
    received: Arc<Mutex<Recorded>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

const STAND_IN_PAGE: &str = r#"<!doctype html><title>stand-in</title><script>
window.addEventListener("message", async (e) => {
  if (e.data === "PING") { e.source.postMessage("PONG", e.origin); return; }
  if (e.data && e.data.perfetto) {
    const p = e.data.perfetto;
    const q = new URLSearchParams({ title: p.title, fileName: p.fileName,
      isArrayBuffer: String(p.buffer instanceof ArrayBuffer), origin: e.origin });
    await fetch("/record?" + q.toString(), { method: "POST", body: p.buffer });
    document.title = "received";
  }
});
</script>"#;

impl StandIn {
    fn start() -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(None));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (rec, stop2) = (received.clone(), stop.clone());
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(300);
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
                match listener.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        let _ = Self::serve(c, &rec);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        StandIn {
            url,
            received,
            stop,
        }
    }

    fn serve(c: TcpStream, rec: &Mutex<Recorded>) -> std::io::Result<()> {
        c.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut r = BufReader::new(c.try_clone()?);
        let mut line = String::new();
        r.read_line(&mut line)?;
        let target = line.split(' ').nth(1).unwrap_or("/").to_string();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            r.read_line(&mut h)?;
            if h.trim().is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':')
                && n.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        let mut w = c;
        if let Some(q) = target.strip_prefix("/record?") {
            let params = q
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), pct(v)))
                .collect();
            *rec.lock().unwrap() = Some((params, body));
            w.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")?;
        } else {
            w.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                    STAND_IN_PAGE.len(),
                    STAND_IN_PAGE
                )
                .as_bytes(),
            )?;
        }
        w.flush()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn pct(s: &str) -> String {
    let s = s.replace('+', " ");
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&String::from_utf8_lossy(&b[i + 1..i + 3]), 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = s
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for ch in clean.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in ch.iter().enumerate() {
            n |= u32::from(val(c)) << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if ch.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if ch.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

#[test]
fn serve_page_in_a_real_browser() {
    let Some((browser, driver)) = chromium() else {
        return;
    };
    let fixture = common::fixture("nvtx_workload.sqlite");
    let dir = tempfile::tempdir().unwrap();
    let downloads = dir.path().join("downloads");
    std::fs::create_dir(&downloads).unwrap();
    let stand_in = StandIn::start();
    let s = spawn_serve(&[], &[("NSYS_PERFETTO_UI_URL", stand_in.url.as_str())]);
    let Some(d) = Driver::start(&browser, &driver, &downloads, &dir.path().join("profile")) else {
        return;
    };
    d.call(
        "POST",
        "/url",
        serde_json::json!({"url": format!("{}/", s.url)}),
    );
    wait_until(Duration::from_secs(20), "the page's options", || {
        d.js("return document.querySelectorAll('#types input').length")
            .as_u64()
            .filter(|&n| n == nsys_perfetto_model::category::EventType::ALL.len() as u64)
    });
    // Every type is offered, checked as the command line's defaults (all). Keep only NVTX and OS
    // runtime (one reader thread: a deterministic output to compare byte for byte with the
    // CLI's); JSON output.
    for t in nsys_perfetto_model::category::EventType::ALL {
        if !matches!(t.name(), "nvtx" | "osrt") {
            d.click(&format!("#type-{}", t.name()));
        }
    }
    d.click("input[name=format][value=json]");
    let input = d.element("#file");
    d.call(
        "POST",
        &format!("/element/{input}/value"),
        serde_json::json!({"text": fixture.to_str().unwrap()}),
    );
    let state = wait_until(
        Duration::from_secs(90),
        "the conversion in the page",
        || {
            let v = d.js("const j = document.querySelector('.job.done, .job.failed');
             return j ? {cls: j.className, status: j.querySelector('.status').textContent,
                         summary: (j.querySelector('.summary') || {}).innerText || '',
                         stats: (j.querySelector('.stats') || {}).textContent || ''} : null");
            (!v.is_null()).then_some(v)
        },
    );
    assert!(
        state["cls"].as_str().unwrap().contains("done"),
        "the page shows a failure: {}",
        state["status"]
    );
    let (cli, cli_err) = cli_convert(
        &fixture,
        dir.path(),
        "cli.json.gz",
        &["--types", "nvtx,osrt"],
    );
    // The summary shown is the CLI's: events per category, skipped rows, notes.
    let summary = state["summary"].as_str().unwrap().replace(',', "");
    let events = cli_err
        .lines()
        .find_map(|l| l.trim().strip_prefix("events: "))
        .unwrap()
        .replace(',', "");
    // The same total and counts per category (the page lists categories by name).
    let parts = |s: &str| -> Vec<String> {
        let mut v: Vec<String> = s
            .split(|c: char| c == '(' || c == ')' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    let shown = summary
        .lines()
        .find_map(|l| l.strip_prefix("events\t"))
        .unwrap_or_else(|| panic!("no events line in {summary:?}"));
    assert_eq!(parts(shown), parts(&events), "{events:?} vs {summary:?}");
    assert!(
        summary
            .lines()
            .any(|l| l.starts_with("skipped rows") && l.trim_end().ends_with('0')),
        "{summary:?}"
    );
    assert!(
        state["stats"].as_str().unwrap().contains("step"),
        "stats table: {}",
        state["stats"]
    );
    let notes = d
        .js("return [...document.querySelectorAll('.job.done .notes li')].map(l => l.textContent)");
    assert!(
        notes.to_string().contains("selection: types nvtx,osrt"),
        "notes shown: {notes}"
    );

    // Screenshot for the README, when asked (NSYS_PERFETTO_SCREENSHOT=docs/serve.png).
    if let Some(path) = std::env::var_os("NSYS_PERFETTO_SCREENSHOT") {
        d.js("document.querySelector('.job.done details').open = true; return 1");
        let png = d.call("GET", "/screenshot", serde_json::json!({}));
        std::fs::write(&path, base64_decode(png.as_str().unwrap())).unwrap();
    }

    // Download through the browser: the file equals the CLI's output, byte for byte.
    d.click(".job.done a.download");
    let file = wait_until(Duration::from_secs(30), "the download", || {
        let p = downloads.join("nvtx_workload.json.gz");
        p.is_file()
            .then(|| std::fs::read(&p).ok())
            .flatten()
            .filter(|b| b.len() == cli.len())
    });
    assert_eq!(file, cli, "downloaded trace differs from the CLI's");

    // Open in Perfetto: the stand-in receives the trace by postMessage, an ArrayBuffer whose
    // bytes are the trace.
    d.click(".job.done button.open");
    let (params, bytes) = wait_until(Duration::from_secs(30), "the hand-off", || {
        stand_in.received.lock().unwrap().clone()
    });
    assert_eq!(bytes, cli, "the stand-in received other bytes");
    assert_eq!(params["isArrayBuffer"], "true");
    assert_eq!(params["fileName"], "nvtx_workload.json.gz");
    assert_eq!(params["title"], "nvtx_workload.sqlite");
    assert_eq!(params["origin"], s.url);
    let note = wait_until(Duration::from_secs(10), "the hand-off note", || {
        let v = d.js("return document.querySelector('.job.done .handoff').textContent");
        v.as_str()
            .filter(|t| t.contains("handed"))
            .map(str::to_string)
    });
    assert!(note.contains("handed to the Perfetto UI"), "{note}");

    // A bad file through the page: a clear message, no crash.
    let bad = dir.path().join("notes.sqlite");
    std::fs::write(&bad, b"just text").unwrap();
    let input = d.element("#file");
    d.call(
        "POST",
        &format!("/element/{input}/value"),
        serde_json::json!({"text": bad.to_str().unwrap()}),
    );
    let msg = wait_until(Duration::from_secs(30), "the failure message", || {
        let v = d.js("const j = document.querySelector('.job.failed'); return j ? j.querySelector('.status').textContent : null");
        v.as_str().map(str::to_string)
    });
    assert!(msg.contains("not an SQLite database"), "{msg}");
}
