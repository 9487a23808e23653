//! An external sort for small records, with bounded memory: records are sorted in chunks (at
//! most [`RUN_RECORDS`] records or [`RUN_BYTES`] bytes); a chunk that fills is written to a
//! scratch file as a sorted run, and reading merges the runs. Inputs that fit one chunk never
//! touch the disk.
//!
//! Used where a join of two large tables would otherwise build SQLite b-trees (the flow links,
//! the NVTX projection: sorting nearly sorted integer keys costs far less than inserting them
//! into an index). Records are integer tuples (`[i64; N]`) or integer tuples carrying a string
//! ([`Named`]).

mod codec;

use crate::order::{KMerge, Slab};
use anyhow::{Context, Result};
use codec::{RunWriter, bad_run, read_fields, write_fields};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;

/// Records per in-memory chunk: 64 Ki records of at most 8 integers is 4 MB.
pub const RUN_RECORDS: usize = 1 << 16;
/// Bytes per in-memory chunk, for records that carry strings.
pub const RUN_BYTES: usize = 8 << 20;

/// A record the sort handles: ordered, written to and read from a run file.
pub trait Record: Ord + Clone {
    /// The first field: what [`Lookup`] matches on.
    fn key(&self) -> i64;
    /// Bytes the record adds in memory (the chunk budget), after `prev`.
    fn size(&self, prev: Option<&Self>) -> usize;
    /// Write the record, which follows `prev` in its run.
    fn write_to(&self, prev: Option<&Self>, w: &mut RunWriter) -> std::io::Result<()>;
    /// What reading a run keeps between records.
    type ReadState: Default;
    /// The next record, `None` at the end of the run.
    fn read_from(
        r: &mut impl BufRead,
        state: &mut Self::ReadState,
    ) -> std::io::Result<Option<Self>>;
}

impl<const N: usize> Record for [i64; N] {
    fn key(&self) -> i64 {
        self[0]
    }
    fn size(&self, _: Option<&Self>) -> usize {
        N * 8
    }
    fn write_to(&self, prev: Option<&Self>, w: &mut RunWriter) -> std::io::Result<()> {
        write_fields(self, prev, 0, w)
    }
    /// The previous record.
    type ReadState = Fields<N>;
    fn read_from(r: &mut impl BufRead, prev: &mut Fields<N>) -> std::io::Result<Option<Self>> {
        Ok(read_fields(r, &mut prev.0)?.map(|_| prev.0))
    }
}

/// The fields of a run's previous record, as reading keeps them (zeros before the first).
pub struct Fields<const N: usize>([i64; N]);

impl<const N: usize> Default for Fields<N> {
    fn default() -> Self {
        Fields([0; N])
    }
}

/// Integer fields with a string, ordered by the fields first. The string is shared: records
/// that carry the same one (the NVTX ranges around many kernels) cost one allocation. Records
/// whose fields say it all (a string by number) carry none, and cost no reference count.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct Named<const N: usize> {
    pub fields: [i64; N],
    pub text: Option<Arc<[u8]>>,
}

/// How a [`Named`] record carries its string (the tag in its header): none, the previous
/// record's, or its own (its length as 8 bytes, then its bytes).
const NO_TEXT: u32 = 0;
const SAME_TEXT: u32 = 1;
const OWN_TEXT: u32 = 2;

impl<const N: usize> Named<N> {
    /// Whether this record and `prev` both carry a string, the same one (or, `by_value`, an
    /// equal one).
    fn shares_text(&self, prev: Option<&Self>, by_value: bool) -> bool {
        match (prev.and_then(|p| p.text.as_ref()), &self.text) {
            (Some(p), Some(t)) => Arc::ptr_eq(p, t) || (by_value && p == t),
            _ => false,
        }
    }
}

impl<const N: usize> Record for Named<N> {
    fn key(&self) -> i64 {
        self.fields[0]
    }
    fn size(&self, prev: Option<&Self>) -> usize {
        let shared = self.shares_text(prev, false);
        let own = self
            .text
            .as_ref()
            .filter(|_| !shared)
            .map_or(0, |t| t.len());
        N * 8 + 16 + own
    }
    /// A string equal to the previous record's is written as `SAME_TEXT` alone.
    fn write_to(&self, prev: Option<&Self>, w: &mut RunWriter) -> std::io::Result<()> {
        let prev_fields = prev.map(|p| &p.fields);
        let Some(text) = &self.text else {
            return write_fields(&self.fields, prev_fields, NO_TEXT, w);
        };
        if self.shares_text(prev, true) {
            return write_fields(&self.fields, prev_fields, SAME_TEXT, w);
        }
        write_fields(&self.fields, prev_fields, OWN_TEXT, w)?;
        w.write_all(&(text.len() as u64).to_le_bytes())?;
        w.write_all(text)
    }
    /// The previous record's fields, the strings read last and a buffer: neighbours in a run
    /// often carry the same string (kernels launched in the same ranges, nested ranges'
    /// spans), which is then shared, not allocated again.
    type ReadState = (Fields<N>, Recent, Vec<u8>);
    fn read_from(
        r: &mut impl BufRead,
        (prev, recent, buf): &mut Self::ReadState,
    ) -> std::io::Result<Option<Self>> {
        let Some(tag) = read_fields(r, &mut prev.0)? else {
            return Ok(None);
        };
        let text = match tag {
            NO_TEXT => None,
            SAME_TEXT => Some(recent.last().ok_or_else(bad_run)?),
            OWN_TEXT => {
                let mut len = [0u8; 8];
                r.read_exact(&mut len)?;
                let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| bad_run())?;
                buf.resize(len, 0);
                r.read_exact(buf)?;
                Some(recent.get(buf))
            }
            _ => return Err(bad_run()),
        };
        Ok(Some(Named {
            fields: prev.0,
            text,
        }))
    }
}

/// The last few distinct strings a run read, most recent first.
#[derive(Default)]
pub struct Recent(Vec<Arc<[u8]>>);

impl Recent {
    const KEPT: usize = 8;

    fn last(&self) -> Option<Arc<[u8]>> {
        self.0.first().cloned()
    }

    /// `t`, shared with a recent string equal to it.
    fn get(&mut self, t: &[u8]) -> Arc<[u8]> {
        let a = match self.0.iter().position(|a| a[..] == *t) {
            Some(i) => self.0.remove(i),
            None => {
                self.0.truncate(Recent::KEPT - 1);
                Arc::from(t)
            }
        };
        self.0.insert(0, a.clone());
        a
    }
}

/// The chunk size: [`RUN_RECORDS`], or `NSYS_PERFETTO_RUN_RECORDS` (at least 16) so that tests
/// reach the spilling paths with small inputs.
fn run_records() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("NSYS_PERFETTO_RUN_RECORDS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(RUN_RECORDS, |n| n.max(16))
    })
}

/// Where runs are written: a scratch directory created on the first spill and removed (also on
/// interrupt) when the last user is dropped.
#[derive(Default)]
pub struct Spill {
    dir: Option<tempfile::TempDir>,
    next: usize,
}

impl Spill {
    fn file(&mut self) -> Result<(PathBuf, File)> {
        if self.dir.is_none() {
            self.dir = Some(crate::scratch::scratch_dir("nsys-perfetto-")?);
        }
        let dir = self.dir.as_ref().expect("created above");
        self.next += 1;
        let path = dir.path().join(format!("run{}", self.next));
        let file = File::create(&path)
            .with_context(|| format!("cannot write scratch file {}", path.display()))?;
        Ok((path, file))
    }
}

/// Collects records; [`Sorter::finish`] sorts them.
///
/// Most streams arrive already in order (a join walked in key order, rows in their table's
/// order): a chunk keeps the records pushed in order as they are, and sorts only those that
/// came late (before the last one kept), merging the two as it is written; a chunk that
/// starts at or after the last record written goes on the end of the last run rather than
/// into a new one, so such a stream is one run read straight through, with no merge. Once a
/// run is on disk, a record that follows its last one is written straight on its end: a long
/// stream in order passes through the run's write buffer alone, not through a chunk of
/// megabytes that every record would cost a cache miss to write, sort and read back.
pub struct Sorter<R: Record> {
    /// Records in the order pushed, each at or after the one before.
    chunk: Vec<R>,
    /// Records of the chunk that came before the last of `chunk`.
    late: Vec<R>,
    /// What the chunk holds (both parts), in bytes.
    bytes: usize,
    runs: Vec<PathBuf>,
    /// The last record of the last run.
    last_written: Option<R>,
    /// The last run, still open for writing.
    tail: Option<RunWriter>,
}

impl<R: Record> Default for Sorter<R> {
    fn default() -> Self {
        Sorter {
            chunk: Vec::new(),
            late: Vec::new(),
            bytes: 0,
            runs: Vec::new(),
            last_written: None,
            tail: None,
        }
    }
}

impl<R: Record> Sorter<R> {
    pub fn push(&mut self, rec: R, spill: &mut Spill) -> Result<()> {
        if let Some(w) = self.tail.as_mut()
            && let Some(l) = self.last_written.as_ref().filter(|l| **l <= rec)
        {
            rec.write_to(Some(l), w)
                .with_context(|| cannot_write(self.runs.last()))?;
            self.last_written = Some(rec);
            return Ok(());
        }
        let last = self.chunk.last();
        self.bytes += rec.size(last);
        if last.is_none_or(|l| *l <= rec) {
            self.chunk.push(rec);
        } else {
            self.late.push(rec);
        }
        if self.chunk.len() + self.late.len() >= run_records() || self.bytes >= RUN_BYTES {
            self.write_run(spill)?;
        }
        Ok(())
    }

    /// The order of the late records: `None` when sorted in place, else their places.
    fn sort_late(&mut self) -> Option<Vec<u32>> {
        // Large records are not moved to sort them: their (first field, place) pairs are, and
        // the records are taken in that order.
        if std::mem::size_of::<R>() <= 32 {
            self.late.sort_unstable();
            return None;
        }
        let late = &self.late;
        let mut keyed: Vec<(i64, u32)> =
            (0..late.len()).map(|i| (late[i].key(), i as u32)).collect();
        keyed.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| late[a.1 as usize].cmp(&late[b.1 as usize]))
        });
        Some(keyed.into_iter().map(|(_, i)| i).collect())
    }

    fn write_run(&mut self, spill: &mut Spill) -> Result<()> {
        let order = self.sort_late();
        let late = &self.late;
        let mut late = (0..late.len()).map(|k| &late[order.as_ref().map_or(k, |o| o[k] as usize)]);
        let mut next_late = late.next();
        let mut chunk = self.chunk.iter();
        let mut next_kept = chunk.next();
        // The chunk's records in order: the kept and the late ones merged.
        let mut next = || match (next_kept, next_late) {
            (Some(k), Some(l)) if l < k => {
                next_late = late.next();
                Some(l)
            }
            (Some(k), _) => {
                next_kept = chunk.next();
                Some(k)
            }
            (None, l) => {
                next_late = late.next();
                l
            }
        };
        let Some(first) = next() else {
            return Ok(());
        };
        // After the last run's last record: the chunk continues that run.
        let continues = self.last_written.as_ref().is_some_and(|l| l <= first);
        let (mut w, mut prev) = match self.tail.take() {
            Some(w) if continues => (w, self.last_written.as_ref()),
            old => {
                flush(old, self.runs.last())?;
                let (path, file) = spill.file()?;
                self.runs.push(path);
                (RunWriter::new(file), None)
            }
        };
        let mut rec = first;
        loop {
            rec.write_to(prev, &mut w)
                .with_context(|| cannot_write(self.runs.last()))?;
            prev = Some(rec);
            match next() {
                Some(r) => rec = r,
                None => break,
            }
        }
        self.last_written = Some(rec.clone());
        self.tail = Some(w);
        self.chunk.clear();
        self.late.clear();
        self.bytes = 0;
        Ok(())
    }

    pub fn finish(mut self, spill: &mut Spill) -> Result<Sorted<R>> {
        if self.runs.is_empty() {
            return Ok(self.kept_in_memory());
        }
        // A last chunk that cannot go on the end of the one run there is (the few records
        // that came too late for a nearly sorted window) stays in memory, merged with the run
        // as it is read: as a second run, every record of the first would pass through the
        // heap of a merge.
        let continues = self.last_written.as_ref().is_some_and(|l| {
            self.chunk.first().is_none_or(|f| l <= f) && self.late.iter().all(|r| l <= r)
        });
        if self.runs.len() == 1 && !continues {
            flush(self.tail.take(), self.runs.last())?;
            return Ok(self.kept_in_memory());
        }
        if !self.chunk.is_empty() {
            self.write_run(spill)?;
        }
        flush(self.tail.take(), self.runs.last())?;
        Ok(Sorted {
            memory: Vec::new(),
            late: Vec::new(),
            runs: std::mem::take(&mut self.runs),
        })
    }

    /// The result with the last chunk kept in memory (its late records sorted), beside the
    /// runs on disk, if any.
    fn kept_in_memory(mut self) -> Sorted<R> {
        self.late.sort_unstable();
        self.chunk.shrink_to_fit();
        self.late.shrink_to_fit();
        Sorted {
            memory: self.chunk,
            late: self.late,
            runs: std::mem::take(&mut self.runs),
        }
    }
}

/// Write out what a run's buffer holds.
fn flush(w: Option<RunWriter>, path: Option<&PathBuf>) -> Result<()> {
    if let Some(mut w) = w {
        w.flush().with_context(|| cannot_write(path))?;
    }
    Ok(())
}

fn cannot_write(path: Option<&PathBuf>) -> String {
    match path {
        Some(p) => format!("cannot write scratch file {}", p.display()),
        None => "cannot write a scratch file".to_string(),
    }
}

/// A [`Sorter`] for streams that are nearly in order but for records held back a while (the
/// NVTX-on-GPU spans: a range's span is known when the range ends, after the spans of the
/// ranges inside it, which sort after it). Records pass through a small window first, kept
/// sorted, and nearly all leave it in order: past the first chunk they go straight on the end
/// of one run (see [`Sorter`]). A record that comes late is inserted where it belongs: it
/// belongs just before the few records that came after it (a range's span before those of
/// the ranges inside it), and what moves to make room is their slot numbers, not the records.
/// The window orders by the whole record, as the runs do.
pub struct NearlySorted<R: Record> {
    held: Slab<R>,
    /// The slots of the records held, in record order.
    order: VecDeque<u32>,
    sorter: Sorter<R>,
}

impl<R: Record> Default for NearlySorted<R> {
    fn default() -> Self {
        NearlySorted {
            held: Slab::default(),
            order: VecDeque::with_capacity(Self::WINDOW + 1),
            sorter: Sorter::default(),
        }
    }
}

impl<R: Record> NearlySorted<R> {
    /// Records held in the window: real exports put few spans further out of order than this
    /// (docs/performance.md has the counts), and those few go to the sorted runs.
    const WINDOW: usize = 256;

    pub fn push(&mut self, rec: R, spill: &mut Spill) -> Result<()> {
        let held = &self.held;
        if self.order.back().is_none_or(|&s| *held.get(s) <= rec) {
            let slot = self.held.put(rec);
            self.order.push_back(slot);
        } else {
            let at = self.order.partition_point(|&s| *held.get(s) <= rec);
            let slot = self.held.put(rec);
            self.order.insert(at, slot);
        }
        if self.order.len() > Self::WINDOW {
            self.release(spill)?;
        }
        Ok(())
    }

    /// Move the least record held to the sorter.
    fn release(&mut self, spill: &mut Spill) -> Result<()> {
        match self.order.pop_front() {
            Some(s) => self.sorter.push(self.held.take(s), spill),
            None => Ok(()),
        }
    }

    pub fn finish(mut self, spill: &mut Spill) -> Result<Sorted<R>> {
        while !self.order.is_empty() {
            self.release(spill)?;
        }
        self.sorter.finish(spill)
    }
}

/// Sorted records, in memory or as runs on disk; read them in order with [`Sorted::iter`] (any
/// number of times, from any thread).
pub struct Sorted<R: Record> {
    /// Records held in memory, in two sorted parts to merge (see [`Sorter`]); with no runs,
    /// or with one.
    memory: Vec<R>,
    late: Vec<R>,
    runs: Vec<PathBuf>,
}

impl<R: Record> Sorted<R> {
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.late.is_empty() && self.runs.is_empty()
    }

    pub fn iter(&self) -> Result<Merge<'_, R>> {
        let mut readers = Vec::with_capacity(self.runs.len());
        for p in &self.runs {
            let f = File::open(p)
                .with_context(|| format!("cannot read scratch file {}", p.display()))?;
            readers.push((
                BufReader::with_capacity(1 << 15, f),
                R::ReadState::default(),
            ));
        }
        let mut m = Merge {
            memory: self.memory.iter(),
            late: self.late.iter(),
            held: None,
            readers,
            runs: KMerge::new(Vec::new(), R::cmp),
        };
        // One run (an in-order stream, the common case): read straight through, no heap (but
        // for a comparison with the records held in memory, while there are any).
        if m.readers.len() == 1 {
            return Ok(m);
        }
        let mut heads = Vec::with_capacity(m.readers.len());
        for i in 0..m.readers.len() {
            heads.push(m.read(i)?);
        }
        m.runs = KMerge::new(heads, R::cmp);
        Ok(m)
    }
}

impl<R: Record> Drop for Sorted<R> {
    fn drop(&mut self) {
        // Runs are not needed past their last reader; the directory goes with its `Spill`.
        for p in &self.runs {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Records of a [`Sorted`] in order.
pub struct Merge<'a, R: Record> {
    memory: std::slice::Iter<'a, R>,
    late: std::slice::Iter<'a, R>,
    /// With one run and records in memory: the run's next record, read ahead.
    held: Option<R>,
    readers: Vec<(BufReader<File>, R::ReadState)>,
    /// The runs' next records; equal records leave in run order.
    runs: KMerge<R>,
}

impl<'a, R: Record> Merge<'a, R> {
    fn read(&mut self, i: usize) -> Result<Option<R>> {
        read_run(&mut self.readers, i)
    }

    /// The next record held in memory (of its two parts), and whether it is a late one.
    fn memory_head(&self) -> Option<(&'a R, bool)> {
        match (self.memory.as_slice().first(), self.late.as_slice().first()) {
            (Some(m), Some(l)) if l < m => Some((l, true)),
            (Some(m), _) => Some((m, false)),
            (None, l) => l.map(|l| (l, true)),
        }
    }

    fn take_memory(&mut self, late: bool) -> Option<R> {
        let next = if late {
            self.late.next()
        } else {
            self.memory.next()
        };
        next.cloned()
    }

    pub fn next_record(&mut self) -> Result<Option<R>> {
        match self.readers.len() {
            0 => Ok(self
                .memory_head()
                .and_then(|(_, late)| self.take_memory(late))),
            1 => {
                let Some((m, late)) = self.memory_head() else {
                    return match self.held.take() {
                        Some(r) => Ok(Some(r)),
                        None => self.read(0),
                    };
                };
                if self.held.is_none() {
                    self.held = self.read(0)?;
                }
                if self.held.as_ref().is_some_and(|h| h <= m) {
                    Ok(self.held.take())
                } else {
                    Ok(self.take_memory(late))
                }
            }
            _ => {
                let readers = &mut self.readers;
                self.runs.next(R::cmp, |i| read_run(readers, i))
            }
        }
    }
}

/// The next record of run `i`.
fn read_run<R: Record>(
    readers: &mut [(BufReader<File>, R::ReadState)],
    i: usize,
) -> Result<Option<R>> {
    let (r, state) = &mut readers[i];
    R::read_from(r, state).context("cannot read a scratch file back")
}

/// A sorted stream read beside a scan in the same key order (a table's rowids): for each key in
/// turn, the records whose first field is that key.
pub struct Lookup<'a, R: Record> {
    merge: Merge<'a, R>,
    /// The next record not yet consumed.
    pending: Option<R>,
}

impl<'a, R: Record> Lookup<'a, R> {
    pub fn new(merge: Merge<'a, R>) -> Self {
        Lookup {
            merge,
            pending: None,
        }
    }

    /// Call `f` on each record whose first field is `key`, passing over those before it. Keys
    /// must come in increasing order.
    pub fn matching(&mut self, key: i64, mut f: impl FnMut(R)) -> Result<()> {
        loop {
            if self.pending.is_none() {
                self.pending = self.merge.next_record()?;
            }
            match self.pending.as_ref().map(R::key) {
                Some(k) if k == key => f(self.pending.take().expect("matched")),
                Some(k) if k < key => self.pending = None,
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_of(recs: &[[i64; 2]]) -> Vec<[i64; 2]> {
        let mut spill = Spill::default();
        let mut s = Sorter::<[i64; 2]>::default();
        for r in recs {
            s.push(*r, &mut spill).unwrap();
        }
        let sorted = s.finish(&mut spill).unwrap();
        let mut out = Vec::new();
        let mut it = sorted.iter().unwrap();
        while let Some(r) = it.next_record().unwrap() {
            out.push(r);
        }
        // Twice: reading does not consume.
        let mut again = 0;
        let mut it = sorted.iter().unwrap();
        while it.next_record().unwrap().is_some() {
            again += 1;
        }
        assert_eq!(again, out.len());
        out
    }

    #[test]
    fn sorts_in_memory_and_across_runs() {
        for n in [0usize, 1, 1000, RUN_RECORDS, 3 * RUN_RECORDS + 17] {
            // A reversed, interleaved order with repeats.
            let recs: Vec<[i64; 2]> = (0..n as i64)
                .rev()
                .map(|i| [(i * 7919) % 1009, -i])
                .collect();
            let mut want = recs.clone();
            want.sort_unstable();
            assert_eq!(sorted_of(&recs), want, "{n} records");
        }
    }

    #[test]
    fn streams_in_order_become_one_run_and_disorder_still_sorts() {
        let n = 3 * RUN_RECORDS as i64 + 17;
        // In order, with repeats: chunks go on the end of one run.
        let in_order: Vec<[i64; 2]> = (0..n).map(|i| [i / 3, i % 3]).collect();
        let mut spill = Spill::default();
        let mut s = Sorter::<[i64; 2]>::default();
        for r in &in_order {
            s.push(*r, &mut spill).unwrap();
        }
        assert!(s.runs.len() == 1, "{} runs", s.runs.len());
        assert_eq!(sorted_of(&in_order), in_order);
        // In order but for one record in the second chunk, and chunks that restart lower: the
        // chunks that cannot continue the last run start new runs.
        let mut mixed = in_order.clone();
        mixed.swap(RUN_RECORDS + 5, RUN_RECORDS + 9);
        mixed.extend((0..RUN_RECORDS as i64 + 3).map(|i| [i / 2, 7]));
        let mut want = mixed.clone();
        want.sort_unstable();
        assert_eq!(sorted_of(&mixed), want);
    }

    /// Spans as ranges end: children first, then their parent, which sorts before them; now
    /// and then an outer range that ends after far more than the window holds. Every record
    /// comes back in order, the nearly ordered stream is one run, and the strings survive
    /// being written straight on the run's end.
    #[test]
    fn nearly_sorted_streams_come_back_in_order() {
        let texts: Vec<Arc<[u8]>> = ["a", "b > c"]
            .iter()
            .map(|t| Arc::from(t.as_bytes()))
            .collect();
        let mut recs = Vec::new();
        let mut outer_start = 0;
        for step in 0..(4 * RUN_RECORDS as i64) / 5 {
            let t = step * 10;
            if step % 1000 == 0 {
                if step > 0 {
                    // The outer range of the last 1000 steps: far behind the window.
                    recs.push([outer_start, 0, 3]);
                }
                outer_start = t;
            }
            // Three children, then their parent (same start, longer).
            recs.extend([[t, -2, 0], [t + 3, -5, 1], [t + 6, -9, 2], [t, -9, 4]]);
        }
        let mut spill = Spill::default();
        let mut s = NearlySorted::<Named<3>>::default();
        for (i, r) in recs.iter().enumerate() {
            let text = (i % 3 != 0).then(|| texts[i / 7 % 2].clone());
            s.push(Named { fields: *r, text }, &mut spill).unwrap();
        }
        assert!(s.sorter.runs.len() <= 2, "{} runs", s.sorter.runs.len());
        let sorted = s.finish(&mut spill).unwrap();
        let mut want: Vec<Named<3>> = recs
            .iter()
            .enumerate()
            .map(|(i, r)| Named {
                fields: *r,
                text: (i % 3 != 0).then(|| texts[i / 7 % 2].clone()),
            })
            .collect();
        want.sort();
        let mut it = sorted.iter().unwrap();
        for w in &want {
            assert_eq!(it.next_record().unwrap().as_ref(), Some(w));
        }
        assert!(it.next_record().unwrap().is_none());
    }

    /// A stream in order but for a few records that come at its end, too late for the run on
    /// disk: they stay in memory, merged with the run as it is read, also through `Lookup`.
    #[test]
    fn stragglers_stay_in_memory_beside_one_run() {
        let n = 2 * RUN_RECORDS as i64 + 9;
        let mut recs: Vec<[i64; 2]> = (0..n).map(|i| [i * 2, 0]).collect();
        recs.extend([[5, 1], [-3, 0], [2 * n + 4, 0], [5, 1], [7, 2]]);
        let mut spill = Spill::default();
        let sorted = sorts_as_expected(&recs, &mut spill);
        assert_eq!(sorted.runs.len(), 1);
        assert!(!sorted.memory.is_empty());
        let mut lookup = Lookup::new(sorted.iter().unwrap());
        let mut found = Vec::new();
        for key in [-3, 0, 5, 7, 10, 2 * n + 4] {
            lookup.matching(key, |r| found.push(r)).unwrap();
        }
        assert_eq!(
            found,
            [
                [-3, 0],
                [0, 0],
                [5, 1],
                [5, 1],
                [7, 2],
                [10, 0],
                [2 * n + 4, 0]
            ]
        );
    }

    #[test]
    fn extreme_values_survive_the_delta_encoding() {
        let edges = [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX];
        let mut recs = Vec::new();
        for (i, a) in edges.iter().enumerate() {
            for b in edges {
                recs.push([*a, b, b.wrapping_mul(i as i64)]);
            }
        }
        // Enough copies to spill several runs.
        let recs: Vec<[i64; 3]> = recs
            .iter()
            .cycle()
            .take(3 * RUN_RECORDS + 5)
            .copied()
            .collect();
        sorts_as_expected(&recs, &mut Spill::default());
    }

    /// Push `recs` through a sorter and check that what it gives reads back as `recs` sorted.
    fn sorts_as_expected<const N: usize>(recs: &[[i64; N]], spill: &mut Spill) -> Sorted<[i64; N]> {
        let mut s = Sorter::<[i64; N]>::default();
        for r in recs {
            s.push(*r, spill).unwrap();
        }
        let sorted = s.finish(spill).unwrap();
        let mut want = recs.to_vec();
        want.sort_unstable();
        let mut it = sorted.iter().unwrap();
        for w in &want {
            assert_eq!(it.next_record().unwrap().as_ref(), Some(w));
        }
        assert!(it.next_record().unwrap().is_none());
        drop(it);
        sorted
    }

    #[test]
    fn strings_survive_runs_and_are_shared_again() {
        let mut spill = Spill::default();
        let mut s = Sorter::<Named<1>>::default();
        let texts: Vec<Arc<[u8]>> = ["a > b", "", "a > b > c"]
            .iter()
            .map(|t| Arc::from(t.as_bytes()))
            .collect();
        let n = 5 * RUN_RECORDS as i64 + 3;
        for i in (0..n).rev() {
            // Every fifth record carries no string.
            let text = (i % 5 != 0).then(|| texts[(i / 7 % 3) as usize].clone());
            s.push(Named { fields: [i], text }, &mut spill).unwrap();
        }
        let sorted = s.finish(&mut spill).unwrap();
        let mut it = sorted.iter().unwrap();
        let mut prev: Option<Named<1>> = None;
        let mut shared = 0;
        for i in 0..n {
            let r = it.next_record().unwrap().expect("a record");
            assert_eq!(r.fields, [i]);
            let want = (i % 5 != 0).then(|| texts[(i / 7 % 3) as usize].clone());
            assert_eq!(r.text, want, "record {i}");
            shared += prev
                .and_then(|p| p.text)
                .zip(r.text.as_ref())
                .is_some_and(|(p, t)| Arc::ptr_eq(&p, t)) as i64;
            prev = Some(r);
        }
        assert!(it.next_record().unwrap().is_none());
        // Neighbours within a run share their string (most of them here); runs interleave.
        assert!(shared > n / 3, "{shared} of {n} shared");
    }
}
