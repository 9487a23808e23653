//! The `nsys stats` report family (`cuda_gpu_kern_sum`, `cuda_api_sum`,
//! `cuda_gpu_mem_time_sum`): nsys' report of the same name per rank, then `rank_stats` and
//! `all_stats`.

use super::{ColumnType, Outcome, Recipe, Table, median, round1};
use anyhow::{Result, anyhow};
use nsys_perfetto_read::reports::functions::register_functions;
use nsys_perfetto_read::reports::{self, Cell, ReportOptions};
use nsys_perfetto_read::source::Export;
use std::collections::BTreeMap;

/// One row of a rank's `nsys stats` report, as the recipe reads it.
#[derive(Debug, Clone)]
pub(super) struct ReportRow {
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

pub(super) fn report_rows(ex: &Export, recipe: Recipe) -> Result<Option<Vec<ReportRow>>> {
    let (name, count, key) = report_of(recipe);
    let r = reports::report_name(name).expect("a known report");
    register_functions(&ex.conn)?;
    let opts = ReportOptions {
        quartiles: true,
        ..Default::default()
    };
    let Some(t) = reports::report(&ex.conn, &ex.schema, r, &opts)? else {
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
pub(super) fn report_recipe(recipe: Recipe, ranks: Vec<(String, Vec<ReportRow>)>) -> Outcome {
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
            Cell::Text(r.name.clone()),
            Cell::Real(r.time),
            Cell::Int(r.total),
            Cell::Int(r.count),
            Cell::Real(r.avg),
            Cell::Real(r.q1),
            Cell::Real(r.med),
            Cell::Real(r.q3),
            Cell::Int(r.min),
            Cell::Int(r.max),
            Cell::Real(r.stddev),
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
                v.push(Cell::Text(f.to_string()));
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
    let mut rows: Vec<(i64, Vec<Cell>)> = groups
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
                Cell::Text(name.to_string()),
                Cell::Real(round1(total as f64 / grand_total as f64 * 100.0)),
                Cell::Int(total),
                Cell::Int(n),
                Cell::Real(round1(avg)),
                Cell::Real(round1(q1)),
                Cell::Real(round1(med)),
                Cell::Real(round1(q3)),
                Cell::Int(min),
                Cell::Int(max),
                Cell::Real(round1(stddev)),
                Cell::Text(files_at(&|r| r.min == min)),
                Cell::Text(files_at(&|r| r.max == max)),
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
