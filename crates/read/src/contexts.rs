//! CUDA contexts: which device each context's work runs on, and which contexts each device has.
//!
//! Nsight Systems shows GPU work as GPU > CUDA context > stream ("Context 1" > "Stream 7").
//! Stream ids repeat across contexts (two processes on one GPU both have a "Stream 7"), so a
//! stream is only known by (process, context, stream). Layout shows the context level where a
//! device has work of several contexts, and keeps streams directly under the GPU where it has
//! one; it needs the list before the first row, so it is read here, once, with the small
//! lookup tables.
//!
//! What counts: the distinct (device, process, context) of the kernels, memcpys and memsets,
//! of whole-graph executions and CUDA event records (the GPU-side tables that name a context),
//! and of the synchronization waits, whose own `deviceId` is 0 in real multi-GPU exports: their
//! device is the context's (from `TARGET_INFO_CUDA_CONTEXT_INFO` where the export has it, else
//! from the context's other rows). Context id 0 is not a context: nsys writes it on the
//! unified-memory migrations (`MEMCPY` rows with a `migrationCause`), which its timeline shows
//! on their own, beside the contexts.
//!
//! Every row of those tables is visited once, by SQLite (`SELECT DISTINCT`), whatever the
//! selection: a device shows the same levels whatever `--types`, `--pid` or `--time-range`
//! keep.

use super::cells::{device_at, int_at};
use super::names::SYNC;
use super::names::{KERNEL, MEMCPY, MEMSET};
use super::scan::{Row, Scan};
use super::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::model::{FastHash, global_pid_of, pid_of};
use rusqlite::Connection;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

const GRAPH_TRACE: &str = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE";
const CUDA_EVENT: &str = "CUPTI_ACTIVITY_KIND_CUDA_EVENT";
const CONTEXT_INFO: &str = "TARGET_INFO_CUDA_CONTEXT_INFO";

#[derive(Debug, Default)]
pub struct Contexts {
    /// (pid, contextId) -> CUDA device of that context's work.
    pub device_of: HashMap<(i64, i64), i64, FastHash>,
    /// CUDA device -> its contexts with GPU-side rows, as (globalPid, contextId), sorted
    /// (moved into [`nsys_perfetto_model::model::Description::gpu_contexts`] once loaded).
    pub by_device: BTreeMap<i64, Vec<(i64, i64)>>,
}

/// The columns read of each table: the context list, the GPU-side tables, the waits.
const INFO_COLUMNS: [&str; 3] = ["processId", "contextId", "deviceId"];
const WORK_COLUMNS: [&str; 3] = ["deviceId", "globalPid", "contextId"];
const SYNC_COLUMNS: [&str; 3] = ["globalPid", "contextId", "deviceId"];

/// The GPU-side tables that name their device and context, with the rows' time column: the
/// tables reader converts the graph and event tables only where they have one.
fn work_tables(schema: &Schema) -> impl Iterator<Item = &'static str> + '_ {
    [KERNEL, MEMCPY, MEMSET, GRAPH_TRACE, CUDA_EVENT]
        .into_iter()
        .filter(|t| schema.time_column(t).is_some())
        .filter(|t| schema.has_columns(t, &WORK_COLUMNS))
}

/// Calls `each` with every row of `table`, as its columns `cols`; none where the table lacks one.
fn each_row(
    conn: &Connection,
    schema: &Schema,
    table: &str,
    cols: &[&str],
    mut each: impl FnMut(&Row<'_>),
) -> Result<()> {
    if !schema.has_columns(table, cols) {
        return Ok(());
    }
    let mut rows = Scan::new(schema, table)
        .cols(schema, cols)
        .open(conn, schema)?;
    while let Some(r) = rows.next()? {
        each(&r);
    }
    Ok(())
}

impl Contexts {
    pub fn load(conn: &Connection, schema: &Schema) -> Result<Contexts> {
        let mut device_of = HashMap::default();
        each_row(conn, schema, CONTEXT_INFO, &INFO_COLUMNS, |r| {
            if let (Some(p), Some(c), Some(d)) = (int_at(r, 0), int_at(r, 1), device_at(r, 2)) {
                device_of.insert((p, c), d);
            }
        })?;
        let mut by_device: BTreeMap<i64, BTreeSet<(i64, i64)>> = BTreeMap::new();
        for t in work_tables(schema) {
            // Each distinct (device, process, context) once, in the order the rows lie.
            let mut seen: HashSet<_, FastHash> = HashSet::default();
            each_row(conn, schema, t, &WORK_COLUMNS, |r| {
                let (Some(d), Some(c)) = (device_at(r, 0), int_at(r, 2)) else {
                    return;
                };
                let process = int_at(r, 1);
                if !seen.insert((d, process, c)) {
                    return;
                }
                let gp = global_pid_of(process.unwrap_or(0));
                device_of.entry((pid_of(gp), c)).or_insert(d);
                if c != 0 {
                    by_device.entry(d).or_default().insert((gp, c));
                }
            })?;
        }
        each_row(conn, schema, SYNC, &SYNC_COLUMNS, |r| {
            let Some(c) = int_at(r, 1).filter(|c| *c != 0) else {
                return;
            };
            let gp = global_pid_of(int_at(r, 0).unwrap_or(0));
            let device = device_of.get(&(pid_of(gp), c)).copied();
            if let Some(d) = device.or_else(|| device_at(r, 2)) {
                by_device.entry(d).or_default().insert((gp, c));
            }
        })?;
        Ok(Contexts {
            device_of,
            by_device: by_device
                .into_iter()
                .map(|(d, s)| (d, s.into_iter().collect()))
                .collect(),
        })
    }

    /// The device a row of context `context` of process `global_pid` ran on: its context's,
    /// else the row's own `deviceId`.
    pub fn device(
        &self,
        global_pid: Option<i64>,
        context: Option<i64>,
        own: Option<i64>,
    ) -> Option<i64> {
        match (global_pid, context) {
            (Some(g), Some(c)) => self.device_of.get(&(pid_of(g), c)).copied().or(own),
            _ => own,
        }
    }
}
