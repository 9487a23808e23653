//! The command-line arguments that several commands share (`convert`, `merge`, `open`,
//! `serve`, `profile`): below every command's module, so that none imports `cli`.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatArg {
    /// Perfetto protobuf (.pftrace)
    Protobuf,
    /// Chrome JSON trace (.json), for tools that read only that
    Json,
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
/// X.sqlite beside X.nsys-rep (or, in a read-only folder or where an X.sqlite this tool did not
/// write is in the way, in $XDG_CACHE_HOME/nsys-perfetto) and reused while the report's content
/// is the one it was exported from. A SQLite file the tool did not write is never modified nor
/// reused.
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
    pub fn export_options(&self, quiet: bool) -> crate::report::ExportOptions {
        crate::report::ExportOptions {
            nsys: self.nsys.clone(),
            no_cache: self.no_cache,
            keep_sqlite: self.keep_sqlite,
            cache_dir: None,
            quiet,
            timeout: self.export_timeout.map(std::time::Duration::from_secs),
            format: match self.export {
                ExportArg::Auto => crate::report::ExportFormat::Auto,
                ExportArg::Sqlite => crate::report::ExportFormat::Sqlite,
                ExportArg::Arrow => crate::report::ExportFormat::Arrow,
            },
        }
    }
}

/// `nsys-perfetto stats PROFILE [PROFILE_B]`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatsArgs {
    /// An nsys SQLite export (.sqlite) or report (.nsys-rep, .qdrep); with a second one, the
    /// two are compared side by side (count, total and change per name, B against A).
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
    pub out: crate::workflow::OutputArgs,
}
