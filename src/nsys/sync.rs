//! CUDA synchronization (`CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`): how long a stream, event or
//! context synchronization waited, on a "sync" track beside its stream.

use super::info::ProfileInfo;
use super::{REORDER_WINDOW, Reorder, Schema, int_at};
use crate::model::EventSink;
use crate::model::{ArgList, ArgValue, Category, Event, Flows, GroupKey, Name, pid_of};
use crate::select::{EventType, Selection};
use anyhow::Result;
use rusqlite::Connection;
use std::collections::HashMap;

pub const SYNC: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";

const COLS: [&str; 9] = [
    "start",
    "end",
    "deviceId",
    "globalPid",
    "streamId",
    "contextId",
    "correlationId",
    "syncType",
    "eventId",
];

pub fn read<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    info: &ProfileInfo,
    sink: &mut S,
) -> Result<()> {
    if !schema.has_columns(SYNC, &["start", "end"]) || !selection.wants(EventType::Sync) {
        return Ok(());
    }
    let cols: Vec<String> = COLS.iter().map(|c| schema.col_of(SYNC, "t", c)).collect();
    // The device comes from the context (the rows' own deviceId is 0 in real multi-GPU
    // exports), so `--device` applies after the mapping, not in SQL.
    let filter = selection.sql(
        "t",
        true,
        schema.has_column(SYNC, "globalPid").then_some("globalPid"),
        None,
    );
    let devices = context_devices(conn, schema)?;
    let rowid = schema.rowid_of(SYNC, "t");
    let sql = format!(
        "SELECT {} FROM {SYNC} t WHERE {filter} ORDER BY {rowid}",
        cols.join(", ")
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut window = Reorder::new(REORDER_WINDOW);
    let mut labels: HashMap<i64, String> = HashMap::new();
    while let Some(r) = rows.next()? {
        let row: [Option<i64>; 9] = std::array::from_fn(|i| match i {
            0 | 1 => super::time_at(r, i),
            2 => super::device_at(r, i),
            _ => int_at(r, i),
        });
        if let Some(row) = window.push(row[0].unwrap_or(i64::MIN), row) {
            emit(&row, &devices, selection, sink, &mut labels, info)?;
        }
    }
    while let Some(row) = window.pop() {
        emit(&row, &devices, selection, sink, &mut labels, info)?;
    }
    Ok(())
}

/// (pid, context) -> CUDA device: from `TARGET_INFO_CUDA_CONTEXT_INFO` where the export has it,
/// else from the first kernel, memcpy or memset of each context that synchronized.
fn context_devices(conn: &Connection, schema: &Schema) -> Result<HashMap<(i64, i64), i64>> {
    let mut map = HashMap::new();
    let info = "TARGET_INFO_CUDA_CONTEXT_INFO";
    if schema.has_columns(info, &["processId", "contextId", "deviceId"]) {
        let mut stmt = conn.prepare(&format!(
            "SELECT processId, contextId, deviceId FROM {info}"
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            if let (Some(p), Some(c), Some(d)) = (int_at(r, 0), int_at(r, 1), int_at(r, 2)) {
                map.insert((p, c), d);
            }
        }
    }
    if !schema.has_columns(SYNC, &["globalPid", "contextId"]) {
        return Ok(map);
    }
    let mut contexts = Vec::new();
    {
        let mut stmt = conn.prepare(&format!(
            "SELECT DISTINCT globalPid, contextId FROM {SYNC} WHERE contextId IS NOT NULL"
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            if let (Some(g), Some(c)) = (int_at(r, 0), int_at(r, 1))
                && !map.contains_key(&(pid_of(g), c))
            {
                contexts.push((g, c));
            }
        }
    }
    for (gpid, ctx) in contexts {
        for t in [super::KERNEL, super::MEMCPY, super::MEMSET] {
            if !schema.has_columns(t, &["globalPid", "contextId", "deviceId"]) {
                continue;
            }
            let device: Option<i64> = conn
                .query_row(
                    &format!(
                        "SELECT deviceId FROM {t} WHERE globalPid = ?1 AND contextId = ?2 LIMIT 1"
                    ),
                    [gpid, ctx],
                    |r| r.get(0),
                )
                .ok();
            if let Some(d) = device {
                map.insert((pid_of(gpid), ctx), d);
                break;
            }
        }
    }
    Ok(map)
}

fn emit<S: EventSink>(
    row: &[Option<i64>; 9],
    devices: &HashMap<(i64, i64), i64>,
    selection: &Selection,
    sink: &mut S,
    labels: &mut HashMap<i64, String>,
    info: &ProfileInfo,
) -> Result<()> {
    let [
        start,
        end,
        device,
        gpid,
        stream,
        ctx,
        corr,
        sync_type,
        event_id,
    ] = *row;
    let Some((start, end)) = sink.interval(SYNC, start, end) else {
        return Ok(());
    };
    let device = match (gpid, ctx) {
        (Some(g), Some(c)) => devices.get(&(pid_of(g), c)).copied().or(device),
        _ => device,
    };
    let (Some(device), Some(stream)) = (device, stream) else {
        sink.skip(SYNC, "no device or stream id");
        return Ok(());
    };
    if !selection.devices.is_empty() && !selection.devices.contains(&device) {
        return Ok(());
    }
    let ty = sync_type.unwrap_or(0);
    let label = labels
        .entry(ty)
        .or_insert_with(|| info.enums.sync_type(ty).into_owned())
        .as_str();
    let mut args = ArgList::new();
    args.push("sync_type", ArgValue::Label(label));
    args.int("event_id", event_id);
    args.int("device", Some(device));
    args.int("context", ctx);
    args.int("stream", Some(stream));
    args.int("correlation_id", corr);
    let ev = Event {
        start,
        end: Some(end),
        name: Name::Text(label),
        category: Category::Sync,
        args: args.as_slice(),
        flows: Flows::default(),
    };
    sink.event(
        GroupKey::GpuSync {
            device,
            global_pid: gpid.unwrap_or(0) & !0xFF_FFFF,
            stream,
        },
        &ev,
    )
}
