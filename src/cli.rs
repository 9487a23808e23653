//! The command line: `nsys-perfetto INPUT...` converts; subcommands cover the workflows.

pub mod args;

use crate::convert::Options;
use args::{CompletionsArgs, ConvertArgs, ManArgs, ProfileArgs, SampleArg};
pub use args::{FormatArg, NsysArgs, SelectArgs};
use clap::{Parser, Subcommand};
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
pub enum Command {
    /// Run a command under `nsys profile` and convert the report: NAME.nsys-rep, its export
    /// (NAME_arwdir, or NAME.sqlite from nsys before 2023) and NAME.pftrace.
    Profile(ProfileArgs),
    /// nsys' summary reports as `nsys stats` prints them (kernels, memory operations, CUDA API
    /// calls, NVTX ranges, OS runtime...: count, total, mean, median, min, max, stddev, %), as a
    /// table, --csv (nsys' columns) or --json.
    Stats(args::StatsArgs),
    /// Findings of nsys' expert rules, as `nsys analyze` finds them: synchronous CUDA calls,
    /// synchronous and pageable memcpys, synchronous memsets, GPU gaps and GPU time utilization.
    Analyze(args::AnalyzeArgs),
    /// Time of the events whose names match patterns (kernels, memory operations, API calls,
    /// NVTX ranges with their CPU and GPU time), per file: count, total, mean.
    Extract(args::ExtractArgs),
    /// Profile a command once per parameter value ($p) and tabulate the extracted event times,
    /// one column per value: sweep -p 16 32 64 -o 'run_$p' -- ./app --size '$p'
    Sweep(args::SweepArgs),
    /// Show a trace in the Perfetto UI: serve it on 127.0.0.1:9001 and open
    /// ui.perfetto.dev on it (profiles are converted first). Over SSH, prints the link and the
    /// `ssh -L` line; --native for traces too large for a browser tab.
    Open(args::OpenArgs),
    /// A local web page (and HTTP API) to convert profiles, see their summary and statistics,
    /// download the traces or open them in Perfetto.
    Serve(args::ServeArgs),
    /// Merge the reports of one job (MPI ranks, nodes) or of several runs into one trace:
    /// merge rank_*.nsys-rep -o job.pftrace
    Merge(args::MergeArgs),
    /// nsys' per-rank analyses (`nsys recipe`), with the recipes' tables and columns:
    /// recipe cuda_gpu_kern_sum rank_*.nsys-rep (also cuda_api_sum, cuda_gpu_mem_time_sum,
    /// nvtx_sum, nvtx_gpu_proj_sum, mpi_sum, gpu_time_util, cuda_gpu_time_util_map); --csv, or
    /// Parquet files with --output DIR.
    Recipe(args::RecipeArgs),
    /// Print a shell completion script: nsys-perfetto completions bash >
    /// ~/.local/share/bash-completion/completions/nsys-perfetto
    Completions(CompletionsArgs),
    /// Print the man page (roff), or write one per command into a directory with --dir:
    /// nsys-perfetto man | man -l -
    Man(ManArgs),
}

pub fn main() -> ExitCode {
    // `--version` alone also lists the nsys installs found (each probed with a timeout); the
    // probe runs only then, not on every command.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 2 && (args[1] == "--version" || args[1] == "-V") {
        print!(
            "{}",
            crate::about::long_version(crate::about::PROBE_TIMEOUT)
        );
        return ExitCode::SUCCESS;
    }
    if args.len() == 1 {
        nsys_perfetto_model::say_part!("{}", bare_usage());
        return ExitCode::from(2);
    }
    if asks_types_help(&args[1..]) {
        nsys_perfetto_model::term::out(format_args!(
            "{}",
            nsys_perfetto_model::category::EventType::help()
        ));
        return ExitCode::SUCCESS;
    }
    let cli = {
        use clap::{CommandFactory, FromArgMatches};
        let matches = short_abouts(Cli::command()).get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    };
    // Ctrl-C and SIGTERM stop child processes and remove temporaries (see `cleanup`).
    nsys_perfetto_model::cleanup::install();
    match cli.command {
        None => run_convert(&cli.convert),
        Some(Command::Profile(args)) => run_profile(&args),
        Some(Command::Stats(args)) => args.run(),
        Some(Command::Analyze(args)) => args.run(),
        Some(Command::Extract(args)) => args.run(),
        Some(Command::Sweep(args)) => args.run(),
        Some(Command::Open(args)) => args.run(),
        Some(Command::Serve(args)) => args.run(),
        Some(Command::Merge(args)) => args.run(),
        Some(Command::Recipe(args)) => args.run(),
        Some(Command::Completions(args)) => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            clap_complete::generate(
                args.shell,
                &mut cmd,
                "nsys-perfetto",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Some(Command::Man(args)) => run_man(&args),
    }
}

/// Each subcommand listed by its first clause (`--help`, a bare call); its own `--help` keeps
/// the whole description.
pub fn short_abouts(mut cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |c| {
            let Some(about) = c.get_about().map(|a| a.to_string()) else {
                return c;
            };
            let long = c
                .get_long_about()
                .map_or_else(|| about.clone(), |l| l.to_string());
            c.about(first_clause(&about)).long_about(long)
        });
    }
    cmd
}

/// What a bare `nsys-perfetto` prints: the usage and the subcommands, one line each.
pub fn bare_usage() -> String {
    use clap::CommandFactory;
    let cmd = short_abouts(Cli::command());
    let mut s = format!(
        "nsys-perfetto {}: convert NVIDIA Nsight Systems profiles into Perfetto traces\n\n\
         Usage: nsys-perfetto [OPTIONS] <INPUT>...   convert reports (.nsys-rep, .qdrep) or exports\n                                                    (.sqlite, .arrows, _arwdir, _pqtdir)\n       \
         nsys-perfetto <COMMAND> [ARGS]\n\nCommands:\n",
        env!("CARGO_PKG_VERSION")
    );
    let subs: Vec<(String, String)> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            (c.get_name().to_string(), about)
        })
        .collect();
    let width = subs.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, about) in subs {
        s.push_str(&format!("  {name:width$}  {about}\n"));
    }
    s.push_str(
        "\nnsys-perfetto --help lists the options; nsys-perfetto COMMAND --help, a command's.\n",
    );
    s
}

/// A command's description cut to its first clause, without parentheses: one short line.
fn first_clause(about: &str) -> String {
    let mut plain = String::new();
    let mut depth = 0usize;
    for c in about.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    let plain = plain.replace(" ,", ",");
    let end = [": ", ". ", "; "]
        .iter()
        .filter_map(|sep| plain.find(sep))
        .min()
        .unwrap_or(plain.len());
    let mut clause = plain[..end].trim_end_matches('.');
    // Long ones lose their trailing list items.
    while clause.len() > 80 {
        match clause.rfind(", ") {
            Some(i) => clause = &clause[..i],
            None => break,
        }
    }
    clause.to_string()
}

/// Whether the command line asks for the list of event types (`--types help`, before any `--`).
fn asks_types_help(args: &[std::ffi::OsString]) -> bool {
    let mut prev_types = false;
    for a in args {
        if a == "--" {
            return false;
        }
        if (prev_types && a == "help") || a == "--types=help" {
            return true;
        }
        prev_types = a == "--types";
    }
    false
}

fn run_man(args: &ManArgs) -> ExitCode {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let result = match &args.dir {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|_| clap_mangen::generate_to(cmd, dir))
            .map(|_| nsys_perfetto_model::say!("man pages written to {}", dir.display())),
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|_| std::io::Write::write_all(&mut std::io::stdout(), &out))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            nsys_perfetto_model::say!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_convert(args: &ConvertArgs) -> ExitCode {
    let format = match args.output_format() {
        Ok(f) => f,
        Err(e) => {
            nsys_perfetto_model::say!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let opts = Options {
        format,
        json_colors: args.json_colors || args.select.nvtx_color_scheme.is_some(),
        progress: !args.quiet,
        check: args.check,
        analyze: args.analyze,
        pictures: None,
        selection: match args.select.selection() {
            Ok(s) => s,
            Err(e) => {
                nsys_perfetto_model::say!("error: {e:#}");
                return ExitCode::from(2);
            }
        },
    };
    let batch = crate::batch::BatchOptions {
        output: args.output.clone(),
        force: args.force,
        quiet: args.quiet,
        export: args.nsys.export_options(args.quiet),
        jobs: args.jobs.unwrap_or(0),
    };
    if crate::batch::run(&args.inputs, &batch, &opts).ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_profile(args: &ProfileArgs) -> ExitCode {
    use crate::report::{
        self,
        profile::{ProfileOptions, Sample},
    };
    // Checked before profiling: a typo must not cost a capture.
    let selection = match args.select.selection() {
        Ok(s) => s,
        Err(e) => {
            nsys_perfetto_model::say!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let popts = ProfileOptions {
        nsys: args.nsys.nsys.clone(),
        output: args.output.clone(),
        trace: args.trace.clone(),
        sample: match args.sample {
            SampleArg::Cpu => Sample::Cpu,
            SampleArg::None => Sample::None,
        },
        cpuctxsw: args.cpuctxsw,
        nsys_args: args.nsys_args.clone(),
        timeout: args.timeout.map(std::time::Duration::from_secs),
        quiet: args.quiet,
    };
    // An interrupt while profiling is handled here: nsys writes its report, which is kept.
    let defer = nsys_perfetto_model::cleanup::defer();
    let profiled = report::profile::profile_run(&popts, &args.command);
    if let Some(sig) = nsys_perfetto_model::cleanup::interrupted() {
        if let Ok(p) = &profiled {
            nsys_perfetto_model::say!(
                "interrupted while profiling; nsys wrote {} (not converted)",
                p.report.display()
            );
        }
        nsys_perfetto_model::cleanup::clean_up_and_exit(sig);
    }
    drop(defer);
    let profiled = match profiled {
        Ok(p) => p,
        Err(e) => {
            nsys_perfetto_model::say!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    // nsys passes on the program's exit status: a failing program fails this command too,
    // after what was captured is converted.
    let failed = (!profiled.status.success()).then(|| {
        use std::os::unix::process::ExitStatusExt;
        match (profiled.status.code(), profiled.status.signal()) {
            (Some(c), _) => (c & 0xff).max(1) as u8,
            (None, Some(sig)) => (128 + sig).min(255) as u8,
            _ => 1,
        }
    });
    if failed.is_some() {
        nsys_perfetto_model::say!(
            "note: the profiled program failed: nsys profile exited with {} (nsys passes on \
             the program's exit status); converting what was captured",
            profiled.status
        );
    }
    if !args.quiet {
        nsys_perfetto_model::say!("report: {}", profiled.report.display());
    }
    let batch = crate::batch::BatchOptions {
        output: None,
        force: true,
        quiet: args.quiet,
        export: args.nsys.export_options(args.quiet),
        jobs: 1,
    };
    let opts = Options {
        json_colors: args.select.nvtx_color_scheme.is_some(),
        progress: !args.quiet,
        selection,
        ..Options::default()
    };
    let converted = crate::batch::run(&[profiled.report], &batch, &opts).ok();
    match (failed, converted) {
        (Some(code), _) => ExitCode::from(code),
        (None, true) => ExitCode::SUCCESS,
        (None, false) => ExitCode::FAILURE,
    }
}
