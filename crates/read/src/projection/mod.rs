//! NVTX projected onto the GPU: which GPU work each NVTX range launched, and which NVTX ranges
//! enclose the launch of each GPU row.
//!
//! A GPU row (kernel, memcpy, memset) is launched by the CUDA API call (runtime or driver) that
//! shares its `correlationId` within one process. That call runs on a CPU thread at some time; an
//! NVTX range on the same thread whose interval contains the call's start encloses the launch.
//!
//! The result ([`Projected`]) is two sorted streams, kept with bounded memory by
//! `crate::runs` (runs spill to a scratch directory past a few MB):
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
//! ([`Projection`](tables::Projection), attached under the schema [`PROJ_DB`]):
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
//! | `src`    | 0 kernel, 1 memcpy, 2 memset (the numbering of `crate::flows`) |
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
//! `crate::flows::prepare` links each GPU row to its launching call in the same
//! sort-merge join as the flow arrows, and hands over the links sorted by the call's start
//! (`Launches`). Then one sweep in time order over two streams, the NVTX ranges by start and
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

pub mod feed;
mod names;
mod sql;
mod sweep;
pub mod tables;

use self::names::{Names, Strings, Text, carried_text, carry, lossy};
use super::names::nvtx_type::{PUSH_POP, START_END};
use crate::names::NVTX;
use crate::runs::{Lookup, Named, NearlySorted, Sorted, Sorter, Spill};
use crate::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::model::TextNo;
use std::borrow::Cow;
use std::sync::Arc;

/// The schema name [`Projection::attach`](tables::Projection::attach) attaches the scratch database under.
pub const PROJ_DB: &str = "proj";
/// Table: one row per (NVTX range, device) with the span of the GPU work it launched.
pub const NVTX_GPU: &str = "nvtx_gpu";
/// Table: for each GPU row, the push/pop ranges enclosing its launch.
pub const KERNEL_NVTX: &str = "kernel_nvtx";
/// The separator between range names in `kernel_nvtx.ranges`.
pub const RANGE_SEPARATOR: &str = " > ";

/// `src` numbers of the GPU tables, as in `crate::flows`.
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
    /// slices of the same range carry (see `Feed::row`).
    pub text_no: Option<TextNo>,
    /// The range's `textId` (`None` when NULL).
    pub name_id: Option<i64>,
}

/// Span record fields: `[gpu_start, -gpu_end, nvtx rowid, device, gpu rows, thread, domain,
/// name id, carried]` (the sort key first). `carried` holds the flags in its low
/// [`FLAG_BITS`] bits and above them, plus one, the text's number in [`Names`] as
/// [`names::carry`] gives it (-1 when the record carries the string itself, or has none).
type SpanRecord = Named<9>;
const HAS_TEXT: i64 = 1;
const HAS_NAME_ID: i64 = 2;
/// Flag: a start/end range (else push/pop; the sweep and the SQL definition take no others).
const IS_START_END: i64 = 4;
const FLAG_BITS: u32 = 3;

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
        let flags = flag(text.is_some(), HAS_TEXT)
            | flag(self.name_id.is_some(), HAS_NAME_ID)
            | flag(self.event_type == START_END, IS_START_END);
        let (no, text) = text.map_or((-1, None), carry);
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
                (no + 1) << FLAG_BITS | flags,
            ],
            text,
        }
    }

    fn of(r: SpanRecord, names: &Strings) -> Span<'_> {
        let f = &r.fields;
        let carried = f[8];
        let (text_no, text) = if carried & HAS_TEXT == 0 {
            (None, None)
        } else {
            let no = (carried >> FLAG_BITS) - 1;
            let (text_no, text) = carried_text(no, r.text.as_deref(), names);
            (text_no, Some(text))
        };
        Span {
            gpu_start: f[0],
            gpu_end: f[1].wrapping_neg(),
            nvtx_rid: f[2],
            device: f[3],
            gpu_rows: f[4],
            global_tid: f[5],
            event_type: if carried & IS_START_END != 0 {
                START_END
            } else {
                PUSH_POP
            },
            domain: f[6],
            name_id: (carried & HAS_NAME_ID != 0).then_some(f[7]),
            text,
            text_no,
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
}

fn nvtx_usable(schema: &Schema) -> bool {
    schema.has_columns(NVTX, &["start", "end", "eventType", "globalTid"])
        && schema.rowid(NVTX) == Some("rowid")
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
