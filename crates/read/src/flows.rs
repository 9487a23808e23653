//! Flow arrows from each CUDA API call to the GPU rows it launched.
//!
//! A GPU row and its launch share `correlationId` within one process (ids repeat across
//! processes). Each linked GPU row's flow id is derived from its own identity ([`flow_id`]), so
//! ids are unique across processes and tables.
//!
//! The links are computed once, before the API and GPU readers start, by a sort-merge join:
//! the API calls `(process, correlation id, table, rowid, start)` and the GPU rows
//! `(process, correlation id, table, rowid, start)` are each sorted with [`super::runs`] (bounded
//! memory: large inputs spill sorted runs to a scratch directory), then walked together. The
//! launching call of a key is its first API row (runtime before driver, then lowest rowid), as
//! nsys repeats none in practice. Two sorted outputs come out of the walk:
//! - per API table, `(api rowid, gpu table, gpu rowid)` of every GPU row that links: the API
//!   reader merges it with its own rowid-ordered scan, so each call carries its flow ids;
//! - per GPU table, `(gpu rowid, launch start)` of every GPU row whose launch was found: the GPU
//!   reader merges it likewise (the launch latency, and whether the arrow may be drawn).
//!
//! The same walk finds the launches the NVTX-on-GPU projection needs ([`Launches`]): there every
//! row with the ids counts, selected or not (a range's GPU span does not depend on the time
//! window), as the projection's definition says (see [`crate::projection`]).
//!
//! (Sorting nearly sorted integer keys costs a fraction of what building SQLite b-trees for
//! the same join did: a third of a whole conversion's CPU time went there.)

use super::scan::Scan;
use crate::names::{DRIVER, KERNEL, MEMCPY, MEMSET, RUNTIME};
use crate::query::int_of;
use crate::runs::{Lookup, Record, Sorted, Sorter, Spill};
use crate::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::select::Selection;
use rusqlite::Connection;
use rusqlite::types::ValueRef;

/// The computed links; shared read-only by the API and GPU readers.
pub struct FlowDb {
    /// Per API table number: `[api rowid, gpu table, gpu rowid]`, sorted.
    api_links: Vec<(i64, Sorted<[i64; 3]>)>,
    /// Per GPU table number: `[gpu rowid, launch start]`, sorted.
    launches: Vec<(i64, Sorted<[i64; 2]>)>,
    /// Keeps the scratch directory of spilled runs while the readers use them.
    _spill: Spill,
}

impl FlowDb {
    /// The links of API table `src` in API rowid order: `[api rowid, gpu table, gpu rowid]`.
    pub fn api_links(&self, src: i64) -> Result<Option<Lookup<'_, [i64; 3]>>> {
        lookup(&self.api_links, src)
    }

    /// The launches of GPU table `src` in GPU rowid order: `[gpu rowid, launch start]`.
    pub fn launches(&self, src: i64) -> Result<Option<Lookup<'_, [i64; 2]>>> {
        lookup(&self.launches, src)
    }
}

/// The rows of table `src` among sorted rows kept per table, in their order.
fn lookup<R: Record>(per_table: &[(i64, Sorted<R>)], src: i64) -> Result<Option<Lookup<'_, R>>> {
    per_table
        .iter()
        .find(|(s, _)| *s == src)
        .map(|(_, l)| Ok(Lookup::new(l.iter()?)))
        .transpose()
}

/// The GPU rows of each launching call, for the NVTX projection.
pub struct Launches {
    /// `[launch start, launching thread (globalTid), gpu table, gpu rowid, device, gpu start,
    /// gpu end]`, sorted: in launch start order.
    pub sorted: Sorted<[i64; 7]>,
    /// A value the projection's sweep does not handle (an id or time that is neither an
    /// integer nor NULL): the projection then follows its SQL definition instead.
    pub unsupported: bool,
    _spill: Spill,
}

/// The flow id of GPU row `rid` of GPU table number `src` (0 kernel, 1 memcpy, 2 memset).
pub fn flow_id(src: i64, rid: i64) -> u64 {
    (rid as u64) << 2 | (src as u64 & 3)
}

/// The GPU tables with the type of their events, each at its `src` number: the number the flow
/// tables and flow ids ([`flow_id`]) give it.
pub const GPU_TABLES: [(EventType, &str); 3] = [
    (EventType::Kernel, KERNEL),
    (EventType::Memcpy, MEMCPY),
    (EventType::Memset, MEMSET),
];

/// (src number, table) of the GPU tables with what linking needs.
pub fn gpu_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    (0..)
        .zip(GPU_TABLES.map(|(_, t)| t))
        .filter(|(_, t)| gpu_flows(schema, t) || gpu_projects(schema, t))
        .collect()
}

/// Whether a GPU table's rows can draw arrows.
fn gpu_flows(schema: &Schema, t: &str) -> bool {
    schema.has_columns(
        t,
        &[
            "start",
            "end",
            "correlationId",
            "globalPid",
            "deviceId",
            "streamId",
        ],
    )
    // Flow ids are built from rowids: a table without one draws no arrows.
    && schema.rowid(t).is_some()
}

/// Whether a GPU table's rows take part in the NVTX projection (its definition).
pub fn gpu_projects(schema: &Schema, t: &str) -> bool {
    schema.has_columns(
        t,
        &["start", "end", "correlationId", "globalPid", "deviceId"],
    ) && schema.rowid(t) == Some("rowid")
}

/// The `src` numbers the flow tables use for the API tables.
pub const SRC_RUNTIME: i64 = 0;
pub const SRC_DRIVER: i64 = 1;

/// (src number, table) of the API tables with what linking needs, runtime first (the order in
/// which a repeated correlation id picks its launch).
pub fn api_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [(SRC_RUNTIME, RUNTIME), (SRC_DRIVER, DRIVER)]
        .into_iter()
        .filter(|(_, t)| api_flows(schema, t) || api_projects(schema, t))
        .collect()
}

fn api_flows(schema: &Schema, t: &str) -> bool {
    schema.has_columns(t, &["start", "end", "correlationId", "globalTid"])
        && schema.rowid(t).is_some()
}

/// Whether an API table's calls take part in the NVTX projection (its definition).
pub fn api_projects(schema: &Schema, t: &str) -> bool {
    schema.has_columns(t, &["start", "correlationId", "globalTid"])
        && schema.rowid(t) == Some("rowid")
}

/// A GPU row links to its launch only when it starts after the launching call starts: an arrow
/// backwards in time is rejected by Perfetto's importer.
pub fn links(gpu_start: i64, launch_start: Option<i64>) -> bool {
    launch_start.is_some_and(|a| gpu_start > a)
}

/// The time pair of a row its reader converts (rather than counts as skipped): integer (or
/// real) times, end not before start nor beyond [`crate::cells::MAX_TIME`]. Only such rows link: an
/// arrow to a row that is not written would dangle.
fn converted_times(start: ValueRef<'_>, end: ValueRef<'_>) -> Option<i64> {
    let (s, e) = (int_of(start)?, int_of(end)?);
    (e >= s && e <= crate::cells::MAX_TIME).then_some(s)
}

/// The process key (`globalPid >> 24`, the same for a process's `globalTid`s) and correlation
/// id of a row. A correlation id that is not an integer links nothing.
fn key(global_id: ValueRef<'_>, corr: ValueRef<'_>) -> Option<(i64, i64)> {
    let corr = match corr {
        ValueRef::Integer(v) => v,
        ValueRef::Real(v) if v.fract() == 0.0 => v as i64,
        _ => return None,
    };
    Some((int_of(global_id)? >> 24, corr))
}

/// An integer, or `None` for NULL; `Err` for any other value (the projection's sweep then
/// gives way to its SQL definition, which has SQLite's own rules for those).
fn int_or_null(v: ValueRef<'_>) -> Result<Option<i64>, ()> {
    match v {
        ValueRef::Integer(v) => Ok(Some(v)),
        ValueRef::Null => Ok(None),
        _ => Err(()),
    }
}

/// The row's first `N` values, each fetched once.
fn values<'r, const N: usize>(
    r: &'r impl crate::query::Fetch,
) -> rusqlite::Result<[ValueRef<'r>; N]> {
    let mut v = [ValueRef::Null; N];
    for (i, v) in v.iter_mut().enumerate() {
        *v = r.fetch(i);
    }
    Ok(v)
}

/// Flags of a sorted row: whether it takes part in the flow links, in the projection.
const FLOWS: i64 = 1;
const PROJECTS: i64 = 2;

/// Compute the flow links (`None` when the export has no GPU rows or no API calls to link, or
/// the selection leaves either out) and, when `project`, the launches of the NVTX projection
/// (`None` when the export has no GPU rows or API calls it can use).
pub fn prepare(
    conn: &Connection,
    schema: &Schema,
    sel: &Selection,
    project: bool,
) -> Result<(Option<FlowDb>, Option<Launches>)> {
    // Only selected rows link: an arrow never points at a slice that is not written.
    let gpu_selected = |s: i64| sel.wants(GPU_TABLES[s as usize].0);
    let gpu_all = gpu_tables(schema);
    let api_all = api_tables(schema);
    let flows = sel.wants(EventType::CudaApi)
        && gpu_all
            .iter()
            .any(|(s, t)| gpu_selected(*s) && gpu_flows(schema, t))
        && api_all.iter().any(|(_, t)| api_flows(schema, t));
    let project = project
        && gpu_all.iter().any(|(_, t)| gpu_projects(schema, t))
        && api_all.iter().any(|(_, t)| api_projects(schema, t));
    // (table, src, whether its rows may link, whether they take part in the projection)
    let gpu: Vec<_> = gpu_all
        .into_iter()
        .map(|(s, t)| {
            let f = flows && gpu_selected(s) && gpu_flows(schema, t);
            (s, t, f, project && gpu_projects(schema, t))
        })
        .filter(|g| g.2 || g.3)
        .collect();
    let api: Vec<_> = api_all
        .into_iter()
        .map(|(s, t)| {
            (
                s,
                t,
                flows && api_flows(schema, t),
                project && api_projects(schema, t),
            )
        })
        .filter(|a| a.2 || a.3)
        .collect();
    if gpu.is_empty() || api.is_empty() {
        return Ok((None, None));
    }
    let mut spill = Spill::default();
    let mut unsupported = false;
    // The projection reads every row; the links only selected ones, so their filter is a
    // column then rather than the WHERE clause.
    let scan = |t: &str, cols: &[&str], filter: String| {
        let scan = Scan::new(schema, t).rowid().cols(schema, cols);
        if project {
            scan.expr(format!("({filter})"))
        } else {
            scan.expr("1").filter(filter)
        }
    };

    // [correlation id, process, position in `api`, rowid, start, thread, flags]: the
    // correlation id first, as the sort orders large records by their first field (the process
    // is the same in nearly all of them).
    let mut calls = Sorter::<[i64; 7]>::default();
    for (order, (_, t, t_flows, t_projects)) in api.iter().enumerate() {
        let mut rows = scan(
            t,
            &["globalTid", "correlationId", "start", "end"],
            sel.sql("t", true, Some("globalTid"), None),
        )
        .open(conn, schema)?;
        while let Some(r) = rows.next()? {
            let r = &r;
            // Each value fetched once: `[rowid, thread, correlation id, start, end, selected]`.
            let v = values::<6>(r)?;
            let rid = int_of(v[0]);
            let mut flags = 0;
            let mut key_start = None;
            // The thread must be one the API reader can place.
            if *t_flows
                && int_of(v[5]) == Some(1)
                && crate::cells::global_tid_of(v[1]).is_some()
                && let (Some(start), Some(k), Some(_)) =
                    (converted_times(v[3], v[4]), key(v[1], v[2]), rid)
            {
                flags |= FLOWS;
                key_start = Some((k, start));
            }
            if *t_projects && !unsupported {
                match (int_or_null(v[1]), int_or_null(v[2]), int_or_null(v[3])) {
                    (Ok(Some(tid)), Ok(Some(corr)), Ok(Some(start))) => {
                        flags |= PROJECTS;
                        key_start.get_or_insert(((tid >> 24, corr), start));
                    }
                    (Ok(_), Ok(_), Ok(_)) => {}
                    _ => unsupported = true,
                }
            }
            if let (Some(((pkey, corr), start)), Some(rid)) = (key_start, rid)
                && flags != 0
            {
                let tid = int_of(v[1]).unwrap_or(0);
                calls.push(
                    [corr, pkey, order as i64, rid, start, tid, flags],
                    &mut spill,
                )?;
            }
        }
    }
    let calls = calls.finish(&mut spill)?;

    // [correlation id, process, table, rowid, start, end, device, flags], ordered as `calls`.
    let mut work = Sorter::<[i64; 8]>::default();
    for (src, t, t_flows, t_projects) in &gpu {
        let mut rows = scan(
            t,
            &[
                "globalPid",
                "correlationId",
                "start",
                "end",
                "deviceId",
                "streamId",
            ],
            sel.sql(
                "t",
                true,
                Some("globalPid"),
                schema.has_column(t, "deviceId").then_some("deviceId"),
            ),
        )
        .open(conn, schema)?;
        while let Some(r) = rows.next()? {
            let r = &r;
            // `[rowid, process, correlation id, start, end, device, stream, selected]`.
            let v = values::<8>(r)?;
            let Some(rid) = int_of(v[0]) else { continue };
            let mut flags = 0;
            let mut rec = None;
            // The ids the GPU reader needs to place the row.
            if *t_flows
                && int_of(v[7]) == Some(1)
                && crate::cells::device_of(v[5]).is_some()
                && int_of(v[6]).is_some()
                && let (Some(start), Some((pkey, corr))) =
                    (converted_times(v[3], v[4]), key(v[1], v[2]))
            {
                flags |= FLOWS;
                let (end, device) = (int_of(v[4]).unwrap_or(start), int_of(v[5]).unwrap_or(0));
                rec = Some([corr, pkey, *src, rid, start, end, device]);
            }
            if *t_projects && !unsupported {
                match [1, 2, 3, 4, 5].map(|i| int_or_null(v[i])) {
                    [
                        Ok(Some(gpid)),
                        Ok(Some(corr)),
                        Ok(Some(start)),
                        Ok(Some(end)),
                        Ok(Some(device)),
                    ] if end >= start
                        && start >= -crate::cells::MAX_TIME
                        && end <= crate::cells::MAX_TIME =>
                    {
                        flags |= PROJECTS;
                        rec.get_or_insert([corr, gpid >> 24, *src, rid, start, end, device]);
                    }
                    ids if ids.iter().any(Result::is_err) => unsupported = true,
                    _ => {}
                }
            }
            if let Some([corr, pkey, src, rid, start, end, device]) = rec
                && flags != 0
            {
                work.push(
                    [corr, pkey, src, rid, start, end, device, flags],
                    &mut spill,
                )?;
            }
        }
    }
    let work = work.finish(&mut spill)?;

    // The merge join.
    let mut api_links: Vec<(i64, Sorter<[i64; 3]>)> = api
        .iter()
        .filter(|a| a.2)
        .map(|a| (a.0, Sorter::default()))
        .collect();
    let mut launches: Vec<(i64, Sorter<[i64; 2]>)> = gpu
        .iter()
        .filter(|g| g.2)
        .map(|g| (g.0, Sorter::default()))
        .collect();
    let mut projected = Sorter::<[i64; 7]>::default();
    let mut projected_spill = Spill::default();
    let (mut calls_it, mut work_it) = (calls.iter()?, work.iter()?);
    let mut call = calls_it.next_record()?;
    // The key of the calls read last, and its launching calls: the first row of the key that
    // links, (position in `api`, rowid, start), and the first the projection counts, (thread,
    // start). Sorted by (key, position, rowid): the first row of a key launches.
    let mut current: Option<[i64; 2]> = None;
    let mut flow_launch: Option<(usize, i64, i64)> = None;
    let mut proj_launch: Option<(i64, i64)> = None;
    while let Some([corr, pkey, src, rid, start, end, device, flags]) = work_it.next_record()? {
        let k = [corr, pkey];
        while let Some(c) = call.filter(|c| [c[0], c[1]] <= k) {
            if current != Some([c[0], c[1]]) {
                current = Some([c[0], c[1]]);
                (flow_launch, proj_launch) = (None, None);
            }
            if c[6] & FLOWS != 0 && flow_launch.is_none() {
                flow_launch = Some((c[2] as usize, c[3], c[4]));
            }
            if c[6] & PROJECTS != 0 && proj_launch.is_none() {
                proj_launch = Some((c[5], c[4]));
            }
            call = calls_it.next_record()?;
        }
        if current != Some(k) {
            continue;
        }
        if flags & FLOWS != 0
            && let Some((order, arid, astart)) = flow_launch
        {
            let slot = launches
                .iter()
                .position(|(s, _)| *s == src)
                .expect("a linked table");
            launches[slot].1.push([rid, astart], &mut spill)?;
            if links(start, Some(astart)) {
                let slot = api_links
                    .iter()
                    .position(|(s, _)| *s == api[order].0)
                    .expect("a linked table");
                api_links[slot].1.push([arid, src, rid], &mut spill)?;
            }
        }
        if flags & PROJECTS != 0
            && !unsupported
            && let Some((tid, astart)) = proj_launch
        {
            projected.push(
                [astart, tid, src, rid, device, start, end],
                &mut projected_spill,
            )?;
        }
    }
    drop((calls_it, work_it));
    let flow_db = if flows {
        let api_links = api_links
            .into_iter()
            .map(|(s, l)| Ok((s, l.finish(&mut spill)?)))
            .collect::<Result<_>>()?;
        let launches = launches
            .into_iter()
            .map(|(s, l)| Ok((s, l.finish(&mut spill)?)))
            .collect::<Result<_>>()?;
        Some(FlowDb {
            api_links,
            launches,
            _spill: spill,
        })
    } else {
        None
    };
    let launches = if project {
        Some(Launches {
            sorted: projected.finish(&mut projected_spill)?,
            unsupported,
            _spill: projected_spill,
        })
    } else {
        None
    };
    Ok((flow_db, launches))
}
