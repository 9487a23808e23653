//! CUDA runtime and driver API calls, merged in start order onto their CPU threads.

use super::cells::int_at;
use super::info::ProfileInfo;
use super::names::{DRIVER, RUNTIME};
use super::reader::ReadContext;
use super::scan::Scan;
use super::schema::Schema;
use crate::flows::{SRC_DRIVER, SRC_RUNTIME};
use crate::runs::Lookup;
use anyhow::Result;
use nsys_perfetto_model::category::{Category, EventType};
use nsys_perfetto_model::model::EventSink;
use nsys_perfetto_model::model::{ArgList, Event, FastHash, Flows, GroupKey, Name};
use nsys_perfetto_model::select::Selection;
use std::collections::HashMap;

struct Row {
    table: &'static str,
    start: Option<i64>,
    end: Option<i64>,
    global_tid: Option<i64>,
    corr: Option<i64>,
    name_id: Option<i64>,
    ret: Option<i64>,
    rowid: i64,
    flows: Launched,
    callchain: Option<std::rc::Rc<str>>,
}

/// The flow ids a call starts: none, or nearly always one, kept inline (an allocation per
/// launch cost more than the rest of its handling).
enum Launched {
    None,
    One([u64; 1]),
    Many(Vec<u64>),
}

impl Launched {
    fn push(&mut self, id: u64) {
        *self = match std::mem::replace(self, Launched::None) {
            Launched::None => Launched::One([id]),
            Launched::One([first]) => Launched::Many(vec![first, id]),
            Launched::Many(mut ids) => {
                ids.push(id);
                Launched::Many(ids)
            }
        };
    }

    fn as_slice(&self) -> &[u64] {
        match self {
            Launched::None => &[],
            Launched::One(id) => id,
            Launched::Many(ids) => ids,
        }
    }
}

fn scan(schema: &Schema, table: &str, selection: &Selection) -> Scan {
    // The call stack at the call site, when nsys captured one.
    let has_stacks =
        super::callchains::Callchains::column(schema, table, "CUDA_CALLCHAINS") != "NULL";
    let scan = Scan::new(schema, table)
        .cols(
            schema,
            &[
                "start",
                "end",
                "globalTid",
                "correlationId",
                "nameId",
                "returnValue",
            ],
        )
        .rowid();
    let scan = if has_stacks {
        scan.col(schema, "callchainId")
    } else {
        scan.null()
    };
    scan.filter(selection.sql(
        "t",
        true,
        schema.has_column(table, "globalTid").then_some("globalTid"),
        None,
    ))
    .by_rowid()
}

fn decode(
    table: &'static str,
    r: &impl super::query::Fetch,
    chains: &mut super::callchains::Callchains<'_>,
) -> Result<Row> {
    Ok(Row {
        table,
        start: super::cells::time_at(r, 0),
        end: super::cells::time_at(r, 1),
        global_tid: super::cells::tid_at(r, 2),
        corr: int_at(r, 3),
        name_id: int_at(r, 4),
        ret: int_at(r, 5),
        rowid: int_at(r, 6).unwrap_or(0),
        flows: Launched::None,
        callchain: chains.get(r, 7)?,
    })
}

/// One API table in rowid order, merged with its flow links (also in API rowid order) so each
/// call carries the flow ids of the GPU rows it launched.
struct Cursor<'s> {
    table: &'static str,
    rows: super::scan::Rows<'s>,
    chains: super::callchains::Callchains<'s>,
    /// `[api rowid, gpu table, gpu rowid]` of the GPU rows each call launched.
    links: Option<Lookup<'s, [i64; 3]>>,
    /// The last rowid read, when the table has real rowids (checked increasing).
    last: Option<Option<i64>>,
}

impl Cursor<'_> {
    fn next(&mut self) -> Result<Option<Row>> {
        let Some(r) = self.rows.next()? else {
            return Ok(None);
        };
        let mut row = decode(self.table, &r, &mut self.chains)?;
        if let Some(last) = self.last.as_mut() {
            super::cells::check_rowid_order(self.table, last, row.rowid)?;
        }
        if let Some(links) = self.links.as_mut() {
            links.matching(row.rowid, |[_, src, rid]| {
                row.flows.push(crate::flows::flow_id(src, rid))
            })?;
        }
        Ok(Some(row))
    }
}

pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    let &ReadContext {
        conn,
        schema,
        flows,
        selection,
        info,
        ..
    } = cx;
    if !selection.wants(EventType::CudaApi) {
        return Ok(());
    }
    // Shown names per string id, computed once.
    let mut names: HashMap<i64, Option<String>, FastHash> = HashMap::default();
    let tables: Vec<(&'static str, i64)> = [(RUNTIME, SRC_RUNTIME), (DRIVER, SRC_DRIVER)]
        .into_iter()
        .filter(|(t, _)| schema.has_columns(t, &["start", "end"]))
        .collect();
    let mut cursors = Vec::new();
    for &(t, src) in &tables {
        cursors.push(Cursor {
            table: t,
            rows: scan(schema, t, selection).open(conn, schema)?,
            chains: super::callchains::Callchains::new(conn, schema, t, "CUDA_CALLCHAINS")?,
            links: match flows {
                Some(f) => f.api_links(src)?,
                None => None,
            },
            last: schema.rowid(t).map(|_| None),
        });
    }
    super::order::merge_by_start(
        cursors.len(),
        |i| cursors[i].next(),
        |row| row.start.unwrap_or(i64::MIN),
        |row| (row.start.unwrap_or(i64::MIN), 0),
        |row| emit(&row, info, &mut names, sink),
    )
}

/// The name nsys shows for a CUDA API symbol: runtime entry points carry the CUDA version that
/// introduced them (`cudaLaunchKernel_v7000`, `cudaStreamGetCaptureInfo_v2_v11030`); nsys drops
/// that suffix. Driver names whose `_v2` is part of the API (`cuMemAlloc_v2`) stay as they are.
pub fn display_name(symbol: &str) -> Option<&str> {
    let (stem, version) = symbol.rsplit_once("_v")?;
    (version.len() >= 4 && version.bytes().all(|b| b.is_ascii_digit()) && !stem.is_empty())
        .then_some(stem)
}

fn emit<S: EventSink>(
    row: &Row,
    info: &ProfileInfo,
    names: &mut HashMap<i64, Option<String>, FastHash>,
    sink: &mut S,
) -> Result<()> {
    let Some((start, end)) = sink.interval(row.table, row.start, row.end) else {
        return Ok(());
    };
    let Some(global_tid) = row.global_tid else {
        sink.skip(row.table, "no thread id");
        return Ok(());
    };
    let mut args = ArgList::new();
    args.int("return_value", row.ret);
    args.int("correlation_id", row.corr);
    // Shown without the version suffix; the full symbol stays an arg.
    let shown = row.name_id.and_then(|id| {
        names
            .entry(id)
            .or_insert_with(|| {
                info.desc
                    .string(id)
                    .and_then(|s| display_name(&s).map(str::to_string))
            })
            .as_deref()
    });
    if shown.is_some()
        && let Some(id) = row.name_id
    {
        args.push("symbol", nsys_perfetto_model::model::ArgValue::StrId(id));
    }
    if let Some(cc) = &row.callchain {
        args.push("callchain", nsys_perfetto_model::model::ArgValue::Str(cc));
    }
    let flows = Flows {
        out: row.flows.as_slice(),
        terminating: None,
    };
    let ev = Event {
        start,
        end: Some(end),
        name: match (shown, row.name_id) {
            (Some(s), _) => Name::Text(s),
            (None, Some(id)) => Name::Str(id),
            (None, None) => Name::Static("(unnamed API call)"),
        },
        category: Category::CudaApi,
        args: args.as_slice(),
        flows,
    };
    sink.event(GroupKey::ThreadApi { global_tid }, &ev)
}
