//! NVTX: push/pop ranges and marks per thread and domain, start/end ranges per process and
//! domain. Names come from `text` or, for registered strings, `textId`.

use super::gpu::ArgList;
use super::{NVTX, Schema, int_at, real_at, text_at};
use crate::layout::Router;
use crate::model::{ArgValue, Category, Event, Flows, GroupKey, Name, global_pid_of, tid_of};
use crate::output::EventWriter;
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

pub fn read<W: EventWriter>(
    conn: &Connection,
    schema: &Schema,
    router: &mut Router<'_, W>,
) -> Result<()> {
    if !schema.has_columns(NVTX, &["start", "eventType"]) {
        return Ok(());
    }
    let cols: Vec<String> = COLS.iter().map(|c| schema.col(NVTX, c)).collect();
    // Rows stream in storage order, which nsys writes by start; layout copes with stragglers.
    let sql = format!("SELECT {} FROM {NVTX} ORDER BY rowid", cols.join(", "));
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut colors: HashMap<i64, String> = HashMap::new();
    let mut categories: HashMap<(i64, i64, i64), String> = HashMap::new();
    while let Some(r) = rows.next()? {
        let Some(ty) = int_at(r, 2) else {
            router.skip(NVTX, "no event type");
            continue;
        };
        if NAMING.contains(&ty) {
            router.note_naming_row(NVTX);
            continue;
        }
        if ty != MARK && ty != PUSH_POP && ty != START_END {
            router.skip(NVTX, "unsupported NVTX event type");
            continue;
        }
        let Some(start) = int_at(r, 0) else {
            router.skip(NVTX, "no start timestamp");
            continue;
        };
        if start < 0 {
            router.skip(NVTX, "negative timestamp");
            continue;
        }
        let end = int_at(r, 1);
        let end = match (ty, end) {
            (MARK, _) => None,
            (_, None) => {
                router.skip(NVTX, "range never ended (no end timestamp)");
                continue;
            }
            (_, Some(e)) if e < start => {
                router.skip(NVTX, "ends before it starts");
                continue;
            }
            (_, Some(e)) => Some(e),
        };
        let Some(global_tid) = int_at(r, 3) else {
            router.skip(NVTX, "no thread id");
            continue;
        };
        let domain = int_at(r, 5).unwrap_or(0);
        let gpid = global_pid_of(global_tid);
        let color = int_at(r, 7);
        if let Some(c) = color {
            colors
                .entry(c)
                .or_insert_with(|| format!("#{:06x}", c as u32 & 0xFF_FFFF));
        }
        let category = int_at(r, 6).filter(|c| *c != 0);
        if let Some(c) = category {
            let info = router.info();
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
        router.event(key, &ev)?;
    }
    Ok(())
}
