//! One conversion, end to end: open the export, build the flow links, run the readers in
//! parallel (GPU activity, CUDA API calls, NVTX), stream their chunks into a temporary file and
//! rename it into place only when everything succeeded.

use crate::flows::{self, FlowDb};
use crate::layout::Router;
use crate::nsys::info::ProfileInfo;
use crate::nsys::{self, Schema};
use crate::output::json::Json;
use crate::output::pftrace::Protobuf;
use crate::output::{Chunk, Format, Ids, WellKnown};
use crate::progress::Progress;
use crate::projection::Projection;
use crate::select::{EventType, Selection};
use crate::summary::Summary;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Protobuf,
    /// Chrome JSON trace format.
    Json,
}

impl OutputFormat {
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Protobuf => "pftrace",
            OutputFormat::Json => "json",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Options {
    pub format: OutputFormat,
    /// JSON only: NVTX colours as the nearest Chrome colour names (`cname`).
    pub json_colors: bool,
    /// Draw a progress bar on stderr when it is a terminal.
    pub progress: bool,
    /// What to convert (default: everything).
    pub selection: Selection,
    /// Run SQLite's `PRAGMA quick_check` first and refuse a damaged file (`--check`). Off by
    /// default: it costs about 40% of a conversion (NOTES: 2.0 s against 5.0 s on the 20x
    /// benchmark), while damage met while reading fails the conversion anyway.
    pub check: bool,
}

/// Where the output goes by default: next to the input, with the format's extension.
pub fn default_output(input: &Path, format: OutputFormat) -> PathBuf {
    input.with_extension(format.extension())
}

/// Convert an nsys SQLite export. Errors name the problem in one line; the caller adds the file.
pub fn convert_sqlite(input: &Path, output: &Path, opts: &Options) -> Result<Summary> {
    match opts.format {
        OutputFormat::Protobuf => run(input, output, &Protobuf, opts),
        OutputFormat::Json => run(
            input,
            output,
            &Json {
                colors: opts.json_colors,
            },
            opts,
        ),
    }
}

fn run<F: Format>(input: &Path, output: &Path, format: &F, opts: &Options) -> Result<Summary> {
    let started = Instant::now();
    let _shm = nsys::ShmGuard::new(input);
    crate::cleanup::remove_dead_scratch();
    let (conn, schema) = nsys::open_schema(input)?;
    if opts.check {
        quick_check(&conn)?;
    }
    let info = Arc::new(
        ProfileInfo::load(&conn, &schema).map_err(|e| anyhow!("damaged SQLite database: {e}"))?,
    );
    drop(conn);

    let target = Target::open(output, input)?;
    let gzip = target.gzip(output);
    let file = target.writer()?;

    let (tx, rx) = sync_channel::<Chunk>(8);
    let ids = Ids::default();
    let mut summary = Summary::default();
    let progress = Progress::default();
    progress
        .total
        .store(estimated_rows(&schema), Ordering::Relaxed);
    let shared = Shared {
        schema: &schema,
        info: &info,
        ids: &ids,
        format,
        progress: &progress,
        selection: &opts.selection,
    };
    let result: Result<(Summary, u64)> = std::thread::scope(|s| {
        if opts.progress {
            s.spawn(|| progress.draw_until_finished("converting"));
        }
        let writer = {
            let info = info.clone();
            s.spawn(move || write_file(file, rx, format, &info, gzip))
        };
        let readers = run_readers(s, &shared, tx);
        progress.finish();
        let written = writer
            .join()
            .map_err(|_| anyhow!("output writer panicked"))?;
        // A writer failure (disk full) explains reader send failures: report it first.
        let bytes = written.map_err(|e| anyhow!("{}: {}", output.display(), error_line(&e)))?;
        Ok((readers?, bytes))
    });
    let (readers_summary, bytes) = result?;
    summary.merge(readers_summary);
    if summary.total_events() == 0 && !opts.selection.is_everything() {
        // The temporary goes with `target`: nothing is written, a previous output stays.
        bail!(
            "the selection ({}) matches no events: nothing written",
            opts.selection
        );
    }
    summary.output_bytes = target.finish(output)?.unwrap_or(bytes);
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// `PRAGMA quick_check`: an error quoting SQLite's first findings when the file is damaged.
pub fn quick_check(conn: &rusqlite::Connection) -> Result<()> {
    let mut stmt = conn
        .prepare("PRAGMA quick_check(5)")
        .map_err(|e| anyhow!("damaged SQLite database: {e}"))?;
    let found: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| anyhow!("damaged SQLite database: {e}"))?;
    if found.len() == 1 && found[0] == "ok" {
        return Ok(());
    }
    bail!(
        "damaged SQLite database (PRAGMA quick_check: {})",
        found.join("; ").replace('\n', " ")
    )
}

/// Whether two paths name the same file (device and inode), however spelled or linked.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// `-o -`: the trace goes to standard output.
pub fn is_stdout(output: &Path) -> bool {
    output.as_os_str() == "-"
}

/// Where a conversion writes.
enum Target {
    /// A temporary beside the output, renamed into place on success (removed otherwise).
    Temp(Option<tempfile::NamedTempFile>),
    /// A device node, FIFO or socket (`-o /dev/null`): written through, never replaced.
    Direct(std::fs::File),
    Stdout,
}

impl Target {
    fn open(output: &Path, input: &Path) -> Result<Target> {
        if is_stdout(output) {
            return Ok(Target::Stdout);
        }
        if same_file(output, input) {
            bail!(
                "-o {} is the input itself: choose another output name",
                output.display()
            );
        }
        match std::fs::metadata(output) {
            Ok(m) if m.is_dir() => bail!("-o {} is a directory", output.display()),
            Ok(m) if !m.is_file() => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(output)
                    .map_err(|e| anyhow!("cannot write {}: {}", output.display(), os_error(&e)))?;
                return Ok(Target::Direct(f));
            }
            _ => {}
        }
        let out_dir = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        match std::fs::metadata(&out_dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!(
                "cannot write {}: {} is not a folder",
                output.display(),
                out_dir.display()
            ),
            Err(_) => bail!(
                "cannot write {}: the folder {} does not exist",
                output.display(),
                out_dir.display()
            ),
        }
        // What runs killed with SIGKILL left here.
        crate::cleanup::remove_dead(&out_dir, TEMP_BASE, ".part");
        let tmp = crate::cleanup::create(
            || {
                tempfile::Builder::new()
                    .prefix(&crate::cleanup::prefix(TEMP_BASE))
                    .suffix(".part")
                    .tempfile_in(&out_dir)
            },
            |t| t.path().to_path_buf(),
        )
        .map_err(|e| write_error(&out_dir, &e))?;
        Ok(Target::Temp(Some(tmp)))
    }

    /// Any format can be gzipped whole: Perfetto and chrome://tracing read .gz files.
    fn gzip(&self, output: &Path) -> bool {
        matches!(self, Target::Temp(_)) && output.extension().is_some_and(|e| e == "gz")
    }

    fn writer(&self) -> Result<Box<dyn Write + Send>> {
        Ok(match self {
            Target::Temp(t) => Box::new(t.as_ref().expect("open").as_file().try_clone()?),
            Target::Direct(f) => Box::new(f.try_clone()?),
            Target::Stdout => Box::new(std::io::stdout()),
        })
    }

    /// Put the output in place; the size on disk when it is a file.
    fn finish(mut self, output: &Path) -> Result<Option<u64>> {
        let Target::Temp(tmp) = &mut self else {
            return Ok(None);
        };
        let tmp = tmp.take().expect("open");
        // Temporary files are private (0600); the trace is an ordinary file, readable like any
        // other.
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = tmp
                .as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644));
        }
        let path = tmp.path().to_path_buf();
        let done = tmp
            .persist(output)
            .map_err(|e| anyhow!("cannot create {}: {}", output.display(), os_error(&e.error)));
        crate::cleanup::forget(&path);
        done?;
        Ok(std::fs::metadata(output).ok().map(|m| m.len()))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Target::Temp(Some(t)) = self {
            crate::cleanup::forget(t.path());
        }
    }
}

/// The name start of output temporaries: `.nsys-perfetto-<pid>-XXXXXX.part`.
const TEMP_BASE: &str = ".nsys-perfetto-";

/// An OS error without the path `tempfile` adds (the internal temporary name means nothing to
/// the user).
pub fn os_error(e: &std::io::Error) -> String {
    match raw_os_error(e) {
        Some(code) => {
            let text = std::io::Error::from_raw_os_error(code).to_string();
            text.split(" (os error").next().unwrap_or(&text).to_string()
        }
        None => e.kind().to_string(),
    }
}

/// The OS error code, also when `tempfile` wrapped the error with its path.
fn raw_os_error(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()?
            .source()?
            .downcast_ref::<std::io::Error>()?
            .raw_os_error()
    })
}

/// Why a file cannot be created in `dir`, with what to do: a read-only folder or file system
/// (a read-only bind mount) gets the same advice.
pub fn write_error(dir: &Path, e: &std::io::Error) -> anyhow::Error {
    let read_only = matches!(
        raw_os_error(e),
        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)
    ) || matches!(
        e.kind(),
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
    );
    match read_only {
        true => anyhow!(
            "{} is read-only ({}), so the output cannot go there: pass -o OUT (a file, or a \
             directory for several inputs) elsewhere",
            dir.display(),
            os_error(e)
        ),
        false => anyhow!("cannot write to {}: {}", dir.display(), os_error(e)),
    }
}

/// Everything the reader threads share.
struct Shared<'e, F: Format> {
    schema: &'e Schema,
    info: &'e Arc<ProfileInfo>,
    ids: &'e Ids,
    format: &'e F,
    progress: &'e Progress,
    selection: &'e Selection,
}

impl<F: Format> Shared<'_, F> {
    fn router(&self, tx: SyncSender<Chunk>) -> Router<'_, F::Writer> {
        Router::new(
            self.format.writer(self.info.clone()),
            self.ids,
            self.info,
            tx,
        )
        .with_progress(self.progress)
    }
}

/// The readers and what they wait for: NVTX and the NVTX-on-GPU projection start at once; the
/// CUDA API reader waits for the flow links; the GPU reader for the links and the projection
/// (each kernel lists its enclosing NVTX ranges).
fn run_readers<'s, 'e, F: Format>(
    s: &'s std::thread::Scope<'s, 'e>,
    sh: &'e Shared<'e, F>,
    tx: SyncSender<Chunk>,
) -> Result<Summary> {
    let schema = sh.schema;
    let nvtx = {
        let tx = tx.clone();
        s.spawn(move || -> Result<Summary> {
            let t = Instant::now();
            let conn = nsys::open_readonly(&schema.path)?;
            let mut router = sh.router(tx);
            nsys::nvtx::read(&conn, schema, sh.selection, &mut router)?;
            timing("nvtx", t);
            let t = Instant::now();
            nsys::osrt::read(&conn, schema, sh.selection, &mut router)?;
            timing("osrt", t);
            nsys::sync::read(&conn, schema, sh.selection, &mut router)?;
            router.finish()
        })
    };
    let sched = {
        let tx = tx.clone();
        s.spawn(move || -> Result<Summary> {
            let t = Instant::now();
            let conn = nsys::open_readonly(&schema.path)?;
            let mut router = sh.router(tx);
            nsys::sched::read(&conn, schema, sh.selection, &mut router)?;
            timing("sched", t);
            router.finish()
        })
    };
    type Tables = (Vec<String>, Vec<((String, String), u64)>);
    let projection = s.spawn(move || -> Result<(Option<Projection>, Tables)> {
        let unconverted = (
            unconverted_tables(schema)?,
            incomplete_tables(schema, sh.selection)?,
        );
        if !sh.selection.wants(EventType::NvtxGpu) {
            return Ok((None, unconverted));
        }
        let t = Instant::now();
        let p = Projection::build(schema).map_err(scratch_error)?;
        timing("nvtx-gpu projection", t);
        Ok((p, unconverted))
    });
    let t = Instant::now();
    let flow_db: Arc<Option<FlowDb>> =
        Arc::new(flows::prepare(schema, sh.selection).map_err(scratch_error)?);
    timing("flow links", t);
    let api = {
        let tx = tx.clone();
        let flow_db = flow_db.clone();
        s.spawn(move || -> Result<Summary> {
            let flow_db = flow_db.as_ref().as_ref();
            let conn = nsys::open_readonly(&schema.path)?;
            if let Some(f) = flow_db {
                f.attach(&conn)?;
            }
            let t = Instant::now();
            let mut router = sh.router(tx);
            nsys::api::read(&conn, schema, flow_db.is_some(), sh.selection, &mut router)?;
            timing("cuda api", t);
            router.finish()
        })
    };
    let (projection, unconverted) = projection
        .join()
        .map_err(|_| anyhow!("NVTX projection panicked"))??;
    let projection: Arc<Option<Projection>> = Arc::new(projection);
    let nvtx_gpu = {
        let tx = tx.clone();
        let projection = projection.clone();
        s.spawn(move || -> Result<Summary> {
            let mut router = sh.router(tx);
            if let Some(p) = projection.as_ref() {
                let t = Instant::now();
                let conn = nsys::open_readonly(&schema.path)?;
                p.attach(&conn)?;
                nsys::nvtx::read_projection(&conn, sh.selection, &mut router)?;
                timing("nvtx-gpu", t);
            }
            router.finish()
        })
    };
    let flow_db = flow_db.as_ref().as_ref();
    let gpu = (|| -> Result<Summary> {
        let conn = nsys::open_readonly(&schema.path)?;
        if let Some(f) = flow_db {
            f.attach(&conn)?;
        }
        if let Some(p) = projection.as_ref() {
            p.attach(&conn)?;
        }
        let t = Instant::now();
        let mut router = sh.router(tx);
        let q = nsys::gpu::GpuQuery {
            with_flows: flow_db.is_some(),
            with_nvtx: projection.is_some(),
            selection: sh.selection,
        };
        nsys::gpu::read(&conn, schema, &q, &mut router)?;
        timing("gpu", t);
        router.finish()
    })();
    let mut summary = Summary::default();
    for part in [
        gpu,
        api.join().map_err(|_| anyhow!("API reader panicked"))?,
        nvtx.join().map_err(|_| anyhow!("NVTX reader panicked"))?,
        nvtx_gpu
            .join()
            .map_err(|_| anyhow!("NVTX projection reader panicked"))?,
        sched
            .join()
            .map_err(|_| anyhow!("scheduling reader panicked"))?,
    ] {
        summary.merge(part.map_err(|e| anyhow!("{}", sqlite_problem(&e)))?);
    }
    if !sh.selection.is_everything() {
        summary.notes.push(format!("selection: {}", sh.selection));
    }
    let (unconverted, incomplete) = unconverted;
    summary.notes.extend(unconverted);
    for (key, n) in incomplete {
        *summary.skipped.entry(key).or_default() += n;
    }
    Ok(summary)
}

/// Timed tables this version does not convert yet, with their row counts: nothing a profile
/// holds is dropped without saying so.
fn unconverted_tables(schema: &Schema) -> Result<Vec<String>> {
    // Written by `nsys stats`: a copy of NVTX_EVENTS' push/pop ranges, converted from there.
    const DERIVED: [&str; 1] = ["NvtxPushPopRanges"];
    let mut tables: Vec<&str> = schema
        .tables()
        .filter(|t| {
            schema.has_column(t, "start") && !nsys::EVENT_TABLES.contains(t) && !DERIVED.contains(t)
        })
        .collect();
    tables.sort_unstable();
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    let conn = nsys::open_readonly(&schema.path)?;
    let mut notes = Vec::new();
    for t in tables {
        let n: i64 = conn.query_row(
            &format!("SELECT count(*) FROM {}", nsys::quote_ident(t)),
            [],
            |r| r.get(0),
        )?;
        if n > 0 {
            notes.push(format!("{t}: {n} rows not converted (not supported yet)"));
        }
    }
    Ok(notes)
}

/// The columns each event reader needs, by table, and the event type it writes: a table that
/// lacks one is not converted, and its rows are counted as skipped (naming the column).
const REQUIRED: [(&str, &[&str], EventType); 9] = [
    (nsys::KERNEL, &["start", "end"], EventType::Kernel),
    (nsys::MEMCPY, &["start", "end"], EventType::Memcpy),
    (nsys::MEMSET, &["start", "end"], EventType::Memset),
    (nsys::RUNTIME, &["start", "end"], EventType::CudaApi),
    (nsys::DRIVER, &["start", "end"], EventType::CudaApi),
    (nsys::NVTX, &["start", "eventType"], EventType::Nvtx),
    (nsys::osrt::OSRT, &["start", "end"], EventType::Osrt),
    (nsys::sync::SYNC, &["start", "end"], EventType::Sync),
    (
        nsys::sched::SCHED,
        &["start", "cpu", "isSchedIn", "globalTid"],
        EventType::Sched,
    ),
];

/// Event tables the selection wants that miss a column their reader needs: ((table, reason),
/// rows), for the skipped-row accounting.
fn incomplete_tables(schema: &Schema, sel: &Selection) -> Result<Vec<((String, String), u64)>> {
    let mut out = Vec::new();
    let mut conn = None;
    for (table, cols, ty) in REQUIRED {
        if !schema.has_table(table) || !sel.wants(ty) {
            continue;
        }
        let missing: Vec<&str> = cols
            .iter()
            .copied()
            .filter(|c| !schema.has_column(table, c))
            .collect();
        if missing.is_empty() {
            continue;
        }
        if conn.is_none() {
            conn = Some(nsys::open_readonly(&schema.path)?);
        }
        let n: i64 = conn.as_ref().expect("opened").query_row(
            &format!("SELECT count(*) FROM {}", nsys::quote_ident(table)),
            [],
            |r| r.get(0),
        )?;
        if n > 0 {
            let reason = format!(
                "table not converted: no {} column",
                missing
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            out.push(((table.to_string(), reason), n as u64));
        }
    }
    Ok(out)
}

/// Rows the readers will visit, for the progress bar: `max(rowid)` is instant where `count(*)`
/// would scan the table.
fn estimated_rows(schema: &Schema) -> u64 {
    let Ok(conn) = nsys::open_readonly(&schema.path) else {
        return 0;
    };
    nsys::EVENT_TABLES
        .iter()
        .filter(|t| schema.has_table(t))
        .filter_map(|t| {
            let rowid = schema.rowid(t)?;
            conn.query_row(
                &format!("SELECT max({rowid}) FROM {}", nsys::quote_ident(t)),
                [],
                |r| r.get::<_, Option<i64>>(0),
            )
            .ok()
            .flatten()
        })
        .map(|n| n.max(0) as u64)
        .sum()
}

/// An error and its causes on one line, without the repetitions SQLite's error chain carries
/// ("malformed: Error code 11: malformed").
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = match text.strip_prefix("Error code ") {
            Some(rest) => rest.split_once(": ").map_or(text.as_str(), |(_, t)| t),
            None => text.as_str(),
        };
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    line.replace('\n', " ")
}

/// A scratch database that cannot grow says which folder is full.
fn scratch_error(e: anyhow::Error) -> anyhow::Error {
    let msg = error_line(&e);
    if msg.contains("disk is full") || msg.contains("No space left") || msg.contains("disk I/O") {
        anyhow!(
            "the temporary folder {} (TMPDIR) is full ({msg}): free space there or set TMPDIR \
             to a folder with room",
            std::env::temp_dir().display()
        )
    } else {
        e
    }
}

/// SQLite errors from a damaged file read better with a hint.
fn sqlite_problem(e: &anyhow::Error) -> String {
    let msg = e.to_string();
    if msg.contains("malformed") || msg.contains("not a database") || msg.contains("disk I/O") {
        format!("damaged SQLite database: {msg}")
    } else {
        msg
    }
}

/// Write the file, gzip-compressed when asked. Returns the bytes written before compression.
fn write_file<F: Format>(
    file: Box<dyn Write + Send>,
    rx: Receiver<Chunk>,
    format: &F,
    info: &ProfileInfo,
    gzip: bool,
) -> Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let bytes = if gzip {
        let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        let bytes = write_chunks(&mut gz, rx, format, info)?;
        gz.finish().context("cannot write output")?;
        bytes
    } else {
        write_chunks(&mut out, rx, format, info)?
    };
    out.flush().context("cannot write output")?;
    Ok(bytes)
}

fn write_chunks<F: Format, W: Write>(
    out: &mut W,
    rx: Receiver<Chunk>,
    format: &F,
    info: &ProfileInfo,
) -> Result<u64> {
    let mut described: HashSet<WellKnown> = HashSet::new();
    let mut bytes = 0u64;
    let mut put = |out: &mut W, data: &[u8]| -> Result<()> {
        out.write_all(data).context("cannot write output")?;
        bytes += data.len() as u64;
        Ok(())
    };
    put(out, &format.header(info))?;
    // Formats whose records are separated (JSON's commas) write each record with a leading
    // separator; the very first record after the header drops it.
    let mut first = true;
    let mut put_record = |out: &mut W, data: &[u8]| -> Result<()> {
        let mut data = data;
        if first && !data.is_empty() {
            if let Some(sep) = format.record_separator() {
                data = data.strip_prefix(sep).unwrap_or(data);
            }
            first = false;
        }
        put(out, data)
    };
    for chunk in rx {
        for wk in chunk.requires {
            if described.insert(wk) {
                put_record(out, &format.describe_well_known(wk, info))?;
            }
        }
        put_record(out, &chunk.data)?;
    }
    put(out, &format.footer(info))?;
    Ok(bytes)
}

/// Phase timings on stderr when NSYS_PERFETTO_TIMING is set: for benchmarking, not for users.
fn timing(phase: &str, since: Instant) {
    if std::env::var_os("NSYS_PERFETTO_TIMING").is_some() {
        // CPU time of this thread (utime + stime, in clock ticks): stable under machine load.
        let cpu = std::fs::read_to_string("/proc/thread-self/stat")
            .ok()
            .and_then(|s| {
                let f: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
                Some(
                    (f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?) as f64
                        / 100.0,
                )
            })
            .unwrap_or(f64::NAN);
        crate::say!(
            "timing: {phase}: {:.3} s wall, thread cpu so far {cpu:.2} s",
            since.elapsed().as_secs_f64()
        );
    }
}
