//! GPU time utilization: `gpu_time_util` (nsys' rule per rank) and `cuda_gpu_time_util_map`
//! (per rank, process and GPU, the share of each time bin covered by kernels).

use super::{ColumnType, Outcome, Recipe, Table, round1};
use anyhow::Result;
use nsys_perfetto_read::recipes;
use nsys_perfetto_read::reports::Cell;
use nsys_perfetto_read::source::Export;

/// nsys' `gpu_time_util` rule on one rank, with its defaults; `None` when nsys would not run it
/// or it finds nothing.
pub(super) fn time_util_findings(
    ex: &Export,
) -> Result<Option<Vec<nsys_perfetto_read::rules::Finding>>> {
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
pub(super) fn gpu_time_util(
    ranks: Vec<(String, Vec<nsys_perfetto_read::rules::Finding>)>,
) -> Outcome {
    use nsys_perfetto_read::rules::{Rule, Value as V};
    let rule = Rule::GpuTimeUtil;
    let num = |v: Option<&V>| match v {
        Some(V::Int(i)) => Cell::Int(*i),
        Some(V::Real(f)) => Cell::Real(*f),
        _ => Cell::Null,
    };
    let mut rows = Vec::new();
    for (file, findings) in &ranks {
        for (i, f) in findings.iter().enumerate() {
            let in_use = match num(f.value(rule, "In-Use (%)")) {
                Cell::Int(i) => Cell::Real(i as f64),
                v => v,
            };
            rows.push(vec![
                Cell::Int(i as i64),
                Cell::Int(i as i64 + 1),
                in_use,
                Cell::Int(f.duration),
                Cell::Int(f.start),
                num(f.value(rule, "PID")),
                num(f.value(rule, "Device ID")),
                num(f.value(rule, "Context ID")),
                Cell::Text(file.clone()),
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
pub(super) struct RankKernels {
    duration: i64,
    session_start: i64,
    /// ((pid, device), intervals by start), in (pid, device) order.
    busy: Vec<Busy>,
}

/// `None` when the export lacks what the recipe reads (it skips such a rank).
pub(super) fn rank_kernels(ex: &Export) -> Result<Option<RankKernels>> {
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
pub(super) fn gpu_time_util_map(ranks: Vec<(String, RankKernels)>, bins: usize) -> Option<Outcome> {
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
                    Cell::Int(index),
                    Cell::Int(bin * i as i64),
                    if p.is_nan() {
                        Cell::Null
                    } else {
                        Cell::Real(round1(p * 100.0))
                    },
                    Cell::Int(*pid),
                    Cell::Int(*device),
                    Cell::Text(file.clone()),
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
