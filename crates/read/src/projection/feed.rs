//! How NVTX rows reach the sweep: fed by the NVTX reader as it reads the table ([`Feed`]),
//! or read on their own (`sweep_all`).

use super::names::{Names, Text};
use super::sweep::{Range, Sweep};
use super::{Abort, Projected, RangeCols, Stop, nvtx_usable};
use crate::flows::Launches;
use crate::names::nvtx_type::{PUSH_POP, START_END};
use crate::runs::Sorted;
use crate::scan::{Lookup, Scan};
use crate::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::model::TextNo;
use rusqlite::Connection;
use rusqlite::types::ValueRef;
use std::collections::HashMap;

/// The sweep, reading the NVTX table sorted by SQLite when it is too far out of order; `None`
/// when the data needs the SQL definition.
pub(super) fn sweep_all(
    conn: &Connection,
    schema: &Schema,
    launches: &Sorted<[i64; 7]>,
) -> Result<Option<Projected>> {
    let cols = RangeCols::new(schema);
    for nvtx_sorted in [false, true] {
        let t0 = std::time::Instant::now();
        match sweep(conn, schema, &cols, launches, nvtx_sorted) {
            Ok(p) => {
                nsys_perfetto_model::progress::timing("projection: sweep", t0);
                return Ok(Some(p));
            }
            Err(Stop::Fail(e)) => return Err(e),
            Err(Stop::Abort(Abort::NvtxDisorder)) if !nvtx_sorted => continue,
            Err(Stop::Abort(_)) => return Ok(None),
        }
    }
    Ok(None)
}

/// An integer the sweep orders or matches by; anything else is left to the SQL definition.
pub(super) fn int(v: ValueRef<'_>) -> Result<i64, Stop> {
    match v {
        ValueRef::Integer(i) => Ok(i),
        _ => Err(Stop::Abort(Abort::Unsupported)),
    }
}

impl Sweep<'_> {
    /// The next row of the table; the number of its text when it is a range the sweep takes
    /// and its text has one.
    pub(super) fn row(
        &mut self,
        v: &RangeValues<'_>,
        registered: &mut Option<Registered<'_>>,
    ) -> Result<Option<u32>, Stop> {
        let mut r = self.out.spare.pop().unwrap_or_default();
        if !range_of(v, &mut self.out.texts, registered, &mut r)? {
            self.out.spare.push(r);
            return Ok(None);
        }
        let no = match r.text {
            Some(Text::No(no)) => Some(no),
            _ => None,
        };
        self.range(r)?;
        Ok(no)
    }
}

/// Where the columns a range needs are in a row of `NVTX_EVENTS`.
#[derive(Clone, Copy)]
pub struct RangeColumns {
    pub rowid: usize,
    pub event_type: usize,
    pub global_tid: usize,
    pub start: usize,
    pub end: usize,
    pub domain: usize,
    pub text: usize,
    pub text_id: usize,
}

/// Registered strings (`StringIds.value` by `id`), looked up once per id, up to
/// [`Registered::CACHED`] of them.
pub(super) struct Registered<'c> {
    lookup: Lookup<'c>,
    cache: HashMap<i64, Option<Text>, nsys_perfetto_model::model::FastHash>,
}

impl<'c> Registered<'c> {
    pub(super) const CACHED: usize = 4096;

    /// `None` when the export has no usable `StringIds` (then names never come from it);
    /// `Err(Unsupported)` when `StringIds.id` is not its unique key (the SQL definition's join
    /// would repeat the range).
    pub(super) fn new(
        conn: &'c Connection,
        schema: &Schema,
        cols: &RangeCols,
    ) -> Result<Option<Registered<'c>>, Stop> {
        if !cols.string_ids {
            return Ok(None);
        }
        let unique: bool = conn.query_row(
            "SELECT count(*) = 1 AND max(name = 'id') FROM pragma_table_info('StringIds', 'main') \
             WHERE pk > 0",
            [],
            |r| r.get(0),
        )?;
        if !unique {
            return Err(Stop::Abort(Abort::Unsupported));
        }
        Ok(Some(Registered {
            lookup: Scan::new(schema, "StringIds")
                .col(schema, "value")
                .lookup(conn, schema, "id")?,
            cache: HashMap::default(),
        }))
    }

    /// The registered string of `id` (`None`: no row, or NULL) in `texts`; a value that is not
    /// text is left to the SQL definition.
    pub(super) fn get(&mut self, id: i64, texts: &mut Names) -> Result<Option<Text>, Stop> {
        if let Some(v) = self.cache.get(&id) {
            return Ok(v.clone());
        }
        // The first row's (the id is the table's key: at most one).
        let mut found: Option<Result<Option<Text>, Stop>> = None;
        self.lookup.each(id, |r| {
            found.get_or_insert_with(|| match r.fetch(0) {
                ValueRef::Text(t) => Ok(Some(texts.text(t))),
                ValueRef::Null => Ok(None),
                _ => Err(Stop::Abort(Abort::Unsupported)),
            });
        })?;
        let v = found.unwrap_or(Ok(None))?;
        if self.cache.len() >= Registered::CACHED {
            self.cache.clear();
        }
        self.cache.insert(id, v.clone());
        Ok(v)
    }
}

/// The values of a row of `NVTX_EVENTS` the projection reads (fetched once for its reader and
/// the projection).
pub struct RangeValues<'a> {
    pub rowid: ValueRef<'a>,
    pub event_type: ValueRef<'a>,
    pub global_tid: ValueRef<'a>,
    pub start: ValueRef<'a>,
    pub end: ValueRef<'a>,
    pub domain: ValueRef<'a>,
    pub text: ValueRef<'a>,
    pub text_id: ValueRef<'a>,
}

impl<'a> RangeValues<'a> {
    pub fn of(
        r: &'a impl crate::query::Fetch,
        c: &RangeColumns,
    ) -> rusqlite::Result<RangeValues<'a>> {
        Ok(RangeValues {
            rowid: r.fetch(c.rowid),
            event_type: r.fetch(c.event_type),
            global_tid: r.fetch(c.global_tid),
            start: r.fetch(c.start),
            end: r.fetch(c.end),
            domain: r.fetch(c.domain),
            text: r.fetch(c.text),
            text_id: r.fetch(c.text_id),
        })
    }
}

/// What a row of `NVTX_EVENTS` is to the projection, filled into `r` (a spare range, reused:
/// most ranges launch little, and building one anew and moving it into place cost more than
/// the rest of their handling); false when the row is not a range the sweep takes.
fn range_of(
    v: &RangeValues<'_>,
    texts: &mut Names,
    registered: &mut Option<Registered<'_>>,
    r: &mut Range,
) -> Result<bool, Stop> {
    // `eventType IN (59, 60) AND end >= start AND globalTid IS NOT NULL`, with integers; other
    // types are left to the SQL definition.
    let int_or_null = |v: ValueRef<'_>| -> Result<Option<i64>, Stop> {
        match v {
            ValueRef::Integer(v) => Ok(Some(v)),
            ValueRef::Null => Ok(None),
            _ => Err(Stop::Abort(Abort::Unsupported)),
        }
    };
    let Some(event_type) = int_or_null(v.event_type)?.filter(|t| *t == PUSH_POP || *t == START_END)
    else {
        return Ok(false);
    };
    let (Some(start), Some(end), Some(tid)) = (
        int_or_null(v.start)?,
        int_or_null(v.end)?,
        int_or_null(v.global_tid)?,
    ) else {
        return Ok(false);
    };
    // Times no trace can hold: the NVTX reader counts the range as skipped.
    if end < start || start < -crate::cells::MAX_TIME || end > crate::cells::MAX_TIME {
        return Ok(false);
    }
    let text = match v.text {
        ValueRef::Text(t) => Some(texts.text(t)),
        ValueRef::Null => None,
        _ => return Err(Stop::Abort(Abort::Unsupported)),
    };
    let text_id = int_or_null(v.text_id)?;
    // `coalesce(text, registered string, '(unnamed range)')`.
    let name = match (event_type == PUSH_POP, &text, text_id, registered.as_mut()) {
        (true, None, Some(id), Some(reg)) => Some(reg.get(id, texts)?),
        (true, None, _, _) => Some(None),
        _ => None,
    }
    .map(|n| n.unwrap_or_else(|| texts.text(b"(unnamed range)")));
    let domain = match v.domain {
        ValueRef::Integer(v) => v,
        ValueRef::Null => 0,
        _ => return Err(Stop::Abort(Abort::Unsupported)),
    };
    r.rid = int(v.rowid)?;
    r.event_type = event_type;
    r.tid = tid;
    r.start = start;
    r.end = end;
    r.domain = domain;
    r.text = text;
    r.text_id = text_id;
    r.name = name;
    r.devs.clear();
    r.pending.clear();
    r.path = None;
    Ok(true)
}

/// The projection fed by a reader of `NVTX_EVENTS` (the NVTX reader: one read of the table
/// serves both). [`Feed::finish`] gives the result, or `None` when the rows did not suit the
/// sweep (far out of order, values it does not handle) or the reader did not read them all:
/// [`Projected::build`] then computes it on its own.
pub struct Feed<'l, 'c> {
    sweep: Option<Sweep<'l>>,
    registered: Option<Registered<'c>>,
    complete: bool,
}

impl<'l, 'c> Feed<'l, 'c> {
    /// `None` when the projection cannot be fed (its launches need the SQL definition, or the
    /// export's NVTX table or strings do not suit the sweep).
    pub fn new(
        conn: &'c Connection,
        schema: &Schema,
        launches: &'l Launches,
    ) -> Result<Option<Feed<'l, 'c>>> {
        if launches.unsupported || !nvtx_usable(schema) {
            return Ok(None);
        }
        let registered = match Registered::new(conn, schema, &RangeCols::new(schema)) {
            Ok(r) => r,
            Err(Stop::Fail(e)) => return Err(e),
            Err(Stop::Abort(_)) => return Ok(None),
        };
        Ok(Some(Feed {
            sweep: Some(Sweep::new(&launches.sorted)?),
            registered,
            complete: false,
        }))
    }

    pub fn finish(self) -> Result<Option<Projected>> {
        let Some(sweep) = self.sweep.filter(|_| self.complete) else {
            return Ok(None);
        };
        match sweep.finish() {
            Ok(p) => Ok(Some(p)),
            Err(Stop::Fail(e)) => Err(e),
            Err(Stop::Abort(_)) => Ok(None),
        }
    }
}

/// What a reader of `NVTX_EVENTS` gives the projection: every row of the table, in rowid order,
/// and then word that it read them all ([`Feed`] is the one there is).
pub trait FeedRows {
    /// The next row of the table; the number its `text` got, when it is a range with a
    /// numbered text (the reader gives the writer that number: the text is then hashed once per
    /// row, here, not again by the writer).
    fn row(&mut self, v: &RangeValues<'_>) -> Result<Option<TextNo>>;
    /// Every row of the table has been fed.
    fn complete(&mut self);
}

impl FeedRows for Feed<'_, '_> {
    fn row(&mut self, v: &RangeValues<'_>) -> Result<Option<TextNo>> {
        let Some(sweep) = self.sweep.as_mut() else {
            return Ok(None);
        };
        let set = sweep.out.texts.set;
        match sweep.row(v, &mut self.registered) {
            Ok(no) => Ok(no.map(|no| TextNo::new(set, no))),
            Err(Stop::Fail(e)) => Err(e),
            Err(Stop::Abort(_)) => {
                self.sweep = None;
                Ok(None)
            }
        }
    }

    fn complete(&mut self) {
        self.complete = true;
    }
}

/// The sweep over the table read on its own (sorted by SQLite when `nvtx_sorted`).
pub(super) fn sweep(
    conn: &Connection,
    schema: &Schema,
    cols: &RangeCols,
    launches: &Sorted<[i64; 7]>,
    nvtx_sorted: bool,
) -> Result<Projected, Stop> {
    let RangeCols {
        text,
        text_id,
        domain,
        ..
    } = cols;
    let mut registered = Registered::new(conn, schema, cols)?;
    let mut stmt = conn.prepare(&format!(
        "SELECT r.rowid, r.eventType, r.globalTid, r.start, r.\"end\", {domain}, {text}, {text_id} \
         FROM main.NVTX_EVENTS r{}",
        if nvtx_sorted { " ORDER BY r.start" } else { "" }
    ))?;
    let c = RangeColumns {
        rowid: 0,
        event_type: 1,
        global_tid: 2,
        start: 3,
        end: 4,
        domain: 5,
        text: 6,
        text_id: 7,
    };
    let mut sweep = Sweep::new(launches)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        sweep.row(&RangeValues::of(r, &c)?, &mut registered)?;
    }
    sweep.finish()
}
