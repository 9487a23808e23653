//! `nsys-perfetto merge INPUT... -o job.pftrace`: the reports of one job (MPI ranks, nodes,
//! workers) or of separate runs in one trace.
//!
//! * Inputs are expanded as batch conversion expands them ([`crate::batch::expand`]); reports are
//!   exported first ([`crate::input::prepare`]), several at a time (`-j`).
//! * Each report is named by a label, "rank 3 · host-a": the rank the report records (the MPI or
//!   launcher environment nsys kept, a thread nsys or the program named "MPI Rank N"), else the
//!   one its file name tells (`rank_%q{OMPI_COMM_WORLD_RANK}`, a trailing number), or a capture
//!   of `--label REGEX` on the file name. Its processes become "rank 3 · host-a · pid 4242", its
//!   GPUs "host-a · GPU 0 · A100".
//! * Time: each report at its own wall-clock session start, or with `--align start` every
//!   session start at zero.
//! * The merge itself ([`crate::convert::merge::merge_exports`]) converts each report as a part, `-j`
//!   at a time, into one writer's file in rank order: memory follows a few reports, not their
//!   number. `--part` makes one report's part where the report is, and a merge of parts
//!   ([`crate::convert::merge::assemble_parts`]) copies them into one trace without the reports.

use crate::args::MergeArgs;
use crate::batch;
use crate::convert::Options;
use crate::convert::merge::{
    Align, Clock, MergedSource, PartHeader, PartIdentity, assemble_parts, merge_clocked,
    read_part_header,
};
use crate::input::{self, Profile};
use crate::report::export::ExportOptions;
use anyhow::{Result, anyhow, bail};
use nsys_perfetto_model::parallel::parallel_map;
use nsys_perfetto_model::summary::{Summary, human_ns};
use nsys_perfetto_read::source::Export;
use nsys_perfetto_write::output::formats::OutputFormat;
use regex::Regex;
use std::path::{Path, PathBuf};

/// What a report says about who it is, for its label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub rank: Option<i64>,
    /// Where the rank came from: "environment", "thread name", "file name".
    pub rank_from: Option<&'static str>,
    pub host: Option<String>,
}

/// The rank of a thread named as MPI tools name it: "MPI Rank 3" (nsys' MPI tracing, and
/// programs through NVTX), "rank 3", "Rank3".
pub fn rank_from_thread_name(name: &str) -> Option<i64> {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"(?i)^(?:MPI[ _-]?)?rank[ _#:-]?(\d{1,7})$").unwrap());
    re.captures(name.trim()).and_then(|c| c[1].parse().ok())
}

/// The rank a file name tells: "rank_3", "rank-03", "r3." (as `%q{OMPI_COMM_WORLD_RANK}` or
/// `%q{SLURM_PROCID}` in `nsys profile -o` write it), else the number that ends its stem.
pub fn rank_from_file_name(path: &Path) -> Option<i64> {
    static RE: std::sync::OnceLock<(Regex, Regex)> = std::sync::OnceLock::new();
    let (named, trailing) = RE.get_or_init(|| {
        (
            Regex::new(r"(?i)(?:^|[^a-z])(?:rank|proc|task|r)[_.-]?(\d{1,7})(?:[^0-9]|$)").unwrap(),
            Regex::new(r"(\d{1,7})$").unwrap(),
        )
    });
    let stem = file_stem(path);
    named
        .captures(&stem)
        .or_else(|| trailing.captures(&stem))
        .and_then(|c| c[1].parse().ok())
}

fn file_stem(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    // "x.nsys-rep", "x.qdrep", "x.sqlite", "x.export-2023.4.4.sqlite" (a name's own dots stay).
    let mut stem = name.as_str();
    for ext in [".sqlite", ".nsys-rep", ".qdrep"] {
        if let Some(s) = stem.strip_suffix(ext) {
            stem = s;
            break;
        }
    }
    if let Some(i) = stem.rfind(".export-")
        && stem[i + 8..]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.')
    {
        stem = &stem[..i];
    }
    stem.to_string()
}

/// Who an opened export says it is.
pub fn identity_of(export: &Export, path: &Path) -> Result<Identity> {
    let info = export.info()?;
    let desc = &info.desc;
    let mut id = Identity {
        host: desc.host.clone(),
        ..Default::default()
    };
    if let Some(r) = info.rank {
        id.rank = Some(r);
        id.rank_from = Some("environment");
    } else {
        // The smallest rank any thread is named after (a report holds one rank, as a rule).
        // Every name a thread had counts: nsys keeps one per thread for display, and a thread
        // named "MPI Rank 3" by MPI tracing may show as the program's name.
        let ranks = info
            .every_thread_name
            .iter()
            .chain(desc.thread_names.values())
            .filter_map(|n| rank_from_thread_name(n))
            .min();
        if let Some(r) = ranks {
            id.rank = Some(r);
            id.rank_from = Some("thread name");
        } else if let Some(r) = rank_from_file_name(path) {
            id.rank = Some(r);
            id.rank_from = Some("file name");
        }
    }
    Ok(id)
}

/// "rank 3 · host-a", "rank 3", "NAME · host-a" (NAME: the file's stem, without rank).
pub fn label_of(id: &Identity, path: &Path, forced: Option<&str>) -> String {
    let who = match (forced, id.rank) {
        (Some(f), _) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
            format!(
                "rank {}",
                f.trim_start_matches('0').parse::<i64>().unwrap_or(0)
            )
        }
        (Some(f), _) if !f.is_empty() => f.to_string(),
        (_, Some(r)) => format!("rank {r}"),
        _ => file_stem(path),
    };
    match &id.host {
        Some(h) => format!("{who} · {h}"),
        None => who,
    }
}

/// `--ranks 0-7,12`: the ranks and ranges a merge keeps.
pub fn parse_ranks(list: &str) -> Result<Vec<(i64, i64)>> {
    let bad = || anyhow!("--ranks {list}: ranks and ranges separated by commas, e.g. 0-7,12");
    list.split(',')
        .map(|item| {
            let item = item.trim();
            let (lo, hi) = item.split_once('-').unwrap_or((item, item));
            let (lo, hi): (i64, i64) = (
                lo.trim().parse().map_err(|_| bad())?,
                hi.trim().parse().map_err(|_| bad())?,
            );
            if lo > hi {
                return Err(bad());
            }
            Ok((lo, hi))
        })
        .collect()
}

/// Whether `rank` is in `ranks` (a report without a rank never is).
fn keeps_rank(ranks: &[(i64, i64)], rank: Option<i64>) -> bool {
    rank.is_some_and(|r| ranks.iter().any(|&(lo, hi)| lo <= r && r <= hi))
}

/// The note after a merge whose output a browser tab may not hold (see [`crate::open`]).
fn browser_note(output: &Path, bytes: u64) -> Option<String> {
    (bytes > crate::open::BIG_TRACE).then(|| {
        format!(
            "  note: {} is {:.1} GB; a browser tab holds about 2 GB, 2-4x the file: open it \
             with `nsys-perfetto open --native {}` (trace_processor on this machine), or \
             merge fewer ranks (--ranks) or less (--types, --time-range, --nvtx-filter)\n",
            output.display(),
            bytes as f64 / 1e9,
            output.display()
        )
    })
}

/// Labels made unique: a repeated one gets its file's stem (then its position) appended.
fn unique_labels(labels: &mut [String], paths: &[PathBuf]) {
    let count = |ls: &[String], l: &String| ls.iter().filter(|x| *x == l).count();
    let snapshot = labels.to_vec();
    for (i, l) in labels.iter_mut().enumerate() {
        if count(&snapshot, l) > 1 {
            *l = format!("{l} · {}", file_stem(&paths[i]));
        }
    }
    let snapshot = labels.to_vec();
    for (i, l) in labels.iter_mut().enumerate() {
        if count(&snapshot, l) > 1 {
            *l = format!("{l} #{}", i + 1);
        }
    }
}

/// One input of a merge, ready: its export (kept alive while the merge runs) and its name.
pub struct Source {
    pub input: PathBuf,
    pub profile: Profile,
    pub identity: Identity,
    pub label: String,
    /// Where it goes on the timeline, read with its identity (the merge opens it once more, to
    /// convert it).
    pub clock: Clock,
}

/// How [`prepare`] and `run` work.
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    pub align: Align,
    /// `--label`: a regex whose first capture group names a report from its file name.
    pub label: Option<String>,
    pub jobs: usize,
    pub export: ExportOptions,
}

/// Export the reports (in parallel) and name every input. Errors name the file.
pub fn prepare(files: &[PathBuf], opts: &MergeOptions) -> Result<Vec<Source>> {
    let label_re = opts
        .label
        .as_deref()
        .map(|r| {
            let re = Regex::new(r).map_err(|e| anyhow!("--label: {e}"))?;
            if re.captures_len() < 2 {
                bail!("--label: the regex needs a capture group, e.g. 'node(\\d+)'");
            }
            Ok(re)
        })
        .transpose()?;
    let prepared = parallel_map(files, opts.jobs, |_, input| -> Result<Source> {
        let profile = input::prepare(input, &opts.export)?;
        let export = Export::open_described(profile.export(), false)?;
        let identity = identity_of(&export, input)?;
        let forced = match &label_re {
            Some(re) => {
                let name = input
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default();
                let c = re.captures(&name).ok_or_else(|| {
                    anyhow!("--label {} does not match the file name", re.as_str())
                })?;
                Some(c.get(1).map_or("", |m| m.as_str()).to_string())
            }
            None => None,
        };
        let label = label_of(&identity, input, forced.as_deref());
        Ok(Source {
            input: input.clone(),
            profile,
            identity,
            label,
            clock: Clock::of(&export)?,
        })
    });
    let mut sources = Vec::new();
    for (r, f) in prepared.into_iter().zip(files) {
        sources.push(r.map_err(|e| {
            anyhow!(
                "{}: {}",
                f.display(),
                nsys_perfetto_model::errors::error_line(&e)
            )
        })?);
    }
    // Ranks in order (rank 2 before rank 10, whatever the file names), then unranked reports.
    sources.sort_by_key(|s| (s.identity.rank.is_none(), s.identity.rank));
    let paths: Vec<PathBuf> = sources.iter().map(|s| s.input.clone()).collect();
    let mut labels: Vec<String> = sources.iter().map(|s| s.label.clone()).collect();
    unique_labels(&mut labels, &paths);
    for (s, l) in sources.iter_mut().zip(labels) {
        s.label = l;
    }
    Ok(sources)
}

/// What a merge did.
#[derive(Debug)]
pub struct Merged {
    pub summary: Summary,
    pub sources: Vec<MergedSource>,
    pub labels: Vec<String>,
}

impl Merged {
    /// Latest minus earliest wall-clock session start of the reports that record one.
    pub fn spread_ns(&self) -> Option<i64> {
        let starts: Vec<i64> = self
            .sources
            .iter()
            .filter_map(|s| s.session_start_utc_ns)
            .collect();
        Some(starts.iter().max()? - starts.iter().min()?)
    }
}

/// A duration that may be days or years long, in the largest unit that reads well.
fn long_ns(ns: i64) -> String {
    const HOUR: f64 = 3600e9;
    let h = ns as f64 / HOUR;
    if h >= 24.0 * 365.0 {
        format!("{:.1} years", h / (24.0 * 365.25))
    } else if h >= 48.0 {
        format!("{:.1} days", h / 24.0)
    } else if h >= 2.0 {
        format!("{h:.1} hours")
    } else {
        human_ns(ns)
    }
}

/// Merge prepared sources into `output`.
pub fn merge(
    sources: &[Source],
    output: &Path,
    opts: &MergeOptions,
    conv: &Options,
) -> Result<Merged> {
    let inputs: Vec<(PathBuf, String)> = sources
        .iter()
        .map(|s| (s.profile.export().to_path_buf(), s.label.clone()))
        .collect();
    let clocks: Vec<Clock> = sources.iter().map(|s| s.clock.clone()).collect();
    let (summary, placed) = merge_clocked(&inputs, &clocks, output, opts.align, conv, opts.jobs)?;
    Ok(Merged {
        summary,
        sources: placed,
        labels: inputs.into_iter().map(|(_, l)| l).collect(),
    })
}

/// One line of [`render`]: a merged report as the user knows it.
pub struct Row {
    pub label: String,
    /// The file named (a report, an export, a part).
    pub input: String,
    pub rank: Option<i64>,
    pub rank_from: Option<String>,
    /// How the report was exported, when it was.
    pub exported: Option<String>,
}

impl Row {
    fn of(src: &Source) -> Row {
        Row {
            label: src.label.clone(),
            input: src.input.display().to_string(),
            rank: src.identity.rank,
            rank_from: src.identity.rank_from.map(str::to_string),
            exported: src.profile.describe(),
        }
    }
}

/// The report printed after a merge: a line per report (label, file, offset, events), the
/// spread of start times, then the whole trace's summary.
pub fn render(merged: &Merged, sources: &[Row], align: Align) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let one = sources.len() == 1;
    for (i, (src, placed)) in sources.iter().zip(&merged.sources).enumerate() {
        // One source keeps no per-source summary: the whole is its own.
        let part = match merged.summary.per_source.get(i) {
            Some(p) => Some(p),
            None if one => Some(&merged.summary),
            None => None,
        };
        let offset = match (align, placed.session_start_utc_ns) {
            (Align::Start, _) => "start at 0".to_string(),
            (Align::WallClock, Some(_)) => format!("offset +{}", long_ns(placed.offset_ns)),
            (Align::WallClock, None) => "no wall clock recorded: start at 0".to_string(),
        };
        let rank = match (src.rank, &src.rank_from) {
            (Some(_), Some(from)) => format!(", rank from {from}"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "  [{}] {}: {} ({offset}{rank}), {} events, {} flows",
            i + 1,
            src.label,
            src.input,
            part.map_or(0, |p| p.total_events()),
            part.map_or(0, |p| p.flows),
        );
        if let Some(e) = &src.exported {
            let _ = writeln!(s, "      {e}");
        }
    }
    match (align, merged.spread_ns()) {
        _ if one => {
            let _ = writeln!(
                s,
                "  note: one report given, so nothing was merged: the trace is this report's \
                 conversion (name two or more reports, or a pattern, to merge them)"
            );
        }
        (Align::WallClock, Some(spread)) => {
            let _ = writeln!(
                s,
                "  session starts spread over {} (latest minus earliest)",
                long_ns(spread)
            );
            // Ranks of one job start within seconds of each other; hours apart are separate runs.
            if spread > 3_600_000_000_000 {
                let _ = writeln!(
                    s,
                    "  note: more than an hour apart, separate runs? --align start puts them all at zero"
                );
            }
        }
        // Placed at zero, the reports' wall-clock starts say nothing about the trace.
        (Align::Start, _) => {
            let _ = writeln!(s, "  every report starts at 0 (--align start)");
        }
        _ => {}
    }
    s.push_str(&merged.summary.render());
    s
}

impl MergeArgs {
    /// The format asked for, else the one the output name implies (as a conversion chooses).
    pub fn output_format(&self) -> Result<OutputFormat> {
        crate::format::chosen(self.format, Some(&self.output))
    }

    /// Merge (or make a part of) the inputs; the text says what was written.
    pub fn merge(&self, opts: &MergeOptions, conv: &Options) -> Result<String> {
        if !self.part
            && let Some(parts) = self.parts()?
        {
            return self.assemble(&parts, conv);
        }
        let ex = batch::expand(&self.inputs);
        if let Some((arg, e)) = ex.errors.first() {
            bail!("{arg}: {e}");
        }
        if !self.quiet {
            for (f, why) in &ex.superseded {
                nsys_perfetto_model::say!("{}: not merged, {why}", f.display());
            }
        }
        check_output(&self.output, &ex.files)?;
        let mut sources = prepare(&ex.files, opts)?;
        if let Some(list) = &self.ranks {
            let ranks = parse_ranks(list)?;
            sources.retain(|s| keeps_rank(&ranks, s.identity.rank));
            if sources.is_empty() {
                bail!("--ranks {list}: no report records one of these ranks");
            }
        }
        if self.part {
            if self.pictures().any() {
                bail!(
                    "--util-map and --stragglers need every rank: give them to a merge of the \
                     reports, not to --part"
                );
            }
            return write_part(&sources, &self.output, opts, conv);
        }
        let mut conv = conv.clone();
        if self.pictures().any() {
            let inputs: Vec<(PathBuf, String)> = sources
                .iter()
                .map(|s| (s.profile.export().to_path_buf(), s.label.clone()))
                .collect();
            conv.pictures = Some(std::sync::Arc::new(crate::workflow::pictures::compute(
                &inputs,
                self.pictures(),
                &opts.export,
                opts.jobs,
            )?));
        }
        let merged = merge(&sources, &self.output, opts, &conv)?;
        let rows: Vec<Row> = sources.iter().map(Row::of).collect();
        Ok(format!(
            "merged {} report{} -> {}\n{}{}",
            sources.len(),
            if sources.len() == 1 { "" } else { "s" },
            self.output.display(),
            render(&merged, &rows, opts.align),
            browser_note(&self.output, merged.summary.output_bytes).unwrap_or_default()
        ))
    }

    /// What `--util-map`, `--bins` and `--stragglers` ask to draw.
    fn pictures(&self) -> crate::pictures::PictureOptions {
        crate::pictures::PictureOptions {
            util_bins: self.util_map.then_some(usize::from(self.bins)),
            stragglers: self.stragglers,
        }
    }

    /// `merge PART...`: every input a part made by `merge --part`; `None` when none is. Parts
    /// and other inputs together are refused, naming the first that is not a part.
    fn parts(&self) -> Result<Option<Vec<PathBuf>>> {
        let mut parts = Vec::new();
        let mut other = None;
        for input in &self.inputs {
            if input.is_file() && read_part_header(input)?.is_some() {
                parts.push(input.clone());
            } else {
                other.get_or_insert(input);
            }
        }
        match other {
            None => Ok(Some(parts)),
            Some(_) if parts.is_empty() => Ok(None),
            Some(o) => bail!(
                "{}: not a part, but {} is: a merge takes reports or parts (made by `merge \
                 --part`), not both",
                o.display(),
                parts[0].display()
            ),
        }
    }

    fn assemble(&self, parts: &[PathBuf], conv: &Options) -> Result<String> {
        if self.output_format()? != OutputFormat::Protobuf {
            bail!("parts merge into a .pftrace only (JSON has no machines)");
        }
        if self.pictures().any() {
            bail!(
                "--util-map and --stragglers read the reports: merge the reports (or their \
                 exports), not parts"
            );
        }
        if !conv.content_text().is_empty() {
            bail!(
                "parts are merged as they were made: give the selection options to \
                 `merge --part`, where each part is made"
            );
        }
        check_output(&self.output, parts)?;
        let ranks = self.ranks.as_deref().map(parse_ranks).transpose()?;
        let (summary, placed, headers) = assemble_parts(parts, &self.output, |h: &PartHeader| {
            ranks.as_ref().is_none_or(|r| keeps_rank(r, h.rank))
        })?;
        let align = headers.first().map_or(Align::WallClock, |h| h.align);
        let rows: Vec<Row> = headers
            .iter()
            .map(|h| Row {
                label: h.label.clone(),
                input: h.input.clone(),
                rank: h.rank,
                rank_from: h.rank_from.clone(),
                exported: None,
            })
            .collect();
        let merged = Merged {
            summary,
            sources: placed,
            labels: headers.iter().map(|h| h.label.clone()).collect(),
        };
        Ok(format!(
            "merged {} part{} -> {}\n{}{}",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" },
            self.output.display(),
            render(&merged, &rows, align),
            browser_note(&self.output, merged.summary.output_bytes).unwrap_or_default()
        ))
    }
}

/// `merge --part REPORT -o PART`: one report converted as a part of a later merge.
fn write_part(
    sources: &[Source],
    output: &Path,
    opts: &MergeOptions,
    conv: &Options,
) -> Result<String> {
    let [src] = sources else {
        bail!(
            "--part makes one part of one report ({} given): run one task per report",
            sources.len()
        );
    };
    if conv.format != OutputFormat::Protobuf {
        bail!("a part is a .pftrace (JSON has no machines)");
    }
    let who = PartIdentity {
        label: &src.label,
        rank: src.identity.rank,
        rank_from: src.identity.rank_from,
        origin: &src.input,
    };
    let summary = crate::convert::merge::write_part(
        src.profile.export(),
        &who,
        &src.clock,
        output,
        opts.align,
        conv,
    )
    .map_err(|e| {
        anyhow!(
            "{}: {}",
            src.input.display(),
            nsys_perfetto_model::errors::error_line(&e)
        )
    })?;
    Ok(format!(
        "part {} ({}) -> {}\n{}",
        src.label,
        src.input.display(),
        output.display(),
        summary.render()
    ))
}

/// The output is a file that is not one of the inputs.
fn check_output(output: &Path, inputs: &[PathBuf]) -> Result<()> {
    if output.is_dir() {
        bail!(
            "-o {} is a directory: a merge writes one file",
            output.display()
        );
    }
    if inputs.is_empty() {
        bail!("nothing to merge");
    }
    if let Ok(out) = std::fs::canonicalize(output)
        && inputs
            .iter()
            .any(|i| std::fs::canonicalize(i).is_ok_and(|i| i == out))
    {
        bail!("-o {} is one of the inputs", output.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_names() {
        assert_eq!(rank_from_thread_name("MPI Rank 3"), Some(3));
        assert_eq!(rank_from_thread_name("rank 12"), Some(12));
        assert_eq!(rank_from_thread_name("worker 3"), None);
        assert_eq!(rank_from_thread_name("MPI Rank 3 helper"), None);
        let f = |s: &str| rank_from_file_name(Path::new(s));
        assert_eq!(f("dir/rank_3.nsys-rep"), Some(3));
        assert_eq!(f("job.rank-07.sqlite"), Some(7));
        assert_eq!(f("report_r12_node4.qdrep"), Some(12));
        assert_eq!(f("mpi_report2.qdrep"), Some(2));
        assert_eq!(f("profile.sqlite"), None);
        assert_eq!(f("trace_r2.sqlite"), Some(2));
        assert_eq!(f("run5.export-2023.4.4.sqlite"), Some(5));
    }

    #[test]
    fn rank_lists() {
        let r = parse_ranks("0-7, 12").unwrap();
        assert_eq!(r, [(0, 7), (12, 12)]);
        assert!(keeps_rank(&r, Some(7)) && keeps_rank(&r, Some(12)));
        assert!(!keeps_rank(&r, Some(8)) && !keeps_rank(&r, None));
        for bad in ["", "3-1", "a", "1-", "1,,2"] {
            assert!(parse_ranks(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_trace_too_big_for_a_tab_names_open_native() {
        let out = Path::new("job.pftrace");
        assert_eq!(browser_note(out, crate::open::BIG_TRACE), None);
        let note = browser_note(out, 3 << 30).unwrap();
        assert!(
            note.contains("3.2 GB") && note.contains("nsys-perfetto open --native job.pftrace"),
            "{note}"
        );
    }

    #[test]
    fn labels() {
        let id = Identity {
            rank: Some(3),
            rank_from: Some("thread name"),
            host: Some("host-a".into()),
        };
        let p = Path::new("x/run_7.sqlite");
        assert_eq!(label_of(&id, p, None), "rank 3 · host-a");
        assert_eq!(label_of(&id, p, Some("007")), "rank 7 · host-a");
        assert_eq!(label_of(&id, p, Some("before")), "before · host-a");
        let none = Identity::default();
        assert_eq!(label_of(&none, p, None), "run_7");
        let mut ls = vec!["a".to_string(), "a".to_string(), "b".to_string()];
        unique_labels(
            &mut ls,
            &[
                PathBuf::from("p.sqlite"),
                PathBuf::from("q.sqlite"),
                PathBuf::from("b.sqlite"),
            ],
        );
        assert_eq!(ls, ["a · p", "a · q", "b"]);
    }
}
