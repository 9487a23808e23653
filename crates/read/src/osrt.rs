//! OS runtime calls (`OSRT_API`: pthread, file and socket calls...) on an "OS runtime" track of
//! their thread, with their call stacks when nsys sampled them. The profiler's own markers in
//! that table ("OS runtime libraries profiling started/finished") are instants in category
//! `nsys.marker` on the same track, not calls.

use super::cells::int_at;
use super::order::{REORDER_WINDOW, Reorder};
use super::reader::ReadContext;
use super::scan::Scan;
use anyhow::Result;
use nsys_perfetto_model::category::{Category, EventType};
use nsys_perfetto_model::model::EventSink;
use nsys_perfetto_model::model::{ArgList, ArgValue, Event, Flows, GroupKey, Name};
use std::collections::HashSet;

pub const OSRT: &str = "OSRT_API";

struct Row {
    start: Option<i64>,
    end: Option<i64>,
    global_tid: Option<i64>,
    name_id: Option<i64>,
    ret: Option<i64>,
    callchain: Option<std::rc::Rc<str>>,
}

pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    if !cx.wants(EventType::Osrt, OSRT, &["start", "end"]) {
        return Ok(());
    }
    let (conn, schema, selection) = (cx.conn, cx.schema, cx.selection);
    let has_stacks =
        super::callchains::Callchains::column(schema, OSRT, "OSRT_CALLCHAINS") != "NULL";
    let scan = Scan::new(schema, OSRT).cols(
        schema,
        &["start", "end", "globalTid", "nameId", "returnValue"],
    );
    let scan = if has_stacks {
        scan.col(schema, "callchainId")
    } else {
        scan.null()
    };
    let scan = scan
        .filter(selection.sql(
            "t",
            true,
            schema.has_column(OSRT, "globalTid").then_some("globalTid"),
            None,
        ))
        .by_rowid();
    let mut chains = super::callchains::Callchains::new(conn, schema, OSRT, "OSRT_CALLCHAINS")?;
    let mut rows = scan.open(conn, schema)?;
    let markers = super::tables::marker_ids(conn, schema)?;
    let mut window = Reorder::new(REORDER_WINDOW);
    while let Some(r) = rows.next()? {
        let r = &r;
        let row = Row {
            start: super::cells::time_at(r, 0),
            end: super::cells::time_at(r, 1),
            global_tid: super::cells::tid_at(r, 2),
            name_id: int_at(r, 3),
            ret: int_at(r, 4),
            callchain: chains.get(r, 5)?,
        };
        // Outer calls first at equal starts, so nested calls nest.
        let key = (row.start.unwrap_or(i64::MIN), -row.end.unwrap_or(0));
        if let Some((_, row)) = window.push(key, row) {
            emit(&row, &markers, sink)?;
        }
    }
    while let Some((_, row)) = window.pop() {
        emit(&row, &markers, sink)?;
    }
    Ok(())
}

fn emit<S: EventSink>(
    row: &Row,
    markers: &HashSet<i64, nsys_perfetto_model::model::FastHash>,
    sink: &mut S,
) -> Result<()> {
    if let Some(id) = row.name_id.filter(|id| markers.contains(id)) {
        let (Some(start), Some(global_tid)) = (row.start, row.global_tid) else {
            sink.skip(OSRT, "profiler marker without a time or thread");
            return Ok(());
        };
        let ev = Event {
            start,
            end: None,
            name: Name::Str(id),
            category: Category::NsysMarker,
            args: &[],
            flows: Flows::default(),
        };
        return sink.event(GroupKey::ThreadOsrt { global_tid }, &ev);
    }
    let Some((start, end)) = sink.interval(OSRT, row.start, row.end) else {
        return Ok(());
    };
    let Some(global_tid) = row.global_tid else {
        sink.skip(OSRT, "no thread id");
        return Ok(());
    };
    let mut args = ArgList::new();
    args.int("return_value", row.ret);
    if let Some(cc) = &row.callchain {
        // Stacks repeat: interned where the format allows.
        args.push("callchain", ArgValue::Label(cc));
    }
    let ev = Event {
        start,
        end: Some(end),
        name: row
            .name_id
            .map_or(Name::Static("(unnamed OS runtime call)"), Name::Str),
        category: Category::Osrt,
        args: args.as_slice(),
        flows: Flows::default(),
    };
    sink.event(GroupKey::ThreadOsrt { global_tid }, &ev)
}
