//! `merge --util-map` and `merge --stragglers`: pictures of the whole job on the timeline.
//!
//! * Utilization map: per rank, process and GPU, a counter track "GPU time utilization · pid P ·
//!   GPU N" (%) first in the rank's "Analysis · LABEL" group (the groups in rank order, at the
//!   top: together they are the heat map), one value per time bin of nsys' `cuda_gpu_time_util_map`
//!   recipe, computed by the recipe's own code ([`crate::workflow::recipe`]): the bins lie on
//!   one wall-clock axis for all ranks, so a bin is the same moment on every rank.
//! * Stragglers: for each NVTX range name and MPI call, its k-th occurrence on every rank that
//!   has one: the rank that starts it last gets a slice "late: NAME" on its "Stragglers" track
//!   (in the same group), from the earliest rank's start to its own (the lag).
//!
//! Both need every rank before any is written (one axis, one earliest start), so they are
//! computed first, from small queries, and each rank's share is written after its events.

use crate::model::{
    Arg, ArgValue, Category, CounterKey, CounterOwner, CounterSample, CounterValue, Event,
    EventSink, Flows, GroupKey, Name,
};
use crate::nsys::recipes;
use crate::report::ExportOptions;
use crate::workflow::Export;
use crate::workflow::recipe::{self, Recipe, RecipeOptions, Value};
use anyhow::{Result, anyhow};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What to draw (`merge --util-map [--bins N] --stragglers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PictureOptions {
    /// The utilization map's number of bins, when drawn.
    pub util_bins: Option<usize>,
    pub stragglers: bool,
}

impl PictureOptions {
    pub fn any(&self) -> bool {
        self.util_bins.is_some() || self.stragglers
    }

    /// As the command line gives them (a trace's record of its options).
    pub fn text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(b) = self.util_bins {
            parts.push(format!("--util-map --bins {b}"));
        }
        if self.stragglers {
            parts.push("--stragglers".to_string());
        }
        parts.join(" ")
    }
}

/// What one rank's pictures hold, in its own time (ns from its session start).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankPictures {
    pub util: Vec<Utilization>,
    pub stragglers: Vec<Straggler>,
}

/// One process's utilization of one GPU: (bin start, percent) for every bin the rank's
/// session covers, then the end of its last bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Utilization {
    pub pid: i64,
    pub device: i64,
    pub bins: Vec<(i64, f64)>,
    pub end: i64,
}

/// A rank that started an NVTX range or MPI call last among the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub name: String,
    /// Which occurrence of the name (0: each rank's first).
    pub occurrence: usize,
    /// Its start on this rank.
    pub start: i64,
    /// Its start minus the earliest rank's start.
    pub lag: i64,
    /// The rank that started it first, and how many ranks have this occurrence.
    pub earliest: String,
    pub ranks: usize,
}

/// Every rank's pictures, by its place in the merge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pictures {
    pub options: PictureOptions,
    pub ranks: Vec<RankPictures>,
}

/// What one rank gives: its session (length, wall-clock start) and its ranges' starts.
struct RankTimes {
    session: Option<(i64, i64)>,
    starts: Vec<(String, i64)>,
}

fn rank_times(path: &Path, export: &ExportOptions, stragglers: bool) -> Result<RankTimes> {
    let ex = Export::open_projecting(path, export, false)?;
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
    let times = crate::parallel::parallel_map(inputs, jobs, |_, (path, _)| {
        rank_times(path, export, options.stragglers)
            .map_err(|e| anyhow!("{}: {}", path.display(), crate::errors::error_line(&e)))
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
        let outcome = recipe::run_named(
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
            (Value::Int(x), Value::Int(y)) => y - x,
            _ => return,
        },
        _ => return,
    };
    for row in &table.rows {
        let (Value::Int(at), Value::Int(pid), Value::Int(device), Value::Text(file)) =
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
        if let Value::Float(pct) = row[2] {
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

/// Write one rank's pictures into `sink` (a router of its source, after its events). A
/// selection's time window keeps the bins and the straggler slices that overlap it.
pub fn write<S: EventSink>(
    pictures: &RankPictures,
    selection: &crate::select::Selection,
    mut sink: S,
) -> Result<crate::summary::Summary> {
    let overlaps = |start: i64, end: i64| {
        selection
            .time
            .is_none_or(|t| t.start.is_none_or(|s| end >= s) && t.end.is_none_or(|e| start <= e))
    };
    for u in &pictures.util {
        let name = format!("GPU time utilization · pid {} · GPU {}", u.pid, u.device);
        let key = CounterKey {
            owner: CounterOwner::Analysis,
            name: &name,
            unit: "%",
        };
        let closing = (u.end > u.bins.last().map_or(0, |b| b.0)).then_some((u.end, 0.0));
        let points: Vec<(i64, f64)> = u.bins.iter().chain(closing.iter()).copied().collect();
        for (i, &(ts, pct)) in points.iter().enumerate() {
            // A bin lasts until the next value (the closing 0 is a moment).
            let until = points.get(i + 1).map_or(ts, |p| p.0);
            if !overlaps(ts, until) {
                continue;
            }
            sink.counter(
                &key,
                CounterSample {
                    ts,
                    value: CounterValue::Double(pct),
                    category: Category::Analysis,
                },
            )?;
        }
    }
    for s in pictures
        .stragglers
        .iter()
        .filter(|s| overlaps(s.start - s.lag, s.start))
    {
        let name = format!("late: {}", s.name);
        let args = [
            Arg::str("range", &s.name),
            Arg::int("occurrence", s.occurrence as i64),
            Arg::int("lag_ns", s.lag),
            Arg::str("earliest_rank", &s.earliest),
            Arg::int("ranks", s.ranks as i64),
            Arg {
                key: "lag_ms",
                value: ArgValue::Double(s.lag as f64 / 1e6),
            },
        ];
        sink.event(
            GroupKey::Analysis {
                rule: u8::MAX,
                track: "Stragglers",
                source: 0,
            },
            &Event {
                // From the earliest rank's start, or from this rank's session start when that
                // was earlier still (the lag stays in the args).
                start: (s.start - s.lag).max(0.min(s.start)),
                end: Some(s.start),
                name: Name::Text(&name),
                category: Category::Analysis,
                args: &args,
                flows: Flows::default(),
            },
        )?;
    }
    sink.finish()
}
