//! The sweep: NVTX ranges and launches taken in time order, each launch inside the ranges
//! open on its thread.

use super::names::{Names, Text, carry};
use super::{Abort, Counts, KernelRecord, Projected, RANGE_SEPARATOR, Span, SpanRecord, Stop};
use crate::names::nvtx_type::PUSH_POP;
use crate::order::Reorder;
use crate::runs::{Named, NearlySorted, Sorted, Sorter, Spill};
use anyhow::Result;
use std::cmp::Reverse;
use std::collections::HashMap;

/// The span of the GPU rows an open range has taken on one device.
pub(super) struct DevSpan {
    device: i64,
    start: i64,
    end: i64,
    rows: i64,
}

/// An NVTX range, open while the sweep is within it. Boxed where the sweep keeps it: it is
/// large, and moving it between the window, a thread's open list and `close` cost more in
/// copies than one allocation.
#[derive(Default)]
pub(super) struct Range {
    pub(super) rid: i64,
    pub(super) event_type: i64,
    pub(super) tid: i64,
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) domain: i64,
    /// `text`, in the sweep's range names ([`Out::texts`]).
    pub(super) text: Option<Text>,
    pub(super) text_id: Option<i64>,
    /// A push/pop range's name when it is not `text` (a registered string, the placeholder),
    /// in the same names.
    pub(super) name: Option<Text>,
    /// The GPU rows launched inside the range, per device: those settled so far (see
    /// `pending`).
    pub(super) devs: Devs,
    /// GPU rows launched while this range was the last of its thread's open list (or handed
    /// down by the ranges after it as they closed): they count for this range and for every
    /// range before it in the list. A launch then costs one update, not one per open range;
    /// a range's rows are `devs` plus the `pending` of itself and of every range after it.
    pub(super) pending: Devs,
    /// A push/pop range's path: the names of the open push/pop ranges up to itself, outermost
    /// first, in the names lists ([`Out::name_lists`]); `None` until a launch needs it, or
    /// once the ranges before it change.
    pub(super) path: Option<Text>,
}

/// Spans per device: nearly always one, kept inline (an allocation per range costs more than
/// the rest of its handling).
#[derive(Default)]
pub(super) struct Devs {
    first: Option<DevSpan>,
    more: Vec<DevSpan>,
}

impl Devs {
    /// Empty, keeping what `more` holds room for.
    pub(super) fn clear(&mut self) {
        self.first = None;
        self.more.clear();
    }

    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &DevSpan> {
        self.first.iter().chain(&self.more)
    }

    /// Take a GPU row into the span of its device.
    pub(super) fn add(&mut self, device: i64, start: i64, end: i64) {
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
    pub(super) fn merge(&mut self, other: &Devs) {
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
    pub(super) fn name(&self) -> Option<&Text> {
        self.name.as_ref().or(self.text.as_ref())
    }

    /// The order of the names around a kernel: by start, the longer first, then by rowid.
    pub(super) fn key(&self) -> (i64, Reverse<i64>, i64) {
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
pub(super) struct Launch {
    tid: i64,
    src: i64,
    rid: i64,
    device: i64,
    start: i64,
    end: i64,
}

/// The sweep's state for one CPU thread.
#[derive(Default)]
pub(super) struct Thread {
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
pub(super) struct Out {
    /// Written as ranges end, which is in span order but for the spans of ranges that
    /// contain others.
    spans: NearlySorted<SpanRecord>,
    kernels: [Sorter<KernelRecord>; 3],
    spill: Spill,
    counts: Counts,
    /// The range names, numbered.
    pub(super) texts: Names,
    /// Scratch for building the names.
    names: Vec<u8>,
    /// The lists of names built, numbered: a thread enters the same ranges again and again.
    name_lists: Names,
    /// The number of each list of names by the numbers of the list without its last name and
    /// of that name (see [`path_key`]), when both have one: a range's path is found from its
    /// parent's without building and hashing the string. At most [`Names::KEPT`].
    paths: HashMap<u64, u32, nsys_perfetto_model::model::FastHash>,
    /// Boxes of closed ranges, for the ranges still to come: most ranges launch little, and an
    /// allocation and a free each cost more than the rest of their handling.
    #[allow(clippy::vec_box)]
    pub(super) spare: Vec<Box<Range>>,
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
    pub(super) fn open(&mut self, threads: &mut Threads, r: Box<Range>) -> Result<(), Stop> {
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
    pub(super) fn launch(
        &mut self,
        threads: &mut Threads,
        astart: i64,
        l: Launch,
    ) -> Result<(), Stop> {
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
    pub(super) fn path(&mut self, open: &mut [Box<Range>]) -> Option<Text> {
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
    pub(super) fn extend(&mut self, parent: Option<&Text>, name: Option<&Text>) -> Text {
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
pub(super) struct Sweep<'l> {
    pub(super) out: Out,
    launches: crate::runs::Merge<'l, [i64; 7]>,
    next_launch: Option<[i64; 7]>,
    /// The ranges read and not yet opened, by start.
    nvtx: Reorder<Box<Range>, i64>,
    /// The start of the last range opened: a range read after that which starts before it is
    /// further out of order than the window allows.
    opened: i64,
    threads: Threads,
}

impl<'l> Sweep<'l> {
    pub(super) fn new(launches: &'l Sorted<[i64; 7]>) -> Result<Sweep<'l>> {
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
            nvtx: Reorder::new(NVTX_WINDOW),
            opened: i64::MIN,
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

    /// The next range of the table.
    pub(super) fn range(&mut self, r: Box<Range>) -> Result<(), Stop> {
        if r.start < self.opened {
            return Err(Stop::Abort(Abort::NvtxDisorder));
        }
        match self.nvtx.push(r.start, r) {
            Some((start, r)) => self.open(start, r),
            None => Ok(()),
        }
    }

    /// Open the earliest range read, which starts at `start`, after the launches before it.
    fn open(&mut self, start: i64, r: Box<Range>) -> Result<(), Stop> {
        self.opened = start;
        self.launches_until(Some(start))?;
        self.out.open(&mut self.threads, r)
    }

    pub(super) fn finish(mut self) -> Result<Projected, Stop> {
        while let Some((start, r)) = self.nvtx.pop() {
            self.open(start, r)?;
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

pub(super) type Threads = HashMap<i64, Thread, nsys_perfetto_model::model::FastHash>;
