//! `nsys-perfetto stats PROFILE`: the top events of each kind by total time.
//!
//! Per name: count, total, mean, median (the mean of the two middle durations when the count is
//! even), min and max, all in ns, and a percentage:
//! - kernels and memory operations: of all GPU time, the sum of the durations of every kernel,
//!   memcpy and memset row (busy time summed over streams and devices, not wall time);
//! - API calls, NVTX ranges and NVTX GPU projections: of their own kind's total (ranges nest, so
//!   NVTX totals count nested time once per level).
//!
//! NVTX names that differ only in counters are grouped by default ([`nsys_perfetto_read::reports::functions::group_name`]): PyTorch
//! names every range `aten::mul, seq = 45328, op_id = 990726`, so a profile of 19 k ranges had
//! 18 k distinct names and the top of the table taught nothing. `--raw-names` keeps them apart.
//!
//! `stats A B` compares two profiles name by name ([`compare`](comparison::compare)): count and total of each, and the
//! change from A to B.
//!
//! The data is declared here; `stats/query.rs` computes it from an export, `stats/render.rs`
//! prints it (table, CSV, JSON), `stats/comparison.rs` compares two profiles;
//! `commands/stats.rs` runs the command.

pub mod comparison;
pub mod query;
pub mod render;

use nsys_perfetto_model::category::Kind;
use nsys_perfetto_read::reports::{KernelNames, ReportName, ReportTable};
use std::path::PathBuf;

/// One name's durations.
#[derive(Debug, Clone, PartialEq)]
pub struct StatRow {
    pub name: String,
    pub count: u64,
    pub total: i64,
    pub mean: f64,
    pub median: f64,
    pub min: i64,
    pub max: i64,
    /// Percent of [`Section::basis`].
    pub percent: f64,
}

/// One kind of event: its top names and its totals over all names.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub kind: Kind,
    /// Events of this kind (all names).
    pub count: u64,
    /// Their summed duration, ns.
    pub total: i64,
    /// What percentages are of, in ns: all GPU time for GPU kinds, else [`Section::total`].
    pub basis: i64,
    /// Distinct names (rows beyond `top` included), after grouping.
    pub names: u64,
    /// Distinct names before grouping (= `names` with `--raw-names` and for kinds not grouped).
    pub raw_names: u64,
    /// The top names by total time (ties: more events first, then by name).
    pub rows: Vec<StatRow>,
}

impl Section {
    pub fn basis_label(&self) -> &'static str {
        match self.kind {
            Kind::Kernel | Kind::Memory => "GPU time",
            Kind::Api => "API time",
            Kind::Nvtx => "NVTX time",
            Kind::NvtxGpu => "NVTX GPU time",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub file: PathBuf,
    /// Sum of all kernel, memcpy and memset durations, ns.
    pub gpu_time: i64,
    /// One section per kind the export has (kinds with no table are left out).
    pub sections: Vec<Section>,
    /// nsys' summary reports, as `nsys stats` computes them ([`nsys_perfetto_read::reports`]): those asked
    /// for, or nsys' default ones; reports whose tables the export lacks are left out.
    pub reports: Vec<ReportTable>,
    /// Rows shown per report in a table (0: all); CSV and JSON hold every row.
    pub top: usize,
    /// One report was asked for: CSV prints it alone, as `nsys stats --report NAME` does.
    pub single_report: bool,
    /// Unified memory CPU page faults per process (most first); empty without faults.
    pub page_faults: Vec<PageFaults>,
    /// The functions CPU samples caught running (leaf frames), most first; empty without
    /// samples.
    pub sampled_functions: Vec<SampledFunction>,
    /// Mean, min and max of each GPU metric per GPU (`GPU_METRICS`); empty without metrics.
    pub gpu_metrics: Vec<MetricSummary>,
}

/// A function and how many CPU samples caught it running (the sample's leaf frame).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledFunction {
    pub function: String,
    pub module: Option<String>,
    pub samples: u64,
    /// Of all samples with a call stack.
    pub percent: f64,
}

/// One GPU metric on one GPU over the capture.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSummary {
    pub gpu: i64,
    pub metric: String,
    pub samples: u64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// The unit of its values ([`metric_unit`]).
    pub unit: &'static str,
}

/// The unit a GPU metric's values are shown with: the trace's unit
/// ([`nsys_perfetto_read::metrics::metric_unit`]), "count" for plain counts.
pub fn metric_unit(name: &str) -> &'static str {
    match nsys_perfetto_read::metrics::metric_unit(name) {
        "" => "count",
        u => u,
    }
}

/// A process's unified memory CPU page faults (`CUDA_UM_CPU_PAGE_FAULT_EVENTS`).
#[derive(Debug, Clone, PartialEq)]
pub struct PageFaults {
    pub pid: i64,
    /// The process's name, as the export names it (`PROCESSES`), when it does.
    pub process: Option<String>,
    pub faults: u64,
    /// Distinct faulting addresses.
    pub addresses: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct StatsOptions {
    /// Rows per section; 0 = all.
    pub top: usize,
    /// Keep NVTX names that differ only in counters apart (no [`nsys_perfetto_read::reports::functions::group_name`]).
    pub raw_names: bool,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            top: 10,
            raw_names: false,
        }
    }
}

/// Which of nsys' reports `stats` computes, and how.
#[derive(Debug, Clone, Default)]
pub struct ReportChoice {
    /// nsys reports to compute, by name; empty: nsys' default ones.
    pub reports: Vec<ReportName>,
    /// How kernels are named in the kernel reports.
    pub kernel_names: KernelNames,
    /// The kinds of [`Stats::sections`] to compute; `None`: all (the reports need none).
    pub kinds: Option<Vec<Kind>>,
}
