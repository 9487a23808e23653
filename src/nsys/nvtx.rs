//! NVTX: push/pop ranges and marks per thread and domain, start/end ranges per process and
//! domain. Names come from `text` or, for registered strings, `textId`.

use super::info::ProfileInfo;
use super::{NVTX, Schema, int_at, real_at, text_at};
use crate::model::EventSink;
use crate::model::{
    ArgList, ArgValue, Category, Event, Flows, GroupKey, Name, global_pid_of, tid_of,
};
use crate::nsys::projection::{NVTX_GPU, PROJ_DB};
use crate::select::{EventType, Selection};
use anyhow::Result;
use rusqlite::Connection;
use std::collections::HashMap;

pub const MARK: i64 = 34;
pub const PUSH_POP: i64 = 59;
pub const START_END: i64 = 60;
/// Rows that name things rather than being events: categories, thread names, domains.
const NAMING: [i64; 4] = [33, 39, 75, 76];

const COLS: [&str; 18] = [
    "start",
    "end",
    "eventType",
    "globalTid",
    "endGlobalTid",
    "domainId",
    "category",
    "color",
    "text",
    "textId",
    "uint64Value",
    "int64Value",
    "doubleValue",
    "uint32Value",
    "int32Value",
    "floatValue",
    "jsonTextId",
    "jsonText",
];

pub fn read<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    info: &ProfileInfo,
    sink: &mut S,
) -> Result<()> {
    if !schema.has_columns(NVTX, &["start", "eventType"]) || !selection.wants(EventType::Nvtx) {
        return Ok(());
    }
    let cols: Vec<String> = COLS.iter().map(|c| schema.col_of(NVTX, "t", c)).collect();
    // Naming rows always pass (they are counted); events are filtered by the selection.
    let filter = selection.sql(
        "t",
        schema.has_column(NVTX, "end"),
        schema.has_column(NVTX, "globalTid").then_some("globalTid"),
        None,
    );
    // Rows stream in storage order, which nsys writes by start; layout copes with stragglers.
    let rowid = schema.rowid_of(NVTX, "t");
    let sql = format!(
        "SELECT {} FROM {NVTX} t WHERE t.eventType NOT IN ({MARK}, {PUSH_POP}, {START_END}) OR ({filter}) \
         ORDER BY {rowid}",
        cols.join(", ")
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut colors: HashMap<i64, String> = HashMap::new();
    let mut categories: HashMap<(i64, i64, i64), String> = HashMap::new();
    while let Some(r) = rows.next()? {
        let Some(ty) = int_at(r, 2) else {
            sink.skip(NVTX, "no event type");
            continue;
        };
        if NAMING.contains(&ty) {
            sink.naming_row(NVTX);
            continue;
        }
        if ty != MARK && ty != PUSH_POP && ty != START_END {
            sink.skip(NVTX, "unsupported NVTX event type");
            continue;
        }
        let Some(start) = super::time_at(r, 0) else {
            sink.skip(NVTX, "no start timestamp");
            continue;
        };
        let end = super::time_at(r, 1);
        let end = match (ty, end) {
            (MARK, _) => None,
            (_, None) => {
                sink.skip(NVTX, "range never ended (no end timestamp)");
                continue;
            }
            (_, Some(e)) if e < start => {
                sink.skip(NVTX, "ends before it starts");
                continue;
            }
            (_, Some(e)) => Some(e),
        };
        let Some(global_tid) = super::tid_at(r, 3) else {
            sink.skip(NVTX, "no thread id");
            continue;
        };
        let domain = int_at(r, 5).unwrap_or(0);
        let gpid = global_pid_of(global_tid);
        let mut color = int_at(r, 7);
        if let Some(c) = color {
            colors
                .entry(c)
                .or_insert_with(|| format!("#{:06x}", c as u32 & 0xFF_FFFF));
        }
        let category = int_at(r, 6).filter(|c| *c != 0);
        if let Some(c) = category {
            categories.entry((gpid, domain, c)).or_insert_with(|| {
                info.nvtx_categories
                    .get(&(gpid, domain, c))
                    .cloned()
                    .unwrap_or_else(|| c.to_string())
            });
        }
        let text = text_at(r, 8);
        let json_text = text_at(r, 17);
        let name = match (&text, int_at(r, 9)) {
            (Some(t), _) => Name::Text(t),
            (None, Some(id)) => Name::Str(id),
            (None, None) => Name::Static("(unnamed range)"),
        };
        if let Some(f) = &selection.nvtx_filter
            && !f.matches(&name_text(info, name))
        {
            continue;
        }
        if !selection.nvtx_colors.is_empty() {
            let text = name_text(info, name);
            if let Some((_, c)) = selection
                .nvtx_colors
                .iter()
                .find(|(re, _)| re.is_match(&text))
            {
                color = Some(*c as i64);
                colors
                    .entry(*c as i64)
                    .or_insert_with(|| format!("#{:06x}", c & 0xFF_FFFF));
            }
        }
        let mut args = ArgList::new();
        args.label(
            "color",
            color.and_then(|c| colors.get(&c)).map(String::as_str),
        );
        args.label(
            "category",
            category
                .and_then(|c| categories.get(&(gpid, domain, c)))
                .map(String::as_str),
        );
        if let Some(v) = int_at(r, 10) {
            args.push("payload", ArgValue::Int(v));
        } else if let Some(v) = int_at(r, 11) {
            args.push("payload", ArgValue::Int(v));
        } else if let Some(v) = real_at(r, 12) {
            args.push("payload", ArgValue::Double(v));
        } else if let Some(v) = int_at(r, 13) {
            args.push("payload", ArgValue::Int(v));
        } else if let Some(v) = int_at(r, 14) {
            args.push("payload", ArgValue::Int(v));
        } else if let Some(v) = real_at(r, 15) {
            args.push("payload", ArgValue::Double(v));
        } else if let Some(id) = int_at(r, 16) {
            args.push("payload", ArgValue::StrId(id));
        } else if let Some(j) = &json_text {
            args.push("payload", ArgValue::Str(j));
        }
        let key = if ty == START_END {
            args.int("tid", Some(tid_of(global_tid)));
            if let Some(et) = int_at(r, 4)
                && et != global_tid
            {
                args.int("end_tid", Some(tid_of(et)));
            }
            GroupKey::ProcessNvtx {
                global_pid: gpid,
                domain,
            }
        } else {
            GroupKey::ThreadNvtx { global_tid, domain }
        };
        let ev = Event {
            start,
            end,
            name,
            category: if ty == MARK {
                Category::NvtxMark
            } else {
                Category::Nvtx
            },
            args: args.as_slice(),
            flows: Flows::default(),
        };
        sink.event(key, &ev)?;
    }
    Ok(())
}

/// The text of a name, for matching against `--nvtx-filter`.
fn name_text<'a>(info: &'a ProfileInfo, name: Name<'a>) -> std::borrow::Cow<'a, str> {
    match name {
        Name::Text(t) | Name::Static(t) => std::borrow::Cow::Borrowed(t),
        Name::Str(id) => {
            std::borrow::Cow::Owned(info.desc.string(id).map(String::from).unwrap_or_default())
        }
    }
}

/// NVTX ranges projected onto the GPU (`nvtx-gpu`): each range becomes a slice spanning the GPU
/// work it launched, on a per-GPU track of its thread. Reads [`crate::nsys::projection`]'s tables,
/// which must be attached to `conn`.
pub fn read_projection<S: EventSink>(
    conn: &Connection,
    selection: &Selection,
    info: &ProfileInfo,
    sink: &mut S,
) -> Result<()> {
    let mut conds = Vec::new();
    if let Some(t) = selection.time {
        if let Some(s) = t.start {
            conds.push(format!("gpu_end >= {s}"));
        }
        if let Some(e) = t.end {
            conds.push(format!("gpu_start <= {e}"));
        }
    }
    if !selection.pids.is_empty() {
        let l: Vec<_> = selection.pids.iter().map(|p| p.to_string()).collect();
        conds.push(format!(
            "((global_tid >> 24) & 16777215) IN ({})",
            l.join(",")
        ));
    }
    if !selection.devices.is_empty() {
        let l: Vec<_> = selection.devices.iter().map(|d| d.to_string()).collect();
        conds.push(format!("device IN ({})", l.join(",")));
    }
    let filter = if conds.is_empty() {
        "1".to_string()
    } else {
        conds.join(" AND ")
    };
    let sql = format!(
        "SELECT gpu_start, gpu_end, global_tid, device, gpu_rows, name_text, name_id, event_type \
         FROM {PROJ_DB}.{NVTX_GPU} WHERE {filter} ORDER BY gpu_start"
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    // Equal starts: the longer (enclosing) range first, so projected ranges nest like the CPU ones.
    let mut window = super::Reorder::new(super::REORDER_WINDOW);
    let emit = |row: ProjectedRow, sink: &mut S| -> Result<()> {
        let name = match (&row.text, row.name_id) {
            (Some(t), _) => Name::Text(t),
            (None, Some(id)) => Name::Str(id),
            (None, None) => Name::Static("(unnamed range)"),
        };
        if let Some(f) = &selection.nvtx_filter
            && !f.matches(&name_text(info, name))
        {
            return Ok(());
        }
        let mut args = ArgList::new();
        args.int("gpu_rows", Some(row.gpu_rows));
        args.int("tid", Some(tid_of(row.global_tid)));
        if row.event_type == START_END {
            args.label("range_kind", Some("start/end"));
        }
        let ev = Event {
            start: row.start,
            end: Some(row.end),
            name,
            category: Category::NvtxGpu,
            args: args.as_slice(),
            flows: Flows::default(),
        };
        sink.event(
            GroupKey::GpuNvtx {
                device: row.device,
                global_tid: row.global_tid,
            },
            &ev,
        )
    };
    while let Some(r) = rows.next()? {
        let (Some(start), Some(end), Some(global_tid), Some(device)) =
            (int_at(r, 0), int_at(r, 1), int_at(r, 2), int_at(r, 3))
        else {
            continue;
        };
        let row = ProjectedRow {
            start,
            end,
            global_tid,
            device,
            gpu_rows: int_at(r, 4).unwrap_or(0),
            text: text_at(r, 5).map(|s| s.into_owned()),
            name_id: int_at(r, 6),
            event_type: int_at(r, 7).unwrap_or(PUSH_POP),
        };
        if let Some(row) = window.push_keyed(start, -end, row) {
            emit(row, sink)?;
        }
    }
    while let Some(row) = window.pop() {
        emit(row, sink)?;
    }
    Ok(())
}

struct ProjectedRow {
    start: i64,
    end: i64,
    global_tid: i64,
    device: i64,
    gpu_rows: i64,
    text: Option<String>,
    name_id: Option<i64>,
    event_type: i64,
}
