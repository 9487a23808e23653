//! Every command, one file each: its arguments (unless `args` holds them for a module
//! that reads them whole) and `run(&args) -> Result<Outcome>`, which turns the arguments into
//! the options of the code that does the work. `cli::main` parses the command line, runs the
//! command through [`run`] and maps its [`Outcome`] or error to the exit
//! code. A new subcommand is its file here and its entry in [`Command`] and [`run`].

pub mod analyze;
pub mod completions;
pub mod convert;
pub mod extract;
pub mod man;
pub mod merge;
pub mod open;
pub mod profile;
pub mod recipe;
pub mod serve;
pub mod stats;
pub mod sweep;

use crate::args::{MergeArgs, OpenArgs, ServeArgs};
use crate::outcome::Outcome;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command under `nsys profile` and convert the report: NAME.nsys-rep, its export
    /// (NAME_arwdir, or NAME.sqlite from nsys before 2023) and NAME.pftrace.
    Profile(profile::ProfileArgs),
    /// nsys' summary reports as `nsys stats` prints them (kernels, memory operations, CUDA API
    /// calls, NVTX ranges, OS runtime...: count, total, mean, median, min, max, stddev, %), as a
    /// table, --csv (nsys' columns) or --json.
    Stats(stats::StatsArgs),
    /// Findings of nsys' expert rules, as `nsys analyze` finds them: synchronous CUDA calls,
    /// synchronous and pageable memcpys, synchronous memsets, GPU gaps and GPU time utilization.
    Analyze(analyze::AnalyzeArgs),
    /// Time of the events whose names match patterns (kernels, memory operations, API calls,
    /// NVTX ranges with their CPU and GPU time), per file: count, total, mean.
    Extract(extract::ExtractArgs),
    /// Profile a command once per parameter value ($p) and tabulate the extracted event times,
    /// one column per value: sweep -p 16 32 64 -o 'run_$p' -- ./app --size '$p'
    Sweep(sweep::SweepArgs),
    /// Show a trace in the Perfetto UI: serve it on 127.0.0.1:9001 and open
    /// ui.perfetto.dev on it (profiles are converted first). Over SSH, prints the link and the
    /// `ssh -L` line; --native for traces too large for a browser tab.
    Open(OpenArgs),
    /// A local web page (and HTTP API) to convert profiles, see their summary and statistics,
    /// download the traces or open them in Perfetto.
    Serve(ServeArgs),
    /// Merge the reports of one job (MPI ranks, nodes) or of several runs into one trace:
    /// merge rank_*.nsys-rep -o job.pftrace
    Merge(MergeArgs),
    /// nsys' per-rank analyses (`nsys recipe`), with the recipes' tables and columns:
    /// recipe cuda_gpu_kern_sum rank_*.nsys-rep (also cuda_api_sum, cuda_gpu_mem_time_sum,
    /// nvtx_sum, nvtx_gpu_proj_sum, mpi_sum, gpu_time_util, cuda_gpu_time_util_map); --csv, or
    /// Parquet files with --output DIR.
    Recipe(recipe::RecipeArgs),
    /// Print a shell completion script: nsys-perfetto completions bash >
    /// ~/.local/share/bash-completion/completions/nsys-perfetto
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff), or write one per command into a directory with --dir:
    /// nsys-perfetto man | man -l -
    Man(man::ManArgs),
}

/// Run `command`; `cli` describes the whole command line (for `completions` and `man`).
pub fn run(command: &Command, cli: fn() -> clap::Command) -> anyhow::Result<Outcome> {
    match command {
        Command::Profile(args) => profile::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Extract(args) => extract::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::Open(args) => open::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Recipe(args) => recipe::run(args),
        Command::Completions(args) => completions::run(args, cli),
        Command::Man(args) => man::run(args, cli),
    }
}
