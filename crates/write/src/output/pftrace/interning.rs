//! Interning per sequence: names, values and arg keys get iids on first use, in short lists
//! first and in maps once a sequence has many.

use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{FastHash, Name, TextNo};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Interning state of one sequence. Ids are per kind of interned data, starting at 1.
///
/// A trace can have a sequence per stream (tens of thousands), most of them with a few events:
/// a sequence's first names and values are a short list in the writer's arena (`Interning`), its
/// arg keys a block in another; maps of its own only once it has more than [`SMALL`] names or
/// values. Allocating and freeing a dozen small maps and lists per sequence cost a quarter of
/// the time of a trace with one stream per kernel.
pub(super) struct Sequence {
    pub(super) last_ts: i64,
    /// The sequence's default track, restated when its incremental state is cleared again.
    pub(super) default_track: u64,
    /// Where the names and values are once there are more than [`SMALL`] of either.
    pub(super) maps: Option<Box<Maps>>,
    /// Where in `Interning::small` the first [`SMALL`] names are, then the first [`SMALL`]
    /// values (a block taken on first use).
    pub(super) small_at: Option<u32>,
    /// The arg keys: `keys` of the `keys_cap` slots at `keys_at` in `Interning::arg_keys`.
    pub(super) keys_at: u32,
    pub(super) keys: u32,
    pub(super) keys_cap: u32,
    /// Names and values interned so far; each one's iid is its position.
    pub(super) names: u32,
    pub(super) values: u32,
    /// Each category's iid on this sequence (0: not interned yet); fewer than 256 categories.
    pub(super) categories: [u8; Category::ALL.len()],
    pub(super) next_category: u8,
    /// A GPU queue's sequence: whether its queue, stages and context are interned.
    pub(super) gpu_specs: bool,
}

// By hand: arrays of more than 32 elements (one per category) have no derived `Default`.
impl Default for Sequence {
    fn default() -> Self {
        Sequence {
            last_ts: 0,
            default_track: 0,
            maps: None,
            small_at: None,
            keys_at: 0,
            keys: 0,
            keys_cap: 0,
            names: 0,
            values: 0,
            categories: [0; Category::ALL.len()],
            next_category: 0,
            gpu_specs: false,
        }
    }
}

// Category iids fit a byte (see `Sequence::categories`).
const _: () = assert!(Category::ALL.len() < 256);

/// Names and values one sequence interns in its short lists, searched in place, before it
/// takes maps.
pub(super) const SMALL: u32 = 8;

/// Interned names or values of a sequence with many.
#[derive(Default)]
pub(super) struct ByKey {
    pub(super) sid: HashMap<i64, u32, FastHash>,
    pub(super) no: ByNumber,
    pub(super) text: HashMap<Box<str>, u32, BuildHasherDefault<TextHasher>>,
}

/// The text maps' hasher: FxHash's multiply over eight bytes at a time, with the bytes past
/// the last full eight read as one overlapping word instead of one by one (labels such as
/// launch shapes are a dozen bytes). These maps are looked up, never walked: their hash
/// decides nothing that is written.
#[derive(Default, Clone, Copy)]
pub(super) struct TextHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl TextHasher {
    #[inline(always)]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for TextHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The multiply's well-mixed high bits pick the bucket (see the model's `FxHasher`).
        self.0.rotate_left(26)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("eight bytes"));
        if n >= 8 {
            let mut chunks = bytes.chunks_exact(8);
            for c in &mut chunks {
                self.mix(word(c));
            }
            if !chunks.remainder().is_empty() {
                self.mix(word(&bytes[n - 8..]) ^ n as u64);
            }
        } else if n >= 4 {
            let half = |b: &[u8]| u64::from(u32::from_le_bytes(b.try_into().expect("four")));
            self.mix(half(&bytes[..4]) | half(&bytes[n - 4..]) << 32 ^ (n as u64) << 61);
        } else if n > 0 {
            let b = |i: usize| u64::from(bytes[i]);
            self.mix(b(0) | b(n / 2) << 8 | b(n - 1) << 16 | (n as u64) << 24);
        }
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.mix(u64::from(v));
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }
}

impl ByKey {
    #[inline(always)]
    pub(super) fn get(&self, key: Key<'_>) -> Option<u32> {
        match key {
            Key::Sid(sid) => self.sid.get(&sid).copied(),
            Key::No(no, _) => self.no.get(no),
            Key::Text(t) => self.text.get(t).copied(),
        }
    }

    pub(super) fn clear(&mut self) {
        self.sid.clear();
        self.no.clear();
        self.text.clear();
    }

    pub(super) fn insert(&mut self, key: Key<'_>, iid: u32) {
        match key {
            Key::Sid(sid) => {
                self.sid.insert(sid, iid);
            }
            Key::No(no, _) => self.no.insert(no, iid),
            Key::Text(t) => {
                self.text.insert(t.into(), iid);
            }
        }
    }
}

/// Interned numbered texts ([`TextNo`]: a set, and a number from 0 in it). A reader's
/// dictionary numbers densely, so a table of iids indexed by number is a fraction of a hash
/// map's size and its lookups stay in cache (an NVTX-heavy conversion looks one up per range);
/// numbers too far beyond what the sequence holds (at most 16 slots per entry, so memory stays
/// proportional) go to a map.
#[derive(Default)]
pub(super) struct ByNumber {
    /// Per set: iids by number, 0 where none.
    pub(super) dense: Vec<(u32, Vec<u32>)>,
    pub(super) entries: usize,
    pub(super) sparse: HashMap<u64, u32, FastHash>,
}

impl ByNumber {
    #[inline(always)]
    pub(super) fn get(&self, key: TextNo) -> Option<u32> {
        let (set, no) = (key.set(), key.number() as usize);
        if let Some((_, table)) = self.dense.iter().find(|(s, _)| *s == set)
            && let Some(&iid) = table.get(no)
            && iid != 0
        {
            return Some(iid);
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.sparse.get(&key.key()).copied()
    }

    pub(super) fn insert(&mut self, key: TextNo, iid: u32) {
        let (set, no) = (key.set(), key.number() as usize);
        self.entries += 1;
        if no >= 16 * self.entries + 64 {
            self.sparse.insert(key.key(), iid);
            return;
        }
        let at = match self.dense.iter().position(|(s, _)| *s == set) {
            Some(at) => at,
            None => {
                self.dense.push((set, Vec::new()));
                self.dense.len() - 1
            }
        };
        let table = &mut self.dense[at].1;
        if table.len() <= no {
            table.resize((no + 1).max(2 * table.len()).min(16 * self.entries + 64), 0);
        }
        table[no] = iid;
    }

    pub(super) fn clear(&mut self) {
        self.dense.clear();
        self.entries = 0;
        self.sparse.clear();
    }
}

#[derive(Default)]
pub(super) struct Maps {
    pub(super) names: ByKey,
    pub(super) values: ByKey,
}

impl Maps {
    /// The maps of the values (`value`) or the names.
    pub(super) fn of(&mut self, value: bool) -> &mut ByKey {
        if value {
            &mut self.values
        } else {
            &mut self.names
        }
    }
}

/// A name or value on a short list: a string id, a text's number, or a text (its length) at
/// `key` in `Interning::small_text`.
#[derive(Clone, Copy, Default)]
pub(super) struct Small {
    pub(super) key: i64,
    pub(super) kind: SmallKind,
}

#[derive(Clone, Copy, Default, PartialEq)]
pub(super) enum SmallKind {
    #[default]
    Sid,
    No,
    Text(u32),
}

/// The writer's sequences by id.
#[derive(Default)]
pub(super) struct Sequences {
    /// Each sequence's index in `list`.
    pub(super) index: HashMap<u32, u32, FastHash>,
    /// In a list, not in the map: a new sequence is written where the last one was, not in a
    /// cold slot of a large table (a trace can have one per stream).
    pub(super) list: Vec<Sequence>,
    /// The last sequence looked up (id, index): events come in runs on one sequence.
    pub(super) last: Option<(u32, u32)>,
}

impl Sequences {
    /// Where the sequence `id` is in `list`.
    #[inline]
    pub(super) fn index(&mut self, id: u32) -> Option<usize> {
        if let Some((last, at)) = self.last
            && last == id
        {
            return Some(at as usize);
        }
        let &at = self.index.get(&id)?;
        self.last = Some((id, at));
        Some(at as usize)
    }

    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut Sequence> {
        let at = self.index(id)?;
        Some(&mut self.list[at])
    }

    /// The sequence `id`, added if new.
    pub(super) fn open(&mut self, id: u32) -> &mut Sequence {
        let n = self.list.len();
        let i = *self
            .index
            .entry(id)
            .or_insert_with(|| u32::try_from(n).expect("fewer than 2^32 sequences"));
        if i as usize == n {
            self.list.push(Sequence::default());
        }
        &mut self.list[i as usize]
    }
}

/// A name or value to intern.
#[derive(Clone, Copy)]
pub(super) enum Key<'a> {
    Sid(i64),
    No(TextNo, &'a str),
    Text(&'a str),
}

impl<'a> From<Name<'a>> for Key<'a> {
    fn from(name: Name<'a>) -> Key<'a> {
        match name {
            Name::Str(sid) => Key::Sid(sid),
            Name::Text(t) | Name::Static(t) => Key::Text(t),
            Name::Numbered(no, t) => Key::No(no, t),
        }
    }
}

/// The arenas of the sequences' short lists (see [`Sequence`]).
#[derive(Default)]
pub(super) struct Interning {
    pub(super) small: Vec<Small>,
    pub(super) small_text: String,
    /// Arg keys are few per sequence (a kernel has a dozen) and static: a short list searched
    /// by address first beats hashing the key text on every arg of every event.
    pub(super) arg_keys: Vec<&'static str>,
}

impl Interning {
    /// The iid of a name (`value` false) or value on `seq`, and whether it is new there.
    /// Inlined, as what it looks up: a call site interns one kind of key.
    #[inline(always)]
    pub(super) fn intern(&mut self, seq: &mut Sequence, value: bool, key: Key<'_>) -> (u32, bool) {
        match seq.maps.is_some() {
            true => in_maps(seq, value, key),
            false => self.intern_small(seq, value, key),
        }
    }

    /// [`Interning::intern`] on a sequence without maps yet: its short lists, then maps once
    /// they are full.
    #[inline(never)]
    fn intern_small(&mut self, seq: &mut Sequence, value: bool, key: Key<'_>) -> (u32, bool) {
        let count = if value { seq.values } else { seq.names };
        {
            let block = match seq.small_at {
                Some(at) => at,
                None => {
                    let at = u32::try_from(self.small.len()).expect("short lists fit u32");
                    self.small
                        .resize(self.small.len() + 2 * SMALL as usize, Small::default());
                    *seq.small_at.insert(at)
                }
            };
            let at = (block + if value { SMALL } else { 0 }) as usize;
            let list = &self.small[at..at + count as usize];
            let text = self.small_text.as_bytes();
            let found = list.iter().position(|e| match (key, e.kind) {
                (Key::Sid(sid), SmallKind::Sid) => e.key == sid,
                (Key::No(no, _), SmallKind::No) => e.key as u64 == no.key(),
                (Key::Text(t), SmallKind::Text(len)) => {
                    len as usize == t.len() && &text[e.key as usize..][..t.len()] == t.as_bytes()
                }
                _ => false,
            });
            if let Some(i) = found {
                return (i as u32 + 1, false);
            }
            if count < SMALL {
                self.small[at + count as usize] = match key {
                    Key::Sid(sid) => Small {
                        key: sid,
                        kind: SmallKind::Sid,
                    },
                    Key::No(no, _) => Small {
                        key: no.key() as i64,
                        kind: SmallKind::No,
                    },
                    Key::Text(t) => {
                        self.small_text.push_str(t);
                        Small {
                            key: (self.small_text.len() - t.len()) as i64,
                            kind: SmallKind::Text(t.len() as u32),
                        }
                    }
                };
                return (seq.next(value), true);
            }
            seq.maps = Some(self.promote(seq));
        }
        in_maps(seq, value, key)
    }

    /// Maps holding what the sequence's short lists hold.
    pub(super) fn promote(&self, seq: &Sequence) -> Box<Maps> {
        let mut maps = Box::<Maps>::default();
        let mut add = |from: u32, count: u32, value: bool| {
            let by_key = maps.of(value);
            let at = from as usize;
            for (i, e) in self.small[at..at + count as usize].iter().enumerate() {
                let iid = i as u32 + 1;
                match e.kind {
                    SmallKind::Sid => {
                        by_key.sid.insert(e.key, iid);
                    }
                    SmallKind::No => by_key.no.insert(TextNo::of_key(e.key as u64), iid),
                    SmallKind::Text(len) => {
                        let t = &self.small_text[e.key as usize..][..len as usize];
                        by_key.text.insert(t.into(), iid);
                    }
                }
            }
        };
        let at = seq.small_at.expect("short lists before maps");
        add(at, seq.names, false);
        add(at + SMALL, seq.values, true);
        maps
    }

    /// The iid of an arg key on `seq`, and whether it is new there. `hint` is the iid of the
    /// event's previous arg key (0 before the first): events of one kind list their args in one
    /// order, which is the order their keys were first seen, so the key after it is nearly
    /// always the one asked for.
    pub(super) fn arg_key(
        &mut self,
        seq: &mut Sequence,
        key: &'static str,
        hint: u64,
    ) -> (u64, bool) {
        let at = seq.keys_at as usize;
        let keys = &self.arg_keys[at..at + seq.keys as usize];
        if keys
            .get(hint as usize)
            .is_some_and(|k| std::ptr::eq(*k, key))
        {
            return (hint + 1, false);
        }
        if let Some(iid) = arg_iid(keys, key) {
            return (iid, false);
        }
        if seq.keys == seq.keys_cap {
            // A block twice as large at the end (16 at first: room for an event's keys); the
            // old one stays unused, smaller than the new.
            let cap = (seq.keys_cap * 2).max(16);
            let to = self.arg_keys.len();
            self.arg_keys.extend_from_within(at..at + seq.keys as usize);
            self.arg_keys.resize(to + cap as usize, "");
            seq.keys_at = u32::try_from(to).expect("arg keys fit u32 indices");
            seq.keys_cap = cap;
        }
        self.arg_keys[(seq.keys_at + seq.keys) as usize] = key;
        seq.keys += 1;
        (u64::from(seq.keys), true)
    }
}

impl Sequence {
    /// Move the sequence's clock on to `ts` (layout keeps each sequence in time order): the
    /// delta its packet at `ts` carries.
    #[inline]
    pub(super) fn advance(&mut self, ts: i64) -> u64 {
        debug_assert!(
            ts >= self.last_ts,
            "layout keeps each sequence in time order"
        );
        let delta = (ts - self.last_ts).max(0) as u64;
        self.last_ts = ts;
        delta
    }

    /// Count a new name or value; its iid.
    pub(super) fn next(&mut self, value: bool) -> u32 {
        let n = if value {
            &mut self.values
        } else {
            &mut self.names
        };
        *n += 1;
        *n
    }
}

/// [`Interning::intern`] on a sequence with maps.
#[inline(always)]
fn in_maps(seq: &mut Sequence, value: bool, key: Key<'_>) -> (u32, bool) {
    let count = if value { seq.values } else { seq.names };
    let by_key = seq.maps.as_mut().expect("a sequence with maps").of(value);
    if let Some(iid) = by_key.get(key) {
        return (iid, false);
    }
    by_key.insert(key, count + 1);
    (seq.next(value), true)
}

/// The interned id of an arg key (its position in `keys`, from 1).
#[inline]
pub(super) fn arg_iid(keys: &[&'static str], key: &'static str) -> Option<u64> {
    if let Some(i) = keys.iter().position(|k| std::ptr::eq(*k, key)) {
        return Some(i as u64 + 1);
    }
    // The same text may sit at several addresses.
    keys.iter().position(|k| *k == key).map(|i| i as u64 + 1)
}
