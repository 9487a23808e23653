//! `nsys-perfetto stats PROFILE [PROFILE_B]`: nsys' summary reports of one profile, or two
//! compared ([`crate::workflow::stats`] computes and renders them).

use crate::args::OutputArgs;
use crate::input;
use crate::outcome::Outcome;
use crate::workflow::Output;
use crate::workflow::stats::comparison::compare;
use crate::workflow::stats::query::stats_with;
use crate::workflow::stats::{ReportChoice, Stats, StatsOptions};
use anyhow::Result;
use nsys_perfetto_model::category::Kind;
use nsys_perfetto_read::reports::{self, KernelNames};
use std::path::{Path, PathBuf};

/// `nsys-perfetto stats PROFILE [PROFILE_B]`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatsArgs {
    /// An nsys report (.nsys-rep, .qdrep) or export (.sqlite, .arrows, _arwdir, _pqtdir); with a
    /// second one, the two are compared side by side (count, total and change per name, B
    /// against A).
    #[arg(value_name = "PROFILE", required = true, num_args = 1..=2)]
    pub profiles: Vec<PathBuf>,
    /// Rows per report in a table, names per kind of event in a comparison (0: all; default
    /// 10). CSV and JSON hold every row unless --top is given.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// nsys reports to print, by nsys' names (`nsys stats --report`), comma-separated:
    /// cuda_gpu_kern_sum, cuda_api_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum,
    /// nvtx_sum, osrt_sum, um_sum, um_total_sum, um_cpu_page_faults_sum, openacc_sum,
    /// openmp_sum, cuda_gpu_kern_gb_sum, cuda_kern_exec_sum. A kernel report may end in
    /// `:base` or `:mangled`, as in nsys. Default: the ones nsys prints by default.
    #[arg(
        long = "report",
        short = 'r',
        value_name = "NAME[,NAME]",
        value_delimiter = ','
    )]
    pub reports: Vec<String>,
    /// Kernels under their base name (`shortName`, as the trace names their slices) instead of
    /// the demangled one, as nsys' `:base`.
    #[arg(long, conflicts_with = "mangled")]
    pub base: bool,
    /// Kernels under their mangled name where the export has it, as nsys' `:mangled`.
    #[arg(long)]
    pub mangled: bool,
    /// Also show the NVTX ranges projected onto the GPU (the span of the GPU work launched
    /// inside each range; no nsys report has it) in the table. JSON always holds it.
    #[arg(long)]
    pub nvtx_gpu: bool,
    /// Keep NVTX names that differ only in counters (', seq = N', ', op_id = N') apart; by
    /// default they are grouped under the name without them.
    #[arg(long)]
    pub raw_names: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl StatsArgs {
    /// The reports asked for, and how kernels are named.
    pub fn choice(&self) -> Result<ReportChoice> {
        let mut kernel_names = if self.base {
            KernelNames::Base
        } else if self.mangled {
            KernelNames::Mangled
        } else {
            KernelNames::Demangled
        };
        let mut reports = Vec::new();
        for r in &self.reports {
            let (name, option) = match r.trim().split_once(':') {
                Some((n, o)) => (n, Some(o)),
                None => (r.trim(), None),
            };
            let Some(rep) = reports::report_name(name) else {
                let known: Vec<&str> = reports::REPORTS.iter().map(|r| r.name).collect();
                anyhow::bail!("unknown report {name:?} (known: {})", known.join(", "));
            };
            match option {
                None => {}
                Some("base") if reports::names_kernels(name) => kernel_names = KernelNames::Base,
                Some("mangled") if reports::names_kernels(name) => {
                    kernel_names = KernelNames::Mangled
                }
                Some(o) => anyhow::bail!("report {name}: unknown option {o:?}"),
            }
            if !reports.contains(&rep) {
                reports.push(rep);
            }
        }
        // A table shows the reports (and our own NVTX-on-GPU section when asked), CSV the
        // reports alone; JSON and comparisons hold every section.
        let kinds = match self.out.format() {
            _ if self.profiles.len() > 1 => None,
            Output::Table if self.nvtx_gpu => Some(vec![Kind::NvtxGpu]),
            Output::Table => Some(Vec::new()),
            Output::Csv => Some(Vec::new()),
            Output::Json => None,
        };
        Ok(ReportChoice {
            reports,
            kernel_names,
            kinds,
        })
    }
}

pub fn run(args: &StatsArgs) -> Result<Outcome> {
    let table = args.out.format() == Output::Table;
    let top = args.top.unwrap_or(if table { 10 } else { 0 });
    let one = |path: &Path, top: usize, choice: &ReportChoice| -> Result<Stats> {
        let opened = input::open(path, &args.out.export_options(), true).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}",
                path.display(),
                nsys_perfetto_model::errors::error_line(&e)
            )
        })?;
        let ex = &opened.export;
        ex.schema
            .read_through(stats_with(
                ex,
                path,
                &StatsOptions {
                    top,
                    raw_names: args.raw_names,
                },
                choice,
            ))
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: {}",
                    path.display(),
                    nsys_perfetto_model::errors::error_line(&e)
                )
            })
    };
    let choice = args.choice()?;
    let text = match args.profiles.as_slice() {
        [a, b] => compare(
            &one(a, 0, &choice)?,
            &one(b, 0, &choice)?,
            args.top.unwrap_or(10),
        )
        .render(args.out.format(), args.out.unit()),
        [a] => one(a, top, &choice)?.render(args.out.format(), args.out.unit()),
        _ => anyhow::bail!("one or two profiles"),
    };
    args.out.emit(&text)?;
    Ok(Outcome::Done)
}
