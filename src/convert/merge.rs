//! A merge: several reports into one trace, each placed on the merge's timeline, converted as
//! a part a few at a time ([`merge_exports`]), or parts made where their reports were written
//! ([`write_part`]) assembled without the reports ([`assemble_parts`]).

use super::file::{Target, is_stdout};
use super::{Options, Run, Sources, read_into, run_format};
use anyhow::{Context, Result, anyhow, bail};
use nsys_perfetto_model::errors::{error_line, os_error, write_error};
use nsys_perfetto_model::progress::Progress;
use nsys_perfetto_model::summary::Summary;
use nsys_perfetto_read::source::Export;
use nsys_perfetto_write::output::formats::OutputFormat;
use nsys_perfetto_write::output::pftrace::file::Protobuf;
use nsys_perfetto_write::output::{Format, Ids, Placed};
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

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
    pub fn of(export: &Export) -> Result<Clock> {
        let d = &export.info()?.desc;
        Ok(Clock {
            session_start_utc_ns: d.session_start_utc_ns,
            earliest_ns: d.earliest_ns.unwrap_or(0).min(0),
            kernel_release: d.kernel_release.clone(),
            machine: d.machine.clone(),
        })
    }

    /// The report named `label`, at `offset` on the trace's timeline, as a writer describes it.
    fn placed(&self, label: &str, offset: i64) -> Placed {
        Placed {
            label: Some(label.to_string()),
            offset,
            session_start_utc_ns: self.session_start_utc_ns,
            metadata: Default::default(),
            kernel_release: self.kernel_release.clone(),
            machine: self.machine.clone(),
        }
    }
}

/// Merge several exports into one trace: each keeps its processes, threads, GPUs and arrows
/// apart (`labels` name them), placed on one timeline by `align`. A `.pftrace` takes any number
/// of reports, read `jobs` at a time (`merge_parts`); JSON, which has no machines, up to
/// [`nsys_perfetto_model::model::MAX_SOURCES`], read one after the other. Returns the summary (with each
/// source's own in `per_source`) and where each source went, in input order.
pub fn merge_exports(
    inputs: &[(PathBuf, String)],
    output: &Path,
    align: Align,
    opts: &Options,
    jobs: usize,
) -> Result<(Summary, Vec<MergedSource>)> {
    // First the clocks of every report (small tables), to place them before any event is written.
    let opened =
        nsys_perfetto_model::parallel::parallel_map(inputs, jobs, |_, (path, _)| -> Result<_> {
            let e = Export::open_described(path, opts.check)
                .map_err(|e| anyhow!("{}: {}", path.display(), error_line(&e)))?;
            Clock::of(&e)
        });
    let clocks = opened.into_iter().collect::<Result<Vec<Clock>>>()?;
    merge_clocked(inputs, &clocks, output, align, opts, jobs)
}

/// [`merge_exports`] of reports whose clocks are known (`known[i]` is `inputs[i]`'s).
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
        .map(|(((_, label), clock), &offset)| clock.placed(label, offset))
        .collect();
    let floors: Vec<i64> = clocks.iter().map(|c| c.1).collect();
    // A protobuf trace takes the reports as parts, several converted at once, each on sequences
    // of its own; another format reads them one after the other into one writer.
    let summary = if opts.format == OutputFormat::Protobuf {
        merge_parts(inputs, placed_all, &floors, output, opts, jobs)?
    } else {
        run_format(Run {
            opened: Vec::new(),
            paths: inputs,
            placed: placed_all,
            floors: &floors,
            output,
            opts,
            record: None,
        })?
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
    export.set_label(part.label.to_string()).map_err(named)?;
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
    pub clock: Clock,
    /// Where its session start sits in the part (a merge moves it to its place).
    pub offset: i64,
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
        let clock = &self.clock;
        if let Some(u) = clock.session_start_utc_ns {
            put("session_start_utc_ns", u.to_string());
        }
        put("earliest_ns", clock.earliest_ns.to_string());
        put("offset", self.offset.to_string());
        if let Some(k) = &clock.kernel_release {
            put("kernel_release", k.clone());
        }
        if let Some(m) = &clock.machine {
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
            clock: Clock {
                session_start_utc_ns: number("session_start_utc_ns")?,
                earliest_ns: number("earliest_ns")?.unwrap_or(0).min(0),
                kernel_release: get("kernel_release"),
                machine: get("machine"),
            },
            offset: number("offset")?.ok_or_else(|| anyhow!("its header lacks offset"))?,
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
    let floor = clock.earliest_ns;
    // Where a conversion of this report alone puts it: its earliest row at zero.
    let placed = [clock.placed(who.label, -floor)];
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
        clock: clock.clone(),
        offset: placed[0].offset,
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
        .map(|(_, h, _)| (h.clock.session_start_utc_ns, h.clock.earliest_ns))
        .collect();
    let (relative, offsets) = placements(&clocks, first.align);
    let placed: Vec<Placed> = read
        .iter()
        .zip(&offsets)
        .map(|((_, h, _), &o)| h.clock.placed(&h.label, o))
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
            session_start_utc_ns: h.clock.session_start_utc_ns,
            trace_offset_ns: off,
        })
        .collect();
    Ok((
        summary,
        sources,
        read.into_iter().map(|(_, h, _)| h).collect(),
    ))
}
