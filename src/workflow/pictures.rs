//! The computation of `merge --util-map` and `merge --stragglers` ([`crate::pictures`] draws
//! them): every rank's utilization bins, by the `cuda_gpu_time_util_map` recipe's own code, and
//! its ranges' starts, before any rank is written.

use crate::input;
use crate::pictures::{PictureOptions, Pictures, RankPictures, Straggler, Utilization};
use crate::report::export::ExportOptions;
use crate::workflow::recipe::{self, Recipe, RecipeOptions};
use anyhow::{Result, anyhow};
use nsys_perfetto_read::recipes;
use nsys_perfetto_read::reports::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What one rank gives: its session (length, wall-clock start) and its ranges' starts.
struct RankTimes {
    session: Option<(i64, i64)>,
    starts: Vec<(String, i64)>,
}

fn rank_times(path: &Path, export: &ExportOptions, stragglers: bool) -> Result<RankTimes> {
    let opened = input::open(path, export, false)?;
    let ex = &opened.export;
    let session = match recipes::session(&ex.schema) {
        Some(sql) => {
            let (d, u): (Option<i64>, Option<i64>) = ex
                .conn
                .query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
            d.zip(u)
        }
        None => None,
    };
    let mut starts = Vec::new();
    if stragglers && let Some(sql) = recipes::range_starts(&ex.schema) {
        let mut stmt = ex.conn.prepare(&sql)?;
        let mut q = stmt.query([])?;
        while let Some(r) = q.next()? {
            let name: Option<String> = r.get(0)?;
            let start: Option<i64> = r.get(1)?;
            if let (Some(n), Some(s)) = (name, start) {
                starts.push((n, s));
            }
        }
    }
    Ok(RankTimes { session, starts })
}

/// Compute the pictures of the merge of `inputs` (export, label), in merge order.
pub fn compute(
    inputs: &[(PathBuf, String)],
    options: PictureOptions,
    export: &ExportOptions,
    jobs: usize,
) -> Result<Pictures> {
    let times = nsys_perfetto_model::parallel::parallel_map(inputs, jobs, |_, (path, _)| {
        rank_times(path, export, options.stragglers).map_err(|e| {
            anyhow!(
                "{}: {}",
                path.display(),
                nsys_perfetto_model::errors::error_line(&e)
            )
        })
    });
    let times: Vec<RankTimes> = times.into_iter().collect::<Result<_>>()?;
    let mut ranks = vec![RankPictures::default(); inputs.len()];
    // The recipe's axis starts at the earliest session start of the ranks it reads.
    let min_session = times.iter().filter_map(|t| t.session.map(|s| s.1)).min();
    if let (Some(bins), Some(min_session)) = (options.util_bins, min_session) {
        // Ranks named by their place, so its rows come back to them.
        let named: Vec<(PathBuf, String)> = inputs
            .iter()
            .enumerate()
            .map(|(i, (p, _))| (p.clone(), i.to_string()))
            .collect();
        let outcome = recipe::ranks::run_named(
            Recipe::CudaGpuTimeUtilMap,
            &named,
            export,
            jobs,
            &RecipeOptions { bins },
        )?;
        for table in outcome.iter().flat_map(|o| &o.tables) {
            util_of(table, &times, min_session, &mut ranks);
        }
    }
    if options.stragglers {
        stragglers_of(inputs, &times, &mut ranks);
    }
    Ok(Pictures { options, ranks })
}

/// The recipe's `analysis` rows ("", Duration, Kernel, PID, Device ID, File) as each rank's
/// series, in its own time.
fn util_of(
    table: &recipe::Table,
    times: &[RankTimes],
    min_session: i64,
    ranks: &mut [RankPictures],
) {
    let bin = match table.rows.as_slice() {
        [a, b, ..] => match (&a[1], &b[1]) {
            (Cell::Int(x), Cell::Int(y)) => y - x,
            _ => return,
        },
        _ => return,
    };
    for row in &table.rows {
        let (Cell::Int(at), Cell::Int(pid), Cell::Int(device), Cell::Text(file)) =
            (&row[1], &row[3], &row[4], &row[5])
        else {
            continue;
        };
        let Some(i) = file.parse::<usize>().ok().filter(|i| *i < ranks.len()) else {
            continue;
        };
        let Some((duration, start)) = times[i].session else {
            continue;
        };
        let util = &mut ranks[i].util;
        if util
            .last()
            .is_none_or(|u| (u.pid, u.device) != (*pid, *device))
        {
            util.push(Utilization {
                pid: *pid,
                device: *device,
                bins: Vec::new(),
                end: 0,
            });
        }
        let u = util.last_mut().expect("pushed");
        if let Cell::Real(pct) = row[2] {
            // A bin the session covers in part starts, on this rank, where the session does.
            let local = at - (start - min_session);
            u.bins.push((local.max(0), pct));
            u.end = (local + bin).min(duration);
        }
    }
    for r in ranks.iter_mut() {
        r.util.retain(|u| !u.bins.is_empty());
    }
}

/// For each name and occurrence that two ranks or more have, the last rank to start it.
fn stragglers_of(inputs: &[(PathBuf, String)], times: &[RankTimes], ranks: &mut [RankPictures]) {
    // name -> per rank, its starts on the wall clock, in order.
    let mut by_name: BTreeMap<&str, Vec<(usize, Vec<i64>)>> = BTreeMap::new();
    for (i, t) in times.iter().enumerate() {
        let Some((_, utc)) = t.session else { continue };
        let mut mine: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for (name, start) in &t.starts {
            mine.entry(name).or_default().push(utc + start);
        }
        for (name, starts) in mine {
            by_name.entry(name).or_default().push((i, starts));
        }
    }
    for (name, per_rank) in by_name {
        if per_rank.len() < 2 {
            continue;
        }
        let longest = per_rank.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
        for k in 0..longest {
            let at: Vec<(usize, i64)> = per_rank
                .iter()
                .filter_map(|(i, s)| s.get(k).map(|t| (*i, *t)))
                .collect();
            if at.len() < 2 {
                break;
            }
            // Ties go to the rank first in the merge, for the earliest and the last alike.
            let first = at.iter().min_by_key(|(i, t)| (*t, *i)).expect("two");
            let last = at
                .iter()
                .max_by_key(|(i, t)| (*t, std::cmp::Reverse(*i)))
                .expect("two");
            let lag = last.1 - first.1;
            if lag <= 0 {
                continue;
            }
            let session = times[last.0].session.expect("ranks with a session").1;
            ranks[last.0].stragglers.push(Straggler {
                name: name.to_string(),
                occurrence: k,
                start: last.1 - session,
                lag,
                earliest: inputs[first.0].1.clone(),
                ranks: at.len(),
            });
        }
    }
    for r in ranks.iter_mut() {
        r.stragglers.sort_by_key(|s| s.start);
    }
}
