//! `nsys-perfetto sweep -p V... -o NAME -- COMMAND...`: profile a command once per parameter
//! value and tabulate the extracted event times ([`crate::workflow::sweep`] runs it).

use crate::args::UnitArg;
use crate::outcome::{Outcome, on_one_line, usage};
use crate::workflow::Pattern;
use crate::workflow::sweep::{Metric, SweepOptions, sweep};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// Which number a sweep table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MetricArg {
    /// Total time of the events per run (mean over iterations).
    #[default]
    Total,
    /// Mean duration of one event.
    Mean,
    /// Number of events per run (mean over iterations).
    Count,
}

impl From<MetricArg> for Metric {
    fn from(m: MetricArg) -> Metric {
        match m {
            MetricArg::Total => Metric::Total,
            MetricArg::Mean => Metric::Mean,
            MetricArg::Count => Metric::Count,
        }
    }
}

/// `nsys-perfetto sweep -p V... [--iter N] [-e PATTERN...] -o NAME -- COMMAND...`.
#[derive(clap::Args, Debug, Clone)]
pub struct SweepArgs {
    /// Parameter values: each replaces `$p` in the command's arguments and in the output name.
    #[arg(short = 'p', long = "param", required = true, num_args = 1.., value_name = "VALUE")]
    pub values: Vec<String>,
    /// Profile each value N times; cells are means over the iterations.
    #[arg(long = "iter", default_value_t = 1, value_name = "N")]
    pub iterations: usize,
    /// An event-name pattern (repeat for more: -e gemm -e 're:^nccl'): a substring, or
    /// 're:REGEX'. Default: the 10 kernels and 10 NVTX ranges with the most time in the first
    /// profile.
    #[arg(short, long = "events", value_name = "PATTERN")]
    pub events: Vec<String>,
    /// Read every pattern as a regex.
    #[arg(long)]
    pub regex: bool,
    /// Report name of each run, with `$p` (quote it: 'run_$p'); nsys adds .nsys-rep, the export
    /// is NAME_arwdir (NAME.sqlite from nsys before 2023). With --iter, -1, -2... follow the name.
    #[arg(short, long, default_value = "sweep_$p", value_name = "NAME")]
    pub output: String,
    /// Also write the table as CSV (times in ns; rows total_ns, mean_ns and count per event).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// What the terminal table shows.
    #[arg(long, value_enum, default_value = "total")]
    pub metric: MetricArg,
    /// Time unit of the terminal table.
    #[arg(long, value_enum, default_value = "us", value_name = "UNIT")]
    pub unit: UnitArg,
    /// APIs to trace (nsys profile --trace).
    #[arg(short, long, default_value = "cuda,nvtx,osrt", value_name = "LIST")]
    pub trace: String,
    /// Stop nsys and the program after SECS seconds (each run).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// The nsys to use (binary or install directory). Default: $NSYS, then PATH, then the
    /// usual install places.
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// Do not convert each run's profile to NAME.pftrace.
    #[arg(long)]
    pub no_traces: bool,
    /// Show nsys's and the program's output (by default shown only when a run fails).
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to profile, after `--`, with `$p` where the value goes.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl SweepArgs {
    pub fn options(&self) -> Result<SweepOptions> {
        Ok(SweepOptions {
            values: self.values.clone(),
            iterations: self.iterations,
            patterns: self
                .events
                .iter()
                .map(|p| Pattern::parse(p, self.regex))
                .collect::<Result<_>>()?,
            output: self.output.clone(),
            command: self.command.clone(),
            export: crate::report::export::ExportOptions {
                nsys: self.nsys.clone(),
                quiet: true,
                ..Default::default()
            },
            traces: !self.no_traces,
        })
    }
}

pub fn run(args: &SweepArgs) -> Result<Outcome> {
    let opts = args.options().map_err(usage)?;
    let mut profile = |command: &[String], output: &Path| -> Result<PathBuf> {
        let popts = crate::report::profile::ProfileOptions {
            nsys: args.nsys.clone(),
            output: Some(output.to_path_buf()),
            trace: args.trace.clone(),
            timeout: args.timeout.map(std::time::Duration::from_secs),
            quiet: !args.verbose,
            ..Default::default()
        };
        let command: Vec<std::ffi::OsString> = command.iter().map(Into::into).collect();
        crate::report::profile::profile(&popts, &command)
    };
    let mut progress = |line: &str| nsys_perfetto_model::say!("sweep: {line}");
    let sw = sweep(&opts, &mut profile, &mut progress).map_err(on_one_line)?;
    for r in &sw.runs {
        match &r.trace {
            Some(t) => nsys_perfetto_model::say!(
                "sweep: p={} -> {}, {}",
                r.value,
                r.profile.display(),
                t.display()
            ),
            None => {
                nsys_perfetto_model::say!("sweep: p={} -> {}", r.value, r.profile.display())
            }
        }
    }
    nsys_perfetto_model::term::out(format_args!(
        "{}",
        sw.table(args.metric.into(), args.unit.into())
    ));
    if let Some(csv) = &args.csv {
        crate::workflow::write_file(csv, &sw.csv()).map_err(on_one_line)?;
        nsys_perfetto_model::say!("sweep: CSV written to {}", csv.display());
    }
    Ok(Outcome::Done)
}
