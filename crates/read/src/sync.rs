//! CUDA synchronization (`CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`): how long a stream, event or
//! context synchronization waited, on a "sync" track beside its stream.

use super::cells::int_at;
use super::gpu::COMMON;
use super::info::ProfileInfo;
use super::names::SYNC;
use super::order::{REORDER_WINDOW, Reorder};
use super::reader::ReadContext;
use super::scan::Scan;
use anyhow::Result;
use nsys_perfetto_model::category::{Category, EventType};
use nsys_perfetto_model::model::EventSink;
use nsys_perfetto_model::model::{
    ArgList, ArgValue, Event, FastHash, Flows, GroupKey, Name, StreamKey,
};
use nsys_perfetto_model::select::Selection;
use std::collections::HashMap;

pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    if !cx.wants(EventType::Sync, SYNC, &["start", "end"]) {
        return Ok(());
    }
    let (conn, schema, selection, info) = (cx.conn, cx.schema, cx.selection, cx.info);
    // The device comes from the context (the rows' own deviceId is 0 in real multi-GPU
    // exports), so `--device` applies after the mapping, not in SQL.
    let filter = selection.sql(
        "t",
        true,
        schema.has_column(SYNC, "globalPid").then_some("globalPid"),
        None,
    );
    let mut rows = Scan::new(schema, SYNC)
        .cols(schema, &COMMON)
        .cols(schema, &["syncType", "eventId"])
        .filter(filter)
        .by_rowid()
        .open(conn, schema)?;
    let mut window = Reorder::new(REORDER_WINDOW);
    let mut labels: HashMap<i64, String, FastHash> = HashMap::default();
    while let Some(r) = rows.next()? {
        let r = &r;
        let row: [Option<i64>; 9] = std::array::from_fn(|i| match i {
            0 | 1 => super::cells::time_at(r, i),
            2 => super::cells::device_at(r, i),
            _ => int_at(r, i),
        });
        if let Some((_, row)) = window.push((row[0].unwrap_or(i64::MIN), 0), row) {
            emit(&row, selection, sink, &mut labels, info)?;
        }
    }
    while let Some((_, row)) = window.pop() {
        emit(&row, selection, sink, &mut labels, info)?;
    }
    Ok(())
}

fn emit<S: EventSink>(
    row: &[Option<i64>; 9],
    selection: &Selection,
    sink: &mut S,
    labels: &mut HashMap<i64, String, FastHash>,
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
    // The context's device (`crate::contexts`), else the row's own.
    let device = info.contexts.device(gpid, ctx, device);
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
        GroupKey::GpuSync(StreamKey {
            device,
            global_pid: gpid.unwrap_or(0) & !0xFF_FFFF,
            context: ctx.unwrap_or(0),
            stream,
        }),
        &ev,
    )
}
