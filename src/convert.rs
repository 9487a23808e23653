//! One conversion, end to end: sources (nsys exports, read by `nsys::source`) stream events
//! through layout into one format's writers; the file writer puts their chunks into a temporary
//! file, renamed into place only when everything succeeded. A merge is several sources, one
//! after the other, into the same file.

use anyhow::{Context, Result, anyhow, bail};
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::errors::{error_line, os_error, write_error};
use nsys_perfetto_model::model::{
    CounterKey, CounterSample, CpuSample, CpuSlice, Description, Event, EventSink, Filtered,
    GroupKey, SinkFilter,
};
use nsys_perfetto_model::progress::Progress;
use nsys_perfetto_model::select::{NameFilter, Selection};
use nsys_perfetto_model::summary::Summary;
use nsys_perfetto_read::source::Export;
use nsys_perfetto_write::layout::{Placement, Router};
use nsys_perfetto_write::output::json::Json;
use nsys_perfetto_write::output::pftrace::file::Protobuf;
use nsys_perfetto_write::output::{Chunk, Format, Ids, Placed, WellKnown};
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
    /// A merge's pictures (`merge --util-map`, `--stragglers`): each report's share is written
    /// after its events.
    pub pictures: Option<Arc<crate::pictures::Pictures>>,
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
            pictures,
        } = self;
        let nsys_perfetto_model::select::Selection {
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
        if *gpu == nsys_perfetto_model::select::GpuModel::Perfetto
            && *format == OutputFormat::Protobuf
        {
            parts.push("--gpu perfetto".into());
        }
        if let Some(p) = pictures {
            parts.push(p.options.text());
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
            .strip_suffix(nsys_perfetto_read::arrow::NSYS_DIR_SUFFIX)
            .or_else(|| name.strip_suffix(nsys_perfetto_read::parquet::NSYS_DIR_SUFFIX))
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
    nsys_perfetto_model::cleanup::remove_dead_scratch();
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

/// What places a report on a merge's timeline and names its machine, read when the report is
/// opened: a merge that opened its reports already (to name them) places them without opening
/// them again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Clock {
    /// Its wall-clock session start (ns since the Unix epoch), when the report records one.
    pub session_start_utc_ns: Option<i64>,
    /// Its earliest row's time relative to its session start (at most 0).
    pub earliest_ns: i64,
    pub kernel_release: Option<String>,
    pub machine: Option<String>,
}

impl Clock {
    pub fn of(export: &Export) -> Clock {
        let d = &export.info.desc;
        Clock {
            session_start_utc_ns: d.session_start_utc_ns,
            earliest_ns: d.earliest_ns.unwrap_or(0).min(0),
            kernel_release: d.kernel_release.clone(),
            machine: d.machine.clone(),
        }
    }
}

/// Merge several exports into one trace: each keeps its processes, threads, GPUs and arrows
/// apart (`labels` name them), placed on one timeline by `align`. A `.pftrace` takes any number
/// of reports, read `jobs` at a time (`merge_parts`); JSON, which has no machines, up to
/// [`nsys_perfetto_model::model::MAX_SOURCES`], read one after the other. Returns the summary (with each
/// source's own in `per_source`) and where each source went, in input order.
pub fn merge_sqlite(
    inputs: &[(PathBuf, String)],
    output: &Path,
    align: Align,
    opts: &Options,
    jobs: usize,
) -> Result<(Summary, Vec<MergedSource>)> {
    // First the clocks of every report (small tables), to place them before any event is written.
    let opened =
        nsys_perfetto_model::parallel::parallel_map(inputs, jobs, |_, (path, _)| -> Result<_> {
            let e = Export::open(path, opts.check)
                .map_err(|e| anyhow!("{}: {}", path.display(), error_line(&e)))?;
            Ok(Clock::of(&e))
        });
    let clocks = opened.into_iter().collect::<Result<Vec<Clock>>>()?;
    merge_clocked(inputs, &clocks, output, align, opts, jobs)
}

/// [`merge_sqlite`] of reports whose clocks are known (`known[i]` is `inputs[i]`'s).
pub fn merge_clocked(
    inputs: &[(PathBuf, String)],
    known: &[Clock],
    output: &Path,
    align: Align,
    opts: &Options,
    jobs: usize,
) -> Result<(Summary, Vec<MergedSource>)> {
    if inputs.is_empty() {
        bail!("nothing to merge");
    }
    if opts.format == OutputFormat::Json && inputs.len() > nsys_perfetto_model::model::MAX_SOURCES {
        bail!(
            "{} reports: a JSON merge holds at most {} (JSON has no machines to keep more \
             apart); write a .pftrace, which holds any number",
            inputs.len(),
            nsys_perfetto_model::model::MAX_SOURCES
        );
    }
    let clocks: Vec<(Option<i64>, i64)> = known
        .iter()
        .map(|c| (c.session_start_utc_ns, c.earliest_ns))
        .collect();
    let (relative, offsets) = placements(&clocks, align);
    let placed_all: Vec<Placed> = inputs
        .iter()
        .zip(known)
        .zip(&offsets)
        .map(|(((_, label), clock), &offset)| Placed {
            label: Some(label.clone()),
            offset,
            session_start_utc_ns: clock.session_start_utc_ns,
            metadata: Default::default(),
            kernel_release: clock.kernel_release.clone(),
            machine: clock.machine.clone(),
        })
        .collect();
    let floors: Vec<i64> = clocks.iter().map(|c| c.1).collect();
    let summary = match opts.format {
        OutputFormat::Protobuf => merge_parts(inputs, placed_all, &floors, output, opts, jobs)?,
        OutputFormat::Json => {
            run_format(Vec::new(), inputs, placed_all, &floors, output, opts, None)?
        }
    };
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

/// Where the reports of a merge go, from each one's clock (its wall-clock session start, when
/// recorded, and its earliest row's time, at most 0): each one's session start relative to the
/// earliest one (0 with [`Align::Start`]), and its offset on the trace's timeline (that, shifted
/// so that no report's earliest row falls before zero).
fn placements(clocks: &[(Option<i64>, i64)], align: Align) -> (Vec<i64>, Vec<i64>) {
    let base = clocks.iter().filter_map(|c| c.0).min();
    let relative: Vec<i64> = clocks
        .iter()
        .map(|(utc, _)| match (align, utc, base) {
            (Align::WallClock, Some(u), Some(b)) => u - b,
            _ => 0,
        })
        .collect();
    let shift = clocks
        .iter()
        .zip(&relative)
        .map(|((_, earliest), rel)| -(earliest + rel))
        .max()
        .unwrap_or(0)
        .max(0);
    let offsets = relative.iter().map(|r| r + shift).collect();
    (relative, offsets)
}

/// A `.pftrace` merge: each report is a part, converted on its own ([`read_into`], with
/// [`Protobuf::part`]) into an unnamed temporary file, `jobs` reports at a time; the parts go
/// into the output in report order after the file's own packets (every machine's name and
/// kernel, the clock, the session markers). A part's packets are all on its report's machine,
/// which is its own namespace of pids, tids, track uuids and sequences in trace_processor, so a
/// part needs nothing from the others; its arrows carry its place. Workers start a report only
/// within `2 * jobs` of the one being written: memory is a few reports' conversions and disk a
/// few parts, whatever the number of reports.
fn merge_parts(
    inputs: &[(PathBuf, String)],
    placed: Vec<Placed>,
    floors: &[i64],
    output: &Path,
    opts: &Options,
    jobs: usize,
) -> Result<Summary> {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::sync::{Condvar, Mutex};
    let started = Instant::now();
    let n = inputs.len();
    let input_paths: Vec<&Path> = inputs.iter().map(|(p, _)| p.as_path()).collect();
    let target = Target::open(output, &input_paths)?;
    let gzip = target.gzip(output);
    let file = target.writer()?;
    // Parts are written beside the output (the same disk, the room it needs anyway).
    let spool_dir = spool_dir(output);
    let whole = Protobuf::new(&placed);
    let part_opts = Options {
        progress: false,
        ..opts.clone()
    };
    let window = 2 * jobs.max(1);
    let ids = Ids::default();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    // How many parts are in the output; a worker waits for it to come within `window`.
    let written = (Mutex::new(0usize), Condvar::new());
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<(std::fs::File, Summary)>)>();
    let progress = Progress::default();
    progress.total.store(n as u64, Ordering::Relaxed);
    let convert_part = |i: usize| {
        let (path, label) = &inputs[i];
        let part = Part {
            label,
            placed: &placed,
            position: i,
            floor: floors[i],
            ids: &ids,
        };
        convert_part(path, &part, &spool_dir, output, &part_opts)
    };
    let result: Result<(Summary, u64)> = std::thread::scope(|s| {
        if opts.progress {
            s.spawn(|| progress.draw_until_finished("merging"));
        }
        for _ in 0..jobs.clamp(1, n) {
            let tx = tx.clone();
            let (next, stop, written, convert_part) = (&next, &stop, &written, &convert_part);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    {
                        let (count, moved) = written;
                        let mut count = count.lock().unwrap_or_else(|e| e.into_inner());
                        while i >= *count + window && !stop.load(Ordering::Relaxed) {
                            count = moved.wait(count).unwrap_or_else(|e| e.into_inner());
                        }
                    }
                    if stop.load(Ordering::Relaxed) || tx.send((i, convert_part(i))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let assemble = |w: &mut dyn Write| -> Result<(Summary, u64)> {
            let mut bytes = 0u64;
            for data in [whole.header(), whole.preamble(&placed)] {
                w.write_all(&data).context("cannot write output")?;
                bytes += data.len() as u64;
            }
            let mut summary = Summary::default();
            let mut ready = std::collections::BTreeMap::new();
            for (i, (_, label)) in inputs.iter().enumerate() {
                let (mut part, mut p) = loop {
                    if let Some(r) = ready.remove(&i) {
                        break r;
                    }
                    let (j, r) = rx.recv().map_err(|_| anyhow!("a merge worker stopped"))?;
                    ready.insert(j, r?);
                };
                bytes += std::io::copy(&mut part, w).context("cannot write output")?;
                drop(part);
                let (count, moved) = &written;
                *count.lock().unwrap_or_else(|e| e.into_inner()) = i + 1;
                moved.notify_all();
                progress.done.fetch_add(1, Ordering::Relaxed);
                if n > 1 {
                    // Which report a note is about.
                    for note in &mut p.notes {
                        *note = format!("{label}: {note}");
                    }
                    summary.per_source.push(p.clone());
                }
                summary.merge(p);
            }
            let footer = whole.footer(&placed, None);
            w.write_all(&footer).context("cannot write output")?;
            bytes += footer.len() as u64;
            Ok((summary, bytes))
        };
        let assembled = (|| {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            let done = if gzip {
                let mut gz =
                    flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
                let done = assemble(&mut gz)?;
                gz.finish().context("cannot write output")?;
                done
            } else {
                assemble(&mut out)?
            };
            out.flush().context("cannot write output")?;
            Ok(done)
        })();
        // On failure the workers stop at their next report.
        stop.store(true, Ordering::Relaxed);
        written.1.notify_all();
        progress.finish();
        assembled
    });
    let (mut summary, bytes) = result?;
    if summary.total_events() == 0 && !opts.selection.is_everything() {
        bail!(
            "{}",
            crate::hints::empty_selection(&opts.selection, &input_paths)
        );
    }
    summary.output_bytes = target.finish(output)?.unwrap_or(bytes);
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// Where a merge's parts wait for their turn: beside the output (the same disk, the room it
/// needs anyway), else the temporary folder.
fn spool_dir(output: &Path) -> PathBuf {
    match output.parent() {
        Some(p) if !p.as_os_str().is_empty() && p.is_dir() && !is_stdout(output) => p.to_path_buf(),
        Some(p) if p.as_os_str().is_empty() => PathBuf::from("."),
        _ => std::env::temp_dir(),
    }
}

/// One report of a merge, to convert as a part.
struct Part<'a> {
    label: &'a str,
    /// Every report of the merge (or this one alone: a part made where its report is).
    placed: &'a [Placed],
    /// Its place among `placed`; a part made alone: its rank.
    position: usize,
    /// Its earliest time, below which rows are skipped (see [`Floor`]).
    floor: i64,
    ids: &'a Ids,
}

/// Convert one report into an unnamed temporary file (removed when closed), rewound: the
/// part's packets, without the file's own. Errors name the report.
fn convert_part(
    path: &Path,
    part: &Part<'_>,
    spool_dir: &Path,
    output: &Path,
    opts: &Options,
) -> Result<(std::fs::File, Summary)> {
    use std::io::Seek;
    let named = |e: anyhow::Error| anyhow!("{}: {}", path.display(), error_line(&e));
    // The merge's clock pass found the report's earliest time: its floor.
    let mut export = Export::open_placed(path, opts.check, part.floor).map_err(named)?;
    export.set_label(part.label.to_string());
    let mut spool = tempfile::tempfile_in(spool_dir).map_err(|e| write_error(spool_dir, &e))?;
    let sink = spool.try_clone().map_err(|e| write_error(spool_dir, &e))?;
    let i = part.position.min(part.placed.len() - 1);
    let (summary, _) = read_into(
        Box::new(sink),
        false,
        Sources {
            opened: vec![Some(export)],
            paths: &[],
            part: Some((
                part.position % nsys_perfetto_model::model::MAX_SOURCES,
                part.position,
            )),
            ids: part.ids,
        },
        &part.placed[i..=i],
        &[part.floor],
        output,
        &Protobuf::part(part.placed, part.position).with_gpu_model(opts.selection.gpu),
        opts,
        None,
    )
    .map_err(named)?;
    spool.rewind().map_err(|e| write_error(spool_dir, &e))?;
    Ok((spool, summary))
}

/// What a part made where its report was written ([`write_part`]) says of its report in its
/// first packet: all a merge of parts ([`assemble_parts`]) needs to name and place it, and
/// what it converted, without reading its events again.
#[derive(Debug, Clone, PartialEq)]
pub struct PartHeader {
    pub label: String,
    pub rank: Option<i64>,
    pub rank_from: Option<String>,
    /// The report the part was made from, as named where it was made.
    pub input: String,
    pub align: Align,
    /// The options that shape the content ([`Options::content_text`]): every part of a merge
    /// must be made with the same.
    pub options: String,
    pub session_start_utc_ns: Option<i64>,
    /// Its earliest row's time relative to its session start (at most 0).
    pub earliest_ns: i64,
    /// Where its session start sits in the part (a merge moves it to its place).
    pub offset: i64,
    pub kernel_release: Option<String>,
    pub machine: Option<String>,
    /// Its events by category (`Category::index`), flows, trace events and tracks.
    pub events: Vec<u64>,
    pub flows: u64,
    pub trace_events: u64,
    pub tracks: u64,
}

/// The first line of a part's header text, with the format's version.
const PART_MAGIC: &str = "nsys-perfetto part 1";

impl PartHeader {
    fn to_text(&self) -> String {
        let mut t = format!("{PART_MAGIC}\n");
        let mut put = |k: &str, v: String| {
            let _ = writeln!(t, "{k}={}", v.replace('\n', " "));
        };
        put("label", self.label.clone());
        if let Some(r) = self.rank {
            put("rank", r.to_string());
        }
        if let Some(r) = &self.rank_from {
            put("rank_from", r.clone());
        }
        put("input", self.input.clone());
        put(
            "align",
            match self.align {
                Align::WallClock => "wall-clock",
                Align::Start => "start",
            }
            .into(),
        );
        put("options", self.options.clone());
        if let Some(u) = self.session_start_utc_ns {
            put("session_start_utc_ns", u.to_string());
        }
        put("earliest_ns", self.earliest_ns.to_string());
        put("offset", self.offset.to_string());
        if let Some(k) = &self.kernel_release {
            put("kernel_release", k.clone());
        }
        if let Some(m) = &self.machine {
            put("machine", m.clone());
        }
        let events: Vec<String> = self.events.iter().map(u64::to_string).collect();
        put("events", events.join(","));
        put("flows", self.flows.to_string());
        put("trace_events", self.trace_events.to_string());
        put("tracks", self.tracks.to_string());
        t
    }

    fn from_text(text: &str) -> Result<PartHeader> {
        let mut lines = text.lines();
        if lines.next() != Some(PART_MAGIC) {
            bail!("a part of another version of nsys-perfetto: make it again with this one");
        }
        let fields: std::collections::HashMap<&str, &str> =
            lines.filter_map(|l| l.split_once('=')).collect();
        let get = |k: &str| fields.get(k).map(|v| v.to_string());
        let need = |k: &str| get(k).ok_or_else(|| anyhow!("its header lacks {k}"));
        let number = |k: &str| -> Result<Option<i64>> {
            get(k)
                .map(|v| {
                    v.parse()
                        .map_err(|_| anyhow!("its header's {k} is not a number"))
                })
                .transpose()
        };
        let count = |k: &str| -> Result<u64> { Ok(number(k)?.unwrap_or(0).max(0) as u64) };
        Ok(PartHeader {
            label: need("label")?,
            rank: number("rank")?,
            rank_from: get("rank_from"),
            input: need("input")?,
            align: match need("align")?.as_str() {
                "start" => Align::Start,
                _ => Align::WallClock,
            },
            options: get("options").unwrap_or_default(),
            session_start_utc_ns: number("session_start_utc_ns")?,
            earliest_ns: number("earliest_ns")?.unwrap_or(0).min(0),
            offset: number("offset")?.ok_or_else(|| anyhow!("its header lacks offset"))?,
            kernel_release: get("kernel_release"),
            machine: get("machine"),
            events: need("events")?
                .split(',')
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.parse()
                        .map_err(|_| anyhow!("its header's events are not numbers"))
                })
                .collect::<Result<_>>()?,
            flows: count("flows")?,
            trace_events: count("trace_events")?,
            tracks: count("tracks")?,
        })
    }

    /// What the part converted, as a summary of its own.
    fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for (slot, n) in s.events.iter_mut().zip(&self.events) {
            *slot = *n;
        }
        s.flows = self.flows;
        s.trace_events = self.trace_events;
        s.tracks = self.tracks;
        s
    }

    fn placed(&self, offset: i64) -> Placed {
        Placed {
            label: Some(self.label.clone()),
            offset,
            session_start_utc_ns: self.session_start_utc_ns,
            metadata: Default::default(),
            kernel_release: self.kernel_release.clone(),
            machine: self.machine.clone(),
        }
    }
}

/// Who a report is, for [`write_part`]: its label and rank as a merge names it.
pub struct PartIdentity<'a> {
    pub label: &'a str,
    pub rank: Option<i64>,
    pub rank_from: Option<&'a str>,
    /// The report as the user named it (the export may be a file made from it).
    pub origin: &'a Path,
}

/// Convert one report as a part of a merge made later from parts ([`assemble_parts`]): where
/// the report was written, one task per report. The part is placed on the timeline by its own
/// clock, its processes ordered by its rank: a merge of parts holds what a
/// merge of the reports holds. The file is a trace of its own (Perfetto opens it).
pub fn write_part(
    input: &Path,
    who: &PartIdentity<'_>,
    clock: &Clock,
    output: &Path,
    align: Align,
    opts: &Options,
) -> Result<Summary> {
    let started = Instant::now();
    let Clock {
        session_start_utc_ns: utc,
        earliest_ns: floor,
        kernel_release: kernel,
        machine,
    } = clock.clone();
    let placed = [Placed {
        label: Some(who.label.to_string()),
        // Where a conversion of this report alone puts it: its earliest row at zero.
        offset: -floor,
        session_start_utc_ns: utc,
        metadata: Default::default(),
        kernel_release: kernel.clone(),
        machine: machine.clone(),
    }];
    let target = Target::open(output, &[input])?;
    let position = who.rank.unwrap_or(0).clamp(0, i32::MAX as i64 >> 8) as usize;
    let part = Part {
        label: who.label,
        placed: &placed,
        position,
        floor,
        ids: &Ids::block(position as u32),
    };
    let part_opts = Options {
        progress: false,
        ..opts.clone()
    };
    let (mut body, mut summary) =
        convert_part(input, &part, &spool_dir(output), output, &part_opts)?;
    if summary.total_events() == 0 && !opts.selection.is_everything() {
        bail!(
            "{}",
            crate::hints::empty_selection(&opts.selection, &[input])
        );
    }
    let header = PartHeader {
        label: who.label.to_string(),
        rank: who.rank,
        rank_from: who.rank_from.map(str::to_string),
        input: who.origin.display().to_string(),
        align,
        options: opts.content_text(),
        session_start_utc_ns: utc,
        earliest_ns: floor,
        offset: placed[0].offset,
        kernel_release: kernel,
        machine,
        events: summary.events.to_vec(),
        flows: summary.flows,
        trace_events: summary.trace_events,
        tracks: summary.tracks,
    };
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, target.writer()?);
        out.write_all(
            &nsys_perfetto_write::output::pftrace::file::metadata_packet(
                nsys_perfetto_write::output::pftrace::file::PART_KEY,
                &header.to_text(),
            ),
        )
        .and_then(|()| std::io::copy(&mut body, &mut out).map(|_| ()))
        .and_then(|()| out.flush())
        .map_err(|e| write_error(output, &e))?;
    }
    summary.output_bytes = target.finish(output)?.unwrap_or(0);
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The header of a part made by [`write_part`], and where its packets start; `None` when the
/// file is not a part (any other file, a trace of another kind).
pub fn read_part_header(path: &Path) -> Result<Option<(PartHeader, u64)>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|e| anyhow!("cannot read {}: {}", path.display(), os_error(&e)))?;
    let mut head = vec![0u8; 64 << 10];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => bail!("cannot read {}: {}", path.display(), os_error(&e)),
        }
    }
    let head = &head[..n];
    let Some((&nsys_perfetto_write::output::pftrace::wire::TRACE_PACKET_BYTE, rest)) =
        head.split_first()
    else {
        return Ok(None);
    };
    let (len, used) = read_varint(rest);
    let Some(packet) = rest.get(used..used + len as usize) else {
        return Ok(None);
    };
    let prefix = nsys_perfetto_write::output::pftrace::file::metadata_text_prefix(
        nsys_perfetto_write::output::pftrace::file::PART_KEY,
    );
    let Some(at) = packet.windows(prefix.len()).position(|w| w == prefix) else {
        return Ok(None);
    };
    let after = &packet[at + prefix.len()..];
    let (text_len, used_text) = read_varint(after);
    let text = after
        .get(used_text..used_text + text_len as usize)
        .and_then(|t| std::str::from_utf8(t).ok())
        .ok_or_else(|| anyhow!("{}: a damaged part header", path.display()))?;
    let header = PartHeader::from_text(text)
        .map_err(|e| anyhow!("{}: {}", path.display(), error_line(&e)))?;
    Ok(Some((header, (1 + used + len as usize) as u64)))
}

/// A varint at the start of `data`: (value, bytes used); (0, data.len()) when cut short.
fn read_varint(data: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    for (i, b) in data.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    (0, data.len())
}

/// A merge of parts made where their reports were written ([`write_part`]): the file's own
/// packets (every machine's name and kernel, the clock, the session markers), then each part's
/// packets, copied on its machine, in rank order. The reports are not read: this costs what
/// copying the parts costs. Returns the summary, where each part went and the headers, in the
/// order written.
pub fn assemble_parts(
    parts: &[PathBuf],
    output: &Path,
    keep: impl Fn(&PartHeader) -> bool,
) -> Result<(Summary, Vec<MergedSource>, Vec<PartHeader>)> {
    let started = Instant::now();
    let mut read = Vec::with_capacity(parts.len());
    for p in parts {
        match read_part_header(p)? {
            Some((h, start)) => read.push((p.clone(), h, start)),
            None => bail!(
                "{}: not a part (make one with `nsys-perfetto merge --part REPORT -o PART`)",
                p.display()
            ),
        }
    }
    read.retain(|(_, h, _)| keep(h));
    if read.is_empty() {
        bail!("nothing to merge: no part records one of the ranks asked for");
    }
    let first = read[0].1.clone();
    for (p, h, _) in &read {
        if h.align != first.align || h.options != first.options {
            bail!(
                "{}: made with other options ({:?}, --align {:?}) than {} ({:?}, --align {:?}): \
                 every part of a merge must be made alike",
                p.display(),
                h.options,
                h.align,
                read[0].0.display(),
                first.options,
                first.align
            );
        }
    }
    // Ranks in order, then unranked parts (as a merge of reports orders them), placed as a
    // merge of the reports places them: each part moves from its own place to that one.
    read.sort_by_key(|(_, h, _)| (h.rank.is_none(), h.rank));
    let clocks: Vec<(Option<i64>, i64)> = read
        .iter()
        .map(|(_, h, _)| (h.session_start_utc_ns, h.earliest_ns))
        .collect();
    let (relative, offsets) = placements(&clocks, first.align);
    let placed: Vec<Placed> = read
        .iter()
        .zip(&offsets)
        .map(|((_, h, _), &o)| h.placed(o))
        .collect();
    let inputs: Vec<&Path> = read.iter().map(|(p, _, _)| p.as_path()).collect();
    let target = Target::open(output, &inputs)?;
    let gzip = target.gzip(output);
    let whole = Protobuf::new(&placed);
    let n = read.len();
    let write = |w: &mut dyn Write| -> Result<u64> {
        use std::io::{Seek, SeekFrom};
        let mut bytes = 0u64;
        for data in [whole.header(), whole.preamble(&placed)] {
            w.write_all(&data).context("cannot write output")?;
            bytes += data.len() as u64;
        }
        for (i, ((path, h, start), to)) in read.iter().zip(&placed).enumerate() {
            let mut f = std::fs::File::open(path)
                .map_err(|e| anyhow!("cannot read {}: {}", path.display(), os_error(&e)))?;
            f.seek(SeekFrom::Start(*start))
                .map_err(|e| anyhow!("cannot read {}: {}", path.display(), os_error(&e)))?;
            let machine = if n > 1 { i as u32 } else { 0 };
            // Never negative: the merge's shift keeps every report's earliest row at or after
            // zero, where the part alone put it.
            let delta = (to.offset - h.offset).max(0) as u64;
            bytes +=
                nsys_perfetto_write::output::pftrace::copy_on_machine(&mut f, w, machine, delta)
                    .map_err(|e| anyhow!("{}: {}", path.display(), os_error(&e)))?;
        }
        Ok(bytes)
    };
    let bytes = {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, target.writer()?);
        let bytes = if gzip {
            let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
            let b = write(&mut gz)?;
            gz.finish().context("cannot write output")?;
            b
        } else {
            write(&mut out)?
        };
        out.flush().context("cannot write output")?;
        bytes
    };
    let mut summary = Summary::default();
    for (_, h, _) in &read {
        let part = h.summary();
        if n > 1 {
            summary.per_source.push(part.clone());
        }
        summary.merge(part);
    }
    summary.output_bytes = target.finish(output)?.unwrap_or(bytes);
    summary.seconds = started.elapsed().as_secs_f64();
    let sources = read
        .iter()
        .zip(relative.iter().zip(&offsets))
        .map(|((_, h, _), (&rel, &off))| MergedSource {
            offset_ns: rel,
            session_start_utc_ns: h.session_start_utc_ns,
            trace_offset_ns: off,
        })
        .collect();
    Ok((
        summary,
        sources,
        read.into_iter().map(|(_, h, _)| h).collect(),
    ))
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
            sink.skip(
                nsys_perfetto_model::model::EARLY_ROWS.0,
                nsys_perfetto_model::model::EARLY_ROWS.1,
            );
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

/// The pipeline into `output`: [`read_into`] a temporary file, renamed into place on success.
/// `record` closes the file (see [`crate::provenance`]).
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
    let n_sources = opened.len().max(paths.len());
    let (mut summary, bytes) = read_into(
        file,
        gzip,
        Sources {
            opened,
            paths,
            part: None,
            ids: &Ids::default(),
        },
        &placed,
        floors,
        output,
        format,
        opts,
        record.as_deref(),
    )?;
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
            nsys_perfetto_model::summary::human_ns(first.offset)
        ));
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// What [`read_into`] reads: exports already open in `opened`, else opened from `paths` when
/// their turn comes.
struct Sources<'a> {
    opened: Vec<Option<Export>>,
    paths: &'a [(PathBuf, String)],
    /// One report of a large merge, read alone: (the source index its ids carry, its place in
    /// the merge). `None`: source `i` is the `i`th, its index and its place.
    part: Option<(usize, usize)>,
    /// The track uuids and sequence ids already given out: a merge's parts share them, so that
    /// every track and sequence of the trace has its own, as in a conversion of one report.
    ids: &'a Ids,
}

/// The pipeline: each source is read into routers (layout) that encode through `format`'s
/// writers; one file-writer thread streams the chunks to `file`. `floors` (merges): each
/// source's earliest time, below which its rows are skipped. Returns the summary and the bytes
/// written (before compression); `output` names the file in errors.
#[allow(clippy::too_many_arguments)]
fn read_into<F: Format>(
    file: Box<dyn Write + Send>,
    gzip: bool,
    sources: Sources<'_>,
    placed: &[Placed],
    floors: &[i64],
    output: &Path,
    format: &F,
    opts: &Options,
    record: Option<&str>,
) -> Result<(Summary, u64)> {
    let Sources {
        opened,
        paths,
        part,
        ids,
    } = sources;
    // Chunks on their way to the file are memory: while the file writer is behind (a slow
    // disk, a starved thread), two a channel are held, not a number that grows the peak.
    let (tx, rx) = sync_channel::<ToFile>(2);
    let progress = Progress::default();
    let n_sources = opened.len().max(paths.len());
    let mut opened = opened;
    opened.resize_with(n_sources, || None);
    progress.total.store(
        opened.iter().flatten().map(Export::estimated_rows).sum(),
        Ordering::Relaxed,
    );
    std::thread::scope(|s| {
        if opts.progress {
            s.spawn(|| progress.draw_until_finished("converting"));
        }
        let writer = s.spawn(move || write_file(file, rx, format, placed, record, gzip));
        let mut summary = Summary::default();
        let mut failure = None;
        for (i, slot) in opened.into_iter().enumerate() {
            let (source, position) = part.unwrap_or((i, i));
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
            if tx.send(ToFile::Source(source, desc.clone())).is_err() {
                break;
            }
            let placement = Placement {
                source,
                position,
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
                match nsys_perfetto_read::rules::trace::for_trace(&export.schema) {
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
                        format.writer(source, desc.clone()),
                        ids,
                        &desc,
                        placement,
                        chunks_tx.clone(),
                    )
                    .with_progress(&progress),
                    filter: Floor(floors.get(i).copied().unwrap_or(i64::MIN)),
                },
                filter: nsys_perfetto_read::rules::trace::Blamed {
                    findings: &findings,
                    scratch: Vec::new(),
                },
            };
            let part = export.read(&opts.selection, &make_sink).and_then(|mut p| {
                if opts.analyze {
                    p.merge(nsys_perfetto_read::rules::trace::write_findings(
                        &findings,
                        &opts.selection,
                        make_sink(),
                    )?);
                }
                if let Some(mine) = opts.pictures.as_ref().and_then(|p| p.ranks.get(position)) {
                    p.merge(crate::pictures::write(mine, &opts.selection, make_sink())?);
                }
                Ok(p)
            });
            // What was read is the export's only if it did not change meanwhile.
            let part = export.schema.read_through(part);
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
    })
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
        nsys_perfetto_model::cleanup::remove_dead(&out_dir, TEMP_BASE, ".part");
        let tmp = nsys_perfetto_model::cleanup::create(
            || {
                tempfile::Builder::new()
                    .prefix(&nsys_perfetto_model::cleanup::prefix(TEMP_BASE))
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
        nsys_perfetto_model::cleanup::forget(&path);
        done?;
        Ok(std::fs::metadata(output).ok().map(|m| m.len()))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Target::Temp(Some(t)) = self {
            nsys_perfetto_model::cleanup::forget(t.path());
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
        nsys_perfetto_write::output::recycle(chunk.data);
    }
    put(out, &format.footer(placed, record))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsys_perfetto_model::category::EventType;

    #[test]
    fn options_text_is_canonical() {
        let mut o = Options::default();
        assert_eq!(o.content_text(), "");
        o.selection.types = EventType::parse_list(&["nvtx", "kernel"]).unwrap();
        o.selection.time = Some(nsys_perfetto_model::select::TimeRange {
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
