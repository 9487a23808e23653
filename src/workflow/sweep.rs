//! `nsys-perfetto sweep -p V... [--iter N] [-e PATTERN...] -o NAME -- COMMAND...`:
//! profile a command once per parameter value (`$p` in the command's arguments and in the
//! output name is replaced by the value), extract the matching event times from each profile and
//! tabulate them with one column per value. With `--iter N` every value runs N times and each
//! cell is the mean over the iterations (an iteration where the event did not occur counts as 0).
//!
//! Each run's profile is also converted to a Perfetto trace beside its report (`run_16.pftrace`),
//! the file people open next; the table names them.
//!
//! Without `-e`, the events are the 10 kernels and the 10 NVTX ranges with the most total
//! time in the first profile, matched by exact name (its memory operations and CUDA API calls
//! when it has neither; an error, before the other runs, when it has none of these).

use super::extract::{Extract, extract_of};
use super::stats::StatsOptions;
use super::stats::query::stats_of;
use super::{Pattern, Table, Unit, csv_line, plain_f64};
use crate::input;
use anyhow::{Context, Result, bail};
use nsys_perfetto_model::category::Kind;
use nsys_perfetto_read::source::Export;
use std::path::{Path, PathBuf};

/// The placeholder replaced by each parameter value.
pub const PLACEHOLDER: &str = "$p";

#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// Parameter values, in column order.
    pub values: Vec<String>,
    /// Runs per value (at least 1).
    pub iterations: usize,
    /// Event patterns; empty = the top kernels and NVTX ranges of the first profile.
    pub patterns: Vec<Pattern>,
    /// Output name template (`run_$p`): each run's report goes there (nsys adds its extension).
    pub output: String,
    /// The command and its arguments, with `$p` placeholders.
    pub command: Vec<String>,
    /// How reports are exported (Arrow or SQLite, cached).
    pub export: crate::report::export::ExportOptions,
    /// Convert each run's profile to `OUTPUT.pftrace` (the output name of the run plus
    /// `.pftrace`).
    pub traces: bool,
}

/// One profiled run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub value: String,
    /// 1-based.
    pub iteration: usize,
    /// The command as run.
    pub command: Vec<String>,
    /// The output name given to the profiler.
    pub output: PathBuf,
    /// The profile the profiler produced.
    pub profile: PathBuf,
    /// The Perfetto trace written for it ([`SweepOptions::traces`]).
    pub trace: Option<PathBuf>,
    pub extract: Extract,
}

/// An event's numbers for one parameter value, over its iterations.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Cell {
    pub iterations: usize,
    /// Events summed over the iterations.
    pub count_sum: u64,
    /// Durations summed over the iterations, ns.
    pub total_sum: i64,
}

impl Cell {
    /// Mean number of events per iteration.
    pub fn count(&self) -> f64 {
        self.count_sum as f64 / self.iterations.max(1) as f64
    }
    /// Mean total time per iteration, ns.
    pub fn total(&self) -> f64 {
        self.total_sum as f64 / self.iterations.max(1) as f64
    }
    /// Mean duration of one event over all iterations, ns (NaN without events).
    pub fn mean(&self) -> f64 {
        if self.count_sum == 0 {
            f64::NAN
        } else {
            self.total_sum as f64 / self.count_sum as f64
        }
    }
}

/// Which number a sweep table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Metric {
    /// Total time of the events per run (mean over iterations).
    #[default]
    Total,
    /// Mean duration of one event.
    Mean,
    /// Number of events per run (mean over iterations).
    Count,
}

impl Metric {
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Total => "total_ns",
            Metric::Mean => "mean_ns",
            Metric::Count => "count",
        }
    }
    fn value(self, c: &Cell) -> f64 {
        match self {
            Metric::Total => c.total(),
            Metric::Mean => c.mean(),
            Metric::Count => c.count(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SweepRow {
    pub pattern: String,
    pub kind: Option<Kind>,
    /// One per parameter value, in [`Sweep::values`] order.
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub values: Vec<String>,
    pub iterations: usize,
    pub rows: Vec<SweepRow>,
    pub runs: Vec<Run>,
}

/// Replace every `$p` in `s` by `value`.
pub fn substitute(s: &str, value: &str) -> String {
    s.replace(PLACEHOLDER, value)
}

/// The output name of one run: the template with the value substituted (or appended when the
/// template has no `$p`), and `-ITER` appended when values run more than once.
pub fn output_name(template: &str, value: &str, iteration: usize, iterations: usize) -> String {
    let mut name = if template.contains(PLACEHOLDER) {
        substitute(template, value)
    } else {
        format!("{template}_{value}")
    };
    if iterations > 1 {
        name = format!("{name}-{iteration}");
    }
    name
}

/// Run the sweep. `profile(command, output)` profiles one command into `output` (a name
/// without extension) and returns the profile it wrote (an SQLite export or a report).
/// `progress` hears about each run before it starts.
pub fn sweep(
    opts: &SweepOptions,
    profile: &mut dyn FnMut(&[String], &Path) -> Result<PathBuf>,
    progress: &mut dyn FnMut(&str),
) -> Result<Sweep> {
    if opts.values.is_empty() {
        bail!("no parameter values (-p)");
    }
    if opts.command.is_empty() {
        bail!("no command to profile (after --)");
    }
    let iterations = opts.iterations.max(1);
    let mut patterns = opts.patterns.clone();
    let mut runs = Vec::new();
    for value in &opts.values {
        for iteration in 1..=iterations {
            let command: Vec<String> = opts.command.iter().map(|a| substitute(a, value)).collect();
            let output = PathBuf::from(output_name(&opts.output, value, iteration, iterations));
            progress(&format!(
                "p={value}{}: {}",
                if iterations > 1 {
                    format!(" (iteration {iteration}/{iterations})")
                } else {
                    String::new()
                },
                command.join(" ")
            ));
            let prof = profile(&command, &output)
                .with_context(|| format!("profiling p={value} ({})", command.join(" ")))?;
            let opened = input::open(&prof, &opts.export, true)
                .with_context(|| format!("{}", prof.display()))?;
            let ex = &opened.export;
            if patterns.is_empty() {
                let (top, what) = default_patterns(ex, &prof)?;
                if top.is_empty() {
                    bail!(
                        "no -e pattern given, and {} (p={value}) has no kernels, NVTX ranges, \
                         memory operations or CUDA API calls to choose from: name the events \
                         to tabulate with -e PATTERN (repeat for more)",
                        prof.display()
                    );
                }
                progress(&format!(
                    "no -e pattern given: tabulating {what} with the most time in p={value}'s \
                     profile"
                ));
                patterns = top;
            }
            let extract = extract_of(ex, &prof, &patterns)?;
            let trace = if opts.traces {
                let trace = trace_name(&output);
                let copts = crate::convert::Options {
                    progress: false,
                    ..Default::default()
                };
                crate::convert::convert_export(opened.profile.export(), &trace, &copts)
                    .with_context(|| format!("converting {}", opened.profile.export().display()))?;
                Some(trace)
            } else {
                None
            };
            runs.push(Run {
                value: value.clone(),
                iteration,
                command,
                output,
                profile: prof,
                trace,
                extract,
            });
        }
    }
    Ok(Sweep {
        values: opts.values.clone(),
        iterations,
        rows: tabulate(&opts.values, iterations, &patterns, &runs),
        runs,
    })
}

/// The trace of a run: its output name plus `.pftrace` (`run_16` -> `run_16.pftrace`).
pub fn trace_name(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_os_string();
    name.push(".pftrace");
    PathBuf::from(name)
}

/// The top 10 kernels and NVTX ranges of a profile, as exact-name patterns; without either, its
/// top 10 memory operations and CUDA API calls. With what they are, for the note that says so.
fn default_patterns(ex: &Export, path: &Path) -> Result<(Vec<Pattern>, &'static str)> {
    let st = stats_of(
        ex,
        path,
        &StatsOptions {
            top: 10,
            raw_names: true,
        },
    )?;
    let pick = |kinds: &[Kind]| {
        let mut out: Vec<Pattern> = Vec::new();
        for sec in st.sections.iter().filter(|s| kinds.contains(&s.kind)) {
            for r in &sec.rows {
                if !out.iter().any(|p| p.text == r.name) {
                    out.push(Pattern::exact(&r.name));
                }
            }
        }
        out
    };
    let top = pick(&[Kind::Kernel, Kind::Nvtx]);
    if !top.is_empty() {
        return Ok((top, "the 10 kernels and 10 NVTX ranges"));
    }
    Ok((
        pick(&[Kind::Memory, Kind::Api]),
        "the 10 memory operations and 10 CUDA API calls (it has no kernels or NVTX ranges)",
    ))
}

/// Rows: each (pattern, kind) that any run matched, patterns in order; a pattern no run matched
/// keeps one row without a kind.
fn tabulate(
    values: &[String],
    iterations: usize,
    patterns: &[Pattern],
    runs: &[Run],
) -> Vec<SweepRow> {
    let mut rows = Vec::new();
    for p in patterns {
        let mut kinds: Vec<Kind> = runs
            .iter()
            .flat_map(|r| r.extract.rows.iter())
            .filter(|r| r.pattern == p.text)
            .filter_map(|r| r.kind)
            .collect();
        kinds.sort();
        kinds.dedup();
        let keys: Vec<Option<Kind>> = if kinds.is_empty() {
            vec![None]
        } else {
            kinds.into_iter().map(Some).collect()
        };
        for kind in keys {
            let cells = values
                .iter()
                .map(|v| {
                    let mut c = Cell {
                        iterations,
                        ..Default::default()
                    };
                    for run in runs.iter().filter(|r| &r.value == v) {
                        for e in run.extract.rows.iter() {
                            if e.pattern == p.text && e.kind == kind {
                                c.count_sum += e.count;
                                c.total_sum += e.total;
                            }
                        }
                    }
                    c
                })
                .collect();
            rows.push(SweepRow {
                pattern: p.text.clone(),
                kind,
                cells,
            });
        }
    }
    rows
}

impl Sweep {
    /// The terminal table: one row per event, one column per value.
    pub fn table(&self, metric: Metric, unit: Unit) -> String {
        let mut headers: Vec<(String, bool)> =
            vec![("Event".into(), false), ("Kind".into(), false)];
        headers.extend(self.values.iter().map(|v| (format!("p={v}"), true)));
        let hdr: Vec<(&str, bool)> = headers.iter().map(|(h, r)| (h.as_str(), *r)).collect();
        let mut t = Table::new(&hdr);
        for r in &self.rows {
            let mut line = vec![
                r.pattern.clone(),
                r.kind.map_or("-", Kind::as_str).to_string(),
            ];
            for c in &r.cells {
                let v = metric.value(c);
                line.push(match metric {
                    Metric::Count => {
                        super::fmt_decimals(v, if self.iterations > 1 { 1 } else { 0 })
                    }
                    _ if r.kind.is_none() => "-".into(),
                    _ => unit.fmt_f64(v),
                });
            }
            t.rows.push(line);
        }
        let what = match metric {
            Metric::Total => format!("total time per run ({})", unit.as_str()),
            Metric::Mean => format!("mean event duration ({})", unit.as_str()),
            Metric::Count => "events per run".to_string(),
        };
        let iters = if self.iterations > 1 {
            format!(", mean of {} iterations", self.iterations)
        } else {
            String::new()
        };
        let mut s = format!("{what}{iters}\n{}", t.render());
        let traces: Vec<&Run> = self.runs.iter().filter(|r| r.trace.is_some()).collect();
        if !traces.is_empty() {
            s.push_str("\nPerfetto traces (open in ui.perfetto.dev):\n");
            let mut tt = Table::new(&[("Run", false), ("Trace", false)]);
            for r in traces {
                tt.rows.push(vec![
                    if self.iterations > 1 {
                        format!("p={} #{}", r.value, r.iteration)
                    } else {
                        format!("p={}", r.value)
                    },
                    r.trace
                        .as_ref()
                        .map_or_else(String::new, |t| t.display().to_string()),
                ]);
            }
            s.push_str(&tt.render());
        }
        s
    }

    /// CSV: `event,kind,metric,V1,V2...`, three rows per event (total_ns, mean_ns, count), in ns.
    pub fn csv(&self) -> String {
        let mut header = vec!["event".to_string(), "kind".into(), "metric".into()];
        header.extend(self.values.iter().cloned());
        let mut s = csv_line(&header);
        for r in &self.rows {
            for m in [Metric::Total, Metric::Mean, Metric::Count] {
                let mut line = vec![
                    r.pattern.clone(),
                    r.kind.map_or("", Kind::as_str).to_string(),
                    m.as_str().to_string(),
                ];
                line.extend(r.cells.iter().map(|c| plain_f64(m.value(c))));
                s.push_str(&csv_line(&line));
            }
        }
        s
    }
}
