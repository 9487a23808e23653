//! The command line: `nsys-perfetto INPUT...` converts; subcommands cover the workflows.

use crate::convert::{self, Options, OutputFormat};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Convert NVIDIA Nsight Systems profiles into Perfetto traces (ui.perfetto.dev).
#[derive(Parser, Debug)]
#[command(version, about, args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub convert: ConvertArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {}

#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// Profiles to convert: nsys SQLite exports (.sqlite).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Output file (default: next to the input, with .pftrace).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => run_convert(&cli.convert),
    }
}

fn run_convert(args: &ConvertArgs) -> ExitCode {
    let opts = Options {
        format: OutputFormat::Protobuf,
    };
    let mut failed = 0;
    for input in &args.inputs {
        let output = args
            .output
            .clone()
            .unwrap_or_else(|| convert::default_output(input, opts.format));
        match convert::convert_sqlite(input, &output, &opts) {
            Ok(summary) => {
                if !args.quiet {
                    eprintln!("{} -> {}", input.display(), output.display());
                    eprint!("{}", summary.render());
                }
            }
            Err(e) => {
                eprintln!("error: {}: {e:#}", input.display());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
