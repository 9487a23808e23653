//! `nsys-perfetto open INPUT`: show a trace in the Perfetto UI with one command.
//!
//! Like Perfetto's own `open_trace_in_ui`: the trace is served read-only on 127.0.0.1:9001 (the
//! one port the UI's content-security policy accepts) with `Access-Control-Allow-Origin:
//! https://ui.perfetto.dev`, and the browser opens
//! `https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/NAME`. The server exits once the trace
//! has been fetched. Without a display, or over SSH, the link and the `ssh -L` line to run on the
//! laptop are printed instead. `--native` hands the trace to a `trace_processor_shell --httpd`
//! instead, for traces too large for a browser tab.

use crate::args::{LOCAL_UI_PORT, OpenArgs, PERFETTO_PORT};
use crate::outcome::Outcome;
use crate::serve::http;
use crate::serve::ui_dir::{TRACE_PREFIX, UiDir};
use anyhow::{Context, Result, anyhow, bail};
use nsys_perfetto_read::inputs::{Input, classify};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const UI: &str = "https://ui.perfetto.dev";
const UI_ORIGIN: &str = "https://ui.perfetto.dev";
/// Above this size, a browser tab may not hold the trace: suggest --native.
pub const BIG_TRACE: u64 = 1 << 30;
const GET_TRACE_PROCESSOR: &str = "get one with `curl -LO https://get.perfetto.dev/trace_processor && chmod +x trace_processor` \
(it downloads trace_processor_shell on first use), then pass --trace-processor ./trace_processor or put it on PATH";

/// Listen on 127.0.0.1:`port`; when it is taken, say `why` it must be that port and how to find
/// what holds it (`open` has no other port to offer).
fn bind_local(port: u16, why: &str) -> Result<std::net::TcpListener> {
    std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow!(
                "port {port} is busy on 127.0.0.1: {why}. Find it with `ss -ltnp 'sport = \
                 :{port}'`, stop it and run this again"
            )
        } else {
            anyhow!("cannot listen on 127.0.0.1:{port}: {e}")
        }
    })
}

/// Where the UI should open: `visStart`/`visEnd` (and `ts` for `--at`), in trace nanoseconds.
/// The UI's GPU plugins users enable (`open --gpu-compute`), as a link asks for them.
pub const GPU_COMPUTE_PLUGINS: &str =
    "&enablePlugins=com.meta.GpuCompute,dev.perfetto.GpuByProcess";

pub fn deep_link_params(at: Option<&str>, range: Option<&str>) -> Result<String> {
    if let Some(at) = at {
        let t = nsys_perfetto_model::select::parse_duration(at)?;
        // A millisecond around the time, and the slice starting exactly there if there is one.
        let half = 500_000;
        let start = (t - half).max(0);
        return Ok(format!("&ts={t}&visStart={start}&visEnd={}", t + half));
    }
    if let Some(range) = range {
        let r: nsys_perfetto_model::select::TimeRange = range.parse()?;
        let (Some(a), Some(b)) = (r.start, r.end) else {
            bail!("--range needs both ends: A..B, e.g. 2s..2.5s");
        };
        if b <= a {
            bail!("--range: the end must be after the start");
        }
        return Ok(format!("&visStart={a}&visEnd={b}"));
    }
    Ok(String::new())
}

/// Why no browser is started, if one should not be.
pub fn no_display_reason() -> Option<&'static str> {
    let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
    if set("SSH_CONNECTION") || set("SSH_CLIENT") || set("SSH_TTY") {
        return Some("this is an SSH session");
    }
    if cfg!(target_os = "linux") && !set("DISPLAY") && !set("WAYLAND_DISPLAY") && !set("BROWSER") {
        return Some("there is no display (DISPLAY and WAYLAND_DISPLAY are unset)");
    }
    None
}

/// This machine's name for the `ssh -L` hint.
fn host_name() -> String {
    let user = std::env::var("USER").ok().filter(|u| !u.is_empty());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| {
            Command::new("hostname")
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "THIS_HOST".into());
    match user {
        Some(u) => format!("{u}@{host}"),
        None => host,
    }
}

/// The line to run on the laptop: its port forwarded to ours (9001, the one the UI accepts;
/// another only in tests, where the link names it too).
pub fn ssh_hint(port: u16) -> String {
    format!("ssh -L {port}:127.0.0.1:{port} {}", host_name())
}

/// Start the user's browser on `url`: `$BROWSER` (a `:`-separated list, `%s` for the URL), else
/// xdg-open (or open on macOS).
pub fn launch_browser(url: &str) -> Result<String> {
    let mut tried = Vec::new();
    let mut candidates: Vec<Vec<String>> = Vec::new();
    if let Ok(b) = std::env::var("BROWSER") {
        for cmd in b.split(':').filter(|c| !c.trim().is_empty()) {
            let mut words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
            if words.iter().any(|w| w.contains("%s")) {
                for w in &mut words {
                    *w = w.replace("%s", url);
                }
            } else {
                words.push(url.to_string());
            }
            candidates.push(words);
        }
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    candidates.push(vec![opener.to_string(), url.to_string()]);
    for words in candidates {
        tried.push(words[0].clone());
        let spawned = Command::new(&words[0])
            .args(&words[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Ok(mut child) = spawned {
            // Openers return at once; a browser started directly keeps running: both are fine.
            // A command that exits with an error within a second did not open anything.
            let deadline = Instant::now() + Duration::from_secs(1);
            loop {
                match nsys_perfetto_model::cleanup::wait_exit(&mut child, Duration::from_millis(50))
                {
                    Ok(Some(st)) if !st.success() => break,
                    Ok(Some(_)) => return Ok(words[0].clone()),
                    Ok(None) if Instant::now() >= deadline => return Ok(words[0].clone()),
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
        }
    }
    Err(anyhow!(
        "could not start a browser (tried {})",
        tried.join(", ")
    ))
}

/// The temporary folder of `open`'s conversion, registered with `cleanup` while it lives.
struct TempFolder(tempfile::TempDir);

impl Drop for TempFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.path());
        nsys_perfetto_model::cleanup::forget(self.0.path());
    }
}

/// The trace to show: the input itself, or its conversion (reused when its record matches). The
/// temporary directory, when there is one, must outlive the serving.
fn trace_for(args: &OpenArgs) -> Result<(PathBuf, Option<TempFolder>)> {
    let input = &args.input;
    if !input.exists() {
        bail!("{}: no such file", input.display());
    }
    let kind = classify(input);
    if input.is_dir() && !kind.is_columnar() {
        bail!(
            "{}: is a directory; open one trace or profile",
            input.display()
        );
    }
    if kind == Input::Trace {
        return Ok((input.clone(), None));
    }
    if !kind.is_profile() {
        bail!(
            "{}: neither a trace (.pftrace, .json, .gz) nor a profile (.nsys-rep, .qdrep, .sqlite, an Arrow export)",
            input.display()
        );
    }
    let mut selection = args.select.selection()?;
    if args.gpu_compute {
        // The GPU compute tab and GPU-by-process tracks read Perfetto's GPU model.
        selection.gpu = nsys_perfetto_model::select::GpuModel::Perfetto;
    }
    let opts = crate::convert::Options {
        format: nsys_perfetto_write::output::formats::OutputFormat::Protobuf,
        json_colors: false,
        progress: true,
        selection,
        check: false,
        analyze: false,
        pictures: None,
    };
    let selected = !opts.selection.is_everything();
    let default = crate::convert::default_output(input, opts.format);
    let dir = match default.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A selection gets its own temporary trace: the one beside the input stays the full one.
    let (output, temp) = if selected || crate::report::export::read_only_dir(&dir) {
        // Registered with `cleanup`: an interrupt during the conversion removes it; its name
        // carries the process id, so that a run killed outright has it removed by the next.
        let t = nsys_perfetto_model::cleanup::temp_dir("nsys-perfetto-open-")
            .context("cannot create a temporary directory")?;
        let out = t.path().join(default.file_name().unwrap_or_default());
        (out, Some(TempFolder(t)))
    } else {
        (default, None)
    };
    if temp.is_none() {
        match crate::provenance::check(&output, input, &opts.content_text()) {
            crate::provenance::Reuse::Same => {
                eprintln!(
                    "{}: reused {}: same input and options",
                    input.display(),
                    output.display()
                );
                return Ok((output, None));
            }
            crate::provenance::Reuse::Differs(why) => {
                eprintln!("{}: converting again: {why}", input.display());
            }
            crate::provenance::Reuse::Missing => {}
        }
    }
    let named = |e: anyhow::Error| {
        anyhow!(
            "{}: {}",
            input.display(),
            nsys_perfetto_model::errors::error_line(&e)
        )
    };
    let profile = crate::input::prepare(input, &args.nsys.export_options(false)).map_err(named)?;
    if let Some(line) = profile.describe() {
        eprintln!("  {line}");
    }
    let summary = crate::convert::convert_export_from(profile.export(), input, &output, &opts)
        .map_err(named)?;
    eprintln!("{} -> {}", input.display(), output.display());
    eprint!("{}", summary.render());
    Ok((output, temp))
}

fn find_trace_processor(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["trace_processor_shell", "trace_processor"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

impl OpenArgs {
    /// Convert the input when it is a profile, then show the trace until the UI has it.
    pub fn open(&self) -> Result<Outcome> {
        let mut link_params = deep_link_params(self.at.as_deref(), self.range.as_deref())?;
        if self.gpu_compute {
            link_params.push_str(GPU_COMPUTE_PLUGINS);
        }
        // A local UI build is checked before anything is converted.
        let ui = self
            .ui
            .as_deref()
            .map(crate::serve::ui_dir::UiDir::open)
            .transpose()?;
        let (trace, _temp) = trace_for(self)?;
        let size = std::fs::metadata(&trace)
            .with_context(|| format!("cannot read {}", trace.display()))?
            .len();
        let tp = find_trace_processor(self.trace_processor.as_deref());
        if self.native {
            let Some(tp) = tp else {
                bail!(
                    "--native needs trace_processor_shell, and none is on PATH: {GET_TRACE_PROCESSOR}"
                );
            };
            return self.open_native(&tp, &trace, &link_params);
        }
        if let Some(ui) = &ui {
            return open_with_local_ui(self, ui, &trace, size, &link_params);
        }
        if size > BIG_TRACE {
            let gb = size as f64 / 1e9;
            match &tp {
                Some(p) => eprintln!(
                    "note: this trace is {gb:.1} GB; a browser tab holds about 2 GB, 2-4x the \
                     file. If the UI runs out of memory, use --native (it will use {})",
                    p.display()
                ),
                None => eprintln!(
                    "note: this trace is {gb:.1} GB; a browser tab holds about 2 GB, 2-4x the \
                     file. If the UI runs out of memory, use --native with a \
                     trace_processor_shell: {GET_TRACE_PROCESSOR}"
                ),
            }
        }
        self.serve_once(&trace, size, &link_params)
    }

    /// When `--timeout` ends waiting, counted from now.
    fn deadline(&self) -> Option<Instant> {
        self.timeout
            .map(|secs| Instant::now() + Duration::from_secs(secs))
    }

    /// Say where the UI is, and start a browser when there is a display.
    pub(crate) fn announce(&self, url: &str) {
        let mut err = std::io::stderr();
        let reason = if self.no_browser {
            Some("--no-browser")
        } else {
            no_display_reason()
        };
        match reason {
            None => match launch_browser(url) {
                Ok(how) => {
                    let _ = writeln!(err, "opened the Perfetto UI with {how}: {url}");
                }
                Err(e) => {
                    let _ = writeln!(err, "{e}; open this link in a browser:\n  {url}");
                }
            },
            Some(why) => {
                let _ = writeln!(
                    err,
                    "open this link in a browser ({why}, so none was started):"
                );
                println!("{url}");
                let _ = writeln!(
                    err,
                    "on another machine (your laptop), first forward port {} to this one:\n  {}",
                    self.port,
                    ssh_hint(self.port)
                );
            }
        }
    }

    fn serve_once(&self, trace: &Path, size: u64, link_params: &str) -> Result<Outcome> {
        let name = trace
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "trace".into());
        let encoded = http::percent_encode(&name);
        let listener = bind_local(
            self.port,
            &format!(
                "the Perfetto UI only accepts traces from port {PERFETTO_PORT} (so no other port \
                 will do), and another program listens there: probably another `nsys-perfetto \
                 open`, Perfetto's open_trace_in_ui or a trace_processor_shell --httpd"
            ),
        )?;
        let port = listener.local_addr()?.port();
        let url = format!("{UI}/#!/?url=http://127.0.0.1:{PERFETTO_PORT}/{encoded}{link_params}");
        let url = if port == PERFETTO_PORT {
            url
        } else {
            // Tests: the link names the port actually served (the UI itself accepts only 9001).
            url.replace(
                &format!("127.0.0.1:{PERFETTO_PORT}/"),
                &format!("127.0.0.1:{port}/"),
            )
        };
        eprintln!(
            "serving {} ({}) on http://127.0.0.1:{port}/{encoded} until the UI has fetched it \
             (Ctrl-C to stop)",
            trace.display(),
            nsys_perfetto_model::summary::human_bytes(size)
        );
        let fetched = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<http::Handler> = {
            let (trace, fetched, stop) = (trace.to_path_buf(), fetched.clone(), stop.clone());
            Arc::new(move |req: &mut http::Request| {
                let cors = |r: http::Response| {
                    r.header("Access-Control-Allow-Origin", UI_ORIGIN)
                        .header("Vary", "Origin")
                };
                // Only requests for the loopback address (no DNS rebinding to this file).
                if !req.header("host").is_some_and(http::loopback_host) {
                    return cors(http::Response::text(403, "only for 127.0.0.1"));
                }
                let path_ok = req.path == format!("/{name}");
                match (req.method.as_str(), path_ok) {
                    ("OPTIONS", _) => cors(http::Response::bytes(204, "text/plain", Vec::new()))
                        .header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
                        .header("Access-Control-Allow-Headers", "*")
                        .header("Access-Control-Allow-Private-Network", "true"),
                    ("GET" | "HEAD", true) => match std::fs::File::open(&trace)
                        .and_then(|f| http::Response::file("application/octet-stream", f))
                    {
                        Ok(mut r) => {
                            if req.method == "GET" {
                                let (fetched, stop) = (fetched.clone(), stop.clone());
                                r.on_sent = Some(Box::new(move || {
                                    fetched.store(true, Ordering::SeqCst);
                                    stop.store(true, Ordering::SeqCst);
                                }));
                            }
                            cors(r)
                        }
                        Err(e) => cors(http::Response::text(500, &format!("cannot read: {e}"))),
                    },
                    ("GET" | "HEAD", false) => cors(http::Response::text(
                        404,
                        "not found: this server serves one trace only",
                    )),
                    _ => cors(http::Response::text(405, "read-only")),
                }
            })
        };
        self.announce(&url);
        serve_until(&listener, handler, stop, self.deadline(), 16)?;
        if fetched.load(Ordering::SeqCst) {
            eprintln!("the trace was fetched; done");
            Ok(Outcome::Done)
        } else if nsys_perfetto_model::cleanup::interrupted().is_some() {
            eprintln!("interrupted before the trace was fetched");
            Ok(Outcome::Interrupted)
        } else {
            eprintln!("timed out: the trace was not fetched");
            Ok(Outcome::SomeFailed)
        }
    }

    fn open_native(&self, tp: &Path, trace: &Path, link_params: &str) -> Result<Outcome> {
        // Fail early with the clear message when the port is taken.
        drop(bind_local(
            self.port,
            "trace_processor_shell --httpd serves the UI there (the port the UI looks for), and \
             another program listens there",
        )?);
        let mut child = Command::new(tp)
            .arg("--httpd")
            .arg("--http-port")
            .arg(self.port.to_string())
            .arg(trace)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot run {}", tp.display()))?;
        let mut params = String::new();
        if self.port != PERFETTO_PORT {
            params.push_str(&format!("&rpc_port={}", self.port));
        }
        params.push_str(link_params);
        // Offline: the local UI build on its own port (one the trace processor accepts as an
        // origin by default), while the trace processor holds the trace.
        let local_ui = match &self.ui {
            Some(dir) => Some(crate::serve::ui_dir::Background::start(
                &crate::serve::ui_dir::UiDir::open(dir)?,
                self.ui_port,
            )?),
            None => None,
        };
        let ui = local_ui.as_ref().map_or(UI, |b| b.origin.as_str());
        let url = match params.strip_prefix('&') {
            Some(p) => format!("{ui}/#!/?{p}"),
            None => format!("{ui}/#!/"),
        };
        eprintln!(
            "{} loads {} and serves it on 127.0.0.1:{}; in the UI, choose \"Use the loaded trace\" \
             (the native engine). Ctrl-C to stop.",
            tp.display(),
            trace.display(),
            self.port
        );
        self.announce(&url);
        if let Some(b) = &local_ui {
            let port = b.origin.rsplit(':').next().unwrap_or_default();
            eprintln!(
                "the UI is served from {} (Ctrl-C stops it too); from another machine forward both \
                 ports: ssh -L {port}:127.0.0.1:{port} -L {p}:127.0.0.1:{p} {}",
                b.origin,
                host_name(),
                p = self.port
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let _interrupts = nsys_perfetto_model::cleanup::stop_on_interrupt(&stop);
        let deadline = self.deadline();
        loop {
            if let Some(st) =
                nsys_perfetto_model::cleanup::wait_exit(&mut child, Duration::from_millis(100))?
            {
                return Ok(if st.success() {
                    Outcome::Done
                } else {
                    eprintln!("error: {} exited with {st}", tp.display());
                    Outcome::SomeFailed
                });
            }
            if stop.load(Ordering::SeqCst) || deadline.is_some_and(|d| Instant::now() >= d) {
                let _ = child.kill();
                let _ = child.wait();
                eprintln!("stopped {}", tp.display());
                return Ok(Outcome::Done);
            }
        }
    }
}

/// Serve `handler` on `listener` (at most `max_connections` at once) until `stop` is set: by
/// the handler, by Ctrl-C, or at `deadline`.
fn serve_until(
    listener: &std::net::TcpListener,
    handler: Arc<http::Handler>,
    stop: Arc<AtomicBool>,
    deadline: Option<Instant>,
    max_connections: usize,
) -> Result<()> {
    let _interrupts = nsys_perfetto_model::cleanup::stop_on_interrupt(&stop);
    if let Some(end) = deadline {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
            stop.store(true, Ordering::SeqCst);
        });
    }
    http::run(listener, handler, stop, max_connections)?;
    Ok(())
}

/// `open --ui DIR`: serve the UI at `/` and the trace at `/nsys-perfetto/NAME` on one port, and
/// open `http://127.0.0.1:PORT/#!/?url=...`. The UI loads its files from us after the trace
/// too, so this serves until Ctrl-C (or `--timeout`), not only until the trace is fetched.
fn open_with_local_ui(
    args: &OpenArgs,
    ui: &UiDir,
    trace: &Path,
    size: u64,
    link_params: &str,
) -> Result<Outcome> {
    let port = if args.port == PERFETTO_PORT {
        LOCAL_UI_PORT
    } else {
        args.port
    };
    let listener =
        http::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).map_err(|e| anyhow!("{e:#}"))?;
    let port = listener.local_addr()?.port();
    let name = trace
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "trace".into());
    let trace_path = format!("{TRACE_PREFIX}{name}");
    let origin = format!("http://127.0.0.1:{port}");
    let url = format!(
        "{origin}/#!/?url={origin}{TRACE_PREFIX}{}{link_params}",
        http::percent_encode(&name)
    );
    eprintln!(
        "serving the Perfetto UI from {} and {} ({}) on {origin}/ until Ctrl-C",
        ui.root().display(),
        trace.display(),
        nsys_perfetto_model::summary::human_bytes(size)
    );
    let fetched = Arc::new(AtomicBool::new(false));
    let handler: Arc<http::Handler> = {
        let (ui, trace, fetched) = (ui.clone(), trace.to_path_buf(), fetched.clone());
        Arc::new(move |req: &mut http::Request| {
            // Only requests for the loopback address (no DNS rebinding to these files).
            if !req.header("host").is_some_and(http::loopback_host) {
                return http::Response::text(403, "only for 127.0.0.1");
            }
            if !matches!(req.method.as_str(), "GET" | "HEAD") {
                return http::Response::text(405, "read-only");
            }
            if req.path == trace_path {
                return match std::fs::File::open(&trace)
                    .and_then(|f| http::Response::file("application/octet-stream", f))
                {
                    Ok(mut r) => {
                        if req.method == "GET" {
                            let fetched = fetched.clone();
                            r.on_sent = Some(Box::new(move || {
                                if !fetched.swap(true, Ordering::SeqCst) {
                                    eprintln!("the Perfetto UI fetched the trace");
                                }
                            }));
                        }
                        r
                    }
                    Err(e) => http::Response::text(500, &format!("cannot read the trace: {e}")),
                };
            }
            ui.respond(&req.path)
        })
    };
    let mut shown = args.clone();
    shown.port = port;
    shown.announce(&url);
    serve_until(&listener, handler, Arc::default(), args.deadline(), 64)?;
    let was_fetched = fetched.load(Ordering::SeqCst);
    if nsys_perfetto_model::cleanup::interrupted().is_some() {
        eprintln!("stopped");
        Ok(if was_fetched {
            Outcome::Done
        } else {
            Outcome::Interrupted
        })
    } else if was_fetched {
        eprintln!("--timeout reached; stopped");
        Ok(Outcome::Done)
    } else {
        eprintln!("timed out: the trace was not fetched");
        Ok(Outcome::SomeFailed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_links() {
        assert_eq!(deep_link_params(None, None).unwrap(), "");
        assert_eq!(
            deep_link_params(None, Some("2s..2.5s")).unwrap(),
            "&visStart=2000000000&visEnd=2500000000"
        );
        assert_eq!(
            deep_link_params(Some("1500000ns"), None).unwrap(),
            "&ts=1500000&visStart=1000000&visEnd=2000000"
        );
        assert_eq!(
            deep_link_params(Some("100us"), None).unwrap(),
            "&ts=100000&visStart=0&visEnd=600000"
        );
        assert!(deep_link_params(None, Some("2s..")).is_err());
    }
}
