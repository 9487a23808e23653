//! One conversion, end to end: sources (nsys exports, read by `nsys::source`) stream events
//! through layout into one format's writers; the file writer puts their chunks into a temporary
//! file, renamed into place only when everything succeeded. A merge is several sources, one
//! after the other, into the same file: [`merge`]. [`file`](mod@file) is the output file and
//! the thread that writes it, [`format`](mod@crate::format) the output formats.

pub mod file;
pub mod merge;

use anyhow::{Result, anyhow, bail};
use file::{Target, ToFile, write_file};
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::errors::error_line;
use nsys_perfetto_model::model::{
    CounterKey, CounterSample, CpuSample, CpuSlice, Event, EventSink, Filtered, GroupKey,
    SinkFilter,
};
use nsys_perfetto_model::progress::Progress;
use nsys_perfetto_model::select::{NameFilter, Selection};
use nsys_perfetto_model::summary::Summary;
use nsys_perfetto_read::source::Export;
use nsys_perfetto_write::layout::{Placement, Router};
use nsys_perfetto_write::output::formats::{OutputFormat, WithFormat};
use nsys_perfetto_write::output::{Chunk, Format, FormatOptions, Ids, Placed};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

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
        if *format != OutputFormat::default() {
            parts.push(format!("--format {}", format.name()));
        }
        if *format == OutputFormat::Json && *json_colors {
            parts.push("--json-colors".into());
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
pub fn convert_export(input: &Path, output: &Path, opts: &Options) -> Result<Summary> {
    convert_export_from(input, input, output, opts)
}

/// Convert the SQLite export `input` of `origin` (the file the user named: a report, or the
/// export itself), recording `origin`'s identity in the output, so that a later run can tell
/// whether the output still stands for it.
pub fn convert_export_from(
    input: &Path,
    origin: &Path,
    output: &Path,
    opts: &Options,
) -> Result<Summary> {
    nsys_perfetto_model::cleanup::remove_dead_scratch();
    let export = Export::open_described(input, opts.check)?;
    let offset = export.info()?.desc.earliest_ns.map_or(0, |e| -e);
    let placed = vec![placed(&export, offset)?];
    // Only where a later run can read it back (not `.gz`, not standard output).
    let record = crate::provenance::readable(output)
        .then(|| crate::provenance::Record::new(origin, opts.content_text()).map(|r| r.to_text()))
        .flatten();
    run_format(Run {
        opened: vec![Some(export)],
        paths: &[],
        placed,
        floors: &[],
        output,
        opts,
        record,
    })
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

fn placed(export: &Export, offset: i64) -> Result<Placed> {
    let d = &export.info()?.desc;
    Ok(Placed {
        label: d.label.clone(),
        offset,
        session_start_utc_ns: d.session_start_utc_ns,
        metadata: d.metadata.clone(),
        kernel_release: d.kernel_release.clone(),
        machine: d.machine.clone(),
    })
}

/// Convert with the format's writer: [`run`] it.
fn run_format(conversion: Run<'_>) -> Result<Summary> {
    let opts = conversion.opts;
    let options = FormatOptions {
        gpu: opts.selection.gpu,
        json_colors: opts.json_colors,
    };
    opts.format.write_with(&options, conversion)
}

/// What [`run`] converts, and where: all but the format's writer, which
/// [`OutputFormat::write_with`] makes.
struct Run<'a> {
    opened: Vec<Option<Export>>,
    paths: &'a [(PathBuf, String)],
    placed: Vec<Placed>,
    floors: &'a [i64],
    output: &'a Path,
    opts: &'a Options,
    record: Option<String>,
}

impl WithFormat for Run<'_> {
    type Output = Result<Summary>;

    fn placed(&self) -> &[Placed] {
        &self.placed
    }

    fn write<F: Format>(self, format: &F) -> Result<Summary> {
        run(self, format)
    }
}

/// The pipeline into `output`: [`read_into`] a temporary file, renamed into place on success.
/// `record` closes the file (see [`crate::provenance`]).
fn run<F: Format>(args: Run<'_>, format: &F) -> Result<Summary> {
    let Run {
        opened,
        paths,
        placed,
        floors,
        output,
        opts,
        record,
    } = args;
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
                None => match Export::open_described(&paths[i].0, opts.check)
                    .and_then(|mut e| e.set_label(paths[i].1.clone()).map(|()| e))
                {
                    Ok(e) => {
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
            // Read when the export was opened (`Export::open_described`): no new error here.
            let desc = match export.description() {
                Ok(d) => d,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
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
