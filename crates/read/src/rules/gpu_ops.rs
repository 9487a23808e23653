//! The GPU rules that read the operations themselves rather than a query's rows: the gaps
//! between operations and the chunks of low utilisation.

use super::{Finding, Value};
use anyhow::Result;
use rusqlite::Connection;
use rusqlite::types::ValueRef;

/// A time SQLite computed as an integer or as a whole real.
pub(super) fn whole(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(i) => Some(i),
        ValueRef::Real(f) if f.is_finite() => Some(f.round() as i64),
        _ => None,
    }
}

/// The temporary table of the chunks below the threshold (`gpu_time_util`).
pub(super) const CHUNKS: &str = "analyze_low_chunks";

/// A row of GPU work (or profiler overhead) as nsys' GPU rules see it.
pub(super) struct GpuOp {
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) pid: Option<i64>,
    pub(super) device: Option<i64>,
    pub(super) global: Option<i64>,
    pub(super) context: Option<i64>,
}

/// GPU work by (process, device), in SQL's order (NULL first).
pub(super) type OpGroups = std::collections::BTreeMap<(Option<i64>, Option<i64>), Vec<GpuOp>>;

/// The rows of one API's GPU work (`gpu_apis`), grouped by (process, device), each group in
/// the query's row order.
pub(super) fn read_ops(conn: &Connection, ops: &str) -> Result<OpGroups> {
    let mut stmt = conn.prepare(&format!(
        "SELECT start, \"end\", pid, deviceId, globalId, contextId FROM ({ops})"
    ))?;
    let mut rows = stmt.query([])?;
    let mut out = OpGroups::new();
    while let Some(r) = rows.next()? {
        let (Some(start), Some(end)) = (whole(r.get_ref(0)?), whole(r.get_ref(1)?)) else {
            continue;
        };
        let op = GpuOp {
            start,
            end,
            pid: whole(r.get_ref(2)?),
            device: whole(r.get_ref(3)?),
            global: whole(r.get_ref(4)?),
            context: whole(r.get_ref(5)?),
        };
        out.entry((op.pid, op.device)).or_default().push(op);
    }
    Ok(out)
}

pub(super) fn int_or_null(v: Option<i64>) -> Value {
    v.map_or(Value::Null, Value::Int)
}

/// nsys' gap query: per process and device, the k-th earliest start against the (k-1)-th
/// earliest end (both numbered in one order over every process and device, joined on the same
/// process and device); a gap where that end precedes that start by more than the threshold.
pub(super) fn gaps(groups: &OpGroups, threshold_ns: i64, out: &mut Vec<Finding>) {
    for (&(pid, device), ops) in groups {
        // SQL's `==` never joins NULLs.
        if pid.is_none() || device.is_none() {
            continue;
        }
        let mut starts: Vec<i64> = ops.iter().map(|o| o.start).collect();
        starts.sort_unstable();
        let mut ends: Vec<&GpuOp> = ops.iter().collect();
        ends.sort_by_key(|o| o.end);
        for k in 1..starts.len() {
            let (start, before) = (starts[k], ends[k - 1]);
            let duration = start - before.end;
            if duration > threshold_ns && before.end < start {
                out.push(Finding {
                    start: before.end,
                    duration,
                    values: vec![
                        int_or_null(pid),
                        int_or_null(device),
                        int_or_null(before.context),
                    ],
                    blame: None,
                });
            }
        }
    }
}

/// nsys' chunk query up to the chunks below the threshold, into the temporary table [`CHUNKS`]:
/// each process's and device's span of GPU work in `chunks` equal chunks (their size rounded
/// up to whole ns, the last one cut at the span's end), and each chunk's use, the summed overlap
/// of the work with it as a percentage of its size. The arithmetic is SQLite's: doubles for
/// chunk bounds and sums (whole numbers of ns, so exact), compared with the integer times.
pub(super) fn chunks(
    conn: &Connection,
    api: &str,
    groups: &OpGroups,
    chunks: i64,
    threshold: i64,
) -> Result<()> {
    let mut insert = conn.prepare(&format!(
        "INSERT INTO temp.{CHUNKS} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
    ))?;
    for (&(pid, device), ops) in groups {
        let (Some(lo), Some(hi)) = (
            ops.iter().map(|o| o.start).min(),
            ops.iter().map(|o| o.end).max(),
        ) else {
            continue;
        };
        // The range's other columns: one row of the group (SQLite's bare columns).
        let first = ops.iter().min_by_key(|o| o.start).expect("a row");
        let size = ((hi - lo) as f64 / chunks as f64).ceil();
        let bounds = |i: i64| {
            let cstart = i as f64 * size + lo as f64;
            (cstart, (cstart + size).min(hi as f64))
        };
        let n = usize::try_from(chunks).unwrap_or(0);
        let mut used = vec![0.0f64; n];
        // NULL process or device: no work joins its chunks (SQL's `==`).
        if pid.is_some() && device.is_some() && size > 0.0 {
            for op in ops {
                // The chunks it overlaps: from the one before its start's, while they start
                // before its end.
                let from = (((op.start - lo) as f64 / size).floor() as i64 - 1).max(0);
                for i in from..chunks {
                    let (cstart, cend) = bounds(i);
                    if cstart >= op.end as f64 {
                        break;
                    }
                    if (op.start as f64) < cend && (op.end as f64) > cstart {
                        used[i as usize] +=
                            (op.end as f64).min(cend) - (op.start as f64).max(cstart);
                    }
                }
            }
        }
        for (i, used) in used.iter().enumerate() {
            let (cstart, cend) = bounds(i as i64);
            if cstart >= cend {
                continue;
            }
            let pct = used / (cend - cstart) * 100.0;
            if pct < threshold as f64 {
                insert.execute(rusqlite::params![
                    i as i64,
                    cstart,
                    cend,
                    cend - cstart,
                    pct,
                    pid,
                    first.global,
                    device,
                    first.context,
                    api
                ])?;
            }
        }
    }
    Ok(())
}
