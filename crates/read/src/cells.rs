//! Reading one cell of a row: integers, times, ids, devices, reals and text, each checked, a
//! value out of range or of another type read as missing.

use crate::query::Fetch;
use anyhow::{Result, bail};

/// Rows read `ORDER BY rowid` must come in increasing rowid order: flow ids and the merge with
/// the link tables rely on it. A damaged b-tree ("Rowid 41 out of order", which SQLite itself
/// does not report while reading) breaks that: fail as a damaged file rather than write arrows
/// that dangle.
pub fn check_rowid_order(table: &str, last: &mut Option<i64>, rowid: i64) -> Result<()> {
    if last.is_some_and(|l| rowid <= l) {
        bail!(
            "damaged SQLite database: {table} returns rowid {rowid} after {} (a damaged \
             b-tree; `PRAGMA quick_check` or --check reports it)",
            last.unwrap_or_default()
        );
    }
    *last = Some(rowid);
    Ok(())
}

/// Read an integer column that may be NULL or (in damaged rows) of another type.
#[inline]
pub fn int_at(row: &(impl Fetch + ?Sized), idx: usize) -> Option<i64> {
    row.int(idx)
}

use crate::query::int_of;

/// [`time_at`] of a value already fetched.
#[inline]
pub fn time_of(v: rusqlite::types::ValueRef<'_>) -> Option<i64> {
    int_of(v).filter(|t| (-MAX_TIME..=MAX_TIME).contains(t))
}

/// The latest timestamp a trace can hold: 2^62 ns (146 years). Perfetto encodes timestamps as
/// deltas of signed 64-bit values; times beyond this (a damaged `end` of 2^63 - 1) cannot be
/// placed and are read as missing, so their rows are counted as skipped.
pub const MAX_TIME: i64 = 1 << 62;

/// Read a timestamp column like [`int_at`], `None` beyond [`MAX_TIME`] (or below -MAX_TIME).
#[inline]
pub fn time_at(row: &(impl Fetch + ?Sized), idx: usize) -> Option<i64> {
    int_at(row, idx).filter(|t| (-MAX_TIME..=MAX_TIME).contains(t))
}

/// Global thread and process ids are below 2^56 (pid and tid in 24 bits each, plus the
/// 8-bit host); a value outside `0..2^56` cannot name a track of its own and is read as missing.
pub const MAX_GLOBAL_ID: i64 = 1 << 56;

/// Read a global thread id: [`int_at`] within `0..MAX_GLOBAL_ID`, else `None`.
#[inline]
pub fn tid_at(row: &(impl Fetch + ?Sized), idx: usize) -> Option<i64> {
    global_id(row.int(idx))
}

/// [`tid_at`] of a value already fetched. This is where nsys' `globalTid` (and `globalPid`)
/// becomes the model's thread (process) id: both pack the machine, PID and TID alike (see
/// `model::global_pid_of`), so a valid one is taken as it is.
#[inline]
pub fn global_tid_of(v: rusqlite::types::ValueRef<'_>) -> Option<i64> {
    global_id(int_of(v))
}

#[inline]
pub(super) fn global_id(n: Option<i64>) -> Option<i64> {
    n.filter(|t| (0..MAX_GLOBAL_ID).contains(t))
}

/// Read a CUDA device number: [`int_at`] within `0..2^32` (a GPU's track is named by it), else
/// `None`.
#[inline]
pub fn device_at(row: &(impl Fetch + ?Sized), idx: usize) -> Option<i64> {
    device(row.int(idx))
}

/// [`device_at`] of a value already fetched.
#[inline]
pub fn device_of(v: rusqlite::types::ValueRef<'_>) -> Option<i64> {
    device(int_of(v))
}

#[inline]
pub(super) fn device(n: Option<i64>) -> Option<i64> {
    n.filter(|d| (0..1 << 32).contains(d))
}

/// Read a float column that may be stored as integer or NULL.
#[inline]
pub fn real_at(row: &(impl Fetch + ?Sized), idx: usize) -> Option<f64> {
    match row.fetch(idx) {
        rusqlite::types::ValueRef::Real(v) => Some(v),
        rusqlite::types::ValueRef::Integer(v) => Some(v as f64),
        _ => None,
    }
}

/// Read a text column lossily: exports can hold bytes that are not valid UTF-8.
#[inline]
pub fn text_at(row: &(impl Fetch + ?Sized), idx: usize) -> Option<std::borrow::Cow<'_, str>> {
    text_of(row.fetch(idx))
}

/// [`text_at`] of a value already fetched.
pub fn text_of(v: rusqlite::types::ValueRef<'_>) -> Option<std::borrow::Cow<'_, str>> {
    match v {
        rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => Some(utf8(b)),
        _ => None,
    }
}

/// Bytes as text: borrowed when valid UTF-8 (the fast check), else with replacement characters.
pub fn utf8(b: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}
