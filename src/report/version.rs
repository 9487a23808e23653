//! Which nsys version captured a report, read from the file alone, and which nsys reads which.

use anyhow::{Result, anyhow, bail};
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// An nsys version such as 2022.4.2.1 (year, release, patch, build).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub year: u32,
    pub release: u32,
    pub patch: u32,
    pub build: Option<u32>,
}

impl Version {
    /// Parse the first version in `s`: `2022.4.2.1-df9881f`, `2025@5@1@121-...`,
    /// `NVIDIA Nsight Systems version 2022.4.2.1-df9881f`, `nsight-systems/2020.3.2`.
    pub fn parse(s: &str) -> Option<Version> {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i].is_ascii_digit()
                && (i == 0 || !b[i - 1].is_ascii_digit())
                && let Some(v) = Self::parse_at(&b[i..])
            {
                return Some(v);
            }
            i += 1;
        }
        None
    }

    /// A version starting exactly at `b`: a 4-digit year from 2000, then at least release and
    /// patch, separated by `.` or `@`.
    pub(super) fn parse_at(b: &[u8]) -> Option<Version> {
        let mut parts: Vec<u32> = Vec::new();
        let mut i = 0;
        loop {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() && i - start < 9 {
                i += 1;
            }
            if i == start {
                break;
            }
            parts.push(std::str::from_utf8(&b[start..i]).ok()?.parse().ok()?);
            if parts.len() == 4 || i >= b.len() || !(b[i] == b'.' || b[i] == b'@') {
                break;
            }
            if !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                break;
            }
            i += 1;
        }
        let year = *parts.first()?;
        if parts.len() < 3 || !(2000..2100).contains(&year) {
            return None;
        }
        Some(Version {
            year,
            release: parts[1],
            patch: parts[2],
            build: parts.get(3).copied(),
        })
    }

    /// `2025.5`: the release, which decides what an nsys can read.
    pub fn release_str(&self) -> String {
        format!("{}.{}", self.year, self.release)
    }

    /// Whether an nsys of this version can read a report captured by `capture`: nsys reads the
    /// reports of its own release and older ones, not newer ones.
    pub fn can_read(&self, capture: &Version) -> bool {
        (self.year, self.release) >= (capture.year, capture.release)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.year, self.release, self.patch)?;
        if let Some(b) = self.build {
            write!(f, ".{b}")?;
        }
        Ok(())
    }
}

const REPORT_MAGIC: &[u8] = b"NVIDIA Tegra Profiler Report ";
const TRAILER_MAGIC: &[u8] = b"U3w[END]";

/// The nsys version that captured a report, read from the file: newer reports name it in their
/// header (`NVIDIA Tegra Profiler Report 2025@5@1@121-...`); older ones (header `... Report 1.`)
/// in their "UI Data" section, found through the section table at the end of the file. `None`
/// when the file is a report but names no version we can find. Errors when it is not a report.
pub fn capture_version(report: &Path) -> Result<Option<Version>> {
    let mut f = File::open(report).map_err(|e| anyhow!("cannot read: {e}"))?;
    let mut head = [0u8; 96];
    let n = read_up_to(&mut f, &mut head)?;
    let head = &head[..n];
    if !head.starts_with(REPORT_MAGIC) {
        bail!("not an Nsight Systems report (no report header)");
    }
    let rest = &head[REPORT_MAGIC.len()..];
    let line_end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
    if let Some(v) = Version::parse_at(&rest[..line_end]) {
        return Ok(Some(v));
    }
    if let Some(v) = version_from_sections(&mut f)? {
        return Ok(Some(v));
    }
    // A damaged or unusual section table: look near the end, where the section lives.
    let len = f.metadata()?.len();
    let from = len.saturating_sub(4 << 20);
    f.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::new();
    f.take(4 << 20).read_to_end(&mut tail)?;
    Ok(find_build_version(&tail))
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Reports end with a section table: `[protobuf table][u64 LE table offset]U3w[END]`, the table
/// a repeated message {1: name, 2: offset, 3: size}. The "UI Data" section holds the build
/// string (`2020.3.2.6-87e152c`).
fn version_from_sections(f: &mut File) -> Result<Option<Version>> {
    let len = f.metadata()?.len();
    if len < 16 {
        return Ok(None);
    }
    f.seek(SeekFrom::Start(len - 16))?;
    let mut end = [0u8; 16];
    f.read_exact(&mut end)?;
    if &end[8..] != TRAILER_MAGIC {
        return Ok(None);
    }
    let toc_at = u64::from_le_bytes(end[..8].try_into().expect("8 bytes"));
    if toc_at >= len - 16 || len - 16 - toc_at > 1 << 20 {
        return Ok(None);
    }
    f.seek(SeekFrom::Start(toc_at))?;
    let mut toc = vec![0u8; (len - 16 - toc_at) as usize];
    f.read_exact(&mut toc)?;
    let mut sections = Vec::new();
    for (field, value) in pb_fields(&toc) {
        if let (1, PbValue::Bytes(entry)) = (field, value) {
            let (mut name, mut off, mut size) = (&[][..], 0u64, 0u64);
            for (ef, ev) in pb_fields(entry) {
                match (ef, ev) {
                    (1, PbValue::Bytes(b)) => name = b,
                    (2, PbValue::Int(v)) => off = v,
                    (3, PbValue::Int(v)) => size = v,
                    _ => {}
                }
            }
            sections.push((name, off, size));
        }
    }
    // "UI Data" first; any other small section after it.
    sections.sort_by_key(|(name, _, _)| *name != b"UI Data");
    for (_, off, size) in sections {
        if size == 0 || size > 1 << 20 || off.saturating_add(size) > len {
            continue;
        }
        f.seek(SeekFrom::Start(off))?;
        let mut sec = vec![0u8; size as usize];
        f.read_exact(&mut sec)?;
        if let Some(v) = find_build_version(&sec) {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

enum PbValue<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

/// The top-level fields of a protobuf message; stops at the first malformed byte.
fn pb_fields(mut b: &[u8]) -> Vec<(u64, PbValue<'_>)> {
    fn varint(b: &mut &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&c, rest) = b.split_first()?;
            *b = rest;
            v |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return Some(v);
            }
        }
        None
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let Some(key) = varint(&mut b) else { break };
        let value = match key & 7 {
            0 => match varint(&mut b) {
                Some(v) => PbValue::Int(v),
                None => break,
            },
            2 => {
                let Some(n) = varint(&mut b) else { break };
                if n as usize > b.len() {
                    break;
                }
                let (v, rest) = b.split_at(n as usize);
                b = rest;
                PbValue::Bytes(v)
            }
            1 if b.len() >= 8 => {
                b = &b[8..];
                continue;
            }
            5 if b.len() >= 4 => {
                b = &b[4..];
                continue;
            }
            _ => break,
        };
        out.push((key >> 3, value));
    }
    out
}

/// The last nsys build string in `b`: `YYYY.R.P.B-hhhhhhh` (7 hex digits of the commit).
pub(super) fn find_build_version(b: &[u8]) -> Option<Version> {
    let mut found = None;
    let mut i = 0;
    while i + 4 < b.len() {
        if b[i] == b'2' && b[i + 1] == b'0' && (i == 0 || !b[i - 1].is_ascii_digit()) {
            let mut j = i;
            let mut dots = 0;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                dots += usize::from(b[j] == b'.');
                j += 1;
            }
            let hex = b.get(j + 1..j + 8);
            if dots == 3
                && b.get(j) == Some(&b'-')
                && hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
                && let Some(v) = Version::parse_at(&b[i..j])
            {
                found = Some(v);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    found
}
