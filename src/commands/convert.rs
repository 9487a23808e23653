//! `nsys-perfetto INPUT...` (no subcommand): convert profiles into traces, one output each
//! ([`crate::batch`] expands the inputs and runs the conversions).

use crate::args::{NsysArgs, SelectArgs, format_parser};
use crate::convert::Options;
use crate::outcome::{Outcome, usage};
use anyhow::Result;
use clap::Args;
use nsys_perfetto_write::output::formats::OutputFormat;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// Profiles to convert: nsys reports (.nsys-rep, .qdrep; exported with nsys), their SQLite,
    /// Arrow or Parquet exports (.sqlite; .arrows, or a directory, from --type arrow, arrowdir
    /// or parquetdir), directories of them, glob patterns.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Output file (default: next to the input, with .pftrace or .json). A name ending in .gz
    /// is gzip-compressed.
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Output format (default: json when OUT ends in .json or .json.gz, else protobuf).
    #[arg(long, value_name = "FORMAT", value_parser = format_parser())]
    pub format: Option<OutputFormat>,
    /// JSON output: colour NVTX ranges with the nearest Chrome colour names.
    #[arg(long)]
    pub json_colors: bool,
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub select: SelectArgs,
    /// Add the findings of nsys' expert rules (as `analyze` finds them, nsys' defaults) as an
    /// "Analysis" track group: one slice per finding on the time it covers, with the rule's
    /// explanation and advice, and an arrow from the CUDA call it blames.
    #[arg(long)]
    pub analyze: bool,
    /// Convert even inputs whose output was made from the same input with the same options.
    /// (With several inputs, a directory or a pattern, those are reused; a single file is
    /// always converted.)
    #[arg(long)]
    pub force: bool,
    /// Check the SQLite file first (PRAGMA quick_check) and refuse it when damaged. Off by
    /// default (it reads the whole file once more); damage met while reading fails anyway.
    #[arg(long)]
    pub check: bool,
    /// Files exported and converted at the same time (default: all cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub nsys: NsysArgs,
}

impl ConvertArgs {
    /// The format asked for, else the one the output name implies. Contradictory choices
    /// (`-o x.json --format protobuf`) are an error.
    pub fn output_format(&self) -> anyhow::Result<OutputFormat> {
        crate::format::chosen(self.format, self.output.as_deref())
    }
}

pub fn run(args: &ConvertArgs) -> Result<Outcome> {
    let format = args.output_format().map_err(usage)?;
    let opts = Options {
        format,
        json_colors: args.json_colors || args.select.nvtx_color_scheme.is_some(),
        progress: !args.quiet,
        check: args.check,
        analyze: args.analyze,
        pictures: None,
        selection: args.select.selection().map_err(usage)?,
    };
    let batch = crate::batch::BatchOptions {
        output: args.output.clone(),
        force: args.force,
        quiet: args.quiet,
        export: args.nsys.export_options(args.quiet),
        jobs: args.jobs.unwrap_or(0),
    };
    Ok(if crate::batch::run(&args.inputs, &batch, &opts).ok() {
        Outcome::Done
    } else {
        Outcome::SomeFailed
    })
}
