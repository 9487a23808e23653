//! The command line: `nsys-perfetto INPUT...` converts; subcommands cover the workflows.

use crate::convert::{self, Options, OutputFormat};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

/// Convert NVIDIA Nsight Systems profiles into Perfetto traces (ui.perfetto.dev).
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
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
    /// Output file (default: next to the input, with .pftrace or .json). A name ending in .gz
    /// is gzip-compressed.
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Output format (default: json when OUT ends in .json or .json.gz, else protobuf).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<FormatArg>,
    /// JSON output: colour NVTX ranges with the nearest Chrome colour names.
    #[arg(long)]
    pub json_colors: bool,
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatArg {
    /// Perfetto protobuf (.pftrace)
    Protobuf,
    /// Chrome JSON trace (.json), for tools that read only that
    Json,
}

impl ConvertArgs {
    /// The format asked for, else the one the output name implies.
    pub fn output_format(&self) -> OutputFormat {
        match self.format {
            Some(FormatArg::Protobuf) => OutputFormat::Protobuf,
            Some(FormatArg::Json) => OutputFormat::Json,
            None => {
                let name = self
                    .output
                    .as_ref()
                    .map(|o| o.to_string_lossy().to_lowercase());
                if name.is_some_and(|n| n.ends_with(".json") || n.ends_with(".json.gz")) {
                    OutputFormat::Json
                } else {
                    OutputFormat::Protobuf
                }
            }
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None => run_convert(&cli.convert),
    }
}

fn run_convert(args: &ConvertArgs) -> ExitCode {
    let opts = Options {
        format: args.output_format(),
        json_colors: args.json_colors,
        ..Default::default()
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
