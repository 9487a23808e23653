//! Putting rows in order, the one way every reader does it: a bounded reorder window
//! ([`Reorder`]) for a stream that is nearly in order, and a k-way merge ([`KMerge`]) of streams
//! that each are in order. Both keep equal keys in the order they arrived (the window) or in
//! source order (the merge), so a conversion is the same every time.
//!
//! What is not here, on purpose: [`crate::runs::Sorter`] sorts a stream of any order with
//! bounded memory by spilling sorted runs to disk (an external sort); it is fed through this
//! window ([`crate::runs::NearlySorted`]) and its runs are read back through this merge.

use anyhow::Result;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

/// Rows held back to restore start order (per reader); bounds memory at a few MB.
pub const REORDER_WINDOW: usize = 32768;

/// Restores key order when a stream's rows are only nearly sorted: up to `capacity` rows wait,
/// and once more arrive the least leaves. nsys writes rows in start order, but merged tables and
/// edited exports can have local inversions: the window absorbs those; what comes later than
/// that stays late (the layout puts it on a separate lane, the NVTX projection reads the table
/// again sorted, the external sort takes it into another run).
///
/// Rows that arrive in order (nearly all) wait in a queue, at O(1) per row; only the others go
/// through a heap of their keys, their rows in a slab so they move once in and once out. Equal
/// keys leave in arrival order.
pub struct Reorder<T, K: Ord = (i64, i64)> {
    run: VecDeque<((K, u64), T)>,
    heap: BinaryHeap<Reverse<((K, u64), u32)>>,
    slots: Slab<T>,
    seq: u64,
    capacity: usize,
}

impl<T, K: Ord> Reorder<T, K> {
    pub fn new(capacity: usize) -> Self {
        Reorder {
            // Sized once: a ring that grew by doubling would touch twice the window's memory.
            run: VecDeque::with_capacity(capacity + 1),
            heap: BinaryHeap::new(),
            slots: Slab::default(),
            seq: 0,
            capacity,
        }
    }

    /// Add a row; once the window is full, the least row held leaves, with its key.
    pub fn push(&mut self, key: K, item: T) -> Option<(K, T)> {
        self.seq += 1;
        let key = (key, self.seq);
        if self.run.back().is_none_or(|(last, _)| *last < key) {
            self.run.push_back((key, item));
        } else {
            let slot = self.slots.put(item);
            self.heap.push(Reverse((key, slot)));
        }
        if self.run.len() + self.heap.len() > self.capacity {
            self.pop()
        } else {
            None
        }
    }

    /// The least row held, with its key (drains the window in key order).
    pub fn pop(&mut self) -> Option<(K, T)> {
        let from_heap = match (self.run.front(), self.heap.peek()) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((a, _)), Some(Reverse((b, _)))) => b < a,
        };
        if from_heap {
            let Reverse(((key, _), slot)) = self.heap.pop()?;
            Some((key, self.slots.take(slot)))
        } else {
            self.run.pop_front().map(|((key, _), item)| (key, item))
        }
    }
}

/// A k-way merge of sorted sources: each source's next item waits as its head, and a binary
/// min-heap of source numbers by `(head, source)` gives the least; heads stay where they are,
/// only source numbers move. Equal heads leave in source order. The order is the `order` each
/// call is given (the same every call), so it inlines.
pub struct KMerge<R> {
    /// The next item of each source.
    heads: Vec<Option<R>>,
    /// The sources that have a next item.
    heap: Vec<usize>,
}

impl<R> KMerge<R> {
    /// The merge of sources whose first items are `heads`.
    pub fn new(heads: Vec<Option<R>>, order: impl Fn(&R, &R) -> Ordering) -> KMerge<R> {
        let heap = (0..heads.len()).filter(|i| heads[*i].is_some()).collect();
        let mut m = KMerge { heads, heap };
        for i in (0..m.heap.len() / 2).rev() {
            m.sift_down(i, &order);
        }
        m
    }

    /// The least head, replaced by its source's next item (`next(source)`); `None` when every
    /// source is done.
    pub fn next(
        &mut self,
        order: impl Fn(&R, &R) -> Ordering,
        next: impl FnOnce(usize) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        let Some(&i) = self.heap.first() else {
            return Ok(None);
        };
        let item = self.heads[i].take();
        self.heads[i] = next(i)?;
        if self.heads[i].is_none() {
            let last = self.heap.pop().expect("not empty");
            if self.heap.is_empty() {
                return Ok(item);
            }
            self.heap[0] = last;
        }
        self.sift_down(0, &order);
        Ok(item)
    }

    fn less(&self, a: usize, b: usize, order: &impl Fn(&R, &R) -> Ordering) -> bool {
        match (&self.heads[a], &self.heads[b]) {
            (Some(x), Some(y)) => order(x, y).then(a.cmp(&b)) == Ordering::Less,
            // Only sources with a head are in the heap.
            _ => a < b,
        }
    }

    fn sift_down(&mut self, mut at: usize, order: &impl Fn(&R, &R) -> Ordering) {
        loop {
            let left = 2 * at + 1;
            if left >= self.heap.len() {
                return;
            }
            let right = left + 1;
            let child =
                if right < self.heap.len() && self.less(self.heap[right], self.heap[left], order) {
                    right
                } else {
                    left
                };
            if !self.less(self.heap[child], self.heap[at], order) {
                return;
            }
            self.heap.swap(child, at);
            at = child;
        }
    }
}

/// Rows of several tables, each read in its storage order, merged by start (ties keep source
/// order, [`KMerge`]) and put in order through a [`Reorder`] window keyed by `key` (start,
/// tiebreak): the one way a reader reads several tables as one stream. `next(i)` is source `i`'s
/// next row.
pub fn merge_by_start<R>(
    sources: usize,
    mut next: impl FnMut(usize) -> Result<Option<R>>,
    start: impl Fn(&R) -> i64,
    key: impl Fn(&R) -> (i64, i64),
    mut emit: impl FnMut(R) -> Result<()>,
) -> Result<()> {
    let mut heads: Vec<Option<R>> = Vec::with_capacity(sources);
    for i in 0..sources {
        heads.push(next(i)?);
    }
    let earlier = |a: &R, b: &R| start(a).cmp(&start(b));
    let mut merge = KMerge::new(heads, earlier);
    let mut window = Reorder::new(REORDER_WINDOW);
    while let Some(row) = merge.next(earlier, &mut next)? {
        if let Some((_, row)) = window.push(key(&row), row) {
            emit(row)?;
        }
    }
    while let Some((_, row)) = window.pop() {
        emit(row)?;
    }
    Ok(())
}

/// Items held in numbered slots, so that an ordering structure moves a small number instead of
/// the item; freed slots are used again.
pub(crate) struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Hold `item`; its slot.
    pub(crate) fn put(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(item);
                i
            }
            None => {
                self.slots.push(Some(item));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The item in `slot` (held).
    pub(crate) fn get(&self, slot: u32) -> &T {
        self.slots[slot as usize].as_ref().expect("a held item")
    }

    /// Take the item out of `slot` (held), freeing the slot.
    pub(crate) fn take(&mut self, slot: u32) -> T {
        self.free.push(slot);
        self.slots[slot as usize].take().expect("a held item")
    }
}

#[cfg(test)]
mod tests {
    use super::{KMerge, Reorder};

    /// The window releases the earliest held row, whatever mix of in-order and late rows.
    #[test]
    fn reorder_releases_earliest_held_row() {
        let mut x: u64 = 12345;
        let mut starts = Vec::new();
        for i in 0..5000i64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Mostly in order, some rows far back.
            starts.push(if x.is_multiple_of(7) {
                i - (x >> 40) as i64 % 300
            } else {
                i
            });
        }
        let cap = 64;
        let mut w = Reorder::new(cap);
        let mut held: Vec<(i64, usize)> = Vec::new();
        for (i, &s) in starts.iter().enumerate() {
            held.push((s, i));
            let got = w.push((s, 0), i).map(|(_, i)| i);
            if held.len() > cap {
                let min = *held.iter().min().unwrap();
                held.retain(|h| *h != min);
                assert_eq!(got, Some(min.1));
            } else {
                assert_eq!(got, None);
            }
        }
        held.sort();
        for (_, i) in held {
            assert_eq!(w.pop().map(|(_, i)| i), Some(i));
        }
        assert_eq!(w.pop(), None);
    }

    /// The merge gives every item of sorted sources in order, equal items in source order,
    /// whatever the sources' lengths (empty ones too).
    #[test]
    fn kmerge_is_sorted_and_stable_by_source() {
        let mut x: u64 = 99;
        let mut sources: Vec<Vec<(i64, usize)>> = Vec::new();
        for s in 0..9usize {
            let n = if s == 4 { 0 } else { (s * 37) % 50 };
            let mut v: Vec<(i64, usize)> = (0..n)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (((x >> 33) % 20) as i64, s)
                })
                .collect();
            v.sort();
            sources.push(v);
        }
        let mut at = vec![0usize; sources.len()];
        let mut next = |i: usize| -> anyhow::Result<Option<(i64, usize)>> {
            let item = sources[i].get(at[i]).copied();
            at[i] += 1;
            Ok(item)
        };
        let heads = (0..9)
            .map(&mut next)
            .collect::<anyhow::Result<Vec<_>>>()
            .unwrap();
        let mut want: Vec<(i64, usize)> = sources.concat();
        want.sort();
        let by_key = |a: &(i64, usize), b: &(i64, usize)| a.0.cmp(&b.0);
        let mut m = KMerge::new(heads, by_key);
        let mut got = Vec::new();
        while let Some(item) = m.next(by_key, &mut next).unwrap() {
            got.push(item);
        }
        assert_eq!(got, want, "by key, then by source");
    }
}
