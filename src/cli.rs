//! The command line: `nsys-perfetto INPUT...` converts; subcommands cover the workflows.

use crate::convert::{Options, OutputFormat};
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
pub enum Command {
    /// Run a command under `nsys profile` and convert the report: NAME.nsys-rep, NAME.sqlite
    /// and NAME.pftrace.
    Profile(ProfileArgs),
    /// Top kernels, memory operations, CUDA API calls and NVTX ranges by total time (count,
    /// total, mean, median, min, max, %), as a table, --csv or --json.
    Stats(crate::workflow::stats::StatsArgs),
    /// Time of the events whose names match patterns (kernels, memory operations, API calls,
    /// NVTX ranges with their CPU and GPU time), per file: count, total, mean.
    Extract(crate::workflow::extract::ExtractArgs),
    /// Profile a command once per parameter value ($p) and tabulate the extracted event times,
    /// one column per value: sweep -p 16 32 64 -o 'run_$p' -- ./app --size '$p'
    Sweep(crate::workflow::sweep::SweepArgs),
}

#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// Profiles to convert: nsys SQLite exports (.sqlite), reports (.nsys-rep, .qdrep; exported
    /// with nsys), directories of them, glob patterns.
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
    #[command(flatten)]
    pub select: SelectArgs,
    /// Convert even inputs whose output is up to date. (With several inputs, a directory or a
    /// pattern, those are skipped; a single file is always converted.)
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub nsys: NsysArgs,
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
        Some(Command::Profile(args)) => run_profile(&args),
        Some(Command::Stats(args)) => args.run(),
        Some(Command::Extract(args)) => args.run(),
        Some(Command::Sweep(args)) => args.run(),
    }
}

fn run_convert(args: &ConvertArgs) -> ExitCode {
    let opts = Options {
        format: args.output_format(),
        json_colors: args.json_colors || args.select.nvtx_color_scheme.is_some(),
        progress: !args.quiet,
        selection: match args.select.selection() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::from(2);
            }
        },
    };
    let batch = crate::batch::BatchOptions {
        output: args.output.clone(),
        force: args.force,
        quiet: args.quiet,
        export: args.nsys.export_options(args.quiet),
    };
    if crate::batch::run(&args.inputs, &batch, &opts).ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What to convert; shared by every command that writes a trace.
#[derive(Args, Debug, Clone, Default)]
pub struct SelectArgs {
    /// Event types to write, comma-separated: kernel, memcpy, memset, cuda-api, nvtx (ranges
    /// and marks), nvtx-gpu (NVTX ranges projected onto the GPU work they launched), osrt (OS
    /// runtime calls), sync (CUDA synchronization waits), sched (threads on CPUs), cpu-samples
    /// (CPU samples with call stacks), gpu-metrics (GPU metric counters), gpu-memory (GPU memory
    /// allocations and bytes allocated), or all.
    /// Default: all but nvtx-gpu, a derived analysis that costs time on big profiles.
    #[arg(long, value_delimiter = ',', value_name = "TYPES")]
    pub types: Vec<String>,
    /// Keep only NVTX ranges and marks whose name starts with TEXT, or matches REGEX when given
    /// as 're:REGEX'. Registered-string names count.
    #[arg(long, value_name = "TEXT|re:REGEX")]
    pub nvtx_filter: Option<String>,
    /// Also project NVTX ranges onto the GPU work they launched (per-GPU "NVTX" tracks; each
    /// kernel lists its enclosing ranges): the same as adding nvtx-gpu to --types.
    #[arg(long)]
    pub nvtx_gpu: bool,
    /// Keep events overlapping this window, relative to the capture start: '2s..3.5s',
    /// '..500ms', '1.2s..' (units: s, ms, us, ns).
    #[arg(long, value_name = "START..END")]
    pub time_range: Option<String>,
    /// Keep only these processes (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', value_name = "PID")]
    pub pid: Vec<i64>,
    /// Keep only GPU work (and NVTX-on-GPU tracks) of these devices.
    #[arg(long, value_delimiter = ',', value_name = "DEVICE")]
    pub device: Vec<i64>,
    /// Colour NVTX ranges by name: '{"regex": "colour", ...}' (first match wins; colours as
    /// #rrggbb, 0xaarrggbb or red/green/blue/...). Overrides the program's colours; in JSON
    /// output it turns on --json-colors.
    #[arg(long, value_name = "JSON")]
    pub nvtx_color_scheme: Option<String>,
}

impl SelectArgs {
    pub fn selection(&self) -> anyhow::Result<crate::select::Selection> {
        use crate::select::{NameFilter, Selection};
        let mut sel = Selection::default();
        if !self.types.is_empty() {
            sel.types = crate::select::EventType::parse_list(&self.types)?;
        }
        if self.nvtx_gpu {
            sel.types.insert(crate::select::EventType::NvtxGpu);
        }
        sel.nvtx_filter = self
            .nvtx_filter
            .as_deref()
            .map(NameFilter::parse)
            .transpose()?;
        sel.time = self.time_range.as_deref().map(str::parse).transpose()?;
        sel.pids = self.pid.clone();
        sel.devices = self.device.clone();
        if let Some(scheme) = &self.nvtx_color_scheme {
            sel.nvtx_colors = crate::select::parse_color_scheme(scheme)?;
        }
        Ok(sel)
    }
}

/// How reports (.nsys-rep, .qdrep) are exported to SQLite. By default the export is cached as
/// X.sqlite beside X.nsys-rep (or, in a read-only folder, in $XDG_CACHE_HOME/nsys-perfetto) and
/// reused while it is at least as new as the report.
#[derive(Args, Debug, Clone, Default)]
pub struct NsysArgs {
    /// The nsys to use (the binary or its install directory). Default: $NSYS, then PATH, then
    /// /opt/nvidia/nsight-systems/*/bin, /usr/local/cuda*/bin, /usr/lib/nsight-systems/bin.
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// Export reports afresh into a temporary directory that is deleted after the conversion:
    /// a cached export is neither used nor left behind.
    #[arg(long)]
    pub no_cache: bool,
    /// With --no-cache: keep the fresh export, in the cache place (replacing the cached one).
    /// The path of the export is printed for every report either way.
    #[arg(long)]
    pub keep_sqlite: bool,
}

impl NsysArgs {
    pub fn export_options(&self, quiet: bool) -> crate::report::ExportOptions {
        crate::report::ExportOptions {
            nsys: self.nsys.clone(),
            no_cache: self.no_cache,
            keep_sqlite: self.keep_sqlite,
            cache_dir: None,
            quiet,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleArg {
    /// CPU sampling (perf events)
    Cpu,
    /// No CPU sampling
    None,
}

#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Base name of the results (NAME.nsys-rep, NAME.sqlite, NAME.pftrace). Default: the
    /// command's name in the current directory, numbered if taken.
    #[arg(short, long, value_name = "NAME")]
    pub output: Option<PathBuf>,
    /// APIs to trace (nsys profile --trace), comma-separated, e.g. cuda,nvtx,osrt,cublas.
    #[arg(short, long, value_name = "LIST", default_value = "cuda,nvtx,osrt")]
    pub trace: String,
    /// CPU sampling. Off by default: with it, nsys 2022.4 hangs after the program exits on
    /// some kernels (use --timeout).
    #[arg(short, long, value_enum, default_value = "none")]
    pub sample: SampleArg,
    /// Collect CPU context switches (nsys --cpuctxsw=process-tree; off by default, for the
    /// same reason as --sample).
    #[arg(long)]
    pub cpuctxsw: bool,
    /// Stop nsys, its agent and the program after SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// One more argument for `nsys profile` (repeat), e.g. --nsys-arg=--duration=30.
    #[arg(long = "nsys-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub nsys_args: Vec<std::ffi::OsString>,
    #[command(flatten)]
    pub nsys: NsysArgs,
    /// Print nothing but errors (nsys's and the program's output are shown only on failure).
    #[arg(short, long)]
    pub quiet: bool,
    /// The command to profile, with its arguments (after `--` when they start with `-`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<std::ffi::OsString>,
}

fn run_profile(args: &ProfileArgs) -> ExitCode {
    use crate::report::{self, ProfileOptions, Sample};
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
    let report = match report::profile(&popts, &args.command) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    if !args.quiet {
        eprintln!("report: {}", report.display());
    }
    let batch = crate::batch::BatchOptions {
        output: None,
        force: true,
        quiet: args.quiet,
        export: args.nsys.export_options(args.quiet),
    };
    if crate::batch::run(&[report], &batch, &Options::default()).ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
