//! NVTX: push/pop ranges and marks per thread and domain, start/end ranges per process and
//! domain. Names come from `text` or, for registered strings, `textId`.

use super::cells::{int_at, text_at};
use super::info::ProfileInfo;
use super::names::NVTX;
use super::query::Fetch;
use super::reader::ReadContext;
use super::scan::Scan;
use crate::projection::feed::{RangeColumns, RangeValues};
use anyhow::Result;
use nsys_perfetto_model::category::{Category, EventType};
use nsys_perfetto_model::model::EventSink;
use nsys_perfetto_model::model::{
    ArgList, ArgValue, Event, Flows, GroupKey, Name, TextNo, global_pid_of, pid_of, tid_of,
};
use rusqlite::types::ValueRef;
use std::collections::HashMap;

use super::names::nvtx_type::{MARK, NAMING, PUSH_POP, START_END};

const COLS: [&str; 12] = [
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
    "jsonTextId",
    "jsonText",
];

/// The numeric payload columns, in the order a range's payload is taken from them: the query
/// selects the first that is not NULL (`coalesce`), one column instead of six (nearly every
/// range has none, and each column costs a fetch per row).
const NUMERIC_PAYLOADS: [&str; 6] = [
    "uint64Value",
    "int64Value",
    "doubleValue",
    "uint32Value",
    "int32Value",
    "floatValue",
];

/// Convert the NVTX table; the context's `feed`, when given, is fed every row (it needs them
/// all, selected or not) and marked complete once the table is read.
pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    let &ReadContext {
        conn,
        schema,
        selection,
        info,
        ..
    } = cx;
    let mut feed = cx.feed.map(|f| f.borrow_mut());
    if !schema.has_columns(NVTX, &["start", "eventType"]) || !selection.wants(EventType::Nvtx) {
        return Ok(());
    }
    let scan = Scan::new(schema, NVTX)
        .cols(schema, &COLS)
        .coalesce(schema, &NUMERIC_PAYLOADS);
    // Naming rows always pass (they are counted); events are filtered by the selection.
    let filter = selection.sql(
        "t",
        schema.has_column(NVTX, "end"),
        schema.has_column(NVTX, "globalTid").then_some("globalTid"),
        None,
    );
    // Rows stream in storage order, which nsys writes by start; layout copes with stragglers.
    // Whether an event row is selected: the WHERE clause, or a column when the feed needs every
    // row.
    // `eventType NOT IN (..)` as comparisons: SQLite looks a constant IN list up in a
    // temporary b-tree on every row; and no test at all without a selection.
    let passes = if filter == "1" {
        filter
    } else {
        format!(
            "(t.eventType <> {MARK} AND t.eventType <> {PUSH_POP} AND t.eventType <> {START_END}) \
             OR ({filter})"
        )
    };
    let scan = if feed.is_some() {
        scan.rowid().expr(passes)
    } else {
        scan.null().expr("1").filter(passes)
    };
    let selected = COLS.len() + 2;
    let mut rows = scan.by_rowid().open(conn, schema)?;
    let mut colors: HashMap<i64, String> = HashMap::new();
    let mut categories: HashMap<(i64, i64, i64), String> = HashMap::new();
    let range_columns = range_columns();
    while let Some(r) = rows.next()? {
        let r = &r;
        // Fetched once for the feed and this reader.
        let v = RangeValues::of(r, &range_columns)?;
        let mut text_no = None;
        if let Some(f) = feed.as_deref_mut() {
            text_no = f.row(&v)?;
            if int_at(r, selected) != Some(1) {
                continue;
            }
        }
        let Some(ty) = super::query::int_of(v.event_type) else {
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
        let Some(start) = super::cells::time_of(v.start) else {
            sink.skip(NVTX, "no start timestamp");
            continue;
        };
        let end = super::cells::time_of(v.end);
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
        let Some(global_tid) = super::cells::global_tid_of(v.global_tid) else {
            sink.skip(NVTX, "no thread id");
            continue;
        };
        let domain = super::query::int_of(v.domain).unwrap_or(0);
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
        let text = super::cells::text_of(v.text);
        let json_text = text_at(r, 11);
        let name = range_name(text.as_deref(), text_no, super::query::int_of(v.text_id));
        if let Some(f) = &selection.nvtx_filter
            && !f.matches_in(
                info.desc
                    .nvtx_domains
                    .get(&(gpid, domain))
                    .map(String::as_str),
                &name_text(info, name),
            )
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
        match r.fetch(NUMERIC_PAYLOAD) {
            ValueRef::Integer(v) => args.push("payload", ArgValue::Int(v)),
            ValueRef::Real(v) => args.push("payload", ArgValue::Double(v)),
            _ => {
                if let Some(id) = int_at(r, 10) {
                    args.push("payload", ArgValue::StrId(id));
                } else if let Some(j) = &json_text {
                    args.push("payload", ArgValue::Str(j));
                }
            }
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
    if let Some(f) = feed.as_deref_mut() {
        f.complete();
    }
    Ok(())
}

/// Where [`read`]'s query puts the first numeric payload (see [`NUMERIC_PAYLOADS`]).
const NUMERIC_PAYLOAD: usize = COLS.len();

/// Where [`read`]'s query puts the columns the projection's feed reads.
pub fn range_columns() -> RangeColumns {
    RangeColumns {
        rowid: COLS.len() + 1,
        event_type: 2,
        global_tid: 3,
        start: 0,
        end: 1,
        domain: 5,
        text: 8,
        text_id: 9,
    }
}

/// A range's name: its `text` (by the number the projection gave it, where it has one), else
/// its registered string (`textId`), else a placeholder.
fn range_name(text: Option<&str>, text_no: Option<TextNo>, text_id: Option<i64>) -> Name<'_> {
    match (text, text_no, text_id) {
        (Some(t), Some(no), _) => Name::Numbered(no, t),
        (Some(t), None, _) => Name::Text(t),
        (None, _, Some(id)) => Name::Str(id),
        (None, _, None) => Name::Static("(unnamed range)"),
    }
}

/// The text of a name, for matching against `--nvtx-filter`.
fn name_text<'a>(info: &'a ProfileInfo, name: Name<'a>) -> std::borrow::Cow<'a, str> {
    match name {
        Name::Text(t) | Name::Static(t) | Name::Numbered(_, t) => std::borrow::Cow::Borrowed(t),
        Name::Str(id) => {
            std::borrow::Cow::Owned(info.desc.string(id).map(String::from).unwrap_or_default())
        }
    }
}

/// NVTX ranges projected onto the GPU (`nvtx-gpu`): each range becomes a slice spanning the GPU
/// work it launched, on a per-GPU track of its thread. The spans come in start order, the
/// longer first at equal starts, so projected ranges nest like the CPU ones.
pub fn read_projection<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    let &ReadContext {
        selection,
        info,
        projected,
        ..
    } = cx;
    let Some(projected) = projected else {
        return Ok(());
    };
    let (from, to) = selection.time.map_or((None, None), |t| (t.start, t.end));
    for span in projected.spans()? {
        let span = span?;
        // The selection, as the other readers' SQL has it: spans overlapping the window, of
        // the chosen processes and devices.
        if from.is_some_and(|s| span.gpu_end < s)
            || to.is_some_and(|e| span.gpu_start > e)
            || (!selection.pids.is_empty() && !selection.pids.contains(&pid_of(span.global_tid)))
            || (!selection.devices.is_empty() && !selection.devices.contains(&span.device))
        {
            continue;
        }
        let name = range_name(span.text.as_deref(), span.text_no, span.name_id);
        if let Some(f) = &selection.nvtx_filter
            && !f.matches_in(
                info.desc
                    .nvtx_domains
                    .get(&(global_pid_of(span.global_tid), span.domain))
                    .map(String::as_str),
                &name_text(info, name),
            )
        {
            continue;
        }
        let mut args = ArgList::new();
        args.int("gpu_rows", Some(span.gpu_rows));
        args.int("tid", Some(tid_of(span.global_tid)));
        if span.event_type == START_END {
            args.label("range_kind", Some("start/end"));
        }
        let ev = Event {
            start: span.gpu_start,
            end: Some(span.gpu_end),
            name,
            category: Category::NvtxGpu,
            args: args.as_slice(),
            flows: Flows::default(),
        };
        sink.event(
            GroupKey::GpuNvtx {
                device: span.device,
                global_tid: span.global_tid,
            },
            &ev,
        )?;
    }
    Ok(())
}
