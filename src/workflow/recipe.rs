//! `nsys-perfetto recipe NAME INPUT...`: the per-rank analyses of nsys 2023.4's recipes
//! (`nsys recipe NAME`), computed as the recipes compute them, with their tables and columns.
//!
//! A recipe reads each input (a rank) on its own, in parallel, into a small per-rank result,
//! then reduces those over all ranks. Two families:
//! - `cuda_gpu_kern_sum`, `cuda_api_sum`, `cuda_gpu_mem_time_sum`: nsys' `stats` report of the
//!   same name per rank (with the quartiles nsys computes but hides,
//!   [`nsys_perfetto_read::reports::ReportOptions`]), then `rank_stats` (every rank's rows)
//!   and `all_stats` (per name over all ranks: summed totals, min of Q1, median of medians, max
//!   of Q3, the pooled standard deviation, and which files hold the min and the max);
//! - `nvtx_sum`, `nvtx_gpu_proj_sum`, `mpi_sum`: pandas' `describe` of the durations per name
//!   (linear quantiles, standard deviation with n - 1), then `rank_stats` and `all_stats` (the
//!   mean of the standard deviations, min of Q1, median of medians, max of Q3).
//!
//! And two that keep every rank's rows in one table, `analysis`:
//! - `gpu_time_util`: nsys' `gpu_time_util` rule per rank ([`nsys_perfetto_read::rules`]);
//! - `cuda_gpu_time_util_map`: per rank, process and GPU, the percentage of each of `bins`
//!   equal time bins covered by kernels (overlapping kernels counted once), on one time axis for
//!   all ranks (each rank placed at its session's wall-clock start).
//!
//! Ranks are named by their file's stem (the report's name for an export), as the recipes name
//! them; the recipes' rounding (`DataFrame.round(1)`: half to even on the scaled binary value)
//! and sort orders are kept. What a recipe reads of a rank is the reading crate's SQL
//! ([`nsys_perfetto_read::recipes`]). One concern a file: here the recipes and their tables;
//! [`ranks`] reads every rank and reduces; `recipe/reports.rs`, `recipe/describe.rs` and
//! `recipe/utilization.rs` compute the families; `recipe/render.rs` prints and writes the
//! tables.

mod describe;
pub mod ranks;
pub mod render;
mod reports;
mod utilization;

use nsys_perfetto_read::reports::Cell;
use std::path::Path;

/// A recipe computed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipe {
    CudaGpuKernSum,
    CudaApiSum,
    CudaGpuMemTimeSum,
    NvtxSum,
    NvtxGpuProjSum,
    MpiSum,
    GpuTimeUtil,
    CudaGpuTimeUtilMap,
}

/// Every recipe, by its nsys name.
pub const RECIPES: [(&str, Recipe); 8] = [
    ("cuda_gpu_kern_sum", Recipe::CudaGpuKernSum),
    ("cuda_api_sum", Recipe::CudaApiSum),
    ("cuda_gpu_mem_time_sum", Recipe::CudaGpuMemTimeSum),
    ("nvtx_sum", Recipe::NvtxSum),
    ("nvtx_gpu_proj_sum", Recipe::NvtxGpuProjSum),
    ("mpi_sum", Recipe::MpiSum),
    ("gpu_time_util", Recipe::GpuTimeUtil),
    ("cuda_gpu_time_util_map", Recipe::CudaGpuTimeUtilMap),
];

/// The recipes' options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecipeOptions {
    /// `cuda_gpu_time_util_map`: the number of time bins (nsys' `--bins`, default 30).
    pub bins: usize,
}

impl Default for RecipeOptions {
    fn default() -> Self {
        RecipeOptions { bins: 30 }
    }
}

impl Recipe {
    pub fn parse(name: &str) -> Option<Recipe> {
        RECIPES.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
    }

    pub fn name(self) -> &'static str {
        RECIPES
            .iter()
            .find(|(_, r)| *r == self)
            .map(|(n, _)| *n)
            .expect("listed")
    }
}

/// What a column holds (its Parquet type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Int,
    Float,
    Text,
}

/// One of a recipe's output tables, as its DataFrame: the first column is the DataFrame's index.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The recipe's file name for it, without `.parquet` (`rank_stats`).
    pub name: &'static str,
    pub columns: Vec<(String, ColumnType)>,
    pub rows: Vec<Vec<Cell>>,
}

/// The tables of one recipe run, in the order the recipe writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub recipe: Recipe,
    /// The files that gave data, by rank name (the recipe's `files` table for the describe
    /// family; every rank otherwise).
    pub files: Vec<String>,
    pub tables: Vec<Table>,
}

/// A rank's name, as the recipes name it: the stem of the report's file name (`rank_0` for
/// `rank_0.nsys-rep`, `rank_0.sqlite`, `rank_0_pqtdir`).
pub fn rank_name(path: &Path) -> String {
    let as_report = crate::convert::default_output(
        path,
        nsys_perfetto_write::output::formats::OutputFormat::Protobuf,
    );
    as_report.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// numpy's `round(x, 1)`, which `DataFrame.round(1)` applies: the value times 10, rounded half
/// to even, divided by 10.
pub fn round1(x: f64) -> f64 {
    (x * 10.0).round_ties_even() / 10.0
}

/// The median as pandas computes it: the middle value, or the mean of the two middle ones.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_numpys() {
        // 0.25 * 10 = 2.5 rounds to even; 0.35 * 10 = 3.5 exactly in binary: to 4.
        assert_eq!(round1(0.25), 0.2);
        assert_eq!(round1(0.35), 0.4);
        assert_eq!(round1(-1.25), -1.2);
    }

    #[test]
    fn ranks_are_named_by_stem() {
        assert_eq!(rank_name(Path::new("/d/rank_0.nsys-rep")), "rank_0");
        assert_eq!(rank_name(Path::new("/d/rank_0.sqlite")), "rank_0");
        assert_eq!(rank_name(Path::new("/d/rank_0_pqtdir")), "rank_0");
        assert_eq!(rank_name(Path::new("/d/r.v2.qdrep")), "r.v2");
    }
}
