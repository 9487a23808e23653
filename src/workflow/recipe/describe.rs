//! The `describe` family (`nvtx_sum`, `nvtx_gpu_proj_sum`, `mpi_sum`): pandas' `describe` of
//! the durations per name, then `rank_stats` and `all_stats`.

use super::{ColumnType, Outcome, Recipe, Table, median, round1};
use anyhow::Result;
use nsys_perfetto_read::recipes;
use nsys_perfetto_read::reports::Cell;
use nsys_perfetto_read::source::Export;
use std::collections::BTreeMap;

/// pandas' `describe` of one name's durations, with their sum (`summary.describe_duration`).
#[derive(Debug, Clone)]
pub(super) struct Described {
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
pub(super) fn describe(ex: &Export, sql: &Option<String>) -> Result<Option<Vec<Described>>> {
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
pub(super) fn nvtx_gpu_projection(ex: &Export) -> Result<Option<Vec<Described>>> {
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
pub(super) fn describe_recipe(recipe: Recipe, mut ranks: Vec<(String, Vec<Described>)>) -> Outcome {
    ranks.sort_by(|a, b| a.0.cmp(&b.0));
    // nvtx_sum reads durations from a column with NULLs (marks have no end): pandas holds them,
    // and so the min, max and sum, as floats.
    let whole = if recipe == Recipe::NvtxSum {
        ColumnType::Float
    } else {
        ColumnType::Int
    };
    let whole_value = |v: i64| match whole {
        ColumnType::Float => Cell::Real(v as f64),
        _ => Cell::Int(v),
    };
    let float = |v: f64| {
        if v.is_nan() {
            Cell::Null
        } else {
            Cell::Real(v)
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
                    Cell::Text(d.name.clone()),
                    Cell::Int(d.count),
                    float(d.mean),
                    float(d.std),
                    whole_value(d.min),
                    float(d.q1),
                    float(d.median),
                    float(d.q3),
                    whole_value(d.max),
                    whole_value(d.sum),
                    Cell::Int(rank as i64),
                    Cell::Text(file.clone()),
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
                Cell::Text(name.to_string()),
                Cell::Int(count),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_linear() {
        let v = [1, 2, 3, 4];
        assert_eq!(quantile(&v, 0.25), 1.75);
        assert_eq!(quantile(&v, 0.5), 2.5);
        assert_eq!(quantile(&v, 0.75), 3.25);
        assert_eq!(quantile(&[7], 0.25), 7.0);
    }
}
