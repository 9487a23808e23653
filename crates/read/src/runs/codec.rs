//! The encoding of a run on disk: integer fields delta-coded against the record before, in
//! the fewest bytes each, with a header of their widths.

use std::fs::File;
use std::io::{BufRead, Write};

pub(super) fn bad_run() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "damaged scratch run")
}

/// How records are written: each field as its difference from the same field of the run's
/// previous record (from 0 for the first), in 0, 2, 4 or 8 bytes, the smallest that holds it;
/// a header gives each field's width in 2 bits, and 2 bits more say how a [`Named`] record
/// carries its string. Neighbours in a run are alike (times a little later, the same thread,
/// device and string), so a record takes a quarter of its fixed-width size or less: the bytes
/// a run writes and reads back through the page cache cost system time, and fixed widths per
/// class keep encoding and decoding free of loops over bytes (varints cost more CPU than the
/// system time they saved).
pub(super) const WIDTHS: [usize; 4] = [0, 2, 4, 8];
/// Per width class: the shift that sign-extends the low bytes, and what of them to keep.
pub(super) const SIGN_SHIFTS: [u32; 4] = [0, 48, 32, 0];
pub(super) const KEEP: [i64; 4] = [0, -1, -1, -1];

/// Header bytes of a record of `n` fields.
pub(super) const fn header_len(n: usize) -> usize {
    (2 * n + 2).div_ceil(8)
}

/// The header at the start of `b`: the string tag in its low 2 bits, then 2 bits per field.
pub(super) fn header_of(b: &[u8], header: usize) -> u32 {
    let mut h = [0u8; 4];
    h[..header].copy_from_slice(&b[..header]);
    u32::from_le_bytes(h)
}

/// Field `i`'s width class in a header.
pub(super) fn class_of(classes: u32, i: usize) -> usize {
    (classes >> (2 + 2 * i)) as usize & 3
}

/// Room for an encoded record of up to 15 fields, with 8 bytes to spare: each field is written
/// as 8 bytes and the position advanced by its width.
pub(super) const ENCODED: usize = 4 + 15 * 8 + 8;

/// Encode `fields` after `prev` (its run's previous record) with the string tag `tag` (0 for
/// records without strings) in `out`; the encoded length.
pub(super) fn encode<const N: usize>(
    fields: &[i64; N],
    prev: Option<&[i64; N]>,
    tag: u32,
    out: &mut [u8; ENCODED],
) -> usize {
    const { assert!(N <= 15, "the header holds 15 fields") };
    let header = header_len(N);
    let mut at = header;
    let mut classes = tag;
    for i in 0..N {
        let d = fields[i].wrapping_sub(prev.map_or(0, |p| p[i]));
        let class = if d == 0 {
            0
        } else if d as i16 as i64 == d {
            1
        } else if d as i32 as i64 == d {
            2
        } else {
            3
        };
        out[at..at + 8].copy_from_slice(&d.to_le_bytes());
        at += WIDTHS[class];
        classes |= (class as u32) << (2 + 2 * i);
    }
    out[..header].copy_from_slice(&classes.to_le_bytes()[..header]);
    at
}

/// Decode the fields of a record from `b`, which holds at least `header_len(N) + 8 * N` bytes,
/// into `prev` (the run's previous record, updated in place); its string tag and the encoded
/// length.
pub(super) fn decode<const N: usize>(b: &[u8], prev: &mut [i64; N]) -> (u32, usize) {
    let header = header_len(N);
    let classes = header_of(b, header);
    let b = &b[..header + 8 * N];
    let mut at = header;
    for (i, field) in prev.iter_mut().enumerate() {
        let class = class_of(classes, i);
        // At most `header + 8 * i`: the clamp changes nothing, and drops the bounds check.
        let at8 = at.min(b.len() - 8);
        let raw = i64::from_le_bytes(b[at8..at8 + 8].try_into().expect("8 bytes"));
        // Sign-extend the low bytes, without a branch per field (classes vary record to
        // record, and a mispredicted branch costs more than these shifts).
        let shift = SIGN_SHIFTS[class];
        let d = ((raw << shift) >> shift) & KEEP[class];
        *field = field.wrapping_add(d);
        at = at8 + WIDTHS[class];
    }
    (classes & 3, at)
}

/// The next record's fields (see [`encode`]) into `prev`, and its string tag; `None` at a
/// clean end of file. Decoded straight from the reader's buffer unless the record straddles
/// its end.
pub(super) fn read_fields<const N: usize>(
    r: &mut impl BufRead,
    prev: &mut [i64; N],
) -> std::io::Result<Option<u32>> {
    let header = header_len(N);
    let buf = r.fill_buf()?;
    if buf.is_empty() {
        return Ok(None);
    }
    if buf.len() >= header + 8 * N {
        let (tag, len) = decode(buf, prev);
        r.consume(len);
        return Ok(Some(tag));
    }
    let mut b = [0u8; ENCODED];
    r.read_exact(&mut b[..header])?;
    let classes = header_of(&b, header);
    let body: usize = (0..N).map(|i| WIDTHS[class_of(classes, i)]).sum();
    r.read_exact(&mut b[header..header + body])?;
    Ok(Some(decode(&b, prev).0))
}

pub(super) fn write_fields<const N: usize>(
    fields: &[i64; N],
    prev: Option<&[i64; N]>,
    tag: u32,
    w: &mut RunWriter,
) -> std::io::Result<()> {
    let len = encode(fields, prev, tag, w.room()?);
    w.at += len;
    Ok(())
}

/// A run's file, written through a buffer that records are encoded straight into (no copy of
/// each record from a buffer of its own, which would also be cleared for each record).
pub struct RunWriter {
    pub(super) file: File,
    /// [`RunWriter::BUF`] bytes to fill, and room for one more encoded record.
    pub(super) buf: Box<[u8]>,
    /// The end of what `buf` holds.
    pub(super) at: usize,
}

impl RunWriter {
    pub(super) const BUF: usize = 1 << 16;

    pub(super) fn new(file: File) -> RunWriter {
        RunWriter {
            file,
            buf: vec![0; RunWriter::BUF + ENCODED].into_boxed_slice(),
            at: 0,
        }
    }

    /// Room for an encoded record at the end of the buffer.
    pub(super) fn room(&mut self) -> std::io::Result<&mut [u8; ENCODED]> {
        if self.at > RunWriter::BUF {
            self.flush()?;
        }
        Ok((&mut self.buf[self.at..self.at + ENCODED])
            .try_into()
            .expect("room for a record past the buffer"))
    }

    pub(super) fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.at + bytes.len() > self.buf.len() {
            self.flush()?;
            if bytes.len() > RunWriter::BUF {
                return self.file.write_all(bytes);
            }
        }
        self.buf[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
        Ok(())
    }

    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        self.file.write_all(&self.buf[..self.at])?;
        self.at = 0;
        Ok(())
    }
}
