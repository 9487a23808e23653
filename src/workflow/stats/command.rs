//! `nsys-perfetto stats`: the command, over `cli::args::StatsArgs`.

use super::{ReportChoice, Stats, StatsOptions};
use super::{compare, stats_with};
use crate::cli::args::StatsArgs;
use crate::input;
use crate::workflow::Output;
use anyhow::Result;
use nsys_perfetto_read::reports::totals::Kind;
use nsys_perfetto_read::reports::{self, KernelNames};
use std::path::Path;

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

    pub fn run(&self) -> std::process::ExitCode {
        let table = self.out.format() == Output::Table;
        let top = self.top.unwrap_or(if table { 10 } else { 0 });
        let one = |path: &Path, top: usize, choice: &ReportChoice| -> Result<Stats> {
            let ex = input::open(path, &self.out.export_options(), true).map_err(|e| {
                anyhow::anyhow!(
                    "{}: {}",
                    path.display(),
                    nsys_perfetto_model::errors::error_line(&e)
                )
            })?;
            ex.schema
                .read_through(stats_with(
                    &ex,
                    path,
                    &StatsOptions {
                        top,
                        raw_names: self.raw_names,
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
        let result = (|| -> Result<()> {
            let choice = self.choice()?;
            let text = match self.profiles.as_slice() {
                [a, b] => compare(
                    &one(a, 0, &choice)?,
                    &one(b, 0, &choice)?,
                    self.top.unwrap_or(10),
                )
                .render(self.out.format(), self.out.unit),
                [a] => one(a, top, &choice)?.render(self.out.format(), self.out.unit),
                _ => anyhow::bail!("one or two profiles"),
            };
            self.out.emit(&text)
        })();
        match result {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                nsys_perfetto_model::say!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        }
    }
}
