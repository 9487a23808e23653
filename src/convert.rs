//! One conversion, end to end: sources (nsys exports, read by `nsys::source`) stream events
//! through layout into one format's writers; the file writer puts their chunks into a temporary
//! file, renamed into place only when everything succeeded. A merge is several sources, one
//! after the other, into the same file.

use crate::errors::{error_line, os_error, write_error};
use crate::layout::{Placement, Router};
use crate::model::{
    CounterKey, CounterSample, CpuSample, CpuSlice, Description, Event, EventSink, Filtered,
    GroupKey, SinkFilter,
};
use crate::nsys::source::Export;
use crate::output::json::Json;
use crate::output::pftrace::Protobuf;
use crate::output::{Chunk, Format, Ids, Placed, WellKnown};
use crate::progress::Progress;
use crate::select::{EventType, NameFilter, Selection};
use crate::summary::Summary;
use anyhow::{Context, Result, anyhow, bail};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, sync_channel};
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
    /// default: it reads the whole file once more (a large share of a conversion's time), while
    /// damage met while reading fails the conversion anyway.
    pub check: bool,
    /// Add nsys' expert rules' findings (`analyze`, default options) as an "Analysis" group:
    /// one slice per finding, with an arrow from the CUDA call it blames.
    pub analyze: bool,
}

impl Options {
    /// The options that shape a conversion's content, as the command line would give them (empty
    /// for the defaults). Equal texts mean equal content from equal input: what a trace records
    /// of its options ([`crate::provenance`]).
    pub fn content_text(&self) -> String {
        // Every field named: a new option must be placed here or declared content-neutral.
        let Options {
            format,
            json_colors,
            progress: _,
            selection: sel,
            check: _,
            analyze,
        } = self;
        let crate::select::Selection {
            types: _,
            nvtx_filter: _,
            time: _,
            pids: _,
            devices: _,
            nvtx_colors: _,
            gpu,
        } = sel;
        let mut parts: Vec<String> = Vec::new();
        if sel.types != EventType::defaults() {
            let types: Vec<&str> = sel.types.iter().map(|t| t.name()).collect();
            parts.push(format!("--types {}", types.join(",")));
        }
        if let Some(f) = &sel.nvtx_filter {
            parts.push(match f {
                NameFilter::Prefix(p) => format!("--nvtx-filter {p:?}"),
                NameFilter::Regex(r) => format!("--nvtx-filter {:?}", format!("re:{r}")),
            });
        }
        if let Some(t) = sel.time {
            parts.push(format!(
                "--time-range {}..{}",
                t.start.map(seconds).unwrap_or_default(),
                t.end.map(seconds).unwrap_or_default()
            ));
        }
        let list = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        if !sel.pids.is_empty() {
            parts.push(format!("--pid {}", list(&sel.pids)));
        }
        if !sel.devices.is_empty() {
            parts.push(format!("--device {}", list(&sel.devices)));
        }
        if !sel.nvtx_colors.is_empty() {
            let mut s = String::from("{");
            for (i, (re, c)) in sel.nvtx_colors.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                let _ = write!(s, "{:?}: \"#{c:06x}\"", re.as_str());
            }
            s.push('}');
            parts.push(format!("--nvtx-color-scheme '{s}'"));
        }
        if *format == OutputFormat::Json {
            parts.push("--format json".into());
            if *json_colors {
                parts.push("--json-colors".into());
            }
        }
        if *analyze {
            parts.push("--analyze".into());
        }
        if *gpu == crate::select::GpuModel::Perfetto && *format == OutputFormat::Protobuf {
            parts.push("--gpu perfetto".into());
        }
        parts.join(" ")
    }
}

/// Nanoseconds as the shortest exact seconds text: `2s`, `3.5s`, `0.000000001s`.
fn seconds(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    let (s, frac) = (a / 1_000_000_000, a % 1_000_000_000);
    if frac == 0 {
        return format!("{sign}{s}s");
    }
    let f = format!("{frac:09}");
    format!("{sign}{s}.{}s", f.trim_end_matches('0'))
}

/// Where the output goes by default: next to the input, with the format's extension.
pub fn default_output(input: &Path, format: OutputFormat) -> PathBuf {
    // nsys names an Arrow export `REPORT_arwdir`, a Parquet one `REPORT_pqtdir`: the trace is
    // `REPORT.pftrace`.
    if let Some(name) = input.file_name().and_then(|n| n.to_str())
        && let Some(report) = name
            .strip_suffix(crate::nsys::arrow::NSYS_DIR_SUFFIX)
            .or_else(|| name.strip_suffix(crate::nsys::parquet::NSYS_DIR_SUFFIX))
        && !report.is_empty()
    {
        return input.with_file_name(format!("{report}.{}", format.extension()));
    }
    input.with_extension(format.extension())
}

/// Convert an nsys SQLite export. Errors name the problem in one line; the caller adds the file.
/// The output records the export's identity and the options (see [`crate::provenance`]).
pub fn convert_sqlite(input: &Path, output: &Path, opts: &Options) -> Result<Summary> {
    convert_sqlite_from(input, input, output, opts)
}

/// Convert the SQLite export `input` of `origin` (the file the user named: a report, or the
/// export itself), recording `origin`'s identity in the output, so that a later run can tell
/// whether the output still stands for it.
pub fn convert_sqlite_from(
    input: &Path,
    origin: &Path,
    output: &Path,
    opts: &Options,
) -> Result<Summary> {
    crate::cleanup::remove_dead_scratch();
    let export = Export::open(input, opts.check)?;
    let offset = export.info.desc.earliest_ns.map_or(0, |e| -e);
    let placed = vec![placed(&export, offset)];
    // Only where a later run can read it back (not `.gz`, not standard output).
    let record = crate::provenance::readable(output)
        .then(|| crate::provenance::Record::new(origin, opts.content_text()).map(|r| r.to_text()))
        .flatten();
    run_format(vec![Some(export)], &[], placed, &[], output, opts, record)
}

/// How several reports share one timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Align {
    /// Each report at its own wall-clock time (its session start), so ranks line up as they ran.
    #[default]
    WallClock,
    /// Every report's session start at zero, to compare separate runs one above the other.
    Start,
}

/// Where one merged report sits on the trace's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MergedSource {
    /// Its session start, relative to the earliest session start of the merge (wall clock), or
    /// 0 for every report with [`Align::Start`] (and for a report that records no wall clock).
    pub offset_ns: i64,
    /// Its wall-clock session start (ns since the Unix epoch), when the report records one.
    pub session_start_utc_ns: Option<i64>,
    /// Where its time zero lies in the trace (the offset plus the shift that keeps rows recorded
    /// before any session start at or after the trace's zero).
    pub trace_offset_ns: i64,
}

/// Merge several exports into one trace: each keeps its processes, threads, GPUs and arrows
/// apart (`labels` name them), placed on one timeline by `align`. Exports are read one after
/// the other, so memory follows the largest report, not their number. Returns the summary (with
/// each source's own in `per_source`) and where each source went, in input order.
pub fn merge_sqlite(
    inputs: &[(PathBuf, String)],
    output: &Path,
    align: Align,
    opts: &Options,
) -> Result<(Summary, Vec<MergedSource>)> {
    if inputs.is_empty() {
        bail!("nothing to merge");
    }
    if inputs.len() > crate::model::MAX_SOURCES {
        bail!(
            "{} reports: a merge holds at most {}",
            inputs.len(),
            crate::model::MAX_SOURCES
        );
    }
    // First the clocks of every report (small tables), to place them before any event is written.
    let mut clocks = Vec::new();
    let mut kernels = Vec::new();
    for (path, _) in inputs {
        let e = Export::open(path, opts.check)
            .map_err(|e| anyhow!("{}: {}", path.display(), error_line(&e)))?;
        clocks.push((
            e.info.desc.session_start_utc_ns,
            e.info.desc.earliest_ns.unwrap_or(0).min(0),
        ));
        kernels.push((
            e.info.desc.kernel_release.clone(),
            e.info.desc.machine.clone(),
        ));
    }
    let base = clocks.iter().filter_map(|c| c.0).min();
    let relative: Vec<i64> = clocks
        .iter()
        .map(|(utc, _)| match (align, utc, base) {
            (Align::WallClock, Some(u), Some(b)) => u - b,
            _ => 0,
        })
        .collect();
    // Shift everything so that no report's earliest row falls before zero.
    let shift = clocks
        .iter()
        .zip(&relative)
        .map(|((_, earliest), rel)| -(earliest + rel))
        .max()
        .unwrap_or(0)
        .max(0);
    let offsets: Vec<i64> = relative.iter().map(|r| r + shift).collect();
    let placed_all: Vec<Placed> = inputs
        .iter()
        .zip(&clocks)
        .zip(&offsets)
        .zip(kernels)
        .map(
            |((((_, label), (utc, _)), &offset), (kernel, machine))| Placed {
                label: Some(label.clone()),
                offset,
                session_start_utc_ns: *utc,
                metadata: Default::default(),
                kernel_release: kernel,
                machine,
            },
        )
        .collect();
    let floors: Vec<i64> = clocks.iter().map(|c| c.1).collect();
    let summary = run_format(Vec::new(), inputs, placed_all, &floors, output, opts, None)?;
    let sources = clocks
        .iter()
        .zip(relative.iter().zip(&offsets))
        .map(|((utc, _), (&rel, &off))| MergedSource {
            offset_ns: rel,
            session_start_utc_ns: *utc,
            trace_offset_ns: off,
        })
        .collect();
    Ok((summary, sources))
}

/// A merged source's filter: a row earlier than the source's own earliest time (a table out of
/// time order) is skipped as its conversion on its own would skip it, although the merge's
/// timeline (shifted for other sources) would have room for it: a merge holds exactly what each
/// source converts to on its own.
struct Floor(i64);

impl Floor {
    /// Whether a row at `ts` goes on; a row before the floor is counted as skipped.
    fn keeps<S: EventSink>(&self, sink: &mut S, ts: i64) -> bool {
        let keeps = ts >= self.0;
        if !keeps {
            sink.skip(crate::model::EARLY_ROWS.0, crate::model::EARLY_ROWS.1);
        }
        keeps
    }
}

impl<S: EventSink> SinkFilter<S> for Floor {
    fn event(&mut self, sink: &mut S, key: GroupKey, ev: &Event<'_>) -> Result<()> {
        match self.keeps(sink, ev.start) {
            true => sink.event(key, ev),
            false => Ok(()),
        }
    }
    fn counter(&mut self, sink: &mut S, key: &CounterKey<'_>, sample: CounterSample) -> Result<()> {
        match self.keeps(sink, sample.ts) {
            true => sink.counter(key, sample),
            false => Ok(()),
        }
    }
    fn cpu_sample(&mut self, sink: &mut S, sample: &CpuSample<'_>) -> Result<()> {
        match self.keeps(sink, sample.ts) {
            true => sink.cpu_sample(sample),
            false => Ok(()),
        }
    }
    fn cpu_slice(&mut self, sink: &mut S, slice: &CpuSlice) -> Result<()> {
        match self.keeps(sink, slice.start) {
            true => sink.cpu_slice(slice),
            false => Ok(()),
        }
    }
}

fn placed(export: &Export, offset: i64) -> Placed {
    let d = &export.info.desc;
    Placed {
        label: d.label.clone(),
        offset,
        session_start_utc_ns: d.session_start_utc_ns,
        metadata: d.metadata.clone(),
        kernel_release: d.kernel_release.clone(),
        machine: d.machine.clone(),
    }
}

fn run_format(
    opened: Vec<Option<Export>>,
    paths: &[(PathBuf, String)],
    placed: Vec<Placed>,
    floors: &[i64],
    output: &Path,
    opts: &Options,
    record: Option<String>,
) -> Result<Summary> {
    match opts.format {
        OutputFormat::Protobuf => {
            let format = Protobuf::new(&placed).with_gpu_model(opts.selection.gpu);
            run(opened, paths, placed, floors, output, &format, opts, record)
        }
        OutputFormat::Json => run(
            opened,
            paths,
            placed,
            floors,
            output,
            &Json {
                colors: opts.json_colors,
            },
            opts,
            record,
        ),
    }
}

/// What the file writer receives: a source's description before its chunks, then its chunks.
enum ToFile {
    Source(usize, Arc<Description>),
    Chunk(Chunk),
}

/// The pipeline: each source (an export already open in `opened`, else opened from `paths` when
/// its turn comes) is read into routers (layout) that encode through `format`'s writers; one
/// file-writer thread streams the chunks to a temporary file, renamed into place on success.
/// `floors` (merges): each source's earliest time, below which its rows are skipped. `record`
/// closes the file (see [`crate::provenance`]).
#[allow(clippy::too_many_arguments)]
fn run<F: Format>(
    opened: Vec<Option<Export>>,
    paths: &[(PathBuf, String)],
    placed: Vec<Placed>,
    floors: &[i64],
    output: &Path,
    format: &F,
    opts: &Options,
    record: Option<String>,
) -> Result<Summary> {
    let started = Instant::now();
    let inputs: Vec<&Path> = opened
        .iter()
        .flatten()
        .map(|e| e.schema.path.as_path())
        .chain(paths.iter().map(|(p, _)| p.as_path()))
        .collect();
    let target = Target::open(output, &inputs)?;
    let input_paths: Vec<PathBuf> = inputs.iter().map(|p| p.to_path_buf()).collect();
    let gzip = target.gzip(output);
    let file = target.writer()?;

    // Chunks on their way to the file are memory: while the file writer is behind (a slow
    // disk, a starved thread), two a channel are held, not a number that grows the peak.
    let (tx, rx) = sync_channel::<ToFile>(2);
    let ids = Ids::default();
    let progress = Progress::default();
    let n_sources = opened.len().max(paths.len());
    let mut opened = opened;
    opened.resize_with(n_sources, || None);
    progress.total.store(
        opened.iter().flatten().map(Export::estimated_rows).sum(),
        Ordering::Relaxed,
    );
    let result: Result<(Summary, u64)> = std::thread::scope(|s| {
        if opts.progress {
            s.spawn(|| progress.draw_until_finished("converting"));
        }
        let writer = {
            let placed = &placed;
            let record = record.as_deref();
            s.spawn(move || write_file(file, rx, format, placed, record, gzip))
        };
        let mut summary = Summary::default();
        let mut failure = None;
        for (i, slot) in opened.into_iter().enumerate() {
            let export = match slot {
                Some(e) => e,
                None => match Export::open(&paths[i].0, opts.check) {
                    Ok(mut e) => {
                        e.set_label(paths[i].1.clone());
                        progress
                            .total
                            .fetch_add(e.estimated_rows(), Ordering::Relaxed);
                        e
                    }
                    Err(e) => {
                        failure = Some(anyhow!("{}: {}", paths[i].0.display(), error_line(&e)));
                        break;
                    }
                },
            };
            let desc = export.description();
            if tx.send(ToFile::Source(i, desc.clone())).is_err() {
                break;
            }
            let placement = Placement {
                source: i,
                offset: placed.get(i).map_or(0, |p| p.offset),
            };
            let (chunks_tx, chunks_rx) = sync_channel::<Chunk>(2);
            // Chunks of this source go to the file writer through one forwarding thread.
            let forward = {
                let tx = tx.clone();
                s.spawn(move || {
                    for c in chunks_rx {
                        if tx.send(ToFile::Chunk(c)).is_err() {
                            break;
                        }
                    }
                })
            };
            let findings = if opts.analyze {
                match crate::nsys::rules::for_trace(&export.schema) {
                    Ok(f) => f,
                    Err(e) => {
                        failure = Some(anyhow!("analysis: {}", error_line(&e)));
                        break;
                    }
                }
            } else {
                Default::default()
            };
            let make_sink = || Filtered {
                sink: Filtered {
                    sink: Router::new(
                        format.writer(i, desc.clone()),
                        &ids,
                        &desc,
                        placement,
                        chunks_tx.clone(),
                    )
                    .with_progress(&progress),
                    filter: Floor(floors.get(i).copied().unwrap_or(i64::MIN)),
                },
                filter: crate::nsys::rules::Blamed {
                    findings: &findings,
                    scratch: Vec::new(),
                },
            };
            let part = export.read(&opts.selection, &make_sink).and_then(|mut p| {
                if opts.analyze {
                    p.merge(crate::nsys::rules::write_findings(
                        &findings,
                        &opts.selection,
                        make_sink(),
                    )?);
                }
                Ok(p)
            });
            drop(chunks_tx);
            let _ = forward.join();
            match part {
                Ok(mut p) => {
                    if n_sources > 1 {
                        // Which report a note is about.
                        for n in &mut p.notes {
                            *n = format!("{}: {n}", paths[i].1);
                        }
                        summary.per_source.push(p.clone());
                    }
                    summary.merge(p);
                }
                Err(e) => {
                    failure = Some(if n_sources > 1 {
                        anyhow!("{}: {}", paths[i].0.display(), error_line(&e))
                    } else {
                        e
                    });
                    break;
                }
            }
        }
        drop(tx);
        progress.finish();
        let written = writer
            .join()
            .map_err(|_| anyhow!("output writer panicked"))?;
        // A writer failure (disk full) explains reader send failures: report it first.
        let bytes = written.map_err(|e| anyhow!("{}: {}", output.display(), error_line(&e)))?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok((summary, bytes))
    });
    let (mut summary, bytes) = result?;
    if summary.total_events() == 0 && !opts.selection.is_everything() {
        // The temporary goes with `target`: nothing is written, a previous output stays.
        bail!(
            "{}",
            crate::hints::empty_selection(
                &opts.selection,
                &input_paths.iter().map(PathBuf::as_path).collect::<Vec<_>>()
            )
        );
    }
    summary.output_bytes = target.finish(output)?.unwrap_or(bytes);
    if let Some(first) = placed.first()
        && n_sources == 1
        && first.offset > 0
    {
        summary.notes.push(format!(
            "rows before the session start: Perfetto's zero is {} before nsys' zero",
            crate::summary::human_ns(first.offset)
        ));
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
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
    fn open(output: &Path, inputs: &[&Path]) -> Result<Target> {
        if is_stdout(output) {
            return Ok(Target::Stdout);
        }
        if inputs.iter().any(|input| same_file(output, input)) {
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

/// Write the file, gzip-compressed when asked. Returns the bytes written before compression.
fn write_file<F: Format>(
    file: Box<dyn Write + Send>,
    rx: Receiver<ToFile>,
    format: &F,
    placed: &[Placed],
    record: Option<&str>,
    gzip: bool,
) -> Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let bytes = if gzip {
        let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        let bytes = write_chunks(&mut gz, rx, format, placed, record)?;
        gz.finish().context("cannot write output")?;
        bytes
    } else {
        write_chunks(&mut out, rx, format, placed, record)?
    };
    out.flush().context("cannot write output")?;
    Ok(bytes)
}

fn write_chunks<F: Format, W: Write>(
    out: &mut W,
    rx: Receiver<ToFile>,
    format: &F,
    placed: &[Placed],
    record: Option<&str>,
) -> Result<u64> {
    let mut described: HashSet<WellKnown> = HashSet::new();
    // The description of each source whose chunks may still come (one at a time, in order).
    let mut sources: Vec<Option<Arc<Description>>> = Vec::new();
    let mut bytes = 0u64;
    let mut put = |out: &mut W, data: &[u8]| -> Result<()> {
        out.write_all(data).context("cannot write output")?;
        bytes += data.len() as u64;
        Ok(())
    };
    put(out, &format.header())?;
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
    put_record(out, &format.preamble(placed))?;
    for msg in rx {
        let chunk = match msg {
            ToFile::Source(i, desc) => {
                // Sources come in order; the previous one has sent all its chunks.
                sources.iter_mut().for_each(|s| *s = None);
                sources.resize(sources.len().max(i + 1), None);
                sources[i] = Some(desc);
                continue;
            }
            ToFile::Chunk(c) => c,
        };
        for wk in chunk.requires {
            if described.insert(wk)
                && let Some(Some(desc)) = sources.get(wk.source())
            {
                put_record(out, &format.describe_well_known(wk, desc))?;
            }
        }
        put_record(out, &chunk.data)?;
        crate::output::recycle(chunk.data);
    }
    put(out, &format.footer(placed, record))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::EventType;

    #[test]
    fn options_text_is_canonical() {
        let mut o = Options::default();
        assert_eq!(o.content_text(), "");
        o.selection.types = EventType::parse_list(&["nvtx", "kernel"]).unwrap();
        o.selection.time = Some(crate::select::TimeRange {
            start: Some(2_000_000_000),
            end: Some(3_500_000_000),
        });
        assert_eq!(
            o.content_text(),
            "--types kernel,nvtx --time-range 2s..3.5s"
        );
        assert_eq!(seconds(1), "0.000000001s");
    }
}
