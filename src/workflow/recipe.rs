//! `nsys-perfetto recipe NAME INPUT...`: the per-rank analyses of nsys 2023.4's recipes
//! (`nsys recipe NAME`), computed as the recipes compute them, with their tables and columns.
//!
//! A recipe reads each input (a rank) on its own, in parallel, into a small per-rank result,
//! then reduces those over all ranks. Two families:
//! - `cuda_gpu_kern_sum`, `cuda_api_sum`, `cuda_gpu_mem_time_sum`: nsys' `stats` report of the
//!   same name per rank (with the quartiles nsys computes but hides, [`reports::ReportOptions`]),
//!   then `rank_stats` (every rank's rows) and `all_stats` (per name over all ranks: summed
//!   totals, min of Q1, median of medians, max of Q3, the pooled standard deviation, and which
//!   files hold the min and the max);
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
//! ([`nsys_perfetto_read::recipes`]); the tables are computed here; `recipe/render.rs` prints and writes
//! them.

mod command;
mod render;

use super::Export;
use super::reports::{self, Cell, ReportOptions};
use crate::report::export::ExportOptions;
use anyhow::{Result, anyhow};
use nsys_perfetto_read::recipes;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use render::{csv, table_text, write_parquet};

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

/// One value of a recipe's table.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// pandas' NaN (a standard deviation of one value).
    Null,
    Int(i64),
    Float(f64),
    Text(String),
}

impl Value {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
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
    pub rows: Vec<Vec<Value>>,
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
    let as_report = crate::convert::default_output(path, crate::convert::OutputFormat::Protobuf);
    as_report.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

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
            let found = found
                .into_iter()
                .filter_map(|(f, d)| match d {
                    RankData::Report(rows) => Some((f, rows)),
                    _ => None,
                })
                .collect();
            report_recipe(recipe, found)
        }
        Recipe::NvtxSum | Recipe::NvtxGpuProjSum | Recipe::MpiSum => {
            let found = found
                .into_iter()
                .filter_map(|(f, d)| match d {
                    RankData::Describe(rows) => Some((f, rows)),
                    _ => None,
                })
                .collect();
            describe_recipe(recipe, found)
        }
        Recipe::GpuTimeUtil => {
            let found = found
                .into_iter()
                .filter_map(|(f, d)| match d {
                    RankData::Findings(rows) => Some((f, rows)),
                    _ => None,
                })
                .collect();
            gpu_time_util(found)
        }
        Recipe::CudaGpuTimeUtilMap => {
            let found: Vec<(String, RankKernels)> = found
                .into_iter()
                .filter_map(|(f, d)| match d {
                    RankData::Kernels(k) => Some((f, k)),
                    _ => None,
                })
                .collect();
            match gpu_time_util_map(found, opts.bins) {
                Some(o) => o,
                None => return Ok(None),
            }
        }
    }))
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
    let ex = Export::open_projecting(path, export, false)?;
    Ok(match recipe {
        Recipe::CudaGpuKernSum | Recipe::CudaApiSum | Recipe::CudaGpuMemTimeSum => {
            report_rows(&ex, recipe)?.map(RankData::Report)
        }
        Recipe::NvtxSum => {
            describe(&ex, &recipes::nvtx_durations(&ex.schema))?.map(RankData::Describe)
        }
        Recipe::MpiSum => {
            describe(&ex, &recipes::mpi_durations(&ex.schema))?.map(RankData::Describe)
        }
        Recipe::NvtxGpuProjSum => nvtx_gpu_projection(&ex)?.map(RankData::Describe),
        Recipe::GpuTimeUtil => time_util_findings(&ex)?.map(RankData::Findings),
        Recipe::CudaGpuTimeUtilMap => rank_kernels(&ex)?.map(RankData::Kernels),
    })
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

// ---- the `nsys stats` report family ----

/// One row of a rank's `nsys stats` report, as the recipe reads it.
#[derive(Debug, Clone)]
struct ReportRow {
    name: String,
    time: f64,
    total: i64,
    count: i64,
    avg: f64,
    q1: f64,
    med: f64,
    q3: f64,
    min: i64,
    max: i64,
    stddev: f64,
}

/// The report a recipe runs, the name of its count column and of its name column.
fn report_of(recipe: Recipe) -> (&'static str, &'static str, &'static str) {
    match recipe {
        Recipe::CudaGpuKernSum => ("cuda_gpu_kern_sum", "Instances", "Name"),
        Recipe::CudaApiSum => ("cuda_api_sum", "Num Calls", "Name"),
        Recipe::CudaGpuMemTimeSum => ("cuda_gpu_mem_time_sum", "Count", "Operation"),
        _ => unreachable!("not a report recipe"),
    }
}

fn report_rows(ex: &Export, recipe: Recipe) -> Result<Option<Vec<ReportRow>>> {
    let (name, count, key) = report_of(recipe);
    let r = reports::report_name(name).expect("a known report");
    reports::register_functions(&ex.conn)?;
    let opts = ReportOptions {
        quartiles: true,
        ..Default::default()
    };
    let Some(t) = reports::report(ex, r, &opts)? else {
        return Ok(None);
    };
    if t.rows.is_empty() {
        return Ok(None);
    }
    let col = |c: &str| {
        t.column(c)
            .ok_or_else(|| anyhow!("report {name} has no column {c}"))
    };
    let idx = [
        col(key)?,
        col("Time")?,
        col("Total Time")?,
        col(count)?,
        col("Avg")?,
        col("Q1")?,
        col("Med")?,
        col("Q3")?,
        col("Min")?,
        col("Max")?,
        col("StdDev")?,
    ];
    let f = |c: &Cell| c.as_f64().unwrap_or(f64::NAN);
    let i = |c: &Cell| match c {
        Cell::Int(v) => *v,
        c => c.as_f64().unwrap_or(0.0) as i64,
    };
    Ok(Some(
        t.rows
            .iter()
            .map(|r| ReportRow {
                name: match &r[idx[0]] {
                    Cell::Text(t) => t.clone(),
                    Cell::Null => String::new(),
                    c => c.as_f64().map(|v| v.to_string()).unwrap_or_default(),
                },
                time: f(&r[idx[1]]),
                total: i(&r[idx[2]]),
                count: i(&r[idx[3]]),
                avg: f(&r[idx[4]]),
                q1: f(&r[idx[5]]),
                med: f(&r[idx[6]]),
                q3: f(&r[idx[7]]),
                min: i(&r[idx[8]]),
                max: i(&r[idx[9]]),
                stddev: f(&r[idx[10]]),
            })
            .collect(),
    ))
}

/// `rank_stats` and `all_stats` of a report recipe, as its `reducer_func` builds them.
fn report_recipe(recipe: Recipe, ranks: Vec<(String, Vec<ReportRow>)>) -> Outcome {
    let (_, count, key) = report_of(recipe);
    let stat_columns = |extra: &[&str]| {
        let mut c: Vec<(String, ColumnType)> = vec![
            (key.into(), ColumnType::Text),
            ("Time".into(), ColumnType::Float),
            ("Total Time".into(), ColumnType::Int),
            (count.into(), ColumnType::Int),
            ("Avg".into(), ColumnType::Float),
            ("Q1".into(), ColumnType::Float),
            ("Med".into(), ColumnType::Float),
            ("Q3".into(), ColumnType::Float),
            ("Min".into(), ColumnType::Int),
            ("Max".into(), ColumnType::Int),
            ("StdDev".into(), ColumnType::Float),
        ];
        c.extend(extra.iter().map(|e| (e.to_string(), ColumnType::Text)));
        c
    };
    let stat_values = |r: &ReportRow| {
        vec![
            Value::Text(r.name.clone()),
            Value::Float(r.time),
            Value::Int(r.total),
            Value::Int(r.count),
            Value::Float(r.avg),
            Value::Float(r.q1),
            Value::Float(r.med),
            Value::Float(r.q3),
            Value::Int(r.min),
            Value::Int(r.max),
            Value::Float(r.stddev),
        ]
    };
    // rank_stats: every rank's rows, by file, then total time, longest first (a stable sort:
    // the report's own order breaks ties).
    let mut all: Vec<(&str, &ReportRow)> = ranks
        .iter()
        .flat_map(|(f, rows)| rows.iter().map(move |r| (f.as_str(), r)))
        .collect();
    let mut by_file = all.clone();
    by_file.sort_by(|a, b| a.0.cmp(b.0).then(b.1.total.cmp(&a.1.total)));
    let rank_stats = Table {
        name: "rank_stats",
        columns: stat_columns(&["File"]),
        rows: by_file
            .iter()
            .map(|(f, r)| {
                let mut v = stat_values(r);
                v.push(Value::Text(f.to_string()));
                v
            })
            .collect(),
    };
    // all_stats: per name (in name order, as pandas groups), over the ranks in input order.
    let mut groups: BTreeMap<&str, Vec<(&str, &ReportRow)>> = BTreeMap::new();
    for (f, r) in all.drain(..) {
        groups.entry(r.name.as_str()).or_default().push((f, r));
    }
    let grand_total: i64 = groups
        .values()
        .flat_map(|g| g.iter().map(|(_, r)| r.total))
        .sum();
    let mut rows: Vec<(i64, Vec<Value>)> = groups
        .iter()
        .map(|(name, g)| {
            let total: i64 = g.iter().map(|(_, r)| r.total).sum();
            let n: i64 = g.iter().map(|(_, r)| r.count).sum();
            let avg = total as f64 / n as f64;
            let q1 = g.iter().map(|(_, r)| r.q1).fold(f64::INFINITY, f64::min);
            let med = median(&mut g.iter().map(|(_, r)| r.med).collect::<Vec<_>>());
            let q3 = g
                .iter()
                .map(|(_, r)| r.q3)
                .fold(f64::NEG_INFINITY, f64::max);
            let min = g.iter().map(|(_, r)| r.min).min().unwrap_or(0);
            let max = g.iter().map(|(_, r)| r.max).max().unwrap_or(0);
            // nsys_recipe.lib.helpers.stddev: the pooled standard deviation of the ranks'
            // (rounded) means and deviations.
            let stddev = if n <= 1 {
                g[0].1.stddev
            } else {
                let var_sum: f64 = g
                    .iter()
                    .map(|(_, r)| (r.count - 1) as f64 * r.stddev * r.stddev)
                    .sum();
                let dev_sum: f64 = g
                    .iter()
                    .map(|(_, r)| r.count as f64 * (r.avg - avg) * (r.avg - avg))
                    .sum();
                round1(((var_sum + dev_sum) / (n - 1) as f64).sqrt())
            };
            let files_at = |pick: &dyn Fn(&ReportRow) -> bool| {
                g.iter()
                    .filter(|(_, r)| pick(r))
                    .map(|(f, _)| *f)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let row = vec![
                Value::Text(name.to_string()),
                Value::Float(round1(total as f64 / grand_total as f64 * 100.0)),
                Value::Int(total),
                Value::Int(n),
                Value::Float(round1(avg)),
                Value::Float(round1(q1)),
                Value::Float(round1(med)),
                Value::Float(round1(q3)),
                Value::Int(min),
                Value::Int(max),
                Value::Float(round1(stddev)),
                Value::Text(files_at(&|r| r.min == min)),
                Value::Text(files_at(&|r| r.max == max)),
            ];
            (total, row)
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    let all_stats = Table {
        name: "all_stats",
        columns: stat_columns(&["Min File", "Max File"]),
        rows: rows.into_iter().map(|(_, r)| r).collect(),
    };
    Outcome {
        recipe,
        files: ranks.into_iter().map(|(f, _)| f).collect(),
        tables: vec![rank_stats, all_stats],
    }
}

// ---- the `describe` family ----

/// pandas' `describe` of one name's durations, with their sum (`summary.describe_duration`).
#[derive(Debug, Clone)]
struct Described {
    name: String,
    count: i64,
    mean: f64,
    /// NaN for one value (n - 1 = 0).
    std: f64,
    min: i64,
    q1: f64,
    median: f64,
    q3: f64,
    max: i64,
    sum: i64,
}

/// pandas' linear quantile of sorted values.
fn quantile(sorted: &[i64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let frac = pos - lo as f64;
    let a = sorted[lo] as f64;
    match sorted.get(lo + 1) {
        Some(&b) if frac > 0.0 => a + (b as f64 - a) * frac,
        _ => a,
    }
}

/// The per-name statistics of the `(name, duration)` rows of `sql`, names in order; `None`
/// without rows.
fn describe(ex: &Export, sql: &Option<String>) -> Result<Option<Vec<Described>>> {
    let Some(sql) = sql else { return Ok(None) };
    let mut by_name: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let mut stmt = ex.conn.prepare(sql)?;
    let mut q = stmt.query([])?;
    while let Some(r) = q.next()? {
        let name = match r.get_ref(0)? {
            rusqlite::types::ValueRef::Text(t) => nsys_perfetto_read::cells::utf8(t).into_owned(),
            _ => continue,
        };
        by_name.entry(name).or_default().push(r.get(1)?);
    }
    Ok(described(by_name))
}

/// pandas' `describe` of each name's durations; `None` without any.
fn described(by_name: BTreeMap<String, Vec<i64>>) -> Option<Vec<Described>> {
    if by_name.is_empty() {
        return None;
    }
    Some(
        by_name
            .into_iter()
            .map(|(name, mut d)| {
                d.sort_unstable();
                let n = d.len();
                let sum: i64 = d.iter().sum();
                let mean = sum as f64 / n as f64;
                let std = if n > 1 {
                    let ss: f64 = d.iter().map(|&x| (x as f64 - mean).powi(2)).sum();
                    (ss / (n - 1) as f64).sqrt()
                } else {
                    f64::NAN
                };
                Described {
                    name,
                    count: n as i64,
                    mean,
                    std,
                    min: d[0],
                    q1: quantile(&d, 0.25),
                    median: quantile(&d, 0.5),
                    q3: quantile(&d, 0.75),
                    max: d[n - 1],
                    sum,
                }
            })
            .collect(),
    )
}

/// `nvtx_gpu_proj_sum`'s rows (nsys_recipe.lib.nvtx.project_nvtx_onto_gpu): each NVTX range
/// that ends on the thread it started on spans, on the GPU, from the earliest start to the
/// latest end of the GPU work (kernels, memcpys, memsets) launched by the CUDA runtime calls it
/// encloses on its thread; named by its text, as `nvtx_sum`. The recipe's sweep is kept as it
/// is: per thread, over range starts, range ends and calls in time order, a call gets the
/// ranges open at its start that have not ended by its end, and a range is closed for good once
/// a call reaches past its end.
fn nvtx_gpu_projection(ex: &Export) -> Result<Option<Vec<Described>>> {
    let Some((ranges_sql, calls_sql)) = recipes::nvtx_projection(&ex.schema) else {
        return Ok(None);
    };
    // Ranges per thread: (start, end, name).
    let mut ranges: BTreeMap<i64, Vec<(i64, i64, Option<String>)>> = BTreeMap::new();
    let mut stmt = ex.conn.prepare(&ranges_sql)?;
    let mut q = stmt.query([])?;
    while let Some(r) = q.next()? {
        let name = match r.get_ref(3)? {
            rusqlite::types::ValueRef::Text(t) => {
                Some(nsys_perfetto_read::cells::utf8(t).into_owned())
            }
            _ => None,
        };
        ranges
            .entry(r.get(0)?)
            .or_default()
            .push((r.get(1)?, r.get(2)?, name));
    }
    drop(q);
    if ranges.is_empty() {
        return Ok(None);
    }
    // Calls per thread with their GPU work: (call start, call end, GPU start, GPU end).
    let mut calls: BTreeMap<i64, Vec<(i64, i64, i64, i64)>> = BTreeMap::new();
    let mut stmt = ex.conn.prepare(&calls_sql)?;
    let mut q = stmt.query([])?;
    while let Some(r) = q.next()? {
        let tid: i64 = r.get(0)?;
        if ranges.contains_key(&tid) {
            calls
                .entry(tid)
                .or_default()
                .push((r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?));
        }
    }
    drop(q);
    let mut by_name: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (tid, mut calls) in calls {
        let ranges = &ranges[&tid];
        calls.sort_by_key(|c| c.0);
        let mut starts: Vec<usize> = (0..ranges.len()).collect();
        starts.sort_by_key(|&i| ranges[i].0);
        let mut ends = starts.clone();
        ends.sort_by_key(|&i| ranges[i].1);
        // Per range: the GPU span of the work of the calls it encloses.
        let mut span: Vec<Option<(i64, i64)>> = vec![None; ranges.len()];
        let mut open: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
        let (mut si, mut ei) = (0, 0);
        let mut ci = 0;
        while ci < calls.len() && ei < ends.len() {
            let (c_start, c_end, g_start, g_end) = calls[ci];
            let next_end = ranges[ends[ei]].1;
            if si < starts.len()
                && ranges[starts[si]].0 <= next_end
                && ranges[starts[si]].0 <= c_start
            {
                open.insert(starts[si]);
                si += 1;
            } else if next_end <= c_start || next_end <= c_end {
                open.remove(&ends[ei]);
                ei += 1;
            } else {
                for &r in &open {
                    let sp = span[r].get_or_insert((g_start, g_end));
                    sp.0 = sp.0.min(g_start);
                    sp.1 = sp.1.max(g_end);
                }
                ci += 1;
            }
        }
        for (r, sp) in span.iter().enumerate() {
            if let (Some((a, b)), Some(name)) = (sp, &ranges[r].2)
                && b - a > 0
            {
                by_name.entry(name.clone()).or_default().push(b - a);
            }
        }
    }
    Ok(described(by_name))
}

/// `rank_stats` and `all_stats` of a describe recipe, as `summary.aggregate_stats_dfs` and the
/// recipe's reducer build them: ranks in file name order, numbered from 0.
fn describe_recipe(recipe: Recipe, mut ranks: Vec<(String, Vec<Described>)>) -> Outcome {
    ranks.sort_by(|a, b| a.0.cmp(&b.0));
    // nvtx_sum reads durations from a column with NULLs (marks have no end): pandas holds them,
    // and so the min, max and sum, as floats.
    let whole = if recipe == Recipe::NvtxSum {
        ColumnType::Float
    } else {
        ColumnType::Int
    };
    let whole_value = |v: i64| match whole {
        ColumnType::Float => Value::Float(v as f64),
        _ => Value::Int(v),
    };
    let float = |v: f64| {
        if v.is_nan() {
            Value::Null
        } else {
            Value::Float(v)
        }
    };
    let columns = |names: [&str; 9], extra: &[(&str, ColumnType)]| {
        let types = [
            ColumnType::Int,
            ColumnType::Float,
            ColumnType::Float,
            whole,
            ColumnType::Float,
            ColumnType::Float,
            ColumnType::Float,
            whole,
            whole,
        ];
        let mut c: Vec<(String, ColumnType)> = vec![("Text".into(), ColumnType::Text)];
        c.extend(names.iter().zip(types).map(|(n, t)| (n.to_string(), t)));
        c.extend(extra.iter().map(|(n, t)| (n.to_string(), *t)));
        c
    };
    let rank_rows = ranks
        .iter()
        .enumerate()
        .flat_map(|(rank, (file, rows))| {
            rows.iter().map(move |d| {
                vec![
                    Value::Text(d.name.clone()),
                    Value::Int(d.count),
                    float(d.mean),
                    float(d.std),
                    whole_value(d.min),
                    float(d.q1),
                    float(d.median),
                    float(d.q3),
                    whole_value(d.max),
                    whole_value(d.sum),
                    Value::Int(rank as i64),
                    Value::Text(file.clone()),
                ]
            })
        })
        .collect();
    let rank_stats = Table {
        name: "rank_stats",
        columns: columns(
            [
                "Count", "Mean", "Std", "Min", "Q1", "Median", "Q3", "Max", "Sum",
            ],
            &[("Rank", ColumnType::Int), ("File", ColumnType::Text)],
        ),
        rows: rank_rows,
    };
    let mut groups: BTreeMap<&str, Vec<&Described>> = BTreeMap::new();
    for (_, rows) in &ranks {
        for d in rows {
            groups.entry(d.name.as_str()).or_default().push(d);
        }
    }
    let all_rows = groups
        .iter()
        .map(|(name, g)| {
            let count: i64 = g.iter().map(|d| d.count).sum();
            let sum: i64 = g.iter().map(|d| d.sum).sum();
            let stds: Vec<f64> = g.iter().map(|d| d.std).filter(|s| !s.is_nan()).collect();
            let std = if stds.is_empty() {
                f64::NAN
            } else {
                stds.iter().sum::<f64>() / stds.len() as f64
            };
            let min = g.iter().map(|d| d.min).min().unwrap_or(0);
            let max = g.iter().map(|d| d.max).max().unwrap_or(0);
            let q1 = g.iter().map(|d| d.q1).fold(f64::INFINITY, f64::min);
            let q3 = g.iter().map(|d| d.q3).fold(f64::NEG_INFINITY, f64::max);
            let median = median(&mut g.iter().map(|d| d.median).collect::<Vec<_>>());
            vec![
                Value::Text(name.to_string()),
                Value::Int(count),
                float(round1(sum as f64 / count as f64)),
                float(round1(std)),
                whole_value(min),
                float(round1(q1)),
                float(round1(median)),
                float(round1(q3)),
                whole_value(max),
                whole_value(sum),
            ]
        })
        .collect();
    let all_stats = Table {
        name: "all_stats",
        columns: columns(
            [
                "Count",
                "Mean",
                "Std (approx)",
                "Min",
                "Q1 (approx)",
                "Median (approx)",
                "Q3 (approx)",
                "Max",
                "Sum",
            ],
            &[],
        ),
        rows: all_rows,
    };
    Outcome {
        recipe,
        files: ranks.into_iter().map(|(f, _)| f).collect(),
        tables: vec![all_stats, rank_stats],
    }
}

// ---- GPU time utilization ----

/// nsys' `gpu_time_util` rule on one rank, with its defaults; `None` when nsys would not run it
/// or it finds nothing.
fn time_util_findings(ex: &Export) -> Result<Option<Vec<nsys_perfetto_read::rules::Finding>>> {
    use nsys_perfetto_read::rules::{self, Outcome, Rule};
    let opts = rules::Options {
        rules: vec![Rule::GpuTimeUtil],
        ..Default::default()
    };
    let reports = rules::analyze::analyze(&ex.conn, &ex.schema, &opts)?;
    Ok(reports.into_iter().find_map(|r| match r.outcome {
        Outcome::Findings(f) if !f.is_empty() => Some(f),
        _ => None,
    }))
}

/// `gpu_time_util`'s `analysis` table: each rank's findings as the rule's report lists them
/// (`Row#` from 1), the rank's file last; the index restarts at 0 for each rank.
fn gpu_time_util(ranks: Vec<(String, Vec<nsys_perfetto_read::rules::Finding>)>) -> Outcome {
    use nsys_perfetto_read::rules::{Rule, Value as V};
    let rule = Rule::GpuTimeUtil;
    let num = |v: Option<&V>| match v {
        Some(V::Int(i)) => Value::Int(*i),
        Some(V::Real(f)) => Value::Float(*f),
        _ => Value::Null,
    };
    let mut rows = Vec::new();
    for (file, findings) in &ranks {
        for (i, f) in findings.iter().enumerate() {
            let in_use = match num(f.value(rule, "In-Use (%)")) {
                Value::Int(i) => Value::Float(i as f64),
                v => v,
            };
            rows.push(vec![
                Value::Int(i as i64),
                Value::Int(i as i64 + 1),
                in_use,
                Value::Int(f.duration),
                Value::Int(f.start),
                num(f.value(rule, "PID")),
                num(f.value(rule, "Device ID")),
                num(f.value(rule, "Context ID")),
                Value::Text(file.clone()),
            ]);
        }
    }
    let columns = [
        ("", ColumnType::Int),
        ("Row#", ColumnType::Int),
        ("In-Use", ColumnType::Float),
        ("Duration", ColumnType::Int),
        ("Start", ColumnType::Int),
        ("PID", ColumnType::Int),
        ("Device ID", ColumnType::Int),
        ("Context ID", ColumnType::Int),
        ("File", ColumnType::Text),
    ];
    Outcome {
        recipe: Recipe::GpuTimeUtil,
        files: ranks.into_iter().map(|(f, _)| f).collect(),
        tables: vec![Table {
            name: "analysis",
            columns: columns.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
            rows,
        }],
    }
}

/// A (process id, device id) and its busy intervals (start, end), by start.
type Busy = ((i64, i64), Vec<(i64, i64)>);

/// What `cuda_gpu_time_util_map` reads of one rank: its session's length and wall-clock start,
/// and per (process id, device) its kernels' busy intervals (overlapping kernels merged).
struct RankKernels {
    duration: i64,
    session_start: i64,
    /// ((pid, device), intervals by start), in (pid, device) order.
    busy: Vec<Busy>,
}

/// `None` when the export lacks what the recipe reads (it skips such a rank).
fn rank_kernels(ex: &Export) -> Result<Option<RankKernels>> {
    let Some(session) = recipes::session(&ex.schema) else {
        return Ok(None);
    };
    let (duration, session_start): (Option<i64>, Option<i64>) =
        ex.conn
            .query_row(&session, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let (Some(duration), Some(session_start)) = (duration, session_start) else {
        return Ok(None);
    };
    let mut busy: Vec<Busy> = Vec::new();
    if let Some(sql) = recipes::kernels_by_device(&ex.schema) {
        let mut stmt = ex.conn.prepare(&sql)?;
        let mut q = stmt.query([])?;
        while let Some(r) = q.next()? {
            let key: (i64, i64) = (r.get(0)?, r.get(1)?);
            let (start, end): (i64, i64) = (r.get(2)?, r.get(3)?);
            if busy.last().is_none_or(|(k, _)| *k != key) {
                busy.push((key, Vec::new()));
            }
            let runs = &mut busy.last_mut().expect("pushed").1;
            // heatmap.consolidate_ranges: a kernel starting after the latest end so far opens
            // a new interval; one starting at or before it joins the current one.
            match runs.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => runs.push((start, end)),
            }
        }
    }
    Ok(Some(RankKernels {
        duration,
        session_start,
        busy,
    }))
}

/// heatmap._calculate_bin_info for one interval: (start bin, end bin, share of the start bin,
/// share of the end bin), in bins of `bin` ns.
fn bin_info(start: i64, end: i64, bin: i64) -> (i64, i64, f64, f64) {
    let (s, e) = (start as f64 / bin as f64, end as f64 / bin as f64);
    let (sb, eb) = (s.floor() as i64, e.floor() as i64);
    let clipped_end = s.ceil().min(e);
    let clipped_start = e.floor().max(s);
    (sb, eb, clipped_end - s, e - clipped_start)
}

/// `cuda_gpu_time_util_map`'s `analysis` table (heatmap.calculate_bin_pcts, numpy's order of
/// additions kept: single-bin intervals first, then those spanning bins).
fn gpu_time_util_map(ranks: Vec<(String, RankKernels)>, bins: usize) -> Option<Outcome> {
    let min_session = ranks.iter().map(|(_, k)| k.session_start).min()?;
    let max_duration = ranks
        .iter()
        .map(|(_, k)| k.duration + (k.session_start - min_session))
        .max()?;
    let bin = (max_duration as f64 / bins as f64).ceil() as i64;
    let bin = bin.max(1);
    let mut rows = Vec::new();
    let mut files = Vec::new();
    for (file, k) in &ranks {
        if k.busy.is_empty() {
            continue;
        }
        files.push(file.clone());
        let offset = k.session_start - min_session;
        let profile_end = k.duration + offset;
        let mut index = 0i64;
        for ((pid, device), runs) in &k.busy {
            let mut pct = vec![0.0f64; bins];
            let mut add = |i: i64, v: f64| {
                if let Some(p) = usize::try_from(i).ok().and_then(|i| pct.get_mut(i)) {
                    *p += v;
                }
            };
            let info: Vec<_> = runs
                .iter()
                .map(|(s, e)| bin_info(s + offset, e + offset, bin))
                .collect();
            for &(sb, eb, sp, _) in &info {
                if sb == eb {
                    add(sb, sp);
                }
            }
            for &(sb, eb, sp, ep) in &info {
                if sb != eb {
                    add(eb, ep);
                    add(sb, sp);
                    for i in sb + 1..eb {
                        add(i, 1.0);
                    }
                }
            }
            // heatmap._rectify_pct_inplace: bins the session only partly covers are scaled
            // to the part it covers; bins outside it are NaN.
            let (sb, eb, sp, ep) = bin_info(offset, profile_end, bin);
            let mut pct: Vec<f64> = pct;
            if sp != 0.0
                && let Some(p) = usize::try_from(sb).ok().and_then(|i| pct.get_mut(i))
            {
                *p /= sp;
            }
            if ep != 0.0
                && sb != eb
                && let Some(p) = usize::try_from(eb).ok().and_then(|i| pct.get_mut(i))
            {
                *p /= ep;
            }
            for (i, p) in pct.iter_mut().enumerate() {
                if (i as i64) > eb || (i as i64) < sb {
                    *p = f64::NAN;
                }
            }
            for (i, p) in pct.iter().enumerate() {
                rows.push(vec![
                    Value::Int(index),
                    Value::Int(bin * i as i64),
                    if p.is_nan() {
                        Value::Null
                    } else {
                        Value::Float(round1(p * 100.0))
                    },
                    Value::Int(*pid),
                    Value::Int(*device),
                    Value::Text(file.clone()),
                ]);
                index += 1;
            }
        }
    }
    if rows.is_empty() {
        return None;
    }
    let columns = [
        ("", ColumnType::Int),
        ("Duration", ColumnType::Int),
        ("Kernel", ColumnType::Float),
        ("PID", ColumnType::Int),
        ("Device ID", ColumnType::Int),
        ("File", ColumnType::Text),
    ];
    Some(Outcome {
        recipe: Recipe::CudaGpuTimeUtilMap,
        files,
        tables: vec![Table {
            name: "analysis",
            columns: columns.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
            rows,
        }],
    })
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
    fn quantiles_are_linear() {
        let v = [1, 2, 3, 4];
        assert_eq!(quantile(&v, 0.25), 1.75);
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert_eq!(quantile(&v, 0.75), 3.25);
        assert_eq!(quantile(&[7], 0.25), 7.0);
    }

    #[test]
    fn ranks_are_named_by_stem() {
        assert_eq!(rank_name(Path::new("/d/rank_0.nsys-rep")), "rank_0");
        assert_eq!(rank_name(Path::new("/d/rank_0.sqlite")), "rank_0");
        assert_eq!(rank_name(Path::new("/d/rank_0_pqtdir")), "rank_0");
        assert_eq!(rank_name(Path::new("/d/r.v2.qdrep")), "r.v2");
    }
}
