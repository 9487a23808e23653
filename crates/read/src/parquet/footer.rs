//! A Parquet file's footer, read a few row groups at a time.
//!
//! The footer describes every row group's column chunks, and parquet decodes it whole before
//! the first row is read. nsys' row groups are small: a large table has thousands of them, and
//! their decoded descriptions held several times the footer's size for as long as the table
//! was read. [`pieces`] walks the footer's Thrift encoding once, without decoding it, and notes
//! where each run of row groups of about [`PIECE_BYTES`] lies; [`Pieces::footer`] then builds a
//! footer of one run: the file's own fields before and after the row group list, verbatim, around
//! that run's row groups. A row group's column chunks name their pages by their offsets in the
//! file, so each such footer reads its rows from the file as the whole one would.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// Bytes of the encoded footer a piece holds at most, unless one row group is larger.
pub(super) const PIECE_BYTES: u64 = 64 << 10;

/// The length of the file's tail: the footer's length (4 bytes, little-endian) and `PAR1`.
const TAIL: u64 = 8;

/// Thrift compact protocol types.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// `FileMetaData.row_groups`'s field id.
const ROW_GROUPS: i16 = 4;

/// Nesting the walk follows at most (a row group's fields nest four deep).
const MAX_DEPTH: u32 = 32;

/// Where a footer's row group list lies, and its runs of row groups.
pub(super) struct Pieces {
    /// The footer's bytes before the row group list's header (its other fields: the schema,
    /// the row count, and the list's field header).
    head: Vec<u8>,
    /// The footer's bytes after the row group list, to its end.
    rest: Vec<u8>,
    /// Each run: its first byte in the file, its length and its number of row groups.
    runs: Vec<(u64, u64, u32)>,
}

impl Pieces {
    /// How many runs of row groups the footer has (at least one: a table without rows is one
    /// empty run).
    pub(super) fn len(&self) -> usize {
        self.runs.len()
    }

    /// The footer of run `i`: the file's footer with only that run's row groups.
    pub(super) fn footer(&self, file: &File, i: usize) -> std::io::Result<Vec<u8>> {
        let (start, len, count) = self.runs[i];
        let (mut out, at) = self.around(len, count);
        // At its offset, not the file's position: parquet's readers share the position.
        std::os::unix::fs::FileExt::read_exact_at(file, &mut out[at..at + len as usize], start)?;
        Ok(out)
    }

    /// The file's footer without its row groups: its schema and metadata alone.
    pub(super) fn without_row_groups(&self) -> Vec<u8> {
        self.around(0, 0).0
    }

    /// A footer of `count` row groups of `len` bytes, and where they go in it (zeros there).
    fn around(&self, len: u64, count: u32) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(self.head.len() + 11 + len as usize + self.rest.len());
        out.extend_from_slice(&self.head);
        if count < 15 {
            out.push(((count as u8) << 4) | STRUCT);
        } else {
            out.push(0xf0 | STRUCT);
            let mut n = u64::from(count);
            while n >= 0x80 {
                out.push((n as u8) | 0x80);
                n >>= 7;
            }
            out.push(n as u8);
        }
        let at = out.len();
        out.resize(at + len as usize, 0);
        out.extend_from_slice(&self.rest);
        (out, at)
    }
}

/// Walk `file`'s footer and split its row group list in runs of at most `piece_bytes` (a run
/// holds one row group at least). `None` where the footer is not what the walk expects (too
/// short, a bad encoding, no row group list): the caller then reads the file whole, and parquet
/// says what is wrong with it.
pub(super) fn pieces(file: &File, piece_bytes: u64) -> Option<Pieces> {
    let len = file.metadata().ok()?.len();
    let mut f = file;
    if len < 4 + TAIL {
        return None;
    }
    let mut tail = [0u8; TAIL as usize];
    f.seek(SeekFrom::Start(len - TAIL)).ok()?;
    f.read_exact(&mut tail).ok()?;
    if &tail[4..] != b"PAR1" {
        return None;
    }
    let footer_len = u64::from(u32::from_le_bytes(tail[..4].try_into().ok()?));
    let end = len - TAIL;
    let start = end.checked_sub(footer_len)?;
    if start < 4 {
        return None;
    }
    let mut w = Walk {
        file,
        buf: Vec::new(),
        at: 0,
        pos: start,
        end,
    };
    let mut head = None;
    let mut list_end = 0;
    let mut runs = Vec::new();
    let mut last = 0i16;
    while let Some((id, ty)) = w.field(&mut last)? {
        if id != ROW_GROUPS {
            w.skip(ty, 0)?;
            continue;
        }
        if ty != LIST || head.is_some() {
            return None;
        }
        let header = w.pos;
        let (elem, count) = w.list_header()?;
        if elem != STRUCT {
            return None;
        }
        let mut run = (w.pos, 0u64, 0u32);
        for _ in 0..count {
            let at = w.pos;
            w.skip(STRUCT, 1)?;
            if run.2 > 0 && w.pos - run.0 > piece_bytes {
                runs.push((run.0, at - run.0, run.2));
                run = (at, 0, 0);
            }
            run.2 += 1;
        }
        runs.push((run.0, w.pos - run.0, run.2));
        head = Some(header);
        list_end = w.pos;
    }
    let header = head?;
    let mut head = vec![0u8; (header - start) as usize];
    let mut rest = vec![0u8; (end - list_end) as usize];
    f.seek(SeekFrom::Start(start)).ok()?;
    f.read_exact(&mut head).ok()?;
    f.seek(SeekFrom::Start(list_end)).ok()?;
    f.read_exact(&mut rest).ok()?;
    Some(Pieces { head, rest, runs })
}

/// A walk over Thrift's compact encoding, within `[pos, end)` of the file, read through a
/// buffer of its own.
struct Walk<'a> {
    file: &'a File,
    buf: Vec<u8>,
    /// The next byte's index in `buf`.
    at: usize,
    /// The file offset of the next byte.
    pos: u64,
    end: u64,
}

impl Walk<'_> {
    const BUF: usize = 64 << 10;

    fn byte(&mut self) -> Option<u8> {
        if self.at == self.buf.len() {
            self.fill()?;
        }
        let b = self.buf[self.at];
        self.at += 1;
        self.pos += 1;
        Some(b)
    }

    /// Read the next bytes of the footer, from `pos` on; `None` at its end.
    fn fill(&mut self) -> Option<()> {
        let n = (self.end - self.pos).min(Self::BUF as u64) as usize;
        if n == 0 {
            return None;
        }
        self.buf.resize(n, 0);
        let mut f = self.file;
        f.seek(SeekFrom::Start(self.pos)).ok()?;
        f.read_exact(&mut self.buf).ok()?;
        self.at = 0;
        Some(())
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn bytes(&mut self, n: u64) -> Option<()> {
        if n > self.end - self.pos {
            return None;
        }
        let buffered = (self.buf.len() - self.at) as u64;
        if n <= buffered {
            self.at += n as usize;
        } else {
            // Past the buffer: the next byte read refills it from there.
            self.at = self.buf.len();
        }
        self.pos += n;
        Some(())
    }

    /// A struct's next field: its id and type, `None` at the struct's end.
    fn field(&mut self, last: &mut i16) -> Option<Option<(i16, u8)>> {
        let b = self.byte()?;
        // As parquet reads it: a type of 0 is the end, whatever the delta.
        if b & 0x0f == 0 {
            return Some(None);
        }
        let ty = b & 0x0f;
        let delta = b >> 4;
        let id = if delta == 0 {
            let z = self.varint()?;
            i16::try_from((z >> 1) as i64 ^ -((z & 1) as i64)).ok()?
        } else {
            last.checked_add(i16::from(delta))?
        };
        *last = id;
        Some(Some((id, ty)))
    }

    /// A list's or set's header: its elements' type and count.
    fn list_header(&mut self) -> Option<(u8, u64)> {
        let b = self.byte()?;
        let count = match b >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        Some((b & 0x0f, count))
    }

    /// Skip a value of type `ty`, as parquet's decoder skips it: a boolean is nothing, in a
    /// list too (Thrift writes a byte there, but no footer field is a list of booleans). Every
    /// other value is a byte at least, so a count larger than the footer fails at its end.
    fn skip(&mut self, ty: u8, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match ty {
            BOOL_TRUE | BOOL_FALSE => {}
            BYTE => self.bytes(1)?,
            I16 | I32 | I64 => {
                self.varint()?;
            }
            DOUBLE => self.bytes(8)?,
            BINARY => {
                let n = self.varint()?;
                self.bytes(n)?;
            }
            LIST | SET => {
                let (elem, count) = self.list_header()?;
                if matches!(elem, BOOL_TRUE | BOOL_FALSE) {
                    return Some(());
                }
                for _ in 0..count {
                    self.skip(elem, depth + 1)?;
                }
            }
            MAP => {
                let count = self.varint()?;
                if count > 0 {
                    let types = self.byte()?;
                    let (k, v) = (types >> 4, types & 0x0f);
                    if matches!(k, BOOL_TRUE | BOOL_FALSE) && matches!(v, BOOL_TRUE | BOOL_FALSE) {
                        return Some(());
                    }
                    for _ in 0..count {
                        self.skip(k, depth + 1)?;
                        self.skip(v, depth + 1)?;
                    }
                }
            }
            STRUCT => {
                let mut last = 0i16;
                while let Some((_, ty)) = self.field(&mut last)? {
                    self.skip(ty, depth + 1)?;
                }
            }
            _ => return None,
        }
        Some(())
    }
}
