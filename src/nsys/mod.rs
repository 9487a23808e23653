//! Reading Nsight Systems SQLite exports.
//!
//! Every table is optional and every column is looked up by name: exports from nsys 2020.3 to
//! 2026.2 (schemas 2.9 to 3.25) differ in both. Readers stream rows and never hold a whole table.

pub mod api;
pub mod enums;
pub mod flows;
pub mod gpu;
pub mod info;
pub mod nvtx;
pub mod osrt;
pub mod projection;
pub mod sched;
pub mod source;
pub mod sync;

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
pub const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
pub const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
pub const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
pub const DRIVER: &str = "CUPTI_ACTIVITY_KIND_DRIVER";
pub const NVTX: &str = "NVTX_EVENTS";

/// The event tables the readers convert (rows counted for the progress bar).
pub const EVENT_TABLES: [&str; 9] = [
    KERNEL,
    MEMCPY,
    MEMSET,
    RUNTIME,
    DRIVER,
    NVTX,
    osrt::OSRT,
    sync::SYNC,
    sched::SCHED,
];

/// Tables whose presence marks a file as an Nsight Systems export.
const NSYS_MARKERS: &[&str] = &[
    "StringIds",
    "ThreadNames",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_GPU",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    NVTX,
    KERNEL,
    RUNTIME,
];

/// An opened export: the path and the set of tables with their columns.
#[derive(Debug, Clone)]
pub struct Schema {
    pub path: PathBuf,
    tables: HashMap<String, Vec<String>>,
}

impl Schema {
    pub fn has_table(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    pub fn tables(&self) -> impl Iterator<Item = &str> {
        self.tables.keys().map(String::as_str)
    }

    pub fn has_column(&self, table: &str, column: &str) -> bool {
        self.tables
            .get(table)
            .is_some_and(|cols| cols.iter().any(|c| c == column))
    }

    /// `"column"` when the table has it, else `NULL`: lets one query serve every schema version.
    pub fn col(&self, table: &str, column: &str) -> String {
        if self.has_column(table, column) {
            format!("\"{column}\"")
        } else {
            "NULL".to_string()
        }
    }

    /// Like [`Schema::col`] with a table alias prefix.
    pub fn col_of(&self, table: &str, alias: &str, column: &str) -> String {
        if self.has_column(table, column) {
            format!("{alias}.\"{column}\"")
        } else {
            "NULL".to_string()
        }
    }

    /// Whether the table exists and has all of these columns.
    pub fn has_columns(&self, table: &str, columns: &[&str]) -> bool {
        columns.iter().all(|c| self.has_column(table, c))
    }
}

/// Percent-encode a path into an SQLite `file:` URI so any file name works.
pub fn sqlite_uri(path: &Path, params: &str) -> String {
    let raw = path.to_string_lossy();
    let mut out = String::from("file:");
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push('?');
    out.push_str(params);
    out
}

/// Open the export read-only. `immutable=1` tells SQLite nobody writes the file while we read,
/// which skips locking and works on read-only media.
pub fn open_readonly(path: &Path) -> Result<Connection> {
    let uri = sqlite_uri(path, "mode=ro&immutable=1");
    let mut conn = Connection::open_with_flags(
        &uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .context("cannot open as SQLite")?;
    tune(&mut conn)?;
    Ok(conn)
}

/// Bounded memory for sorts and caches: big tables stream, they are never loaded whole.
pub fn tune(conn: &mut Connection) -> Result<()> {
    conn.execute_batch("PRAGMA cache_size = -8192; PRAGMA temp_store = FILE;")?;
    // NSYS_PERFETTO_SQL=1 prints every statement run (what bench/floor.rs must read too).
    if std::env::var_os("NSYS_PERFETTO_SQL").is_some() {
        use rusqlite::trace::{TraceEvent, TraceEventCodes};
        conn.trace_v2(
            TraceEventCodes::SQLITE_TRACE_STMT,
            Some(|e: TraceEvent<'_>| {
                if let TraceEvent::Stmt(_, sql) = e {
                    eprintln!("sql: {sql}");
                }
            }),
        )?;
    }
    Ok(())
}

/// Check the file and read its schema. Errors are one line naming the problem.
pub fn open_schema(path: &Path) -> Result<(Connection, Schema)> {
    let meta = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("cannot read: {e}"))?;
    if meta.is_dir() {
        bail!("is a directory, not an nsys export");
    }
    let mut header = [0u8; 16];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read: {e}"))?;
        let n = f.read(&mut header).unwrap_or(0);
        if n < 16 || &header != b"SQLite format 3\0" {
            bail!("not an SQLite database (expected an nsys SQLite export)");
        }
    }
    let conn = open_readonly(path)?;
    let mut tables: HashMap<String, Vec<String>> = HashMap::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p \
                 WHERE m.type = 'table'",
            )
            .map_err(|e| anyhow::anyhow!("damaged SQLite database: {e}"))?;
        let mut rows = stmt
            .query([])
            .map_err(|e| anyhow::anyhow!("damaged SQLite database: {e}"))?;
        while let Some(row) = rows
            .next()
            .map_err(|e| anyhow::anyhow!("damaged SQLite database: {e}"))?
        {
            let t: String = row.get(0)?;
            let c: String = row.get(1)?;
            tables.entry(t).or_default().push(c);
        }
    }
    if !NSYS_MARKERS.iter().any(|t| tables.contains_key(*t)) {
        bail!(
            "SQLite database is not an Nsight Systems export (no StringIds, NVTX or CUPTI tables)"
        );
    }
    Ok((
        conn,
        Schema {
            path: path.to_path_buf(),
            tables,
        },
    ))
}

/// Read an integer column that may be NULL or (in damaged rows) of another type.
#[inline]
pub fn int_at(row: &rusqlite::Row<'_>, idx: usize) -> Option<i64> {
    match row.get_ref(idx) {
        Ok(rusqlite::types::ValueRef::Integer(v)) => Some(v),
        Ok(rusqlite::types::ValueRef::Real(v)) => Some(v as i64),
        _ => None,
    }
}

/// Read a float column that may be stored as integer or NULL.
#[inline]
pub fn real_at(row: &rusqlite::Row<'_>, idx: usize) -> Option<f64> {
    match row.get_ref(idx) {
        Ok(rusqlite::types::ValueRef::Real(v)) => Some(v),
        Ok(rusqlite::types::ValueRef::Integer(v)) => Some(v as f64),
        _ => None,
    }
}

/// Read a text column lossily: exports can hold bytes that are not valid UTF-8.
#[inline]
pub fn text_at<'r>(row: &'r rusqlite::Row<'_>, idx: usize) -> Option<std::borrow::Cow<'r, str>> {
    match row.get_ref(idx) {
        Ok(rusqlite::types::ValueRef::Text(b)) | Ok(rusqlite::types::ValueRef::Blob(b)) => {
            Some(String::from_utf8_lossy(b))
        }
        _ => None,
    }
}

/// A scratch SQLite database in a private temporary directory (deleted with the `TempDir`),
/// with the export attached read-only as `src`: where derived tables (flow links, the NVTX
/// projection) are computed with bounded memory.
pub fn scratch_db(
    schema: &Schema,
    prefix: &str,
    file: &str,
) -> Result<(tempfile::TempDir, PathBuf, Connection)> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .context("cannot create a scratch directory")?;
    let path = dir.path().join(file);
    let mut conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")?;
    tune(&mut conn)?;
    conn.execute(
        "ATTACH DATABASE ?1 AS src",
        [sqlite_uri(&schema.path, "mode=ro&immutable=1")],
    )?;
    Ok((dir, path, conn))
}

/// SQL for the call stack of a row of `table` aliased `t`, innermost frame first, one symbol a
/// line, from the export's `chains` table (CUDA_CALLCHAINS, OSRT_CALLCHAINS); `NULL` when the
/// export has none.
pub fn callchain_sql(schema: &Schema, table: &str, chains: &str) -> String {
    if schema.has_column(table, "callchainId")
        && schema.has_columns(chains, &["id", "symbol", "stackDepth"])
    {
        format!(
            "(SELECT group_concat(coalesce(s.value, '?'), char(10)) FROM (SELECT symbol FROM {chains} \
             WHERE id = t.callchainId ORDER BY stackDepth) cc LEFT JOIN StringIds s ON s.id = cc.symbol)"
        )
    } else {
        "NULL".to_string()
    }
}

/// Restores start order when a table's rows are only nearly sorted. nsys writes rows in start
/// order, but merged tables and edited exports can have local inversions: a bounded window
/// absorbs those; anything later than that is placed on a separate lane by the layout.
/// Rows that arrive in order (nearly all) wait in a queue, at O(1) per row; only the others go
/// through a heap of small keys, their rows in a slab so they move once in and once out.
pub struct Reorder<T> {
    run: std::collections::VecDeque<(Key, T)>,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(Key, u32)>>,
    slots: Vec<Option<T>>,
    free: Vec<u32>,
    seq: u64,
    capacity: usize,
}

/// (start, tiebreak, arrival): unique, so the queue and the heap never tie.
type Key = (i64, i64, u64);

impl<T> Reorder<T> {
    pub fn new(capacity: usize) -> Self {
        Reorder {
            // Sized once: a ring that grew by doubling would touch twice the window's memory.
            run: std::collections::VecDeque::with_capacity(capacity + 1),
            heap: std::collections::BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
            capacity,
        }
    }

    /// Add a row; returns the earliest row once the window is full.
    pub fn push(&mut self, start: i64, item: T) -> Option<T> {
        self.push_keyed(start, 0, item)
    }

    /// Like [`Reorder::push`], ordering equal starts by `tiebreak` (e.g. `-end`: outer first).
    pub fn push_keyed(&mut self, start: i64, tiebreak: i64, item: T) -> Option<T> {
        self.seq += 1;
        let key = (start, tiebreak, self.seq);
        if self.run.back().is_none_or(|(last, _)| *last < key) {
            self.run.push_back((key, item));
        } else {
            let slot = match self.free.pop() {
                Some(i) => {
                    self.slots[i as usize] = Some(item);
                    i
                }
                None => {
                    self.slots.push(Some(item));
                    (self.slots.len() - 1) as u32
                }
            };
            self.heap.push(std::cmp::Reverse((key, slot)));
        }
        if self.run.len() + self.heap.len() > self.capacity {
            self.pop()
        } else {
            None
        }
    }

    /// Drain remaining rows in start order.
    pub fn pop(&mut self) -> Option<T> {
        let from_heap = match (self.run.front(), self.heap.peek()) {
            (None, None) => return None,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((a, _)), Some(std::cmp::Reverse((b, _)))) => b < a,
        };
        if from_heap {
            let std::cmp::Reverse((_, slot)) = self.heap.pop()?;
            self.free.push(slot);
            self.slots[slot as usize].take()
        } else {
            self.run.pop_front().map(|(_, item)| item)
        }
    }
}

/// Rows held back to restore start order (per reader); bounds memory at a few MB.
pub const REORDER_WINDOW: usize = 32768;

#[cfg(test)]
mod tests {
    use super::Reorder;

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
            let got = w.push(s, i);
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
            assert_eq!(w.pop(), Some(i));
        }
        assert_eq!(w.pop(), None);
    }
}
