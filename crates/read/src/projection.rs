//! NVTX projected onto the GPU: which GPU work each NVTX range launched, and which NVTX ranges
//! enclose the launch of each GPU row.
//!
//! A GPU row (kernel, memcpy, memset) is launched by the CUDA API call (runtime or driver) that
//! shares its `correlationId` within one process. That call runs on a CPU thread at some time; an
//! NVTX range on the same thread whose interval contains the call's start encloses the launch.
//!
//! The result ([`Projected`]) is two sorted streams, kept with bounded memory by
//! [`crate::runs`] (runs spill to a scratch directory past a few MB):
//!
//! - **spans**: one record per (NVTX range, GPU device) for ranges that launched GPU work there,
//!   in `(gpu_start, gpu_end descending, nvtx rowid, device)` order, which is the order the
//!   NVTX-on-GPU tracks are written in (a parent's span contains its children's: the slices nest
//!   like the CPU ranges);
//! - **kernels**: per GPU table, in rowid order, each row launched inside at least one push/pop
//!   range with the names of those ranges on the launching thread, outermost first, joined with
//!   `" > "`. The GPU reader merges it with its own rowid-ordered scan.
//!
//! The workflows (`stats`, `extract`) and the tests read the same result as SQLite tables
//! ([`Projection`], attached under the schema [`PROJ_DB`]):
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
//! Indexed by `gpu_start` and `nvtx_rid`; the rowid packs `(nvtx_rid, device)`.
//!
//! `proj.kernel_nvtx`: one row per GPU row launched inside at least one push/pop range.
//!
//! | column   | meaning |
//! |----------|---------|
//! | `src`    | 0 kernel, 1 memcpy, 2 memset (the numbering of [`crate::flows`]) |
//! | `rid`    | `rowid` of the GPU row in its table |
//! | `ranges` | names of the push/pop ranges on the launching thread that contain the launching call's start, outermost first, joined with `" > "` |
//!
//! Rules (the definition, which `project_sql` states as SQL joins): ranges need an `end` no
//! earlier than their `start` and a `globalTid`; GPU rows need `start`, `end >= start`,
//! `deviceId`, `globalPid` and `correlationId`; a call encloses when
//! `range.start <= call.start <= range.end`. Should an export repeat a (process, correlation id)
//! among its API calls, the first row (runtime before driver, then by rowid) is the launch, as
//! for flow arrows.
//!
//! # How
//!
//! [`crate::flows::prepare`] links each GPU row to its launching call in the same
//! sort-merge join as the flow arrows, and hands over the links sorted by the call's start
//! ([`Launches`]). Then one sweep in time order over two streams, the NVTX ranges by start and
//! the launches by start, keeps per thread the ranges open at the current time (at equal times
//! ranges open first, as `range.start <= call.start`). A launch is inside exactly the open
//! ranges of its thread: each takes the GPU row into its span on the row's device, and the
//! push/pop ones, in `(start, end DESC, rowid)` order, name the row. A range is closed, and its
//! spans written, once the sweep passes its end. Nothing assumes that ranges nest: an open range
//! is just an interval, so start/end ranges and push/pop ranges that end after their parent are
//! handled alike. Each launch costs the number of ranges open on its thread (the nesting depth),
//! each range one record per device; memory holds the open ranges and the sorters' chunks.
//!
//! NVTX ranges are read in the table's own order, which is start order in real exports, through
//! a reordering window; a table further out of order is read again sorted by SQLite. Values the
//! sweep does not handle (ids and times that are not integers, names that are not text, a rowid
//! or device beyond the `nvtx_gpu` rowid encoding) send the whole computation to `project_sql`,
//! the definition in SQL joins (exact too, but each launch is visited once per enclosing range,
//! then grouped), whose tables are then read into the same streams.

use crate::flows::Launches;
use crate::model::TextNo;
use crate::runs::{Lookup, Named, NearlySorted, Sorted, Sorter, Spill};
use crate::{DRIVER, NVTX, RUNTIME, Schema};
use anyhow::Result;
use rusqlite::Connection;
use rusqlite::types::{ToSqlOutput, ValueRef};
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

/// The schema name [`Projection::attach`] attaches the scratch database under.
pub const PROJ_DB: &str = "proj";
/// Table: one row per (NVTX range, device) with the span of the GPU work it launched.
pub const NVTX_GPU: &str = "nvtx_gpu";
/// Table: for each GPU row, the push/pop ranges enclosing its launch.
pub const KERNEL_NVTX: &str = "kernel_nvtx";
/// The separator between range names in `kernel_nvtx.ranges`.
pub const RANGE_SEPARATOR: &str = " > ";

/// `src` numbers of the GPU tables, as in [`crate::flows`].
pub const SRC_KERNEL: i64 = 0;
pub const SRC_MEMCPY: i64 = 1;
pub const SRC_MEMSET: i64 = 2;

/// The counts a projection reports.
#[derive(Default, Debug, Clone, Copy)]
pub struct Counts {
    /// Rows of `nvtx_gpu` (span records).
    pub range_device_rows: u64,
    /// Distinct NVTX ranges with at least one span.
    pub ranges_with_gpu_work: u64,
    /// Rows of `kernel_nvtx` (GPU rows with names).
    pub annotated_gpu_rows: u64,
}

/// One range's span on one device, as [`Projected::spans`] yields it.
pub struct Span<'a> {
    pub gpu_start: i64,
    pub gpu_end: i64,
    pub nvtx_rid: i64,
    pub device: i64,
    pub gpu_rows: i64,
    pub global_tid: i64,
    pub event_type: i64,
    pub domain: i64,
    /// The range's `text` (`None` when NULL), as UTF-8 (invalid bytes replaced, as
    /// [`String::from_utf8_lossy`] does).
    pub text: Option<Cow<'a, str>>,
    /// The text's number, where the projection numbered it: the number the NVTX reader's
    /// slices of the same range carry (see [`Feed::row`]).
    pub text_no: Option<TextNo>,
    /// The range's `textId` (`None` when NULL).
    pub name_id: Option<i64>,
}

/// Span record fields: `[gpu_start, -gpu_end, nvtx rowid, device, gpu rows, thread, domain,
/// name id, flags, text number]` (the sort key first); the text is its number in [`Names`], or
/// the record's string when it has none (-1).
type SpanRecord = Named<10>;
const HAS_TEXT: i64 = 1;
const HAS_NAME_ID: i64 = 2;
/// Flag: a start/end range (else push/pop; the sweep and the SQL definition take no others).
const IS_START_END: i64 = 4;

impl Span<'_> {
    /// The record, with the span's own text.
    fn record(&self) -> SpanRecord {
        self.record_with(
            self.text
                .as_ref()
                .map(|t| Text::Own(Arc::<[u8]>::from(t.as_bytes())))
                .as_ref(),
        )
    }

    /// The record, the text carried as `text` says (the span's own `text` is not read).
    fn record_with(&self, text: Option<&Text>) -> SpanRecord {
        let flag = |on: bool, f: i64| if on { f } else { 0 };
        let carried = text.map_or((-1, None), carry);
        Named {
            fields: [
                self.gpu_start,
                // Wrapping: a bijection, so `of` gives back any value.
                self.gpu_end.wrapping_neg(),
                self.nvtx_rid,
                self.device,
                self.gpu_rows,
                self.global_tid,
                self.domain,
                self.name_id.unwrap_or(0),
                flag(text.is_some(), HAS_TEXT)
                    | flag(self.name_id.is_some(), HAS_NAME_ID)
                    | flag(self.event_type == START_END, IS_START_END),
                carried.0,
            ],
            text: carried.1,
        }
    }

    fn of(r: SpanRecord, names: &Strings) -> Span<'_> {
        let f = r.fields;
        let (text_no, text) = carried_text(f[9], r.text.as_deref(), names);
        let has_text = f[8] & HAS_TEXT != 0;
        Span {
            gpu_start: f[0],
            gpu_end: f[1].wrapping_neg(),
            nvtx_rid: f[2],
            device: f[3],
            gpu_rows: f[4],
            global_tid: f[5],
            event_type: if f[8] & IS_START_END != 0 {
                START_END
            } else {
                PUSH_POP
            },
            domain: f[6],
            name_id: (f[8] & HAS_NAME_ID != 0).then_some(f[7]),
            text: has_text.then_some(text),
            text_no: text_no.filter(|_| has_text),
        }
    }
}

/// How a record carries a string of [`Names`]: its number and no string when it has a number,
/// else -1 and the string itself.
fn carry(text: &Text) -> (i64, Option<Arc<[u8]>>) {
    match text {
        Text::No(no) => (i64::from(*no), None),
        Text::Own(t) => (-1, Some(t.clone())),
    }
}

/// The string a record carries (see [`carry`]), its number looked up in `list`: with its
/// [`TextNo`] when it has one.
fn carried_text<'a>(
    no: i64,
    text: Option<&[u8]>,
    list: &'a Strings,
) -> (Option<TextNo>, Cow<'a, str>) {
    match u32::try_from(no) {
        Ok(no) => (Some(TextNo::new(list.set, no)), Cow::Borrowed(list.get(no))),
        Err(_) => (
            None,
            Cow::Owned(String::from_utf8_lossy(text.unwrap_or_default()).into_owned()),
        ),
    }
}

/// `t` as UTF-8, as [`String::from_utf8_lossy`] reads it.
fn lossy(t: &[u8]) -> Arc<str> {
    match std::str::from_utf8(t) {
        Ok(s) => Arc::from(s),
        Err(_) => Arc::from(String::from_utf8_lossy(t).as_ref()),
    }
}

/// The numbered strings of a [`Names`] once the sweep is done, as UTF-8 (invalid bytes
/// replaced, as [`String::from_utf8_lossy`] does), end to end in one buffer: handing one out
/// touches nothing but the offsets (a string of its own each would cost a cache miss on its
/// reference count for every span and GPU row that carries it).
#[derive(Default)]
pub struct Strings {
    text: String,
    /// As [`Names::ends`] (the text is at most three times the bytes: U+FFFD for each invalid
    /// byte).
    ends: Vec<u32>,
    /// The numbers' set (see [`TextNo`]).
    set: u32,
}

impl Strings {
    fn get(&self, no: u32) -> &str {
        &self.text[nth(&self.ends, no)]
    }
}

/// Strings by number, so that sorted records carry a number rather than the string (a profile
/// repeats a few thousand range names and lists of names over hundreds of thousands of spans
/// and kernels). Bounded: past [`Names::KEPT`] strings or [`Names::BYTES`] bytes, new strings
/// get no number and records carry them.
///
/// Looked up once per NVTX range, so laid out for few cache misses: the strings end to end in
/// one buffer, and the index maps a string's hash to its number (16-byte buckets, where a boxed
/// string key takes 24 and a pointer to follow). Two strings of one hash: the later one gets
/// no number.
struct Names {
    /// The strings end to end: number `n` is `bytes[ends[n - 1]..ends[n]]` (from 0 for 0; see
    /// [`nth`]).
    bytes: Vec<u8>,
    ends: Vec<u32>,
    index: HashMap<u64, u32, KeyIsHash>,
    /// The numbers' set, for the writers (see [`TextNo`]).
    set: u32,
}

impl Default for Names {
    fn default() -> Names {
        Names {
            bytes: Vec::new(),
            ends: Vec::new(),
            index: HashMap::default(),
            set: TextNo::new_set(),
        }
    }
}

/// Where string `no` is in strings stored end to end, by their ends.
fn nth(ends: &[u32], no: u32) -> std::ops::Range<usize> {
    let no = no as usize;
    let start = if no == 0 { 0 } else { ends[no - 1] };
    start as usize..ends[no] as usize
}

/// A map keyed by a hash already computed: the key is its own hash.
type KeyIsHash = std::hash::BuildHasherDefault<HashIsKey>;

#[derive(Default)]
struct HashIsKey(u64);

impl std::hash::Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A string of a [`Names`]: its number, or the string itself once the dictionary is full.
#[derive(Clone)]
enum Text {
    No(u32),
    Own(Arc<[u8]>),
}

impl Names {
    const KEPT: usize = 1 << 16;
    const BYTES: usize = 16 << 20;

    /// `t`, numbered when it has or can get a number.
    fn text(&mut self, t: &[u8]) -> Text {
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = crate::model::FxHasher::default();
            t.hash(&mut h);
            h.finish()
        };
        match self.index.entry(hash) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let no = *e.get();
                if self.numbered(no) == t {
                    return Text::No(no);
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                if self.ends.len() < Names::KEPT && self.bytes.len() + t.len() <= Names::BYTES {
                    let no = self.ends.len() as u32;
                    self.bytes.extend_from_slice(t);
                    self.ends.push(self.bytes.len() as u32);
                    e.insert(no);
                    return Text::No(no);
                }
            }
        }
        Text::Own(Arc::from(t))
    }

    /// String number `no`.
    fn numbered(&self, no: u32) -> &[u8] {
        &self.bytes[nth(&self.ends, no)]
    }

    /// The strings by number, as UTF-8.
    fn into_strings(self) -> Strings {
        let mut out = Strings {
            text: String::with_capacity(self.bytes.len()),
            ends: Vec::with_capacity(self.ends.len()),
            set: self.set,
        };
        for no in 0..self.ends.len() as u32 {
            out.text += &String::from_utf8_lossy(self.numbered(no));
            out.ends.push(out.text.len() as u32);
        }
        out
    }

    /// The bytes of a [`Text`] of this dictionary.
    fn bytes<'a>(&'a self, t: &'a Text) -> &'a [u8] {
        match t {
            Text::No(no) => self.numbered(*no),
            Text::Own(t) => t,
        }
    }
}

/// Kernel record: `[rowid, number of the names in Names, or -1]`, the names as the string when
/// they have no number.
type KernelRecord = Named<2>;

/// The names of the push/pop ranges around each GPU row of one table, read beside its
/// rowid-ordered scan (see [`Projected::kernel_names`]).
pub struct KernelNames<'a> {
    lookup: Lookup<'a, KernelRecord>,
}

/// The names of the push/pop ranges around a GPU row's launch: their number in
/// [`Projected::range_names`], or the names themselves when they have none.
#[derive(Clone, Debug)]
pub enum RangeNames {
    No(u32),
    Own(Arc<str>),
}

impl KernelNames<'_> {
    /// The names around the launch of GPU row `rowid` (rowids in increasing order).
    pub fn of(&mut self, rowid: i64) -> Result<Option<RangeNames>> {
        let mut found = None;
        self.lookup.matching(rowid, |r| {
            found = Some(match u32::try_from(r.fields[1]) {
                Ok(no) => RangeNames::No(no),
                Err(_) => RangeNames::Own(lossy(r.text.as_deref().unwrap_or_default())),
            });
        })?;
        Ok(found)
    }
}

/// The projection of one export as sorted streams (see the module's documentation).
pub struct Projected {
    spans: Sorted<SpanRecord>,
    /// The numbered range names of the spans.
    texts: Strings,
    /// Per GPU table number: the enclosing push/pop ranges' names by rowid.
    kernels: [Sorted<KernelRecord>; 3],
    /// The numbered lists of names of the kernels.
    name_lists: Strings,
    pub counts: Counts,
    _spill: Spill,
}

impl Projected {
    /// Compute the projection from the launches [`crate::flows::prepare`] found, or
    /// `None` when the export lacks NVTX ranges (or there are no launches).
    pub fn build(
        conn: &Connection,
        schema: &Schema,
        launches: &Launches,
    ) -> Result<Option<Projected>> {
        if !nvtx_usable(schema) {
            return Ok(None);
        }
        if !launches.unsupported
            && let Some(p) = sweep_all(conn, schema, &launches.sorted)
                .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?
        {
            return Ok(Some(p));
        }
        // Values the sweep does not handle: the SQL definition, read back into streams.
        let tables = SqlTables::build(schema)?;
        Projected::from_tables(&tables).map(Some)
    }

    /// The spans in `(gpu_start, gpu_end descending, nvtx rowid, device)` order.
    pub fn spans(&self) -> Result<impl Iterator<Item = Result<Span<'_>>> + '_> {
        let mut merge = self.spans.iter()?;
        Ok(std::iter::from_fn(move || {
            merge
                .next_record()
                .transpose()
                .map(|r| r.map(|r| Span::of(r, &self.texts)))
        }))
    }

    /// The names of the push/pop ranges around the launches of GPU table `src`, by rowid.
    pub fn kernel_names(&self, src: i64) -> Result<KernelNames<'_>> {
        Ok(KernelNames {
            lookup: Lookup::new(self.kernels[src as usize].iter()?),
        })
    }

    /// The names `names` of [`KernelNames::of`], with their number when they have one.
    pub fn range_names<'a>(&'a self, names: &'a RangeNames) -> (Option<TextNo>, &'a str) {
        match names {
            RangeNames::No(no) => (
                Some(TextNo::new(self.name_lists.set, *no)),
                self.name_lists.get(*no),
            ),
            RangeNames::Own(t) => (None, t),
        }
    }

    /// The result from its collected records.
    fn sorted(
        spans: NearlySorted<SpanRecord>,
        texts: Names,
        kernels: [Sorter<KernelRecord>; 3],
        name_lists: Names,
        counts: Counts,
        mut spill: Spill,
    ) -> Result<Projected> {
        let [k0, k1, k2] = kernels;
        Ok(Projected {
            spans: spans.finish(&mut spill)?,
            texts: texts.into_strings(),
            name_lists: name_lists.into_strings(),
            kernels: [
                k0.finish(&mut spill)?,
                k1.finish(&mut spill)?,
                k2.finish(&mut spill)?,
            ],
            counts,
            _spill: spill,
        })
    }

    /// Read tables made by `project_sql` into streams.
    fn from_tables(t: &SqlTables) -> Result<Projected> {
        let conn = Connection::open_with_flags(
            &t.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let mut spill = Spill::default();
        let mut spans = NearlySorted::<SpanRecord>::default();
        let mut st = conn.prepare(&format!(
            "SELECT gpu_start, gpu_end, nvtx_rid, device, gpu_rows, global_tid, event_type, \
             domain, name_text, name_id FROM {NVTX_GPU}"
        ))?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let i = |k| crate::int_at(r, k);
            let (Some(gpu_start), Some(gpu_end), Some(global_tid), Some(device)) =
                (i(0), i(1), i(5), i(3))
            else {
                continue;
            };
            let text = match r.get_ref(8)? {
                ValueRef::Text(b) | ValueRef::Blob(b) => Some(String::from_utf8_lossy(b)),
                _ => None,
            };
            let span = Span {
                gpu_start,
                gpu_end,
                nvtx_rid: i(2).unwrap_or(0),
                device,
                gpu_rows: i(4).unwrap_or(0),
                global_tid,
                event_type: i(6).unwrap_or(PUSH_POP),
                domain: i(7).unwrap_or(0),
                text,
                text_no: None,
                name_id: i(9),
            };
            spans.push(span.record(), &mut spill)?;
        }
        let mut kernels: [Sorter<KernelRecord>; 3] = Default::default();
        let mut st = conn.prepare(&format!("SELECT src, rid, ranges FROM {KERNEL_NVTX}"))?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let (Some(src), Some(rid)) = (crate::int_at(r, 0), crate::int_at(r, 1)) else {
                continue;
            };
            if let (Some(k), ValueRef::Text(b) | ValueRef::Blob(b)) =
                (kernels.get_mut(src as usize), r.get_ref(2)?)
            {
                k.push(
                    Named {
                        fields: [rid, -1],
                        text: Some(Arc::from(b)),
                    },
                    &mut spill,
                )?;
            }
        }
        let none = Names::default;
        Projected::sorted(spans, none(), kernels, none(), t.counts, spill)
    }
}

fn nvtx_usable(schema: &Schema) -> bool {
    schema.has_columns(NVTX, &["start", "end", "eventType", "globalTid"])
        && schema.rowid(NVTX) == Some("rowid")
}

/// The projection as SQLite tables in a scratch database deleted on drop (see the module's
/// documentation), for the workflows' SQL.
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

/// The tables `project_sql` (or [`Projection::build`]) fills, in a scratch database.
struct SqlTables {
    dir: tempfile::TempDir,
    path: PathBuf,
    counts: Counts,
}

impl SqlTables {
    /// Empty tables with the declared types of the original `CREATE TABLE AS` over the join
    /// (readers and `SELECT *` see the same table whichever way it is filled).
    fn create(conn: &Connection, cols: &RangeCols) -> rusqlite::Result<()> {
        conn.execute_batch(&format!(
            "CREATE TABLE {NVTX_GPU} AS SELECT r.rowid AS nvtx_rid, r.eventType AS event_type, \
               r.globalTid AS global_tid, coalesce({}, 0) AS domain, CAST(NULL AS INTEGER) AS device, \
               NULL AS gpu_start, NULL AS gpu_end, NULL AS gpu_rows, {} AS name_text, {} AS name_id \
               FROM src.NVTX_EVENTS r LIMIT 0;
             CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
               PRIMARY KEY (src, rid)) WITHOUT ROWID;",
            cols.domain, cols.text, cols.text_id
        ))
    }

    /// The tables by the SQL definition.
    fn build(schema: &Schema) -> Result<SqlTables> {
        let gpu: Vec<(i64, &'static str)> = crate::flows::gpu_tables(schema)
            .into_iter()
            .filter(|(_, t)| crate::flows::gpu_projects(schema, t))
            .collect();
        let (dir, path, conn) =
            crate::scratch_db(schema, "nsys-perfetto-proj-", "projection.sqlite")?;
        let mut sql = String::from(
            "BEGIN;
             CREATE TABLE api_first(pkey INTEGER, corr INTEGER, tid INTEGER, start INTEGER, \
               PRIMARY KEY (pkey, corr)) WITHOUT ROWID;\n",
        );
        // The launching call of each (process, correlation id); should an export repeat one,
        // the first row wins, as for flow arrows.
        for t in [RUNTIME, DRIVER] {
            if crate::flows::api_projects(schema, t) {
                sql += &format!(
                    "INSERT OR IGNORE INTO api_first SELECT globalTid >> 24, correlationId, \
                     globalTid, start FROM src.\"{t}\" WHERE correlationId IS NOT NULL \
                     AND globalTid IS NOT NULL AND start IS NOT NULL;\n"
                );
            }
        }
        let counts = (|| {
            conn.execute_batch(&sql)?;
            project_sql(&conn, &RangeCols::new(schema), &gpu)
        })()
        .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?;
        conn.execute_batch("DROP TABLE api_first; COMMIT; DETACH DATABASE src;")?;
        Ok(SqlTables { dir, path, counts })
    }
}

impl Projection {
    /// Compute the tables, or `None` when the export lacks NVTX ranges, GPU rows or API calls.
    pub fn build(schema: &Schema) -> Result<Option<Projection>> {
        if !nvtx_usable(schema) {
            return Ok(None);
        }
        let conn = crate::open_readonly(&schema.path)?;
        let nothing = crate::select::Selection {
            types: Default::default(),
            ..Default::default()
        };
        let Some(launches) = crate::flows::prepare(&conn, schema, &nothing, true)?.1 else {
            return Ok(None);
        };
        let projected = if launches.unsupported {
            None
        } else {
            sweep_all(&conn, schema, &launches.sorted)
                .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?
        };
        let tables = match projected {
            Some(p) => p.into_tables(schema)?,
            None => SqlTables::build(schema)?,
        };
        Ok(Some(Projection {
            _dir: tables.dir,
            path: tables.path,
            range_device_rows: tables.counts.range_device_rows,
            ranges_with_gpu_work: tables.counts.ranges_with_gpu_work,
            annotated_gpu_rows: tables.counts.annotated_gpu_rows,
        }))
    }

    /// Attach the tables, read-only, to a connection as schema [`PROJ_DB`].
    pub fn attach(&self, conn: &Connection) -> Result<()> {
        let uri = crate::sqlite_uri(&self.path, "mode=ro");
        conn.execute(&format!("ATTACH DATABASE ?1 AS {PROJ_DB}"), [uri])?;
        Ok(())
    }

    /// The scratch database file (valid while `self` lives).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Projected {
    /// Write the streams as the tables.
    fn into_tables(self, schema: &Schema) -> Result<SqlTables> {
        let (dir, path, conn) =
            crate::scratch_db(schema, "nsys-perfetto-proj-", "projection.sqlite")?;
        conn.execute_batch("PRAGMA page_size = 16384;")?;
        SqlTables::create(&conn, &RangeCols::new(schema))?;
        conn.execute_batch("DETACH DATABASE src; BEGIN;")?;
        {
            let mut ranges = Inserter::<Span<'_>>::new(
                &conn,
                &format!(
                    "INSERT INTO {NVTX_GPU}(rowid, nvtx_rid, event_type, global_tid, domain, \
                     device, gpu_start, gpu_end, gpu_rows, name_text, name_id) VALUES "
                ),
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?;
            for span in self.spans()? {
                ranges.push(span?)?;
            }
            ranges.finish()?;
            let mut kernels = Inserter::<(i64, Named<1>)>::new(
                &conn,
                &format!("INSERT INTO {KERNEL_NVTX}(src, rid, ranges) VALUES "),
                "(?, ?, ?)",
            )?;
            for src in [SRC_KERNEL, SRC_MEMCPY, SRC_MEMSET] {
                let mut it = self.kernels[src as usize].iter()?;
                while let Some(k) = it.next_record()? {
                    let (_, text) = carried_text(k.fields[1], k.text.as_deref(), &self.name_lists);
                    kernels.push((
                        src,
                        Named {
                            fields: [k.fields[0]],
                            text: Some(Arc::<[u8]>::from(text.as_bytes())),
                        },
                    ))?;
                }
            }
            kernels.finish()?;
        }
        conn.execute_batch(&format!(
            "CREATE INDEX nvtx_gpu_start ON {NVTX_GPU}(gpu_start);
             CREATE INDEX nvtx_gpu_rid ON {NVTX_GPU}(nvtx_rid);
             COMMIT;"
        ))?;
        Ok(SqlTables {
            dir,
            path,
            counts: self.counts,
        })
    }
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

/// Why a sweep gave up.
enum Abort {
    /// `NVTX_EVENTS` in rowid order is not in start order (beyond the reorder window): read it
    /// again sorted.
    NvtxDisorder,
    /// A value the sweep does not handle (a time or id that is not an integer, a rowid or
    /// device beyond the `nvtx_gpu` rowid encoding, a name that is not text, `StringIds.id`
    /// not unique): the SQL definition defines the result.
    Unsupported,
}

enum Stop {
    Abort(Abort),
    Fail(anyhow::Error),
}

impl From<rusqlite::Error> for Stop {
    fn from(e: rusqlite::Error) -> Stop {
        Stop::Fail(e.into())
    }
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Stop {
        Stop::Fail(e)
    }
}

/// The sweep, reading the NVTX table sorted by SQLite when it is too far out of order; `None`
/// when the data needs the SQL definition.
fn sweep_all(
    conn: &Connection,
    schema: &Schema,
    launches: &Sorted<[i64; 7]>,
) -> Result<Option<Projected>> {
    let cols = RangeCols::new(schema);
    for nvtx_sorted in [false, true] {
        let t0 = std::time::Instant::now();
        match sweep(conn, &cols, launches, nvtx_sorted) {
            Ok(p) => {
                crate::progress::timing("projection: sweep", t0);
                return Ok(Some(p));
            }
            Err(Stop::Fail(e)) => return Err(e),
            Err(Stop::Abort(Abort::NvtxDisorder)) if !nvtx_sorted => continue,
            Err(Stop::Abort(_)) => return Ok(None),
        }
    }
    Ok(None)
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
             WHERE g.deviceId IS NOT NULL AND g.\"end\" >= g.start \
             AND g.start >= -{max} AND g.\"end\" <= {max};\n",
            max = super::MAX_TIME
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
           WHERE r.eventType IN ({PUSH_POP}, {START_END}) AND r.\"end\" >= r.start \
             AND r.start >= -{max} AND r.\"end\" <= {max} \
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
                 WHERE r.eventType = {PUSH_POP} AND r.\"end\" >= r.start \
                   AND r.start >= -{max} AND r.\"end\" <= {max}) \
           GROUP BY pkey, corr;
         CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
           PRIMARY KEY (src, rid)) WITHOUT ROWID;
         INSERT INTO {KERNEL_NVTX} SELECT g.src, g.rid, n.ranges FROM gpu_link g \
           JOIN launch_nvtx n ON n.pkey = g.pkey AND n.corr = g.corr ORDER BY g.src, g.rid;
         DROP TABLE launch_nvtx; DROP TABLE launch; DROP TABLE launch_dev; DROP TABLE gpu_link;",
        max = super::MAX_TIME
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

/// An integer the sweep orders or matches by; anything else is left to the SQL definition.
fn int(v: ValueRef<'_>) -> Result<i64, Stop> {
    match v {
        ValueRef::Integer(i) => Ok(i),
        _ => Err(Stop::Abort(Abort::Unsupported)),
    }
}

use super::nvtx_type::{PUSH_POP, START_END};

/// The span of the GPU rows an open range has taken on one device.
struct DevSpan {
    device: i64,
    start: i64,
    end: i64,
    rows: i64,
}

/// An NVTX range, open while the sweep is within it. Boxed where the sweep keeps it: it is
/// large, and moving it between the window, a thread's open list and `close` cost more in
/// copies than one allocation.
#[derive(Default)]
struct Range {
    rid: i64,
    event_type: i64,
    tid: i64,
    start: i64,
    end: i64,
    domain: i64,
    /// `text`, in the sweep's range names ([`Out::texts`]).
    text: Option<Text>,
    text_id: Option<i64>,
    /// A push/pop range's name when it is not `text` (a registered string, the placeholder),
    /// in the same names.
    name: Option<Text>,
    /// The GPU rows launched inside the range, per device: those settled so far (see
    /// `pending`).
    devs: Devs,
    /// GPU rows launched while this range was the last of its thread's open list (or handed
    /// down by the ranges after it as they closed): they count for this range and for every
    /// range before it in the list. A launch then costs one update, not one per open range;
    /// a range's rows are `devs` plus the `pending` of itself and of every range after it.
    pending: Devs,
    /// A push/pop range's path: the names of the open push/pop ranges up to itself, outermost
    /// first, in the names lists ([`Out::name_lists`]); `None` until a launch needs it, or
    /// once the ranges before it change.
    path: Option<Text>,
}

/// Spans per device: nearly always one, kept inline (an allocation per range costs more than
/// the rest of its handling).
#[derive(Default)]
struct Devs {
    first: Option<DevSpan>,
    more: Vec<DevSpan>,
}

impl Devs {
    /// Empty, keeping what `more` holds room for.
    fn clear(&mut self) {
        self.first = None;
        self.more.clear();
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn iter(&self) -> impl Iterator<Item = &DevSpan> {
        self.first.iter().chain(&self.more)
    }

    /// Take a GPU row into the span of its device.
    fn add(&mut self, device: i64, start: i64, end: i64) {
        self.add_span(&DevSpan {
            device,
            start,
            end,
            rows: 1,
        });
    }

    /// Take `n`'s rows into the span of its device.
    fn add_span(&mut self, n: &DevSpan) {
        let d = match self.first.as_mut().filter(|d| d.device == n.device) {
            Some(d) => Some(d),
            None => self.more.iter_mut().find(|d| d.device == n.device),
        };
        match d {
            Some(d) => {
                d.start = d.start.min(n.start);
                d.end = d.end.max(n.end);
                d.rows += n.rows;
            }
            None => {
                let d = DevSpan { ..*n };
                match self.first {
                    None => self.first = Some(d),
                    Some(_) => self.more.push(d),
                }
            }
        }
    }

    /// Take every span of `other`.
    fn merge(&mut self, other: &Devs) {
        for d in other.iter() {
            self.add_span(d);
        }
    }
}

impl Range {
    fn push_pop(&self) -> bool {
        self.event_type == PUSH_POP
    }

    /// The name a push/pop range gives the GPU work launched inside it.
    fn name(&self) -> Option<&Text> {
        self.name.as_ref().or(self.text.as_ref())
    }

    /// The order of the names around a kernel: by start, the longer first, then by rowid.
    fn key(&self) -> (i64, Reverse<i64>, i64) {
        (self.start, Reverse(self.end), self.rid)
    }
}

/// Move every pending row of a thread's open ranges into the `devs` of the ranges it counts
/// for (see [`Range::pending`]).
fn settle(open: &mut [Box<Range>]) {
    let mut after = Devs::default();
    for r in open.iter_mut().rev() {
        after.merge(&std::mem::take(&mut r.pending));
        r.devs.merge(&after);
    }
}

/// A GPU row with its launching call's thread and start.
struct Launch {
    tid: i64,
    src: i64,
    rid: i64,
    device: i64,
    start: i64,
    end: i64,
}

/// The sweep's state for one CPU thread.
#[derive(Default)]
struct Thread {
    /// The ranges containing the thread's latest event time, in [`Range::key`] order.
    #[allow(clippy::vec_box)] // moved as the list changes: see `Range`
    open: Vec<Box<Range>>,
    /// The earliest end of the open ranges (when there are any): nothing closes before it.
    min_end: i64,
    /// Whether some open range ends after the one before it in `open` (start/end ranges, or
    /// push/pop ranges that outlive their parent). Else the last one ends first, and the
    /// earliest end is found without visiting every open range.
    tangled: bool,
}

impl Thread {
    /// `min_end` and `tangled` anew from the open ranges.
    fn survey(&mut self) {
        self.min_end = i64::MAX;
        self.tangled = false;
        let mut before = i64::MAX;
        for r in &self.open {
            self.min_end = self.min_end.min(r.end);
            self.tangled |= r.end > before;
            before = r.end;
        }
    }
}

/// Where the sweep writes.
struct Out {
    /// Written as ranges end, which is in span order but for the spans of ranges that
    /// contain others.
    spans: NearlySorted<SpanRecord>,
    kernels: [Sorter<KernelRecord>; 3],
    spill: Spill,
    counts: Counts,
    /// The range names, numbered.
    texts: Names,
    /// Scratch for building the names.
    names: Vec<u8>,
    /// The lists of names built, numbered: a thread enters the same ranges again and again.
    name_lists: Names,
    /// The number of each list of names by the numbers of the list without its last name and
    /// of that name (see [`path_key`]), when both have one: a range's path is found from its
    /// parent's without building and hashing the string. At most [`Names::KEPT`].
    paths: HashMap<u64, u32, crate::model::FastHash>,
    /// Boxes of closed ranges, for the ranges still to come: most ranges launch little, and an
    /// allocation and a free each cost more than the rest of their handling.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Range>>,
}

impl Out {
    /// A range ends: write its spans, one per device.
    fn close(&mut self, r: &Range) -> Result<(), Stop> {
        if r.devs.is_empty() {
            return Ok(());
        }
        // The tables' rowid packs (nvtx rowid, device).
        if !(0..1 << 31).contains(&r.rid) {
            return Err(Stop::Abort(Abort::Unsupported));
        }
        self.counts.ranges_with_gpu_work += 1;
        for d in r.devs.iter() {
            if !(0..1 << 32).contains(&d.device) {
                return Err(Stop::Abort(Abort::Unsupported));
            }
            let span = Span {
                gpu_start: d.start,
                gpu_end: d.end,
                nvtx_rid: r.rid,
                device: d.device,
                gpu_rows: d.rows,
                global_tid: r.tid,
                event_type: r.event_type,
                domain: r.domain,
                text: None,
                text_no: None,
                name_id: r.text_id,
            };
            let record = span.record_with(r.text.as_ref());
            self.spans.push(record, &mut self.spill)?;
            self.counts.range_device_rows += 1;
        }
        Ok(())
    }

    /// Close the thread's ranges that end before `t`: no later event is inside them.
    fn prune(&mut self, th: &mut Thread, t: i64) -> Result<(), Stop> {
        if th.open.is_empty() || th.min_end >= t {
            return Ok(());
        }
        // The innermost ranges end first (push/pop ranges nest): each hands its pending rows to
        // the range before it.
        while let Some(mut r) = th.open.pop_if(|r| r.end < t) {
            let pending = std::mem::take(&mut r.pending);
            r.devs.merge(&pending);
            if let Some(prev) = th.open.last_mut() {
                prev.pending.merge(&pending);
            }
            self.close(&r)?;
            self.spare.push(r);
        }
        if th.tangled {
            th.survey();
        } else {
            th.min_end = th.open.last().map_or(i64::MAX, |r| r.end);
        }
        if th.min_end >= t {
            return Ok(());
        }
        // Ranges that do not nest end further in: settle every range's rows, then close them.
        settle(&mut th.open);
        let mut i = 0;
        while i < th.open.len() {
            if th.open[i].end < t {
                let r = th.open.remove(i);
                if r.push_pop() {
                    forget_paths(&mut th.open[i..]);
                }
                self.close(&r)?;
                self.spare.push(r);
            } else {
                i += 1;
            }
        }
        th.survey();
        Ok(())
    }

    /// A range starts on its thread.
    fn open(&mut self, threads: &mut Threads, r: Box<Range>) -> Result<(), Stop> {
        let th = threads.entry(r.tid).or_default();
        self.prune(th, r.start)?;
        th.min_end = if th.open.is_empty() {
            r.end
        } else {
            th.min_end.min(r.end)
        };
        let key = r.key();
        // Nearly always after every open range (they started earlier).
        let last = th.open.last().map(|o| (o.key(), o.end));
        if last.is_none_or(|(k, _)| k < key) {
            th.tangled |= last.is_some_and(|(_, end)| r.end > end);
            th.open.push(r);
            return Ok(());
        }
        let at = th.open.partition_point(|o| o.key() < key);
        // Not last: the pending rows of the ranges after it are not the new range's, and
        // their paths miss its name.
        settle(&mut th.open);
        if r.push_pop() {
            forget_paths(&mut th.open[at..]);
        }
        th.open.insert(at, r);
        th.survey();
        Ok(())
    }

    /// A GPU row's launching call starts at `astart`: the thread's open ranges contain it.
    fn launch(&mut self, threads: &mut Threads, astart: i64, l: Launch) -> Result<(), Stop> {
        let Some(th) = threads.get_mut(&l.tid) else {
            return Ok(());
        };
        self.prune(th, astart)?;
        if let Some(last) = th.open.last_mut() {
            last.pending.add(l.device, l.start, l.end);
        }
        if let Some(names) = self.path(&mut th.open)
            && let Some(k) = self.kernels.get_mut(l.src as usize)
        {
            let (no, text) = carry(&names);
            k.push(
                Named {
                    fields: [l.rid, no],
                    text,
                },
                &mut self.spill,
            )?;
            self.counts.annotated_gpu_rows += 1;
        }
        Ok(())
    }

    /// The names of the open push/pop ranges `open`, outermost first, joined with
    /// [`RANGE_SEPARATOR`] (the innermost one's path); `None` when there are none. Each range's
    /// path is built once, from its parent's.
    fn path(&mut self, open: &mut [Box<Range>]) -> Option<Text> {
        let last = open.iter().rposition(|r| r.push_pop())?;
        if let Some(p) = &open[last].path {
            return Some(p.clone());
        }
        // The ranges from the outermost without a path to the innermost.
        let mut first = last;
        let mut parent = None;
        for (i, r) in open[..last].iter().enumerate().rev() {
            if r.push_pop() {
                if r.path.is_some() {
                    parent = r.path.clone();
                    break;
                }
                first = i;
            }
        }
        for r in open[first..=last].iter_mut().filter(|r| r.push_pop()) {
            let path = self.extend(parent.as_ref(), r.name());
            r.path = Some(path.clone());
            parent = Some(path);
        }
        parent
    }

    /// The path `parent` (none for the outermost range) followed by `name`.
    fn extend(&mut self, parent: Option<&Text>, name: Option<&Text>) -> Text {
        let key = match (parent, name) {
            (None, Some(Text::No(n))) => Some(path_key(None, *n)),
            (Some(Text::No(p)), Some(Text::No(n))) => Some(path_key(Some(*p), *n)),
            _ => None,
        };
        if let Some(&no) = key.and_then(|k| self.paths.get(&k)) {
            return Text::No(no);
        }
        let names = &mut self.names;
        names.clear();
        if let Some(p) = parent {
            names.extend_from_slice(self.name_lists.bytes(p));
            names.extend_from_slice(RANGE_SEPARATOR.as_bytes());
        }
        names.extend_from_slice(name.map_or(&b""[..], |t| self.texts.bytes(t)));
        let path = self.name_lists.text(names);
        if let (Some(k), Text::No(no)) = (key, &path)
            && self.paths.len() < Names::KEPT
        {
            self.paths.insert(k, *no);
        }
        path
    }
}

/// The key of a path in [`Out::paths`]: its parent's number in the names lists (none for an
/// outermost range) and the number of its last name in the range names.
fn path_key(parent: Option<u32>, name: u32) -> u64 {
    (parent.map_or(0, |p| u64::from(p) + 1) << 32) | u64::from(name)
}

/// The ranges of `after` lost or gained a push/pop range before them: their paths are built
/// again when needed.
fn forget_paths(after: &mut [Box<Range>]) {
    for r in after {
        r.path = None;
    }
}

/// How far NVTX ranges may be out of start order before the sweep asks SQLite to sort them
/// (they are in start order in real exports).
const NVTX_WINDOW: usize = 64;

/// The sweep: NVTX ranges are pushed in the table's order (start order, give or take
/// [`NVTX_WINDOW`] rows), launches are pulled in start order; both are taken in time order,
/// keeping per thread the ranges open at the current time. A GPU row's launch is inside exactly
/// the open ranges of its thread, which take its span; a range's spans are written when the
/// sweep passes its end. At equal times, ranges open before calls (a call at a range's start is
/// inside it).
struct Sweep<'l> {
    out: Out,
    launches: crate::runs::Merge<'l, [i64; 7]>,
    next_launch: Option<[i64; 7]>,
    nvtx: Window<Box<Range>>,
    threads: Threads,
}

impl<'l> Sweep<'l> {
    fn new(launches: &'l Sorted<[i64; 7]>) -> Result<Sweep<'l>> {
        let mut launches = launches.iter()?;
        let next_launch = launches.next_record()?;
        Ok(Sweep {
            out: Out {
                spans: NearlySorted::default(),
                kernels: Default::default(),
                spill: Spill::default(),
                counts: Counts::default(),
                texts: Names::default(),
                names: Vec::new(),
                name_lists: Names::default(),
                paths: HashMap::default(),
                spare: Vec::new(),
            },
            launches,
            next_launch,
            nvtx: Window::new(),
            threads: Threads::default(),
        })
    }

    /// Take the launches that start before `t` (all of them for `None`).
    fn launches_until(&mut self, t: Option<i64>) -> Result<(), Stop> {
        while let Some([astart, tid, src, rid, device, start, end]) = self.next_launch {
            if t.is_some_and(|t| astart >= t) {
                break;
            }
            let l = Launch {
                tid,
                src,
                rid,
                device,
                start,
                end,
            };
            self.out.launch(&mut self.threads, astart, l)?;
            self.next_launch = self.launches.next_record()?;
        }
        Ok(())
    }

    /// The next row of the table; the number of its text when it is a range the sweep takes
    /// and its text has one.
    fn row(
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

    /// The next range of the table.
    fn range(&mut self, r: Box<Range>) -> Result<(), Stop> {
        if !self.nvtx.push(r.start, r) {
            return Err(Stop::Abort(Abort::NvtxDisorder));
        }
        if self.nvtx.buf.len() > NVTX_WINDOW {
            self.open_next()?;
        }
        Ok(())
    }

    /// Open the earliest buffered range, after the launches before it.
    fn open_next(&mut self) -> Result<(), Stop> {
        let (start, r) = self.nvtx.pop().expect("a buffered range");
        self.launches_until(Some(start))?;
        self.out.open(&mut self.threads, r)
    }

    fn finish(mut self) -> Result<Projected, Stop> {
        while !self.nvtx.buf.is_empty() {
            self.open_next()?;
        }
        self.launches_until(None)?;
        for mut th in std::mem::take(&mut self.threads).into_values() {
            settle(&mut th.open);
            for r in th.open {
                self.out.close(&r)?;
            }
        }
        let Out {
            spans,
            kernels,
            spill,
            counts,
            texts,
            name_lists,
            ..
        } = self.out;
        Ok(Projected::sorted(
            spans, texts, kernels, name_lists, counts, spill,
        )?)
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
struct Registered<'c> {
    stmt: rusqlite::Statement<'c>,
    cache: HashMap<i64, Option<Text>>,
}

impl<'c> Registered<'c> {
    const CACHED: usize = 4096;

    /// `None` when the export has no usable `StringIds` (then names never come from it);
    /// `Err(Unsupported)` when `StringIds.id` is not its unique key (the SQL definition's join
    /// would repeat the range).
    fn new(conn: &'c Connection, cols: &RangeCols) -> Result<Option<Registered<'c>>, Stop> {
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
            stmt: conn.prepare("SELECT value FROM main.StringIds WHERE id = ?1")?,
            cache: HashMap::new(),
        }))
    }

    /// The registered string of `id` (`None`: no row, or NULL) in `texts`; a value that is not
    /// text is left to the SQL definition.
    fn get(&mut self, id: i64, texts: &mut Names) -> Result<Option<Text>, Stop> {
        if let Some(v) = self.cache.get(&id) {
            return Ok(v.clone());
        }
        let mut rows = self.stmt.query([id])?;
        let v = match rows.next()? {
            None => None,
            Some(r) => match r.get_ref(0)? {
                ValueRef::Text(t) => Some(texts.text(t)),
                ValueRef::Null => None,
                _ => return Err(Stop::Abort(Abort::Unsupported)),
            },
        };
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
    pub fn of(r: &'a impl crate::Fetch, c: &RangeColumns) -> rusqlite::Result<RangeValues<'a>> {
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
    if end < start || start < -super::MAX_TIME || end > super::MAX_TIME {
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
        let registered = match Registered::new(conn, &RangeCols::new(schema)) {
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

    /// The next row of the table, in rowid order; the number its `text` got, when it is a
    /// range with a numbered text (the reader gives the writer that number: the text is then
    /// hashed once per row, here, not again by the writer).
    pub fn row(&mut self, v: &RangeValues<'_>) -> Result<Option<TextNo>> {
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

    /// Every row of the table has been fed.
    pub fn complete(&mut self) {
        self.complete = true;
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

/// The sweep over the table read on its own (sorted by SQLite when `nvtx_sorted`).
fn sweep(
    conn: &Connection,
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
    let mut registered = Registered::new(conn, cols)?;
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

/// A row for an [`Inserter`].
trait BindRow {
    const COLUMNS: usize;
    /// Bind the row's values to parameters `first..first + COLUMNS`.
    fn bind(&self, st: &mut rusqlite::Statement<'_>, first: usize) -> rusqlite::Result<()>;
}

/// A text or NULL.
fn text_or_null<'a>(t: &'a Option<Cow<'_, str>>) -> ToSqlOutput<'a> {
    ToSqlOutput::Borrowed(
        t.as_deref()
            .map_or(ValueRef::Null, |t| ValueRef::Text(t.as_bytes())),
    )
}

impl BindRow for Span<'_> {
    const COLUMNS: usize = 11;
    fn bind(&self, st: &mut rusqlite::Statement<'_>, i: usize) -> rusqlite::Result<()> {
        st.raw_bind_parameter(i, self.nvtx_rid << 32 | self.device)?;
        st.raw_bind_parameter(i + 1, self.nvtx_rid)?;
        st.raw_bind_parameter(i + 2, self.event_type)?;
        st.raw_bind_parameter(i + 3, self.global_tid)?;
        st.raw_bind_parameter(i + 4, self.domain)?;
        st.raw_bind_parameter(i + 5, self.device)?;
        st.raw_bind_parameter(i + 6, self.gpu_start)?;
        st.raw_bind_parameter(i + 7, self.gpu_end)?;
        st.raw_bind_parameter(i + 8, self.gpu_rows)?;
        st.raw_bind_parameter(i + 9, text_or_null(&self.text))?;
        st.raw_bind_parameter(i + 10, self.name_id)
    }
}

impl BindRow for (i64, Named<1>) {
    const COLUMNS: usize = 3;
    fn bind(&self, st: &mut rusqlite::Statement<'_>, i: usize) -> rusqlite::Result<()> {
        st.raw_bind_parameter(i, self.0)?;
        st.raw_bind_parameter(i + 1, self.1.fields[0])?;
        let text = self.1.text.as_deref().unwrap_or_default();
        st.raw_bind_parameter(i + 2, ToSqlOutput::Borrowed(ValueRef::Text(text)))
    }
}

/// Rows per INSERT statement: a statement per row costs more than its row.
const BATCH: usize = 32;

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

/// Puts a nearly sorted stream in key order with a buffer, stable for equal keys; `push`
/// reports an item that arrives after a later key has already left (the stream is further out
/// of order than the buffer allows). In order, each item costs O(1).
struct Window<T> {
    buf: VecDeque<(i64, T)>,
    last: i64,
}

impl<T> Window<T> {
    fn new() -> Window<T> {
        Window {
            buf: VecDeque::new(),
            last: i64::MIN,
        }
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

    fn pop(&mut self) -> Option<(i64, T)> {
        let b = self.buf.pop_front()?;
        self.last = b.0;
        Some(b)
    }
}

type Threads = HashMap<i64, Thread, crate::model::FastHash>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal strings get one number and read back as themselves; the dictionary stops
    /// numbering at its bounds, and the strings it then hands back are the strings given.
    #[test]
    fn names_number_once_and_stay_bounded() {
        let mut names = Names::default();
        let texts: Vec<Vec<u8>> = (0..1000)
            .map(|i| format!("aten::op, seq = {i}").into_bytes())
            .chain([Vec::new(), vec![0xff, 0xfe]])
            .collect();
        let first: Vec<Text> = texts.iter().map(|t| names.text(t)).collect();
        for (t, n) in texts.iter().zip(&first) {
            let Text::No(no) = n else {
                panic!("not numbered")
            };
            assert!(matches!(names.text(t), Text::No(again) if again == *no));
            assert_eq!(names.bytes(n), &t[..]);
        }
        // Handed over as UTF-8, each in one buffer, invalid bytes replaced.
        let strings = names.into_strings();
        assert_eq!(strings.get(7), "aten::op, seq = 7");
        assert_eq!(strings.get(1000), "");
        assert_eq!(strings.get(1001), "\u{fffd}\u{fffd}");

        let mut full = Names::default();
        let big = vec![b'x'; Names::BYTES / 2];
        assert!(matches!(full.text(&big), Text::No(0)));
        let mut other = big.clone();
        other[0] = b'y';
        assert!(matches!(full.text(&other), Text::No(1)));
        other[0] = b'z';
        let over = full.text(&other);
        assert!(matches!(&over, Text::Own(t) if t[..] == other[..]));
        assert_eq!(full.bytes(&over), &other[..]);
        assert!(matches!(full.text(&big), Text::No(0)), "still found");
    }
}
