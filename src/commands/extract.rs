//! `nsys-perfetto extract PROFILE... -e PATTERN`: the time of the events whose names match
//! ([`crate::workflow::extract`] computes and renders it).

use crate::args::OutputArgs;
use crate::input;
use crate::outcome::{Outcome, usage};
use crate::workflow::Pattern;
use crate::workflow::extract::{extract_of, render};
use anyhow::Result;
use std::path::PathBuf;

/// `nsys-perfetto extract PROFILE... -e PATTERN [-e PATTERN...]`.
#[derive(clap::Args, Debug, Clone)]
pub struct ExtractArgs {
    /// nsys reports (.nsys-rep, .qdrep) or exports (.sqlite, .arrows, _arwdir, _pqtdir).
    #[arg(required = true, value_name = "PROFILE")]
    pub profiles: Vec<PathBuf>,
    /// An event-name pattern (repeat for more: -e gemm -e 're:^nccl'): a substring, or a regex
    /// as 're:REGEX'. Matched against kernel (short and demangled), memory operation, CUDA API
    /// and NVTX range names.
    #[arg(short, long = "events", required = true, value_name = "PATTERN")]
    pub events: Vec<String>,
    /// Read every pattern as a regex.
    #[arg(long)]
    pub regex: bool,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub fn run(args: &ExtractArgs) -> Result<Outcome> {
    let patterns: Vec<Pattern> = args
        .events
        .iter()
        .map(|p| Pattern::parse(p, args.regex))
        .collect::<Result<_>>()
        .map_err(usage)?;
    let mut results = Vec::new();
    let mut failed = false;
    for p in &args.profiles {
        match input::open(p, &args.out.export_options(), true).and_then(|o| {
            o.export
                .schema
                .read_through(extract_of(&o.export, p, &patterns))
        }) {
            Ok(r) => results.push(r),
            Err(e) => {
                nsys_perfetto_model::say!(
                    "error: {}: {}",
                    p.display(),
                    nsys_perfetto_model::errors::error_line(&e)
                );
                failed = true;
            }
        }
    }
    if let Err(e) = args
        .out
        .emit(&render(&results, args.out.format(), args.out.unit()))
    {
        nsys_perfetto_model::say!("error: {e:#}");
        failed = true;
    }
    Ok(if failed {
        Outcome::SomeFailed
    } else {
        Outcome::Done
    })
}
