//! The command-line argument types that several commands share (what to convert, how reports
//! are exported, how a table prints) and those of `merge`, `open` and `serve`, whose modules
//! read them whole. Every other command's arguments are in its file under `commands`. Below the
//! commands' modules, so that none imports `cli`.

use crate::report::export::ExportOptions;
use crate::workflow::{Output, Unit};
use anyhow::Result;
use clap::{Args, ValueEnum};
use nsys_perfetto_write::output::formats::{FORMATS, OutputFormat};
use std::net::IpAddr;
use std::path::PathBuf;

/// `--format`'s values: each output format's name, with its help.
pub fn format_parser() -> impl clap::builder::TypedValueParser<Value = OutputFormat> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        FORMATS
            .iter()
            .map(|s| PossibleValue::new(s.name).help(s.help)),
    )
    .map(|name| OutputFormat::named(&name).expect("a format's name"))
}

/// What to convert; shared by every command that writes a trace.
#[derive(Args, Debug, Clone, Default)]
pub struct SelectArgs {
    /// Event types to write, comma-separated (see --types help), or all (the default).
    /// -TYPE leaves a type out: --types=-nvtx-gpu,-cpu-samples.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "TYPES",
        allow_hyphen_values = true
    )]
    pub types: Vec<String>,
    /// Keep only NVTX ranges and marks whose name starts with TEXT, or matches REGEX when given
    /// as 're:REGEX'. Registered-string names count.
    #[arg(long, value_name = "TEXT|re:REGEX")]
    pub nvtx_filter: Option<String>,
    /// Project NVTX ranges onto the GPU work they launched (per-GPU "NVTX" tracks; each kernel
    /// lists its enclosing ranges): the same as adding nvtx-gpu to --types. It is in the
    /// default types; the flag is kept for scripts and for lists given with --types.
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
    /// How a protobuf trace writes kernels, memcpys and memsets: 'tracks' (a track per stream
    /// under each GPU, beside its NVTX and sync tracks) or 'perfetto' (Perfetto's own GPU model:
    /// its gpu_slice table, the GPU hardware-queue tracks and the UI's GPU plugins). JSON
    /// output always writes tracks.
    #[arg(long, value_enum, value_name = "MODEL", default_value_t = GpuArg::Tracks)]
    pub gpu: GpuArg,
}

/// `--gpu`: see [`nsys_perfetto_model::select::GpuModel`].
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GpuArg {
    #[default]
    Tracks,
    Perfetto,
}

impl SelectArgs {
    pub fn selection(&self) -> anyhow::Result<nsys_perfetto_model::select::Selection> {
        use nsys_perfetto_model::select::{NameFilter, Selection};
        let mut sel = Selection::default();
        if !self.types.is_empty() {
            sel.types = nsys_perfetto_model::category::EventType::parse_list(&self.types)?;
        }
        if self.nvtx_gpu {
            sel.types
                .insert(nsys_perfetto_model::category::EventType::NvtxGpu);
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
            sel.nvtx_colors = nsys_perfetto_model::select::parse_color_scheme(scheme)?;
        }
        sel.gpu = match self.gpu {
            GpuArg::Tracks => nsys_perfetto_model::select::GpuModel::Tracks,
            GpuArg::Perfetto => nsys_perfetto_model::select::GpuModel::Perfetto,
        };
        Ok(sel)
    }
}

/// How reports (.nsys-rep, .qdrep) are exported: to Arrow (X_arwdir) where the nsys found
/// writes it, else to SQLite (X.sqlite). By default the export is cached beside X.nsys-rep (or,
/// in a read-only folder or where an export this tool did not write is in the way, in
/// $XDG_CACHE_HOME/nsys-perfetto) and reused while the report's content is the one it was
/// exported from. An export the tool did not write is never modified nor reused.
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
    /// Stop `nsys export` after SECONDS (default: no limit; a progress line on stderr says
    /// what is being waited for).
    #[arg(long, value_name = "SECONDS")]
    pub export_timeout: Option<u64>,
    /// The format reports are exported to: Arrow (X_arwdir, faster) where the nsys found writes
    /// it (2023 and newer), else SQLite (X.sqlite); or always one of them.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = ExportArg::Auto)]
    pub export: ExportArg,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportArg {
    /// Arrow where the nsys found writes it, else SQLite
    #[default]
    Auto,
    /// `nsys export --type sqlite`
    Sqlite,
    /// `nsys export --type arrowdir` (nsys 2023 and newer)
    Arrow,
}

impl NsysArgs {
    pub fn export_options(&self, quiet: bool) -> crate::report::export::ExportOptions {
        crate::report::export::ExportOptions {
            nsys: self.nsys.clone(),
            no_cache: self.no_cache,
            keep_sqlite: self.keep_sqlite,
            cache_dir: None,
            quiet,
            timeout: self.export_timeout.map(std::time::Duration::from_secs),
            format: match self.export {
                ExportArg::Auto => crate::report::export::ExportFormat::Auto,
                ExportArg::Sqlite => crate::report::export::ExportFormat::Sqlite,
                ExportArg::Arrow => crate::report::export::ExportFormat::Arrow,
            },
        }
    }
}

/// Time unit for tables. CSV and JSON always carry nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum UnitArg {
    #[default]
    Ns,
    Us,
    Ms,
    S,
}

impl From<UnitArg> for Unit {
    fn from(u: UnitArg) -> Unit {
        match u {
            UnitArg::Ns => Unit::Ns,
            UnitArg::Us => Unit::Us,
            UnitArg::Ms => Unit::Ms,
            UnitArg::S => Unit::S,
        }
    }
}

/// How `stats` and `extract` print.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Print CSV (times in ns) instead of a table.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Print JSON (times in ns) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Time unit of the table (CSV and JSON are always in ns).
    #[arg(long, value_enum, default_value = "ns", value_name = "UNIT")]
    pub unit: UnitArg,
    /// Write to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// The nsys that exports reports (.nsys-rep, .qdrep). Default: $NSYS, then PATH, then the
    /// usual install places.
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<std::path::PathBuf>,
}

impl OutputArgs {
    pub fn unit(&self) -> Unit {
        self.unit.into()
    }

    pub fn format(&self) -> Output {
        if self.csv {
            Output::Csv
        } else if self.json {
            Output::Json
        } else {
            Output::Table
        }
    }

    pub fn export_options(&self) -> ExportOptions {
        ExportOptions {
            nsys: self.nsys.clone(),
            quiet: true,
            ..Default::default()
        }
    }

    /// Print or write the rendered result.
    pub fn emit(&self, text: &str) -> Result<()> {
        match &self.output {
            Some(p) => crate::workflow::write_file(p, text),
            None => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                // A closed pipe (`| head`) is not an error worth reporting.
                let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
                Ok(())
            }
        }
    }
}

/// Merge the reports of one job (MPI ranks, nodes) or of several runs into one trace.
#[derive(Args, Debug, Clone)]
#[command(after_help = SCALING_HELP)]
pub struct MergeArgs {
    /// Reports or exports (.nsys-rep, .qdrep, .sqlite, .arrows, _arwdir, _pqtdir), directories
    /// of them, glob patterns.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// The merged trace (.pftrace, or .json; .gz compresses).
    #[arg(short, long, value_name = "OUT", required = true)]
    pub output: PathBuf,
    /// Output format (default: json when OUT ends in .json or .json.gz, else protobuf).
    #[arg(long, value_name = "FORMAT", value_parser = format_parser())]
    pub format: Option<OutputFormat>,
    /// JSON output: colour NVTX ranges with the nearest Chrome colour names.
    #[arg(long)]
    pub json_colors: bool,
    /// How the reports share the timeline: wall-clock (each at the time it ran, so ranks line
    /// up) or start (every report's session start at zero, to compare separate runs).
    #[arg(long, value_enum, default_value = "wall-clock", value_name = "HOW")]
    pub align: AlignArg,
    /// Name each report by the first capture group of REGEX applied to its file name (a number
    /// gives "rank N"), instead of the rank the report records: --label 'node(\d+)'.
    #[arg(long, value_name = "REGEX")]
    pub label: Option<String>,
    /// Reports to export and convert at the same time (default: all cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<usize>,
    /// Merge only these ranks: a list of ranks and ranges, `--ranks 0-7,12` (reports that
    /// record no rank are left out). Applies to reports and to parts alike.
    #[arg(long, value_name = "LIST")]
    pub ranks: Option<String>,
    /// Convert one report as a part of a merge made later from parts, where the report was
    /// written (one task per report): `merge --part rank_3.nsys-rep -o rank_3.part.pftrace`,
    /// then `merge *.part.pftrace -o job.pftrace` copies the parts into one trace without
    /// reading the reports again.
    #[arg(long)]
    pub part: bool,
    /// Draw each rank's GPU time utilization as counter tracks first in its "Analysis · LABEL"
    /// group, binned as nsys' cuda_gpu_time_util_map recipe bins it (--bins bins on one
    /// wall-clock axis): the ranks' groups, in rank order at the top, make a heat map.
    #[arg(long)]
    pub util_map: bool,
    /// --util-map: the number of equal time bins over the longest session.
    #[arg(long, value_name = "N", default_value_t = 30, requires = "util_map", value_parser = clap::value_parser!(u16).range(2..))]
    pub bins: u16,
    /// Add a "Stragglers" track to each rank's "Analysis" group: for every NVTX range name and
    /// MPI call, the rank that starts its k-th occurrence last gets a slice "late: NAME" from the
    /// earliest rank's start to its own (the lag).
    #[arg(long)]
    pub stragglers: bool,
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub nsys: NsysArgs,
}

/// How to scale past one machine, in `merge --help` (and docs/merge.md).
pub const SCALING_HELP: &str = "\
Scaling past one machine: convert each report where it was written as a part, one task per report
in the scheduler you already have, then merge the parts (the reports are not read again):
  sbatch --array=0-255 --wrap 'nsys-perfetto merge --part rank_${SLURM_ARRAY_TASK_ID}.nsys-rep \\
      -o rank_${SLURM_ARRAY_TASK_ID}.part.pftrace'                                 (Slurm array)
  ls *.nsys-rep | xargs -P 16 -I{} nsys-perfetto merge --part {} -o {}.part.pftrace   (xargs -P)
  nsys-perfetto merge *.part.pftrace -o job.pftrace
The merge of the parts holds what `merge *.nsys-rep -o job.pftrace` holds.";

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignArg {
    /// Each report at its own wall-clock session start.
    WallClock,
    /// Every report's session start at zero.
    Start,
}

/// The port the Perfetto UI accepts traces (and trace processors) from.
pub const PERFETTO_PORT: u16 = 9001;

/// `nsys-perfetto open`.
#[derive(clap::Args, Debug, Clone)]
pub struct OpenArgs {
    /// A trace (.pftrace, .json, .gz...) or a profile (.nsys-rep, .qdrep, or an export:
    /// .sqlite, .arrows, _arwdir, _pqtdir; converted first, or reused when the .pftrace beside
    /// it was made from the same input content with the same options by this version).
    #[arg(value_name = "INPUT")]
    pub input: PathBuf,
    /// Do not start a browser: print the link (automatic without a display or over SSH).
    #[arg(long)]
    pub no_browser: bool,
    /// Load the trace in a native trace_processor_shell (--httpd) that the UI uses instead of
    /// its in-browser engine: for traces too large for a browser tab (about 2 GB of memory,
    /// 2-4x the file).
    #[arg(long)]
    pub native: bool,
    /// The trace_processor_shell for --native (default: trace_processor_shell or
    /// trace_processor on PATH).
    #[arg(long, value_name = "PATH")]
    pub trace_processor: Option<PathBuf>,
    /// Open the UI around this nsys session time (2.5s, 1200ms, 2500000000ns; a slice starting
    /// exactly there is selected).
    #[arg(long, value_name = "TIME", conflicts_with = "range")]
    pub at: Option<String>,
    /// Open the UI showing this window of nsys session time: 2s..2.5s.
    #[arg(long, value_name = "A..B")]
    pub range: Option<String>,
    /// Stop waiting for the UI after this many seconds (default: until fetched or Ctrl-C).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Open the UI with its GPU compute tab (plugin com.meta.GpuCompute: kernel summary,
    /// launch statistics) and GPU-by-process tracks (dev.perfetto.GpuByProcess) enabled. They
    /// read Perfetto's GPU model: a profile is converted with --gpu perfetto.
    #[arg(long)]
    pub gpu_compute: bool,
    /// Serve this local Perfetto UI build (a directory with its index.html) instead of opening
    /// ui.perfetto.dev: for machines whose browser cannot reach it. The UI and the trace are
    /// served on http://127.0.0.1:10000/ until Ctrl-C.
    #[arg(long, value_name = "DIR")]
    pub ui: Option<PathBuf>,
    /// Port of the local UI with --native --ui (tests; trace processors accept 10000).
    #[arg(long, hide = true, default_value_t = LOCAL_UI_PORT)]
    pub ui_port: u16,
    /// Port to serve on (tests; the UI accepts only 9001).
    #[arg(long, hide = true, default_value_t = PERFETTO_PORT)]
    pub port: u16,
    /// Convert with these options (profiles only).
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub nsys: NsysArgs,
}

/// The port `open --ui` serves on unless told otherwise: not 9001, which the UI probes for a
/// native trace processor, and one Perfetto's `trace_processor_shell` accepts as an origin.
pub const LOCAL_UI_PORT: u16 = 10000;

/// `nsys-perfetto serve`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on. Anything but a loopback address exposes the page (and the files
    /// it converts) to the network: a warning says so.
    #[arg(long, default_value = "127.0.0.1", value_name = "ADDR")]
    pub bind: IpAddr,
    /// Largest upload accepted, e.g. 4G, 500M (bytes without a unit).
    #[arg(long, default_value = "8G", value_name = "SIZE", value_parser = parse_size)]
    pub max_upload: u64,
    /// Conversions run at once (others wait their turn).
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub jobs: usize,
    /// Where temporary files go (default: the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
    /// The nsys used for reports (see `nsys-perfetto --help`).
    #[arg(long, value_name = "PATH")]
    pub nsys: Option<PathBuf>,
    /// Serve this local Perfetto UI build (a directory with its index.html) under /perfetto/ and
    /// open traces in it instead of ui.perfetto.dev: for machines whose browser cannot reach it.
    #[arg(long, value_name = "DIR")]
    pub ui: Option<PathBuf>,
    /// The Perfetto UI the page opens (for tests: a stand-in page; also $NSYS_PERFETTO_UI_URL).
    #[arg(long, hide = true, value_name = "URL")]
    pub perfetto_url: Option<String>,
}

/// `4G`, `500M`, `64k`, `123` (bytes): decimal units; `GiB`, `MiB`, `KiB` binary ones.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_lowercase();
            let mult: f64 = match unit.as_str() {
                "b" => 1.0,
                "k" | "kb" => 1e3,
                "m" | "mb" => 1e6,
                "g" | "gb" => 1e9,
                "t" | "tb" => 1e12,
                "kib" => 1024.0,
                "mib" => 1024.0 * 1024.0,
                "gib" => 1024.0 * 1024.0 * 1024.0,
                _ => return Err(format!("bad size '{s}' (use e.g. 500M, 4G)")),
            };
            (&t[..i], mult)
        }
        None => (t, 1.0),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad size '{s}' (use e.g. 500M, 4G)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("bad size '{s}'"));
    }
    Ok((v * mult) as u64)
}
