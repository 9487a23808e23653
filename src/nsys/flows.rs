//! Flow arrows from each CUDA API call to the GPU rows it launched.
//!
//! A GPU row and its launch share `correlationId` within one process (ids repeat across
//! processes). Each linked GPU row's flow id is derived from its own identity ([`flow_id`]), so
//! ids are unique across processes and tables.
//!
//! The links are computed once, before the API and GPU readers start, by a sort-merge join:
//! the API calls `(process, correlation id, table, rowid, start)` and the GPU rows
//! `(process, correlation id, table, rowid, start)` are each sorted with [`runs`] (bounded
//! memory: large inputs spill sorted runs to a scratch directory), then walked together. The
//! launching call of a key is its first API row (runtime before driver, then lowest rowid), as
//! nsys repeats none in practice. Two sorted outputs come out of the walk:
//! - per API table, `(api rowid, gpu table, gpu rowid)` of every GPU row that links: the API
//!   reader merges it with its own rowid-ordered scan, so each call carries its flow ids;
//! - per GPU table, `(gpu rowid, launch start)` of every GPU row whose launch was found: the GPU
//!   reader merges it likewise (the launch latency, and whether the arrow may be drawn).
//!
//! (Sorting nearly sorted integer keys costs a fraction of what building SQLite b-trees for
//! the same join did: a third of a whole conversion's CPU time went there.)

use crate::nsys::runs::{Lookup, Sorted, Sorter, Spill};
use crate::nsys::{self, DRIVER, KERNEL, MEMCPY, MEMSET, RUNTIME, Schema, int_at};
use crate::select::{EventType, Selection};
use anyhow::Result;
use rusqlite::Connection;

/// The computed links; shared read-only by the API and GPU readers.
pub struct FlowDb {
    /// Per API table number: `[api rowid, gpu table, gpu rowid]`, sorted.
    api_links: Vec<(i64, Sorted<3>)>,
    /// Per GPU table number: `[gpu rowid, launch start]`, sorted.
    launches: Vec<(i64, Sorted<2>)>,
    /// Keeps the scratch directory of spilled runs while the readers use them.
    _spill: Spill,
}

impl FlowDb {
    /// The links of API table `src` in API rowid order: `[api rowid, gpu table, gpu rowid]`.
    pub fn api_links(&self, src: i64) -> Result<Option<Lookup<'_, 3>>> {
        self.api_links
            .iter()
            .find(|(s, _)| *s == src)
            .map(|(_, l)| Ok(Lookup::new(l.iter()?)))
            .transpose()
    }

    /// The launches of GPU table `src` in GPU rowid order: `[gpu rowid, launch start]`.
    pub fn launches(&self, src: i64) -> Result<Option<Lookup<'_, 2>>> {
        self.launches
            .iter()
            .find(|(s, _)| *s == src)
            .map(|(_, l)| Ok(Lookup::new(l.iter()?)))
            .transpose()
    }
}

/// The flow id of GPU row `rid` of GPU table number `src` (0 kernel, 1 memcpy, 2 memset).
pub fn flow_id(src: i64, rid: i64) -> u64 {
    (rid as u64) << 2 | (src as u64 & 3)
}

/// (src number, table) of the GPU tables with what linking needs.
pub fn gpu_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [(0, KERNEL), (1, MEMCPY), (2, MEMSET)]
        .into_iter()
        .filter(|(_, t)| {
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
        })
        // Flow ids are built from rowids: a table without one draws no arrows.
        .filter(|(_, t)| schema.rowid(t).is_some())
        .collect()
}

pub fn api_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [
        (crate::nsys::api::SRC_RUNTIME, RUNTIME),
        (crate::nsys::api::SRC_DRIVER, DRIVER),
    ]
    .into_iter()
    .filter(|(_, t)| schema.has_columns(t, &["start", "end", "correlationId", "globalTid"]))
    .filter(|(_, t)| schema.rowid(t).is_some())
    .collect()
}

/// A GPU row links to its launch only when it starts after the launching call starts: an arrow
/// backwards in time is rejected by Perfetto's importer.
pub fn links(gpu_start: i64, launch_start: Option<i64>) -> bool {
    launch_start.is_some_and(|a| gpu_start > a)
}

/// The time pair of a row its reader converts (rather than counts as skipped): integer (or
/// real) times, end not before start nor beyond [`nsys::MAX_TIME`]. Only such rows link: an
/// arrow to a row that is not written would dangle.
fn converted_times(r: &rusqlite::Row<'_>, start: usize, end: usize) -> Option<i64> {
    let (s, e) = (int_at(r, start)?, int_at(r, end)?);
    (e >= s && e <= nsys::MAX_TIME).then_some(s)
}

/// The process key (`globalPid >> 24`, the same for a process's `globalTid`s) and correlation
/// id of a row. A correlation id that is not an integer links nothing.
fn key(r: &rusqlite::Row<'_>, global_id: usize, corr: usize) -> Option<(i64, i64)> {
    let corr = match r.get_ref(corr).ok()? {
        rusqlite::types::ValueRef::Integer(v) => v,
        rusqlite::types::ValueRef::Real(v) if v.fract() == 0.0 => v as i64,
        _ => return None,
    };
    Some((int_at(r, global_id)? >> 24, corr))
}

/// Compute the links, or `None` when the export has no GPU rows or no API calls to link.
pub fn prepare(conn: &Connection, schema: &Schema, sel: &Selection) -> Result<Option<FlowDb>> {
    // Only selected rows link: an arrow never points at a slice that is not written.
    let gpu: Vec<_> = gpu_tables(schema)
        .into_iter()
        .filter(|(s, _)| {
            sel.wants([EventType::Kernel, EventType::Memcpy, EventType::Memset][*s as usize])
        })
        .collect();
    let api = if sel.wants(EventType::CudaApi) {
        api_tables(schema)
    } else {
        Vec::new()
    };
    if gpu.is_empty() || api.is_empty() {
        return Ok(None);
    }
    let mut spill = Spill::default();

    // [process, correlation id, position in `api`, rowid, start]
    let mut calls = Sorter::<5>::default();
    for (order, (_, t)) in api.iter().enumerate() {
        let sql = format!(
            "SELECT {}, t.globalTid, t.correlationId, t.start, t.\"end\" FROM \"{t}\" t WHERE {}",
            schema.rowid_of(t, "t"),
            sel.sql("t", true, Some("globalTid"), None)
        );
        let mut stmt = conn.prepare(&sql)?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            // The thread must be one the API reader can place.
            let placed = nsys::tid_at(r, 1).is_some();
            if let (true, Some(start), Some((pkey, corr)), Some(rid)) =
                (placed, converted_times(r, 3, 4), key(r, 1, 2), int_at(r, 0))
            {
                calls.push([pkey, corr, order as i64, rid, start], &mut spill)?;
            }
        }
    }
    let calls = calls.finish(&mut spill)?;

    // [process, correlation id, table, rowid, start]
    let mut work = Sorter::<5>::default();
    for (src, t) in &gpu {
        let sql = format!(
            "SELECT {}, g.globalPid, g.correlationId, g.start, g.\"end\", g.deviceId, g.streamId \
             FROM \"{t}\" g WHERE {}",
            schema.rowid_of(t, "g"),
            sel.sql(
                "g",
                true,
                Some("globalPid"),
                schema.has_column(t, "deviceId").then_some("deviceId")
            )
        );
        let mut stmt = conn.prepare(&sql)?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            // The ids the GPU reader needs to place the row.
            let placed = nsys::device_at(r, 5).is_some() && int_at(r, 6).is_some();
            if let (true, Some(start), Some((pkey, corr)), Some(rid)) =
                (placed, converted_times(r, 3, 4), key(r, 1, 2), int_at(r, 0))
            {
                work.push([pkey, corr, *src, rid, start], &mut spill)?;
            }
        }
    }
    let work = work.finish(&mut spill)?;

    // The merge join.
    let mut api_links: Vec<(i64, Sorter<3>)> =
        api.iter().map(|(s, _)| (*s, Sorter::default())).collect();
    let mut launches: Vec<(i64, Sorter<2>)> =
        gpu.iter().map(|(s, _)| (*s, Sorter::default())).collect();
    let (mut calls_it, mut work_it) = (calls.iter()?, work.iter()?);
    let mut call = calls_it.next_record()?;
    // The launching call of the current key: (key, position in `api`, rowid, start).
    let mut launch: Option<([i64; 2], usize, i64, i64)> = None;
    while let Some([pkey, corr, src, rid, start]) = work_it.next_record()? {
        let k = [pkey, corr];
        while let Some(c) = call.filter(|c| [c[0], c[1]] <= k) {
            if launch.is_none_or(|l| l.0 != [c[0], c[1]]) {
                // Sorted by (key, position, rowid): the first row of a key launches.
                launch = Some(([c[0], c[1]], c[2] as usize, c[3], c[4]));
            }
            call = calls_it.next_record()?;
        }
        let Some((_, order, arid, astart)) = launch.filter(|l| l.0 == k) else {
            continue;
        };
        let slot = gpu
            .iter()
            .position(|(s, _)| *s == src)
            .expect("a linked table");
        launches[slot].1.push([rid, astart], &mut spill)?;
        if links(start, Some(astart)) {
            api_links[order].1.push([arid, src, rid], &mut spill)?;
        }
    }
    drop((calls_it, work_it));
    let api_links = api_links
        .into_iter()
        .map(|(s, l)| Ok((s, l.finish(&mut spill)?)))
        .collect::<Result<_>>()?;
    let launches = launches
        .into_iter()
        .map(|(s, l)| Ok((s, l.finish(&mut spill)?)))
        .collect::<Result<_>>()?;
    Ok(Some(FlowDb {
        api_links,
        launches,
        _spill: spill,
    }))
}
