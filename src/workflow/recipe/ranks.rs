//! Every rank of a recipe read on its own thread into a small result (`RankData`), then the
//! results reduced over all ranks by the recipe's family.

use super::describe::{Described, describe, describe_recipe, nvtx_gpu_projection};
use super::reports::{ReportRow, report_recipe, report_rows};
use super::utilization::{
    RankKernels, gpu_time_util, gpu_time_util_map, rank_kernels, time_util_findings,
};
use super::{Outcome, Recipe, RecipeOptions, rank_name};
use crate::input;
use crate::report::export::ExportOptions;
use anyhow::{Result, anyhow};
use nsys_perfetto_read::recipes;
use std::path::{Path, PathBuf};

/// Run `recipe` over `files` (one per rank) on up to `jobs` threads. `Ok(None)` when no rank has
/// data for it (the recipe writes nothing then). An input that cannot be read fails the run,
/// its error naming the file.
pub fn run(
    recipe: Recipe,
    files: &[PathBuf],
    export: &ExportOptions,
    jobs: usize,
    opts: &RecipeOptions,
) -> Result<Option<Outcome>> {
    let named: Vec<(PathBuf, String)> = files.iter().map(|p| (p.clone(), rank_name(p))).collect();
    run_named(recipe, &named, export, jobs, opts)
}

/// [`run`] with each rank named by the caller (its `File` in the tables): `merge --util-map`
/// names ranks by their place in the merge.
pub fn run_named(
    recipe: Recipe,
    files: &[(PathBuf, String)],
    export: &ExportOptions,
    jobs: usize,
    opts: &RecipeOptions,
) -> Result<Option<Outcome>> {
    let ranks = nsys_perfetto_model::parallel::parallel_map(files, jobs, |_, (path, _)| {
        rank_data(recipe, path, export).map_err(|e| {
            anyhow!(
                "{}: {}",
                path.display(),
                nsys_perfetto_model::errors::error_line(&e)
            )
        })
    });
    let mut found = Vec::new();
    for ((_, name), r) in files.iter().zip(ranks) {
        if let Some(d) = r? {
            found.push((name.clone(), d));
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    Ok(Some(match recipe {
        Recipe::CudaGpuKernSum | Recipe::CudaApiSum | Recipe::CudaGpuMemTimeSum => {
            let found = each(found, |d| match d {
                RankData::Report(rows) => Some(rows),
                _ => None,
            });
            report_recipe(recipe, found)
        }
        Recipe::NvtxSum | Recipe::NvtxGpuProjSum | Recipe::MpiSum => {
            let found = each(found, |d| match d {
                RankData::Describe(rows) => Some(rows),
                _ => None,
            });
            describe_recipe(recipe, found)
        }
        Recipe::GpuTimeUtil => gpu_time_util(each(found, |d| match d {
            RankData::Findings(rows) => Some(rows),
            _ => None,
        })),
        Recipe::CudaGpuTimeUtilMap => {
            let found = each(found, |d| match d {
                RankData::Kernels(k) => Some(k),
                _ => None,
            });
            match gpu_time_util_map(found, opts.bins) {
                Some(o) => o,
                None => return Ok(None),
            }
        }
    }))
}

/// The ranks' results of the recipe's family (`family` takes them out of [`RankData`]), with
/// their names.
fn each<T>(
    found: Vec<(String, RankData)>,
    family: impl Fn(RankData) -> Option<T>,
) -> Vec<(String, T)> {
    found
        .into_iter()
        .filter_map(|(name, d)| Some((name, family(d)?)))
        .collect()
}

/// One rank's result, before the reduction.
enum RankData {
    Report(Vec<ReportRow>),
    Describe(Vec<Described>),
    Findings(Vec<nsys_perfetto_read::rules::Finding>),
    Kernels(RankKernels),
}

fn rank_data(recipe: Recipe, path: &Path, export: &ExportOptions) -> Result<Option<RankData>> {
    // No recipe reads this tool's NVTX projection (nvtx_gpu_proj_sum has its own).
    let opened = input::open(path, export, false)?;
    let ex = &opened.export;
    Ok(match recipe {
        Recipe::CudaGpuKernSum | Recipe::CudaApiSum | Recipe::CudaGpuMemTimeSum => {
            report_rows(ex, recipe)?.map(RankData::Report)
        }
        Recipe::NvtxSum => {
            describe(ex, &recipes::nvtx_durations(&ex.schema))?.map(RankData::Describe)
        }
        Recipe::MpiSum => {
            describe(ex, &recipes::mpi_durations(&ex.schema))?.map(RankData::Describe)
        }
        Recipe::NvtxGpuProjSum => nvtx_gpu_projection(ex)?.map(RankData::Describe),
        Recipe::GpuTimeUtil => time_util_findings(ex)?.map(RankData::Findings),
        Recipe::CudaGpuTimeUtilMap => rank_kernels(ex)?.map(RankData::Kernels),
    })
}
