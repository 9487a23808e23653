//! NVTX projected onto the GPU: which GPU work each NVTX range launched, and which NVTX ranges
//! enclose the launch of each GPU row.
//!
//! A GPU row (kernel, memcpy, memset) is launched by the CUDA API call (runtime or driver) that
//! shares its `correlationId` within one process. That call runs on a CPU thread at some time; an
//! NVTX range on the same thread whose interval contains the call's start encloses the launch.
//!
//! The tables are written into a scratch database attached read-only to the source (like
//! [`crate::nsys::flows`]), so memory stays bounded however long the profile. Readers attach the
//! result with [`Projection::attach`] and query two tables under the schema [`PROJ_DB`]:
//!
//! `proj.nvtx_gpu`: one row per (NVTX range, GPU device) for ranges that launched GPU work there.
//!
//! | column       | meaning |
//! |--------------|---------|
//! | `nvtx_rid`   | `rowid` of the range in the export's `NVTX_EVENTS` |
//! | `event_type` | 59 (push/pop: nests per thread) or 60 (start/end: free intervals) |
//! | `global_tid` | the thread the range started on (its `globalTid`) |
//! | `domain`     | the range's `domainId` (0 when unset) |
//! | `device`     | `deviceId` of the GPU rows |
//! | `gpu_start`  | earliest `start` of the GPU rows the range launched on that device (ns) |
//! | `gpu_end`    | latest `end` of those GPU rows (ns) |
//! | `gpu_rows`   | how many GPU rows (kernels + memcpys + memsets) |
//! | `name_text`  | the range's `text` (NULL for registered strings) |
//! | `name_id`    | the range's `textId` into `StringIds` (used when `name_text` is NULL) |
//!
//! Indexed by `gpu_start`, so `SELECT ... FROM proj.nvtx_gpu ORDER BY gpu_start` streams.
//! Because a push/pop range encloses every call its children enclose, a child's GPU span lies
//! within its parent's on each device: the slices nest like the CPU ranges.
//!
//! `proj.kernel_nvtx`: one row per GPU row launched inside at least one push/pop range.
//!
//! | column   | meaning |
//! |----------|---------|
//! | `src`    | 0 kernel, 1 memcpy, 2 memset (the numbering of [`crate::nsys::flows`]) |
//! | `rid`    | `rowid` of the GPU row in its table |
//! | `ranges` | names of the push/pop ranges on the launching thread that contain the launching call's start, outermost first, joined with `" > "` |
//!
//! Keyed by `(src, rid)`: readers `LEFT JOIN proj.kernel_nvtx k ON k.src = 0 AND k.rid = t.rowid`.
//!
//! Rules: ranges need an `end` no earlier than their `start` and a `globalTid`; GPU rows need
//! `start`, `end >= start`, `deviceId`, `globalPid` and `correlationId`; a call encloses when
//! `range.start <= call.start <= range.end`. Should an export repeat a (process, correlation id)
//! among its API calls, the first row (runtime before driver) is the launch, as for flow arrows.
//!
//! # How
//!
//! SQLite links each GPU row to its launching call (`api_first`, keyed by process and
//! correlation id). Then one sweep in time order over two streams, the NVTX ranges by start and
//! the linked GPU rows by their launch's start, keeps per thread the ranges open at the current
//! time (at equal times ranges open first, as `range.start <= call.start`). A GPU row's launch is
//! inside exactly the open ranges of its thread: each takes the row into its span on the row's
//! device, and the push/pop ones, in `(start, end DESC, rowid)` order, name the row in
//! `kernel_nvtx`. A range is closed, and its `nvtx_gpu` rows written, once the sweep passes its
//! end. Nothing assumes that ranges nest: an open range is just an interval, so start/end
//! ranges and push/pop ranges that end after their parent are handled alike. Each launch costs
//! the number of ranges open on its thread (the nesting depth), each range one insertion per
//! device; memory holds the open ranges and bounded reordering buffers.
//!
//! Both streams are read in the tables' own order, which is start order in real exports (GPU
//! rows are in GPU start order, close to their launches' order), through reordering windows; a
//! stream further out of order is read again sorted by SQLite. Values the sweep does not handle
//! (times that are not integers, a NVTX rowid or device beyond the `nvtx_gpu` rowid encoding,
//! names that are not text) send the whole computation to `project_sql`, the definition in
//! SQL joins (exact too, but each launch is visited once per enclosing range, then grouped).

use crate::nsys::{self, DRIVER, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, Schema};
use anyhow::Result;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql};
use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;

/// The schema name [`Projection::attach`] attaches the scratch database under.
pub const PROJ_DB: &str = "proj";
/// Table: one row per (NVTX range, device) with the span of the GPU work it launched.
pub const NVTX_GPU: &str = "nvtx_gpu";
/// Table: for each GPU row, the push/pop ranges enclosing its launch.
pub const KERNEL_NVTX: &str = "kernel_nvtx";
/// The separator between range names in `kernel_nvtx.ranges`.
pub const RANGE_SEPARATOR: &str = " > ";

/// `src` numbers of the GPU tables, as in [`crate::nsys::flows`].
pub const SRC_KERNEL: i64 = 0;
pub const SRC_MEMCPY: i64 = 1;
pub const SRC_MEMSET: i64 = 2;

/// The projection tables of one export, in a scratch database deleted on drop.
pub struct Projection {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Rows of `nvtx_gpu`.
    pub range_device_rows: u64,
    /// Distinct NVTX ranges with at least one `nvtx_gpu` row.
    pub ranges_with_gpu_work: u64,
    /// Rows of `kernel_nvtx`.
    pub annotated_gpu_rows: u64,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("path", &self.path)
            .field("range_device_rows", &self.range_device_rows)
            .field("ranges_with_gpu_work", &self.ranges_with_gpu_work)
            .field("annotated_gpu_rows", &self.annotated_gpu_rows)
            .finish()
    }
}

fn gpu_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [
        (SRC_KERNEL, KERNEL),
        (SRC_MEMCPY, MEMCPY),
        (SRC_MEMSET, MEMSET),
    ]
    .into_iter()
    .filter(|(_, t)| {
        schema.has_columns(
            t,
            &["start", "end", "correlationId", "globalPid", "deviceId"],
        ) && schema.rowid(t) == Some("rowid")
    })
    .collect()
}

fn api_tables(schema: &Schema) -> Vec<&'static str> {
    [RUNTIME, DRIVER]
        .into_iter()
        .filter(|t| schema.has_columns(t, &["start", "correlationId", "globalTid"]))
        .filter(|t| schema.rowid(t) == Some("rowid"))
        .collect()
}

impl Projection {
    /// Compute the tables, or `None` when the export lacks NVTX ranges, GPU rows or API calls.
    pub fn build(schema: &Schema) -> Result<Option<Projection>> {
        let gpu = gpu_tables(schema);
        let api = api_tables(schema);
        if gpu.is_empty()
            || api.is_empty()
            || !schema.has_columns(NVTX, &["start", "end", "eventType", "globalTid"])
            || schema.rowid(NVTX) != Some("rowid")
        {
            return Ok(None);
        }
        let (dir, path, conn) =
            nsys::scratch_db(schema, "nsys-perfetto-proj-", "projection.sqlite")?;
        // Larger pages: fewer page splits and writes for the tables appended row by row.
        conn.execute_batch("PRAGMA page_size = 16384;")?;

        // One transaction: the sweep inserts row by row. (No journal: nothing is rolled back;
        // a sweep that gives up drops its tables instead.)
        // Declared INTEGER columns: the SQL fallback's time-range joins must be able to use
        // the indexes.
        let mut sql = String::from(
            "BEGIN;
             CREATE TABLE api_first(pkey INTEGER, corr INTEGER, tid INTEGER, start INTEGER, \
               PRIMARY KEY (pkey, corr)) WITHOUT ROWID;\n",
        );
        // The launching call of each (process, correlation id); should an export repeat one, the
        // first row wins, as for flow arrows.
        for t in &api {
            sql += &format!(
                "INSERT OR IGNORE INTO api_first SELECT globalTid >> 24, correlationId, globalTid, start \
                 FROM src.\"{t}\" WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL \
                 AND start IS NOT NULL;\n"
            );
        }
        let t0 = std::time::Instant::now();
        conn.execute_batch(&sql)
            .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?;
        crate::nsys::source::timing("projection: api_first", t0);
        let counts = project(&conn, schema, &gpu)
            .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?;
        conn.execute_batch("DROP TABLE api_first; COMMIT; DETACH DATABASE src;")?;
        drop(conn);
        Ok(Some(Projection {
            _dir: dir,
            path,
            range_device_rows: counts.range_device_rows,
            ranges_with_gpu_work: counts.ranges_with_gpu_work,
            annotated_gpu_rows: counts.annotated_gpu_rows,
        }))
    }

    /// Attach the tables, read-only, to a connection as schema [`PROJ_DB`].
    pub fn attach(&self, conn: &Connection) -> Result<()> {
        let uri = nsys::sqlite_uri(&self.path, "mode=ro");
        conn.execute(&format!("ATTACH DATABASE ?1 AS {PROJ_DB}"), [uri])?;
        Ok(())
    }

    /// The scratch database file (valid while `self` lives).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// The counts [`Projection`] reports.
#[derive(Default)]
struct Counts {
    range_device_rows: u64,
    ranges_with_gpu_work: u64,
    annotated_gpu_rows: u64,
}

/// The schema-dependent SQL expressions for the range columns.
struct RangeCols {
    text: String,
    text_id: String,
    domain: String,
    /// Whether names fall back to the registered string `StringIds.value` of `textId`.
    string_ids: bool,
}

impl RangeCols {
    fn new(schema: &Schema) -> RangeCols {
        RangeCols {
            text: schema.col_of(NVTX, "r", "text"),
            text_id: schema.col_of(NVTX, "r", "textId"),
            domain: schema.col_of(NVTX, "r", "domainId"),
            string_ids: schema.has_columns("StringIds", &["id", "value"])
                && schema.has_column(NVTX, "textId"),
        }
    }
}

/// Why a sweep gave up; the tables are then computed another way.
enum Abort {
    /// `NVTX_EVENTS` in rowid order is not in start order (beyond the reorder window).
    NvtxDisorder,
    /// The linked GPU rows in rowid order are not in their launches' start order.
    LaunchDisorder,
    /// A value the sweep does not handle (a time or id that is not an integer, a rowid or
    /// device beyond the `nvtx_gpu` rowid encoding, a push/pop range's name that is not text,
    /// `StringIds.id` not unique): the SQL fallback defines the result.
    Unsupported,
}

enum Stop {
    Abort(Abort),
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for Stop {
    fn from(e: rusqlite::Error) -> Stop {
        Stop::Sql(e)
    }
}

/// Fill the two tables: by a sweep, else (data the sweep does not handle) by plain SQL.
fn project(
    conn: &Connection,
    schema: &Schema,
    gpu: &[(i64, &'static str)],
) -> rusqlite::Result<Counts> {
    let cols = RangeCols::new(schema);
    let (mut nvtx_sorted, mut launches_sorted) = (false, false);
    loop {
        conn.execute_batch(&format!(
            // The declared types of the original `CREATE TABLE AS` over the join (readers and
            // `SELECT *` see the same table whichever way it is filled).
            "CREATE TABLE {NVTX_GPU} AS SELECT r.rowid AS nvtx_rid, r.eventType AS event_type, \
               r.globalTid AS global_tid, coalesce({}, 0) AS domain, CAST(NULL AS INTEGER) AS device, \
               NULL AS gpu_start, NULL AS gpu_end, NULL AS gpu_rows, {} AS name_text, {} AS name_id \
               FROM src.NVTX_EVENTS r LIMIT 0;
             CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
               PRIMARY KEY (src, rid)) WITHOUT ROWID;
             CREATE TABLE kernel_nvtx_memcpy(rid INTEGER PRIMARY KEY, ranges TEXT NOT NULL);
             CREATE TABLE kernel_nvtx_memset(rid INTEGER PRIMARY KEY, ranges TEXT NOT NULL);",
            cols.domain, cols.text, cols.text_id
        ))?;
        let t0 = std::time::Instant::now();
        let abort = match sweep(conn, &cols, gpu, nvtx_sorted, launches_sorted) {
            Ok(counts) => {
                crate::nsys::source::timing("projection: sweep", t0);
                conn.execute_batch(&format!(
                    "INSERT INTO {KERNEL_NVTX} SELECT {SRC_MEMCPY}, rid, ranges FROM kernel_nvtx_memcpy ORDER BY rid;
                     INSERT INTO {KERNEL_NVTX} SELECT {SRC_MEMSET}, rid, ranges FROM kernel_nvtx_memset ORDER BY rid;
                     DROP TABLE kernel_nvtx_memcpy; DROP TABLE kernel_nvtx_memset;
                     CREATE INDEX nvtx_gpu_start ON {NVTX_GPU}(gpu_start);
                     CREATE INDEX nvtx_gpu_rid ON {NVTX_GPU}(nvtx_rid);"
                ))?;
                crate::nsys::source::timing("projection: indexes", t0);
                return Ok(counts);
            }
            Err(Stop::Sql(e)) => return Err(e),
            Err(Stop::Abort(a)) => a,
        };
        conn.execute_batch(&format!(
            "DROP TABLE {NVTX_GPU}; DROP TABLE {KERNEL_NVTX}; \
             DROP TABLE kernel_nvtx_memcpy; DROP TABLE kernel_nvtx_memset;"
        ))?;
        match abort {
            Abort::NvtxDisorder if !nvtx_sorted => nvtx_sorted = true,
            Abort::LaunchDisorder if !launches_sorted => launches_sorted = true,
            _ => return project_sql(conn, &cols, gpu),
        }
    }
}

/// The tables by SQL joins, for data the sweep does not handle: exact, but each launch is
/// visited once per enclosing range.
fn project_sql(
    conn: &Connection,
    cols: &RangeCols,
    gpu: &[(i64, &'static str)],
) -> rusqlite::Result<Counts> {
    let mut sql = String::from(
        "CREATE TABLE gpu_link(src INTEGER, rid INTEGER, pkey INTEGER, corr INTEGER, \
           device INTEGER, start INTEGER, \"end\" INTEGER, tid INTEGER, astart INTEGER);
         CREATE TABLE launch_dev(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER, \
           device INTEGER, gmin INTEGER, gmax INTEGER, n INTEGER);
         CREATE TABLE launch(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER);
         CREATE TABLE launch_nvtx(pkey INTEGER, corr INTEGER, ranges TEXT, \
           PRIMARY KEY (pkey, corr)) WITHOUT ROWID;\n",
    );
    // Every linked GPU row with its launch.
    for (s, t) in gpu {
        sql += &format!(
            "INSERT INTO gpu_link SELECT {s}, g.rowid, a.pkey, a.corr, g.deviceId, g.start, g.\"end\", \
             a.tid, a.start FROM src.\"{t}\" g \
             JOIN api_first a ON a.pkey = g.globalPid >> 24 AND a.corr = g.correlationId \
             WHERE g.deviceId IS NOT NULL AND g.\"end\" >= g.start;\n"
        );
    }
    let RangeCols {
        text,
        text_id,
        domain,
        string_ids,
    } = cols;
    let (name_join, name) = if *string_ids {
        (
            " LEFT JOIN src.StringIds s ON s.id = r.textId",
            format!("coalesce({text}, s.value, '(unnamed range)')"),
        )
    } else {
        ("", format!("coalesce({text}, '(unnamed range)')"))
    };
    sql += &format!(
        "-- One row per launching call and device: the span of its GPU rows there.
         INSERT INTO launch_dev SELECT tid, astart, pkey, corr, device, \
           min(start), max(\"end\"), count(*) FROM gpu_link GROUP BY pkey, corr, device;
         CREATE INDEX launch_dev_time ON launch_dev(tid, start);
         INSERT INTO launch SELECT DISTINCT tid, start, pkey, corr FROM launch_dev;
         CREATE INDEX launch_time ON launch(tid, start);
         -- Ranges outer, launches found by an index range scan on (thread, start).
         CREATE TABLE {NVTX_GPU} AS SELECT r.rowid AS nvtx_rid, r.eventType AS event_type, \
           r.globalTid AS global_tid, coalesce({domain}, 0) AS domain, l.device AS device, \
           min(l.gmin) AS gpu_start, max(l.gmax) AS gpu_end, sum(l.n) AS gpu_rows, \
           {text} AS name_text, {text_id} AS name_id \
           FROM src.NVTX_EVENTS r CROSS JOIN launch_dev l \
           ON l.tid = r.globalTid AND l.start BETWEEN r.start AND r.\"end\" \
           WHERE r.eventType IN (59, 60) AND r.\"end\" >= r.start \
           GROUP BY r.rowid, l.device;
         CREATE INDEX nvtx_gpu_start ON {NVTX_GPU}(gpu_start);
         CREATE INDEX nvtx_gpu_rid ON {NVTX_GPU}(nvtx_rid);
         -- For each launch, the enclosing push/pop ranges, outermost first.
         INSERT INTO launch_nvtx SELECT pkey, corr, \
           group_concat(name, '{RANGE_SEPARATOR}' ORDER BY rstart, rend DESC, rrid) \
           FROM (SELECT l.pkey, l.corr, r.start AS rstart, r.\"end\" AS rend, r.rowid AS rrid, \
                 {name} AS name \
                 FROM src.NVTX_EVENTS r CROSS JOIN launch l \
                 ON l.tid = r.globalTid AND l.start BETWEEN r.start AND r.\"end\"{name_join} \
                 WHERE r.eventType = 59 AND r.\"end\" >= r.start) \
           GROUP BY pkey, corr;
         CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
           PRIMARY KEY (src, rid)) WITHOUT ROWID;
         INSERT INTO {KERNEL_NVTX} SELECT g.src, g.rid, n.ranges FROM gpu_link g \
           JOIN launch_nvtx n ON n.pkey = g.pkey AND n.corr = g.corr ORDER BY g.src, g.rid;
         DROP TABLE launch_nvtx; DROP TABLE launch; DROP TABLE launch_dev; DROP TABLE gpu_link;"
    );
    conn.execute_batch(&sql)?;
    let count = |sql: &str| -> rusqlite::Result<u64> {
        Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64)
    };
    Ok(Counts {
        range_device_rows: count(&format!("SELECT count(*) FROM {NVTX_GPU}"))?,
        ranges_with_gpu_work: count(&format!("SELECT count(DISTINCT nvtx_rid) FROM {NVTX_GPU}"))?,
        annotated_gpu_rows: count(&format!("SELECT count(*) FROM {KERNEL_NVTX}"))?,
    })
}

/// A value copied from the export to `nvtx_gpu` unchanged, whatever its type.
enum Raw {
    Null,
    Int(i64),
    Real(f64),
    Text(Box<[u8]>),
    Blob(Box<[u8]>),
}

impl Raw {
    fn of(v: ValueRef<'_>) -> Raw {
        match v {
            ValueRef::Null => Raw::Null,
            ValueRef::Integer(i) => Raw::Int(i),
            ValueRef::Real(f) => Raw::Real(f),
            ValueRef::Text(t) => Raw::Text(t.into()),
            ValueRef::Blob(b) => Raw::Blob(b.into()),
        }
    }
}

impl ToSql for Raw {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Raw::Null => ValueRef::Null,
            Raw::Int(i) => ValueRef::Integer(*i),
            Raw::Real(f) => ValueRef::Real(*f),
            Raw::Text(t) => ValueRef::Text(t),
            Raw::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// An integer the sweep orders or matches by; anything else is left to the SQL fallback.
fn int(v: ValueRef<'_>) -> Result<i64, Stop> {
    match v {
        ValueRef::Integer(i) => Ok(i),
        _ => Err(Stop::Abort(Abort::Unsupported)),
    }
}

const PUSH_POP: i64 = 59;

/// The span of the GPU rows an open range has taken on one device.
struct DevSpan {
    device: i64,
    start: i64,
    end: i64,
    rows: i64,
}

/// What `nvtx_gpu` copies from a range's row.
struct RangeInfo {
    domain: Raw,
    text: Raw,
    text_id: Raw,
    /// A push/pop range's name when it is not `text` (a registered string, the placeholder).
    name: Option<Box<[u8]>>,
}

/// An NVTX range, open while the sweep is within it.
struct Range {
    rid: i64,
    event_type: i64,
    tid: i64,
    start: i64,
    end: i64,
    info: Rc<RangeInfo>,
    /// The GPU rows launched inside the range, per device.
    devs: Vec<DevSpan>,
}

impl Range {
    fn push_pop(&self) -> bool {
        self.event_type == PUSH_POP
    }

    fn name(&self) -> &[u8] {
        match (&self.info.name, &self.info.text) {
            (Some(n), _) => n,
            (None, Raw::Text(t)) => t,
            (None, _) => b"",
        }
    }

    /// The order of `kernel_nvtx` names: by start, the longer first, then by rowid.
    fn key(&self) -> (i64, Reverse<i64>, i64) {
        (self.start, Reverse(self.end), self.rid)
    }

    fn read(r: &rusqlite::Row<'_>) -> Result<Range, Stop> {
        let event_type = int(r.get_ref(1)?)?;
        let text = r.get_ref(6)?;
        // `coalesce(text, registered string, '(unnamed range)')`, as text; other types are
        // left to the SQL fallback.
        let name = match (event_type == PUSH_POP, text) {
            (false, _) | (true, ValueRef::Text(_)) => None,
            (true, ValueRef::Null) => match r.get_ref(8)? {
                ValueRef::Text(n) => Some(n.into()),
                ValueRef::Null => Some(b"(unnamed range)".as_slice().into()),
                _ => return Err(Stop::Abort(Abort::Unsupported)),
            },
            (true, _) => return Err(Stop::Abort(Abort::Unsupported)),
        };
        Ok(Range {
            rid: int(r.get_ref(0)?)?,
            event_type,
            tid: int(r.get_ref(2)?)?,
            start: int(r.get_ref(3)?)?,
            end: int(r.get_ref(4)?)?,
            info: Rc::new(RangeInfo {
                domain: Raw::of(r.get_ref(5)?),
                text: Raw::of(text),
                text_id: Raw::of(r.get_ref(7)?),
                name,
            }),
            devs: Vec::new(),
        })
    }
}

/// A linked GPU row with its launching call's thread and start.
struct Launch {
    tid: i64,
    astart: i64,
    rid: i64,
    device: i64,
    start: i64,
    end: i64,
}

impl Launch {
    fn read(r: &rusqlite::Row<'_>) -> Result<Launch, Stop> {
        Ok(Launch {
            tid: int(r.get_ref(0)?)?,
            astart: int(r.get_ref(1)?)?,
            rid: int(r.get_ref(2)?)?,
            device: int(r.get_ref(3)?)?,
            start: int(r.get_ref(4)?)?,
            end: int(r.get_ref(5)?)?,
        })
    }
}

/// The sweep's state for one CPU thread.
#[derive(Default)]
struct Thread {
    /// The ranges containing the thread's latest event time, in [`Range::key`] order.
    open: Vec<Range>,
    /// `kernel_nvtx.ranges` for the open push/pop ranges (`None` when there are none), valid
    /// while `names_valid`.
    names: Option<Rc<[u8]>>,
    names_valid: bool,
}

/// Puts a nearly sorted stream in key order with a bounded buffer, stable for equal keys;
/// `push` reports an item that arrives after a later key has already left (the stream is
/// further out of order). In order, each item costs O(1).
///
/// The sweep refills every window before each step, and a full window reads only after handing
/// an item out. So when the sweep hands out the head of one stream, each other stream's unread
/// rows can only come out after that stream hands out its current head, whose key is at least
/// the chosen one: a row the sweep should have taken before is reported by its own stream.
struct Window<T> {
    buf: VecDeque<(i64, T)>,
    cap: usize,
    last: i64,
    done: bool,
}

impl<T> Window<T> {
    fn new(cap: usize) -> Window<T> {
        Window {
            buf: VecDeque::new(),
            cap,
            last: i64::MIN,
            done: false,
        }
    }

    /// Whether to read on: the buffer has room and the stream is not exhausted.
    fn wants(&self) -> bool {
        !self.done && self.buf.len() < self.cap
    }

    /// Buffer an item; false when its key is before one already taken.
    fn push(&mut self, key: i64, item: T) -> bool {
        if self.buf.back().is_none_or(|b| b.0 <= key) {
            self.buf.push_back((key, item));
        } else {
            let at = self.buf.partition_point(|b| b.0 <= key);
            self.buf.insert(at, (key, item));
        }
        key >= self.last
    }

    fn peek(&self) -> Option<i64> {
        self.buf.front().map(|b| b.0)
    }

    fn pop(&mut self) -> Option<(i64, T)> {
        let b = self.buf.pop_front()?;
        self.last = b.0;
        Some(b)
    }
}

/// How far the streams may be out of order before the sweep asks SQLite to sort them. NVTX
/// ranges are in start order in real exports; GPU rows are in GPU start order, close to their
/// launches' order.
const NVTX_WINDOW: usize = 1024;
const LAUNCH_WINDOW: usize = 1 << 14;
/// `kernel_nvtx` rows are put in rowid order before insertion (only for speed: the table is
/// keyed by them, and appending is cheapest).
const KERNEL_WINDOW: usize = 1024;
const RANGE_WINDOW: usize = 4096;
/// Rows per INSERT statement: a statement per row costs more than its row.
const BATCH: usize = 32;

/// A row for an [`Inserter`].
trait BindRow {
    const COLUMNS: usize;
    /// Bind the row's values to parameters `first..first + COLUMNS`.
    fn bind(&self, st: &mut rusqlite::Statement<'_>, first: usize) -> rusqlite::Result<()>;
}

/// Inserts rows [`BATCH`] at a time with one multi-row `INSERT`.
struct Inserter<'c, R: BindRow> {
    many: rusqlite::Statement<'c>,
    one: rusqlite::Statement<'c>,
    rows: Vec<R>,
}

impl<'c, R: BindRow> Inserter<'c, R> {
    /// `head`: `INSERT INTO table(columns) VALUES `; `row`: a row's values, with a `?` for
    /// each bound one (`R::COLUMNS`).
    fn new(conn: &'c Connection, head: &str, row: &str) -> rusqlite::Result<Self> {
        Ok(Inserter {
            many: conn.prepare(&format!("{head}{}", vec![row; BATCH].join(", ")))?,
            one: conn.prepare(&format!("{head}{row}"))?,
            rows: Vec::with_capacity(BATCH),
        })
    }

    fn push(&mut self, row: R) -> rusqlite::Result<()> {
        self.rows.push(row);
        if self.rows.len() == BATCH {
            for (i, r) in self.rows.iter().enumerate() {
                r.bind(&mut self.many, 1 + i * R::COLUMNS)?;
            }
            self.many.raw_execute()?;
            self.rows.clear();
        }
        Ok(())
    }

    fn finish(&mut self) -> rusqlite::Result<()> {
        for r in self.rows.drain(..) {
            r.bind(&mut self.one, 1)?;
            self.one.raw_execute()?;
        }
        Ok(())
    }
}

/// A row of `nvtx_gpu`.
struct RangeRow {
    rowid: i64,
    rid: i64,
    event_type: i64,
    tid: i64,
    span: DevSpan,
    info: Rc<RangeInfo>,
}

impl BindRow for RangeRow {
    const COLUMNS: usize = 11;
    fn bind(&self, st: &mut rusqlite::Statement<'_>, i: usize) -> rusqlite::Result<()> {
        st.raw_bind_parameter(i, self.rowid)?;
        st.raw_bind_parameter(i + 1, self.rid)?;
        st.raw_bind_parameter(i + 2, self.event_type)?;
        st.raw_bind_parameter(i + 3, self.tid)?;
        st.raw_bind_parameter(i + 4, &self.info.domain)?;
        st.raw_bind_parameter(i + 5, self.span.device)?;
        st.raw_bind_parameter(i + 6, self.span.start)?;
        st.raw_bind_parameter(i + 7, self.span.end)?;
        st.raw_bind_parameter(i + 8, self.span.rows)?;
        st.raw_bind_parameter(i + 9, &self.info.text)?;
        st.raw_bind_parameter(i + 10, &self.info.text_id)
    }
}

/// A `kernel_nvtx` row of one GPU table.
struct KernelRow {
    rid: i64,
    names: Rc<[u8]>,
}

impl BindRow for KernelRow {
    const COLUMNS: usize = 2;
    fn bind(&self, st: &mut rusqlite::Statement<'_>, i: usize) -> rusqlite::Result<()> {
        st.raw_bind_parameter(i, self.rid)?;
        st.raw_bind_parameter(i + 1, ToSqlOutput::Borrowed(ValueRef::Text(&self.names)))
    }
}

/// Where the sweep writes.
struct Out<'c> {
    ranges: Inserter<'c, RangeRow>,
    /// `nvtx_gpu` rows waiting, by rowid: ranges end after the ranges they contain but are
    /// numbered before them (only for speed: appending is cheapest).
    range_rows: Window<RangeRow>,
    /// Per GPU table, its `kernel_nvtx` rows, by rowid (through `pending`). Kernels go
    /// straight into `kernel_nvtx` (whose keys start with `src`), the others into a table of
    /// their own appended after the sweep, so that every insertion appends.
    kernels: [Inserter<'c, KernelRow>; 3],
    pending: [Window<Rc<[u8]>>; 3],
    counts: Counts,
    /// Scratch for building `kernel_nvtx.ranges`.
    names: Vec<u8>,
}

impl Out<'_> {
    /// A range ends: write its spans, one row per device, in device order. The `nvtx_gpu`
    /// rowid packs `(nvtx_rid, device)`, so rowid order (which breaks ties in the `gpu_start`
    /// index) is the order of the SQL definition's `GROUP BY nvtx_rid, device`.
    fn close(&mut self, r: Range) -> Result<(), Stop> {
        if r.devs.is_empty() {
            return Ok(());
        }
        if !(0..1 << 31).contains(&r.rid) {
            return Err(Stop::Abort(Abort::Unsupported));
        }
        let Range {
            rid,
            event_type,
            tid,
            info,
            mut devs,
            ..
        } = r;
        devs.sort_unstable_by_key(|d| d.device);
        self.counts.ranges_with_gpu_work += 1;
        for span in devs {
            if !(0..1 << 32).contains(&span.device) {
                return Err(Stop::Abort(Abort::Unsupported));
            }
            let rowid = rid << 32 | span.device;
            self.range_rows.push(
                rowid,
                RangeRow {
                    rowid,
                    rid,
                    event_type,
                    tid,
                    span,
                    info: info.clone(),
                },
            );
            if self.range_rows.buf.len() > RANGE_WINDOW {
                let (_, row) = self.range_rows.pop().expect("full");
                self.ranges.push(row)?;
            }
            self.counts.range_device_rows += 1;
        }
        Ok(())
    }

    fn kernel(&mut self, src: usize, rid: i64, names: Rc<[u8]>) -> rusqlite::Result<()> {
        self.pending[src].push(rid, names);
        if self.pending[src].buf.len() > KERNEL_WINDOW {
            self.flush_kernel(src)?;
        }
        Ok(())
    }

    fn flush_kernel(&mut self, src: usize) -> rusqlite::Result<()> {
        if let Some((rid, names)) = self.pending[src].pop() {
            self.kernels[src].push(KernelRow { rid, names })?;
            self.counts.annotated_gpu_rows += 1;
        }
        Ok(())
    }

    fn finish(&mut self) -> rusqlite::Result<()> {
        for src in 0..3 {
            while !self.pending[src].buf.is_empty() {
                self.flush_kernel(src)?;
            }
            self.kernels[src].finish()?;
        }
        while let Some((_, row)) = self.range_rows.pop() {
            self.ranges.push(row)?;
        }
        self.ranges.finish()
    }

    /// Close the thread's ranges that end before `t`: no later event is inside them.
    fn prune(&mut self, th: &mut Thread, t: i64) -> Result<(), Stop> {
        if th.open.iter().all(|r| r.end >= t) {
            return Ok(());
        }
        let mut i = 0;
        while i < th.open.len() {
            if th.open[i].end < t {
                let r = th.open.remove(i);
                th.names_valid &= !r.push_pop();
                self.close(r)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// A range starts on its thread.
    fn open(&mut self, threads: &mut Threads, r: Range) -> Result<(), Stop> {
        let th = threads.entry(r.tid).or_default();
        self.prune(th, r.start)?;
        th.names_valid &= !r.push_pop();
        let key = r.key();
        let at = th.open.partition_point(|o| o.key() < key);
        th.open.insert(at, r);
        Ok(())
    }

    /// A GPU row's launching call starts: the thread's open ranges contain it.
    fn launch(&mut self, threads: &mut Threads, src: usize, l: Launch) -> Result<(), Stop> {
        let Some(th) = threads.get_mut(&l.tid) else {
            return Ok(());
        };
        self.prune(th, l.astart)?;
        for r in &mut th.open {
            match r.devs.iter_mut().find(|d| d.device == l.device) {
                Some(d) => {
                    d.start = d.start.min(l.start);
                    d.end = d.end.max(l.end);
                    d.rows += 1;
                }
                None => r.devs.push(DevSpan {
                    device: l.device,
                    start: l.start,
                    end: l.end,
                    rows: 1,
                }),
            }
        }
        if !th.names_valid {
            let names = &mut self.names;
            names.clear();
            let mut any = false;
            for r in th.open.iter().filter(|r| r.push_pop()) {
                if any {
                    names.extend_from_slice(RANGE_SEPARATOR.as_bytes());
                }
                names.extend_from_slice(r.name());
                any = true;
            }
            th.names = any.then(|| Rc::from(&names[..]));
            th.names_valid = true;
        }
        if let Some(names) = &th.names {
            self.kernel(src, l.rid, names.clone())?;
        }
        Ok(())
    }
}

/// Thread ids, looked up twice per event: a multiply spreads them well enough.
#[derive(Default)]
struct TidHasher(u64);

impl std::hash::Hasher for TidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64 ^ (v as u64 >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Threads = HashMap<i64, Thread, std::hash::BuildHasherDefault<TidHasher>>;

/// Stream the NVTX ranges and the linked GPU rows, each in start order (of the range, of the
/// launching call), keeping per thread the ranges open at the current time: a GPU row's
/// launch is inside exactly the open ranges of its thread, which take its span; a range's
/// `nvtx_gpu` rows are written when the sweep passes its end. At equal times, ranges open
/// before calls (a call at a range's start is inside it).
fn sweep(
    conn: &Connection,
    cols: &RangeCols,
    gpu: &[(i64, &'static str)],
    nvtx_sorted: bool,
    launches_sorted: bool,
) -> Result<Counts, Stop> {
    let RangeCols {
        text,
        text_id,
        domain,
        string_ids,
    } = cols;
    // A push/pop range without text is named by its registered string (one at most: the
    // sweep needs `StringIds.id` unique, where the SQL definition's join would repeat it).
    let registered = if *string_ids {
        let unique: bool = conn.query_row(
            "SELECT count(*) = 1 AND max(name = 'id') FROM pragma_table_info('StringIds', 'src') \
             WHERE pk > 0",
            [],
            |r| r.get(0),
        )?;
        if !unique {
            return Err(Stop::Abort(Abort::Unsupported));
        }
        format!(
            "CASE WHEN {text} IS NULL AND r.eventType = {PUSH_POP} THEN \
             (SELECT s.value FROM src.StringIds s WHERE s.id = r.textId) END"
        )
    } else {
        "NULL".to_string()
    };
    let mut nvtx_stmt = conn.prepare(&format!(
        "SELECT r.rowid, r.eventType, r.globalTid, r.start, r.\"end\", coalesce({domain}, 0), \
         {text}, {text_id}, {registered} \
         FROM src.NVTX_EVENTS r \
         WHERE r.eventType IN (59, 60) AND r.\"end\" >= r.start AND r.globalTid IS NOT NULL{}",
        if nvtx_sorted { " ORDER BY r.start" } else { "" }
    ))?;
    let mut launch_stmts =
        gpu.iter()
            .map(|(_, t)| {
                conn.prepare(&format!(
                "SELECT a.tid, a.start, g.rowid, g.deviceId, g.start, g.\"end\" FROM src.\"{t}\" g \
                 JOIN api_first a ON a.pkey = g.globalPid >> 24 AND a.corr = g.correlationId \
                 WHERE g.deviceId IS NOT NULL AND g.\"end\" >= g.start{}",
                if launches_sorted { " ORDER BY a.start" } else { "" }
            ))
            })
            .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut out = Out {
        ranges: Inserter::new(
            conn,
            &format!(
                "INSERT INTO {NVTX_GPU}(rowid, nvtx_rid, event_type, global_tid, domain, device, \
                 gpu_start, gpu_end, gpu_rows, name_text, name_id) VALUES "
            ),
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?,
        kernels: [
            Inserter::new(
                conn,
                &format!("INSERT INTO {KERNEL_NVTX}(src, rid, ranges) VALUES "),
                &format!("({SRC_KERNEL}, ?, ?)"),
            )?,
            Inserter::new(
                conn,
                "INSERT INTO kernel_nvtx_memcpy(rid, ranges) VALUES ",
                "(?, ?)",
            )?,
            Inserter::new(
                conn,
                "INSERT INTO kernel_nvtx_memset(rid, ranges) VALUES ",
                "(?, ?)",
            )?,
        ],
        pending: std::array::from_fn(|_| Window::new(KERNEL_WINDOW)),
        range_rows: Window::new(RANGE_WINDOW),
        counts: Counts::default(),
        names: Vec::new(),
    };

    let mut nvtx_rows = nvtx_stmt.query([])?;
    let mut nvtx: Window<Range> = Window::new(NVTX_WINDOW);
    let mut launch_rows = launch_stmts
        .iter_mut()
        .map(|s| s.query([]))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut launches: Vec<Window<Launch>> =
        gpu.iter().map(|_| Window::new(LAUNCH_WINDOW)).collect();
    let mut threads = Threads::default();

    loop {
        while nvtx.wants() {
            let Some(r) = nvtx_rows.next()? else {
                nvtx.done = true;
                break;
            };
            let range = Range::read(r)?;
            if !nvtx.push(range.start, range) {
                return Err(Stop::Abort(Abort::NvtxDisorder));
            }
        }
        for (w, rows) in launches.iter_mut().zip(launch_rows.iter_mut()) {
            while w.wants() {
                let Some(r) = rows.next()? else {
                    w.done = true;
                    break;
                };
                let l = Launch::read(r)?;
                if !w.push(l.astart, l) {
                    return Err(Stop::Abort(Abort::LaunchDisorder));
                }
            }
        }
        let next_launch = launches
            .iter()
            .enumerate()
            .filter_map(|(i, w)| Some((w.peek()?, i)))
            .min();
        let range_first = match (nvtx.peek(), next_launch) {
            (None, None) => break,
            (Some(t), l) => l.is_none_or(|(lt, _)| t <= lt),
            (None, Some(_)) => false,
        };
        if range_first {
            let (_, r) = nvtx.pop().expect("peeked");
            out.open(&mut threads, r)?;
        } else if let Some((_, i)) = next_launch {
            let (_, l) = launches[i].pop().expect("peeked");
            out.launch(&mut threads, gpu[i].0 as usize, l)?;
        }
    }
    for th in threads.into_values() {
        for r in th.open {
            out.close(r)?;
        }
    }
    out.finish()?;
    Ok(out.counts)
}
