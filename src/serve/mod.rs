//! `nsys-perfetto serve`: a local web page (and HTTP API) to convert profiles and view them.
//!
//! * `GET /`: the page (`page.html`, compiled into the binary: no CDN, works offline).
//! * `GET /api/info`: limits, version, event types, the Perfetto UI address.
//! * `POST /api/convert?name=NAME[&types=LIST][&format=protobuf|json][&nvtx_filter=F]
//!   [&time_range=A..B][&job=ID]`: the profile is the request body (`Content-Length` or
//!   chunked), streamed to a temporary file. Answers JSON: `trace_url`, the conversion
//!   `summary`, the `stats` tables, or `error` with a 4xx status.
//! * `GET /api/jobs/ID`: progress of a conversion (phase, bytes received, bytes written).
//! * `GET /api/jobs/ID/trace`: the converted trace. `DELETE /api/jobs/ID`: remove it.
//!
//! Uploads and exports are deleted right after the conversion; traces when deleted, an hour after
//! their last use, or when the server stops (Ctrl-C).

pub mod http;
pub mod ui_dir;

use crate::args::{SelectArgs, ServeArgs};
use crate::convert::{self};
use anyhow::{Context, Result};
use http::{Request, Response, bind, loopback_host};
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::summary::Summary;
use nsys_perfetto_read::inputs::{Input, classify, classify_name};
use nsys_perfetto_write::output::formats::{FORMATS, OutputFormat};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const PAGE: &str = include_str!("page.html");
/// The Perfetto UI the page hands traces to.
pub const PERFETTO_UI: &str = "https://ui.perfetto.dev";
/// Traces not fetched or deleted for this long are removed.
const JOB_TTL: Duration = Duration::from_secs(3600);

/// What a conversion is doing, for the page's progress line.
#[derive(Debug, Clone)]
struct Progress {
    phase: &'static str,
    received: u64,
    expected: Option<u64>,
    started: Instant,
}

struct Job {
    dir: PathBuf,
    progress: Mutex<Progress>,
    /// The trace, once converted: (path, download name, content type).
    trace: Mutex<Option<(PathBuf, String, &'static str)>>,
    last_used: Mutex<Instant>,
}

impl Job {
    fn set_phase(&self, phase: &'static str) {
        self.progress.lock().unwrap().phase = phase;
    }
}

/// A counting semaphore: conversions at once.
struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

struct SlotGuard<'a>(&'a Slots);

impl Slots {
    fn acquire(&self) -> SlotGuard<'_> {
        let mut free = self.free.lock().unwrap();
        while *free == 0 {
            free = self.cv.wait(free).unwrap();
        }
        *free -= 1;
        SlotGuard(self)
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap() += 1;
        self.0.cv.notify_one();
    }
}

pub struct State {
    root: tempfile::TempDir,
    jobs: Mutex<HashMap<String, Arc<Job>>>,
    slots: Slots,
    max_upload: u64,
    nsys: Option<PathBuf>,
    perfetto_url: String,
    /// A local Perfetto UI build served under `/perfetto/` (`--ui`).
    ui: Option<ui_dir::UiDir>,
    /// Bound to a loopback address: only requests naming a loopback host are answered (a web
    /// page elsewhere cannot reach the server through DNS rebinding).
    loopback_only: bool,
}

/// A running server (for tests and library users): its address and a way to stop it.
pub struct Server {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    state: Arc<State>,
}

impl Server {
    /// Bind and serve in a background thread.
    pub fn start(args: &ServeArgs) -> Result<Server> {
        let ui = args.ui.as_deref().map(ui_dir::UiDir::open).transpose()?;
        let listener = bind(SocketAddr::new(args.bind, args.port))?;
        let addr = listener.local_addr()?;
        let mut tmp = tempfile::Builder::new();
        tmp.prefix("nsys-perfetto-serve-");
        // Registered with `cleanup`: an interrupt removes it with the conversions' temporaries.
        let root = nsys_perfetto_model::cleanup::create(
            || match &args.temp_dir {
                Some(d) => tmp.tempdir_in(d),
                None => tmp.tempdir(),
            },
            |d| d.path().to_path_buf(),
        )
        .context("cannot create a temporary directory")?;
        let state = Arc::new(State {
            root,
            jobs: Mutex::new(HashMap::new()),
            slots: Slots {
                free: Mutex::new(args.jobs.max(1)),
                cv: Condvar::new(),
            },
            max_upload: args.max_upload,
            nsys: args.nsys.clone(),
            loopback_only: args.bind.is_loopback(),
            perfetto_url: ui
                .as_ref()
                .map(|_| ui_dir::SERVE_PREFIX.to_string())
                .or_else(|| args.perfetto_url.clone())
                .or_else(|| std::env::var("NSYS_PERFETTO_UI_URL").ok())
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| PERFETTO_UI.to_string())
                .trim_end_matches('/')
                .to_string(),
            ui,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<http::Handler> = {
            let state = state.clone();
            Arc::new(move |req: &mut Request| handle(&state, req))
        };
        let thread = http::run_in_background(listener, handler, stop.clone(), "server");
        Ok(Server {
            addr,
            stop,
            thread: Some(thread),
            state,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The temporary directory holding uploads and traces.
    pub fn temp_dir(&self) -> &Path {
        self.state.root.path()
    }

    /// Stop accepting and wait for the accept loop (connections in progress finish on their own
    /// threads).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The extension of a trace `serve` hands out: the format's, `.gz` where it is served gzipped.
fn served_extension(format: OutputFormat) -> String {
    let spec = format.spec();
    if spec.served_gzipped {
        format!("{}.gz", spec.extension)
    } else {
        spec.extension.to_string()
    }
}

fn error(status: u16, msg: impl Into<String>) -> Response {
    Response::json(status, &json!({ "error": msg.into() }))
}

fn handle(state: &Arc<State>, req: &mut Request) -> Response {
    if state.loopback_only && !req.header("host").is_some_and(loopback_host) {
        return error(
            403,
            "this server answers only requests for 127.0.0.1 or localhost (serve --bind to change)",
        );
    }
    expire_jobs(state);
    let path = req.path.clone();
    let method = req.method.as_str();
    if let Some(ui) = &state.ui
        && let Some(rest) = path.strip_prefix(ui_dir::SERVE_PREFIX)
        && matches!(method, "GET" | "HEAD")
        && (rest.is_empty() || rest.starts_with('/'))
    {
        return if rest.is_empty() {
            Response::bytes(301, "text/plain", Vec::new())
                .header("Location", &format!("{}/", ui_dir::SERVE_PREFIX))
        } else {
            ui.respond(rest)
        };
    }
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segs.as_slice()) {
        ("GET" | "HEAD", [""]) | ("GET" | "HEAD", ["index.html"]) => Response::bytes(
            200,
            "text/html; charset=utf-8",
            PAGE,
        )
        .header(
            "Content-Security-Policy",
            "default-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
        )
        .header("X-Content-Type-Options", "nosniff"),
        ("GET" | "HEAD", ["favicon.ico"]) => Response::bytes(204, "image/x-icon", Vec::new()),
        ("GET" | "HEAD", ["api", "info"]) => Response::json(200, &info(state)),
        ("POST" | "PUT", ["api", "convert"]) => convert_upload(state, req),
        ("GET" | "HEAD", ["api", "jobs", id]) => match job(state, id) {
            Some(j) => Response::json(200, &progress_json(&j)),
            None => error(404, "no such job (finished jobs expire after an hour)"),
        },
        ("DELETE", ["api", "jobs", id]) => {
            let removed = state.jobs.lock().unwrap().remove(*id);
            match removed {
                Some(j) => {
                    let _ = fs::remove_dir_all(&j.dir);
                    Response::json(200, &json!({ "deleted": id }))
                }
                None => error(404, "no such job"),
            }
        }
        ("GET" | "HEAD", ["api", "jobs", id, "trace"]) => {
            let Some(j) = job(state, id) else {
                return error(404, "no such job (finished jobs expire after an hour)");
            };
            let trace = j.trace.lock().unwrap().clone();
            let Some((path, name, ctype)) = trace else {
                return error(404, "this job has no trace (yet)");
            };
            match fs::File::open(&path).and_then(|f| Response::file(ctype, f)) {
                Ok(r) => r.header(
                    "Content-Disposition",
                    &format!("attachment; filename=\"{}\"", name.replace('"', "_")),
                ),
                Err(e) => error(500, format!("cannot read the trace: {e}")),
            }
        }
        (_, [""] | ["api", ..]) => error(405, format!("{method} is not allowed here")),
        _ => error(404, "not found"),
    }
}

fn info(state: &State) -> Value {
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "max_upload": state.max_upload,
        "perfetto_url": state.perfetto_url,
        // Every type, so that the page's checkboxes convert what the command line does.
        "types": nsys_perfetto_model::category::EventType::ALL.iter().map(|t| t.name()).collect::<Vec<_>>(),
        "default_types": nsys_perfetto_model::category::EventType::defaults()
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>(),
        "formats": FORMATS
            .iter()
            .map(|s| (s.name.to_string(), json!(format!(".{}", served_extension(s.format)))))
            .collect::<serde_json::Map<_, _>>(),
        "inputs": [".nsys-rep", ".qdrep", ".sqlite", ".arrows"],
    })
}

fn job(state: &State, id: &str) -> Option<Arc<Job>> {
    let j = state.jobs.lock().unwrap().get(id).cloned()?;
    *j.last_used.lock().unwrap() = Instant::now();
    Some(j)
}

fn expire_jobs(state: &State) {
    let mut jobs = state.jobs.lock().unwrap();
    let old: Vec<String> = jobs
        .iter()
        .filter(|(_, j)| {
            j.last_used.lock().unwrap().elapsed() > JOB_TTL
                && matches!(j.progress.lock().unwrap().phase, "done" | "failed")
        })
        .map(|(k, _)| k.clone())
        .collect();
    for id in old {
        if let Some(j) = jobs.remove(&id) {
            let _ = fs::remove_dir_all(&j.dir);
        }
    }
}

fn progress_json(j: &Job) -> Value {
    let p = j.progress.lock().unwrap().clone();
    // While converting, the output grows in a temporary file of the job's folder.
    let written: u64 = fs::read_dir(&j.dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    json!({
        "phase": p.phase,
        "received": p.received,
        "expected": p.expected,
        "written": written,
        "seconds": p.started.elapsed().as_secs_f64(),
    })
}

fn random_id() -> String {
    let mut b = [0u8; 8];
    if fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b = (t as u64 ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The upload's name, reduced to a safe file name; `None` when it is not a profile's name.
pub fn safe_name(name: &str) -> Option<String> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-+@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = clean.trim_start_matches('.').to_string();
    // The uploads the page takes: a report, an SQLite export or an Arrow export's one file.
    let ok = matches!(
        classify_name(Path::new(&clean)),
        Input::Report | Input::Sqlite | Input::ArrowStreams
    );
    (ok && clean.len() <= 200).then_some(clean)
}

/// What the first bytes say the file is.
fn sniff(path: &Path, name: &str) -> Result<(), String> {
    let mut head = [0u8; 16];
    let n = fs::File::open(path)
        .and_then(|mut f| {
            let mut n = 0;
            while n < head.len() {
                let k = f.read(&mut head[n..])?;
                if k == 0 {
                    break;
                }
                n += k;
            }
            Ok(n)
        })
        .map_err(|e| format!("cannot read the upload: {e}"))?;
    let head = &head[..n];
    if n == 0 {
        return Err(format!("{name} is empty"));
    }
    let kind = classify_name(Path::new(name));
    if kind == Input::Report {
        if !head.starts_with(b"NVIDIA") {
            return Err(format!(
                "{name} is not an Nsight Systems report (it does not start like one)"
            ));
        }
    } else if kind == Input::ArrowStreams {
        // nsys' Arrow streams begin with a message's continuation marker.
        if !head.starts_with(&[0xff; 4]) {
            return Err(format!(
                "{name} is not an Arrow export (it does not start like an Arrow IPC stream)"
            ));
        }
    } else if head != b"SQLite format 3\0" {
        return Err(format!(
            "{name} is not an SQLite database (export reports with `nsys export --type sqlite`, or upload the .nsys-rep)"
        ));
    }
    Ok(())
}

fn summary_json(s: &Summary) -> Value {
    let events: serde_json::Map<String, Value> = Category::ALL
        .iter()
        .filter(|c| s.events_of(**c) > 0)
        .map(|c| (c.as_str().to_string(), json!(s.events_of(*c))))
        .collect();
    json!({
        "events": events,
        "total_events": s.total_events(),
        "trace_events": s.trace_events,
        "tracks": s.tracks,
        "extra_lanes": s.extra_lanes,
        "late_rows": s.late_rows,
        "flows": s.flows,
        "skipped_total": s.skipped_total(),
        "skipped": s.skipped.iter().map(|((table, reason), n)| json!({
            "table": table, "reason": reason, "rows": n
        })).collect::<Vec<_>>(),
        "naming_rows": s.naming_rows,
        "notes": s.notes,
        "output_bytes": s.output_bytes,
        "seconds": s.seconds,
        "text": s.render(),
    })
}

/// `POST /api/convert`.
fn convert_upload(state: &Arc<State>, req: &mut Request) -> Response {
    let Some(raw_name) = req.param("name").filter(|n| !n.is_empty()) else {
        return error(400, "name the file: POST /api/convert?name=report.nsys-rep");
    };
    let Some(name) = safe_name(&raw_name) else {
        return error(
            400,
            format!(
                "{raw_name}: not a profile (expected a .nsys-rep, .qdrep, .sqlite or .arrows file)"
            ),
        );
    };
    let format = match req.param("format").as_deref() {
        None | Some("") => OutputFormat::default(),
        Some(name) => match OutputFormat::named(name) {
            Some(f) => f,
            None => {
                let names: Vec<&str> = FORMATS.iter().map(|s| s.name).collect();
                return error(
                    400,
                    format!("unknown format '{name}' ({})", names.join(" or ")),
                );
            }
        },
    };
    let select = SelectArgs {
        types: req
            .param("types")
            .map(|t| t.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
        nvtx_filter: req.param("nvtx_filter").filter(|s| !s.is_empty()),
        time_range: req.param("time_range").filter(|s| !s.is_empty()),
        ..Default::default()
    };
    let selection = match select.selection() {
        Ok(s) => s,
        Err(e) => return error(400, format!("{e:#}")),
    };
    // `analyze=1`: nsys' expert rules' findings as an "Analysis" group (the page's checkbox).
    let analyze = matches!(req.param("analyze").as_deref(), Some("1" | "true" | "on"));
    if let Some(n) = req.body.length
        && n > state.max_upload
    {
        return error(
            413,
            format!(
                "{name} is {}, more than this server accepts ({}; serve --max-upload)",
                nsys_perfetto_model::summary::human_bytes(n),
                nsys_perfetto_model::summary::human_bytes(state.max_upload)
            ),
        );
    }
    let id = req
        .param("job")
        .filter(|j| {
            (8..=64).contains(&j.len())
                && j.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !state.jobs.lock().unwrap().contains_key(j.as_str())
        })
        .unwrap_or_else(random_id);
    let dir = state.root.path().join(&id);
    if let Err(e) = fs::create_dir(&dir) {
        return error(500, format!("cannot create a temporary folder: {e}"));
    }
    let job = Arc::new(Job {
        dir: dir.clone(),
        progress: Mutex::new(Progress {
            phase: "uploading",
            received: 0,
            expected: req.body.length,
            started: Instant::now(),
        }),
        trace: Mutex::new(None),
        last_used: Mutex::new(Instant::now()),
    });
    state.jobs.lock().unwrap().insert(id.clone(), job.clone());
    let fail = |status: u16, msg: String| {
        job.set_phase("failed");
        let _ = fs::remove_dir_all(&job.dir);
        state.jobs.lock().unwrap().remove(&id);
        Response::json(status, &json!({ "error": msg, "job": id }))
    };

    // 1. The upload, streamed to disk.
    let input = dir.join(&name);
    if let Err((status, msg)) = receive(req, &input, state.max_upload, &job, &name) {
        return fail(status, msg);
    }
    if let Err(msg) = sniff(&input, &name) {
        return fail(422, msg);
    }
    let received = job.progress.lock().unwrap().received;

    // 2. Export (reports) and convert, a few at a time.
    job.set_phase("queued");
    let _slot = state.slots.acquire();
    let ext = served_extension(format);
    let stem = Path::new(&name)
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "trace".into());
    let out_name = format!("{stem}.{ext}");
    let output = dir.join(&out_name);
    if classify(&input) == Input::Report {
        job.set_phase("exporting");
    }
    let opts = crate::report::export::ExportOptions {
        nsys: state.nsys.clone(),
        no_cache: false,
        keep_sqlite: false,
        cache_dir: Some(dir.clone()),
        quiet: true,
        timeout: None,
        format: crate::report::export::ExportFormat::Auto,
    };
    let profile = match crate::input::prepare(&input, &opts) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                422,
                format!("{name}: {}", nsys_perfetto_model::errors::error_line(&e)),
            );
        }
    };
    let export_line = profile.describe();
    let export = profile.export().to_path_buf();
    job.set_phase("converting");
    let opts = convert::Options {
        format,
        json_colors: false,
        progress: false,
        selection,
        check: false,
        analyze,
        pictures: None,
    };
    let summary = match convert::convert_export(&export, &output, &opts) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                422,
                format!("{name}: {}", nsys_perfetto_model::errors::error_line(&e)),
            );
        }
    };
    job.set_phase("stats");
    let stats = match crate::workflow::stats::query::stats(
        &export,
        &crate::workflow::stats::StatsOptions {
            top: 10,
            raw_names: false,
        },
    ) {
        Ok(s) => {
            let mut v = s.json();
            v["file"] = json!(name);
            v
        }
        Err(e) => json!({ "error": nsys_perfetto_model::errors::error_line(&e) }),
    };
    // The upload and its export are no longer needed: only the trace stays.
    let _ = fs::remove_file(&input);
    if export != input {
        let _ = fs::remove_file(&export);
    }
    let ctype = if format.spec().served_gzipped {
        "application/gzip"
    } else {
        "application/octet-stream"
    };
    *job.trace.lock().unwrap() = Some((output, out_name.clone(), ctype));
    job.set_phase("done");
    let host = req
        .header("host")
        .filter(|h| {
            h.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".:-[]".contains(c))
        })
        .map(str::to_string)
        .unwrap_or_else(|| "127.0.0.1".into());
    let trace_path = format!("/api/jobs/{id}/trace");
    Response::json(
        200,
        &json!({
            "job": id,
            "name": name,
            "upload_bytes": received,
            "file_name": out_name,
            "format": format.name(),
            "trace_path": trace_path,
            "trace_url": format!("http://{host}{trace_path}"),
            "trace_bytes": summary.output_bytes,
            "export": export_line,
            "summary": summary_json(&summary),
            "stats": stats,
        }),
    )
}

/// Stream the request body into `path`, at most `max` bytes.
fn receive(
    req: &mut Request,
    path: &Path,
    max: u64,
    job: &Job,
    name: &str,
) -> Result<(), (u16, String)> {
    let file =
        fs::File::create(path).map_err(|e| (500, format!("cannot store the upload: {e}")))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = match req.body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                return Err((
                    400,
                    format!(
                        "{name}: the upload did not arrive whole ({e}); {} received",
                        nsys_perfetto_model::summary::human_bytes(total)
                    ),
                ));
            }
        };
        total += n as u64;
        if total > max {
            return Err((
                413,
                format!(
                    "{name} is larger than this server accepts ({}; serve --max-upload)",
                    nsys_perfetto_model::summary::human_bytes(max)
                ),
            ));
        }
        out.write_all(&buf[..n])
            .map_err(|e| (507, format!("cannot store the upload: {e}")))?;
        job.progress.lock().unwrap().received = total;
    }
    out.flush()
        .map_err(|e| (507, format!("cannot store the upload: {e}")))?;
    if total == 0 {
        return Err((
            400,
            format!("{name}: empty upload (send the file as the request body)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_size;

    #[test]
    fn names_and_sizes() {
        assert_eq!(safe_name("a b.sqlite").as_deref(), Some("a_b.sqlite"));
        assert_eq!(
            safe_name("../../etc/x.nsys-rep").as_deref(),
            Some("x.nsys-rep")
        );
        assert_eq!(safe_name("C:\\r\\old.QDREP").as_deref(), Some("old.QDREP"));
        assert_eq!(safe_name("..sqlite"), None);
        assert_eq!(safe_name("notes.txt"), None);
        assert_eq!(safe_name(".sqlite"), None);
        assert_eq!(parse_size("4G"), Ok(4_000_000_000));
        assert_eq!(parse_size("1.5k"), Ok(1500));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert!(parse_size("x").is_err());
    }
}
