//! CUDA runtime and driver API calls, merged in start order onto their CPU threads.

use super::gpu::ArgList;
use super::{DRIVER, RUNTIME, Schema, int_at, is_start_ordered, text_at};
use crate::flows::FLOWS_DB;
use crate::layout::Router;
use crate::model::{Category, Event, Flows, GroupKey, Name};
use crate::output::EventWriter;
use anyhow::Result;
use rusqlite::Connection;

/// The `src` numbers the flow tables use for the API tables.
pub const SRC_RUNTIME: i64 = 0;
pub const SRC_DRIVER: i64 = 1;

struct Row {
    table: &'static str,
    start: Option<i64>,
    end: Option<i64>,
    global_tid: Option<i64>,
    corr: Option<i64>,
    name_id: Option<i64>,
    ret: Option<i64>,
    flow_first: Option<i64>,
    flow_count: Option<i64>,
    callchain: Option<String>,
}

fn query(schema: &Schema, table: &str, src: i64, ordered: bool, with_flows: bool) -> String {
    let c = |n: &str| schema.col_of(table, "t", n);
    let (flow_cols, join) = if with_flows {
        (
            "f.first, f.n".to_string(),
            format!(" LEFT JOIN {FLOWS_DB}.api_flow f ON f.asrc = {src} AND f.arid = t.rowid"),
        )
    } else {
        ("NULL, NULL".to_string(), String::new())
    };
    // The call stack at the call site, innermost frame first, when nsys captured one.
    let callchain = if schema.has_column(table, "callchainId")
        && schema.has_columns("CUDA_CALLCHAINS", &["id", "symbol", "stackDepth"])
    {
        "(SELECT group_concat(coalesce(s.value, '?'), char(10)) FROM (SELECT symbol FROM CUDA_CALLCHAINS \
         WHERE id = t.callchainId ORDER BY stackDepth) cc LEFT JOIN StringIds s ON s.id = cc.symbol)"
            .to_string()
    } else {
        "NULL".to_string()
    };
    let order = if ordered { "t.rowid" } else { "t.start, t.rowid" };
    format!(
        "SELECT {}, {}, {}, {}, {}, {}, {flow_cols}, {callchain} FROM main.\"{table}\" t{join} ORDER BY {order}",
        c("start"),
        c("end"),
        c("globalTid"),
        c("correlationId"),
        c("nameId"),
        c("returnValue"),
    )
}

fn decode(table: &'static str, r: &rusqlite::Row<'_>) -> Row {
    Row {
        table,
        start: int_at(r, 0),
        end: int_at(r, 1),
        global_tid: int_at(r, 2),
        corr: int_at(r, 3),
        name_id: int_at(r, 4),
        ret: int_at(r, 5),
        flow_first: int_at(r, 6),
        flow_count: int_at(r, 7),
        callchain: text_at(r, 8).map(|s| s.into_owned()),
    }
}

pub fn read<W: EventWriter>(
    conn: &Connection,
    schema: &Schema,
    with_flows: bool,
    router: &mut Router<'_, W>,
) -> Result<()> {
    let tables: Vec<(&'static str, i64)> = [(RUNTIME, SRC_RUNTIME), (DRIVER, SRC_DRIVER)]
        .into_iter()
        .filter(|(t, _)| schema.has_columns(t, &["start", "end"]))
        .collect();
    let mut stmts = Vec::new();
    for &(t, src) in &tables {
        let ordered = is_start_ordered(conn, t)?;
        stmts.push((t, conn.prepare(&query(schema, t, src, ordered, with_flows))?));
    }
    let mut cursors = Vec::new();
    for (t, stmt) in stmts.iter_mut() {
        cursors.push((*t, stmt.query([])?));
    }
    let mut heads: Vec<Option<Row>> = Vec::new();
    for (t, rows) in cursors.iter_mut() {
        heads.push(rows.next()?.map(|r| decode(t, r)));
    }
    loop {
        let mut best: Option<(usize, i64)> = None;
        for (i, h) in heads.iter().enumerate() {
            if let Some(row) = h {
                let s = row.start.unwrap_or(i64::MIN);
                if best.is_none_or(|(_, b)| s < b) {
                    best = Some((i, s));
                }
            }
        }
        let Some((i, _)) = best else { break };
        let row = heads[i].take().expect("head present");
        let (t, rows) = &mut cursors[i];
        heads[i] = rows.next()?.map(|r| decode(t, r));
        emit(&row, router)?;
    }
    Ok(())
}

fn emit<W: EventWriter>(row: &Row, router: &mut Router<'_, W>) -> Result<()> {
    let (Some(start), Some(end)) = (row.start, row.end) else {
        router.skip(row.table, "no start or end timestamp");
        return Ok(());
    };
    if end < start {
        router.skip(row.table, "ends before it starts");
        return Ok(());
    }
    if start < 0 {
        router.skip(row.table, "negative timestamp");
        return Ok(());
    }
    let Some(global_tid) = row.global_tid else {
        router.skip(row.table, "no thread id");
        return Ok(());
    };
    let mut args = ArgList::new();
    args.int("return_value", row.ret);
    args.int("correlation_id", row.corr);
    if let Some(cc) = &row.callchain {
        args.push("callchain", crate::model::ArgValue::Str(cc));
    }
    let flows = match (row.flow_first, row.flow_count) {
        (Some(first), Some(n)) if n > 0 => Flows {
            out_first: first as u64,
            out_count: n as u32,
            terminating: None,
        },
        _ => Flows::default(),
    };
    let ev = Event {
        start,
        end: Some(end),
        name: row
            .name_id
            .map_or(Name::Static("(unnamed API call)"), Name::Str),
        category: Category::CudaApi,
        args: args.as_slice(),
        flows,
    };
    router.event(GroupKey::ThreadApi { global_tid }, &ev)
}
