//! Interning: strings by number, so sorted records carry a number rather than the string.

use nsys_perfetto_model::model::TextNo;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// How a record carries a string of [`Names`]: its number and no string when it has a number,
/// else -1 and the string itself.
pub(super) fn carry(text: &Text) -> (i64, Option<Arc<[u8]>>) {
    match text {
        Text::No(no) => (i64::from(*no), None),
        Text::Own(t) => (-1, Some(t.clone())),
    }
}

/// The string a record carries (see [`carry`]), its number looked up in `list`: with its
/// [`TextNo`] when it has one.
pub(super) fn carried_text<'a>(
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
pub(super) fn lossy(t: &[u8]) -> Arc<str> {
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
    pub(super) set: u32,
}

impl Strings {
    pub(super) fn get(&self, no: u32) -> &str {
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
pub(super) struct Names {
    /// The strings end to end: number `n` is `bytes[ends[n - 1]..ends[n]]` (from 0 for 0; see
    /// [`nth`]).
    bytes: Vec<u8>,
    ends: Vec<u32>,
    index: HashMap<u64, u32, KeyIsHash>,
    /// The numbers' set, for the writers (see [`TextNo`]).
    pub(super) set: u32,
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
pub(super) fn nth(ends: &[u32], no: u32) -> std::ops::Range<usize> {
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
pub(super) enum Text {
    No(u32),
    Own(Arc<[u8]>),
}

impl Names {
    pub(super) const KEPT: usize = 1 << 16;
    const BYTES: usize = 16 << 20;

    /// `t`, numbered when it has or can get a number.
    pub(super) fn text(&mut self, t: &[u8]) -> Text {
        let hash = {
            use std::hash::{Hash, Hasher};
            let mut h = nsys_perfetto_model::model::FxHasher::default();
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
    pub(super) fn numbered(&self, no: u32) -> &[u8] {
        &self.bytes[nth(&self.ends, no)]
    }

    /// The strings by number, as UTF-8.
    pub(super) fn into_strings(self) -> Strings {
        let mut out = Strings {
            text: String::with_capacity(self.bytes.len()),
            ends: Vec::with_capacity(self.ends.len()),
            set: self.set,
        };
        // Nearly always valid UTF-8 as a whole, each string ending on a character boundary
        // (a string cut inside a character is not valid on its own): then the strings and
        // their ends are as they are.
        if let Ok(text) = std::str::from_utf8(&self.bytes)
            && self.ends.iter().all(|&e| text.is_char_boundary(e as usize))
        {
            out.text.push_str(text);
            out.ends = self.ends;
            return out;
        }
        for no in 0..self.ends.len() as u32 {
            out.text += &String::from_utf8_lossy(self.numbered(no));
            out.ends.push(out.text.len() as u32);
        }
        out
    }

    /// The bytes of a [`Text`] of this dictionary.
    pub(super) fn bytes<'a>(&'a self, t: &'a Text) -> &'a [u8] {
        match t {
            Text::No(no) => self.numbered(*no),
            Text::Own(t) => t,
        }
    }
}

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
        // A character cut between two strings: valid as a whole, not as the strings.
        let mut cut = Names::default();
        let e = "\u{e9}".as_bytes();
        cut.text(b"ok");
        cut.text(&e[..1]);
        cut.text(&e[1..]);
        let strings = cut.into_strings();
        assert_eq!(strings.get(0), "ok");
        assert_eq!(strings.get(1), "\u{fffd}");
        assert_eq!(strings.get(2), "\u{fffd}");

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
