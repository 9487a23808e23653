//! Reading Nsight Systems exports (SQLite, Arrow, Parquet) into the neutral model of
//! `nsys-perfetto-model`: nsys-perfetto's sources. This crate knows nothing of layout or the
//! output formats (it does not depend on the writing crate), and the compiler holds it to that.
//!
//! Every table is optional and every column is looked up by name: exports from nsys 2020.3 to
//! 2026.2 (schemas 2.9 to 3.25) differ in both. Readers stream rows and never hold a whole table.

pub mod api;
pub mod arrow;
pub mod column;
pub mod contexts;
pub mod enums;
pub mod flows;
pub mod gpu;
pub mod gpu_memory;
pub mod info;
pub mod inputs;
mod mapped;
pub mod metrics;
pub mod nvtx;
pub mod order;
pub mod osrt;
pub mod parquet;
pub mod projection;
pub mod query;
pub mod reader;
pub mod recipes;
pub mod reports;
pub mod rules;
pub mod runs;
pub mod samples;
pub mod scan;
pub mod sched;
pub mod source;
pub mod sync;
pub mod tables;

use anyhow::{Context, Result, anyhow, bail};
use inputs::Input;
pub use order::{REORDER_WINDOW, Reorder, merge_by_start};
pub use query::{Fetch, Query, quote_ident};
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
pub const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
pub const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
pub const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
pub const DRIVER: &str = "CUPTI_ACTIVITY_KIND_DRIVER";
pub const NVTX: &str = "NVTX_EVENTS";
pub const SYNC: &str = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
/// The tables of MPI calls (each row a call with `start`, `end` and its name as `textId`).
pub const MPI_TABLES: [&str; 4] = [
    "MPI_P2P_EVENTS",
    "MPI_START_WAIT_EVENTS",
    "MPI_OTHER_EVENTS",
    "MPI_COLLECTIVES_EVENTS",
];

/// `NVTX_EVENTS.eventType`: the kinds of row the NVTX table holds, named once.
pub mod nvtx_type {
    /// A mark (an instant).
    pub const MARK: i64 = 34;
    /// A push/pop range: nests per thread.
    pub const PUSH_POP: i64 = 59;
    /// A start/end range: a free interval, may end on another thread.
    pub const START_END: i64 = 60;
    /// A push/pop range of an NVTXT file (`nsys`' text-file NVTX import), which nsys' reports
    /// count among the ranges.
    pub const NVTXT_PUSH_POP: i64 = 70;
    /// A start/end range of an NVTXT file.
    pub const NVTXT_START_END: i64 = 71;
    /// Rows that name things rather than being events: categories, thread names, domains.
    pub const NAMING: [i64; 4] = [CATEGORY, THREAD_NAME, DOMAIN_CREATE, DOMAIN_DESTROY];
    /// Names an NVTX category (`category`) of a domain: `text` is its name.
    pub const CATEGORY: i64 = 33;
    /// Names the thread of `globalTid`: `text` is its name.
    pub const THREAD_NAME: i64 = 39;
    /// Creates the domain `domainId`: `text` is its name.
    pub const DOMAIN_CREATE: i64 = 75;
    pub const DOMAIN_DESTROY: i64 = 76;
}

/// `PRAGMA quick_check`: an error quoting SQLite's first findings when the file is damaged.
pub fn quick_check(conn: &rusqlite::Connection) -> Result<()> {
    let mut stmt = conn
        .prepare("PRAGMA quick_check(5)")
        .map_err(|e| anyhow!("damaged SQLite database: {e}"))?;
    let found: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| anyhow!("damaged SQLite database: {e}"))?;
    if found.len() == 1 && found[0] == "ok" {
        return Ok(());
    }
    bail!(
        "damaged SQLite database (PRAGMA quick_check: {})",
        found.join("; ").replace('\n', " ")
    )
}

/// An opened export: the path and the set of tables with their columns.
#[derive(Debug, Clone)]
pub struct Schema {
    pub path: PathBuf,
    tables: HashMap<String, Vec<String>>,
    /// Tables declared `WITHOUT ROWID` (they have no implicit rowid).
    without_rowid: std::collections::HashSet<String>,
    /// The Arrow rewriting of a Parquet export, which `path` names: removed when the last
    /// copy of the schema goes.
    _rewritten: Option<std::sync::Arc<tempfile::TempDir>>,
    /// An Arrow export's tables (a directory of `.arrow` files, or an `.arrows` file), loaded
    /// once for every copy of the schema and its readers; `None` for an SQLite export.
    loaded: Option<std::sync::Arc<arrow::Tables>>,
    /// The files of an SQLite or Parquet export as they were opened (an Arrow export's are in
    /// `loaded`): each reader of an SQLite export opens its own connection, which would read
    /// another file where it was replaced meanwhile; a Parquet export was read into `path`.
    opened: Vec<(PathBuf, arrow::Stamp)>,
}

impl Schema {
    /// Whether the export is nsys' Arrow export (see [`arrow`]).
    pub fn is_arrow(&self) -> bool {
        self.loaded.is_some()
    }

    /// An error where the export changed since it was opened (truncated, rewritten, replaced
    /// or removed), naming the file of an Arrow export that did: what was read may not be the
    /// export's.
    pub fn unchanged(&self) -> Result<()> {
        if let Some(e) = first_change(&self.opened, &self.path) {
            return Err(e);
        }
        self.loaded.as_ref().map_or(Ok(()), |t| t.unchanged())
    }

    /// `read`, what reading the export gave, checked against a change of the export meanwhile
    /// (see [`Schema::unchanged`]): where there is one, it is what went wrong (a truncated
    /// file reads as damaged, a removed one as missing).
    pub fn read_through<T>(&self, read: Result<T>) -> Result<T> {
        self.unchanged()?;
        read
    }

    pub fn has_table(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    pub fn tables(&self) -> impl Iterator<Item = &str> {
        self.tables.keys().map(String::as_str)
    }

    /// The tables named `prefix` and more (nsys' one table per kind: `OPENMP_EVENT_KIND_*`),
    /// sorted by name.
    pub fn tables_named(&self, prefix: &str) -> Vec<&str> {
        let mut tables: Vec<&str> = self
            .tables()
            .filter(|t| t.len() > prefix.len() && t.starts_with(prefix))
            .collect();
        tables.sort_unstable();
        tables
    }

    /// The table's columns in table order (empty when the table is absent).
    pub fn columns(&self, table: &str) -> &[String] {
        self.tables.get(table).map_or(&[], Vec::as_slice)
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

    /// The name under which a table's implicit rowid can be selected: `rowid`, else `_rowid_`,
    /// else `oid` (a real column of that name hides the rowid); `None` for a `WITHOUT ROWID`
    /// table or one whose columns shadow all three.
    pub fn rowid(&self, table: &str) -> Option<&'static str> {
        if !self.has_table(table) || self.without_rowid.contains(table) {
            return None;
        }
        ["rowid", "_rowid_", "oid"]
            .into_iter()
            .find(|r| !self.tables[table].iter().any(|c| c.eq_ignore_ascii_case(r)))
    }

    /// `alias.rowid` (see [`Schema::rowid`]), or `NULL` when the table has none.
    pub fn rowid_of(&self, table: &str, alias: &str) -> String {
        match self.rowid(table) {
            Some(r) => format!("{alias}.{r}"),
            None => "NULL".to_string(),
        }
    }

    /// Whether the table exists and has all of these columns.
    pub fn has_columns(&self, table: &str, columns: &[&str]) -> bool {
        columns.iter().all(|c| self.has_column(table, c))
    }
}

/// Percent-encode a path into an SQLite `file:` URI so any file name works.
/// The path's raw bytes are encoded, so names that are not UTF-8 work too.
pub fn sqlite_uri(path: &Path, params: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
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

/// The URI parameters to read an export with. `immutable=1` tells SQLite nobody writes the file
/// while we read, which skips locking and works on read-only media; but an immutable open
/// ignores the write-ahead log, so a WAL-mode database whose committed changes are still in its
/// `-wal` file (header bytes 18 and 19 are 2, and `X-wal` is not empty) is opened read-only
/// without it, and SQLite reads the log.
pub fn read_params(path: &Path) -> &'static str {
    if has_pending_wal(path) {
        "mode=ro"
    } else {
        "mode=ro&immutable=1"
    }
}

/// Whether `path` is a WAL-mode database with a non-empty `-wal` file beside it.
pub fn has_pending_wal(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 20];
    // Never open a FIFO or device: reading one can block forever.
    let wal_mode = std::fs::metadata(path).is_ok_and(|m| m.is_file())
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut header))
            .is_ok()
        && header[18] == 2
        && header[19] == 2;
    if !wal_mode {
        return false;
    }
    let mut wal = path.as_os_str().to_os_string();
    wal.push("-wal");
    std::fs::metadata(&wal).is_ok_and(|m| m.is_file() && m.len() > 0)
}

/// Reading a WAL database without `immutable` makes SQLite create its `-shm` index file beside
/// it. This removes that file when the guard drops (all connections closed) if it did not exist
/// when the guard was made: no litter in the user's folder. It is also removed on an interrupt.
pub struct ShmGuard {
    created: Option<PathBuf>,
}

impl ShmGuard {
    pub fn new(path: &Path) -> ShmGuard {
        let mut shm = path.as_os_str().to_os_string();
        shm.push("-shm");
        let shm = PathBuf::from(shm);
        let created =
            (has_pending_wal(path) && std::fs::symlink_metadata(&shm).is_err()).then(|| {
                nsys_perfetto_model::cleanup::register(&shm);
                shm
            });
        ShmGuard { created }
    }
}

impl Drop for ShmGuard {
    fn drop(&mut self) {
        if let Some(shm) = &self.created {
            let _ = std::fs::remove_file(shm);
            nsys_perfetto_model::cleanup::forget(shm);
        }
    }
}

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

/// Open the export read-only (see [`read_params`]). An Arrow export is read through an
/// in-memory database where its tables are virtual tables (see [`arrow::register`]).
pub fn open_readonly(path: &Path) -> Result<Connection> {
    if inputs::classify(path).is_arrow() {
        let mut conn = Connection::open_in_memory_with_flags(
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        tune(&mut conn)?;
        arrow::register(&conn, path)?;
        return Ok(conn);
    }
    let uri = sqlite_uri(path, read_params(path));
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
///
/// 2 MB of page cache per connection: the readers scan their tables once, in order, so a page
/// is rarely read twice, and a conversion holds six connections at once (a larger cache costs
/// memory and, from its own churn, CPU).
pub fn tune(conn: &mut Connection) -> Result<()> {
    conn.execute_batch("PRAGMA cache_size = -2048; PRAGMA temp_store = FILE;")?;
    // NSYS_PERFETTO_SQL=1 prints every statement run (what bench/floor.rs must read too);
    // NSYS_PERFETTO_SQL=time prints each with the time it took, when it finishes.
    if let Some(v) = std::env::var_os("NSYS_PERFETTO_SQL") {
        use rusqlite::trace::{TraceEvent, TraceEventCodes};
        let codes = if v == "time" {
            TraceEventCodes::SQLITE_TRACE_PROFILE
        } else {
            TraceEventCodes::SQLITE_TRACE_STMT
        };
        conn.trace_v2(
            codes,
            Some(|e: TraceEvent<'_>| match e {
                TraceEvent::Stmt(_, sql) => eprintln!("sql: {sql}"),
                TraceEvent::Profile(stmt, took) => {
                    eprintln!("sql {:.3} s: {}", took.as_secs_f64(), stmt.sql())
                }
                _ => {}
            }),
        )?;
    }
    Ok(())
}

/// Check the file and read its schema. Errors are one line naming the problem; where the
/// export (a file, or a file in its folder) changed meanwhile, the change is the problem (a
/// file truncated while it is read reads as damaged, one removed as missing).
pub fn open_schema(path: &Path) -> Result<(Connection, Schema)> {
    let files = |path: &Path| -> Vec<(PathBuf, arrow::Stamp)> {
        let listed = match std::fs::read_dir(path) {
            Ok(dir) => dir.filter_map(|e| Some(e.ok()?.path())).collect(),
            Err(_) => vec![path.to_path_buf()],
        };
        listed
            .into_iter()
            .filter_map(|f| Some((arrow::stamp_of(&f)?, f)))
            .map(|(s, f)| (f, s))
            .collect()
    };
    let before = files(path);
    open_schema_as_it_is(path).map_err(|e| first_change(&before, path).unwrap_or(e))
}

/// The error of the first of `files` (the export `export`, or files in it, with their stamps as
/// they were opened) that changed since: the export is named by the caller, a file in it by
/// its name.
fn first_change(files: &[(PathBuf, arrow::Stamp)], export: &Path) -> Option<anyhow::Error> {
    files.iter().find_map(|(f, s)| {
        let how = arrow::change_since(f, *s)?;
        Some(match f == export {
            true => arrow::changed(how),
            false => anyhow::anyhow!(
                "{}: {:#}",
                Path::new(f.file_name().unwrap_or_default()).display(),
                arrow::changed(how)
            ),
        })
    })
}

/// [`open_schema`], the export taken as it is.
fn open_schema_as_it_is(path: &Path) -> Result<(Connection, Schema)> {
    let meta = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("cannot read: {e}"))?;
    let kind = inputs::classify(path);
    let arrow = kind.is_arrow();
    if meta.is_dir() {
        if kind == Input::ParquetDir {
            let (rewritten, opened) = parquet::to_arrow(path)?;
            let (conn, mut schema) = open_schema(rewritten.path())?;
            schema._rewritten = Some(std::sync::Arc::new(rewritten));
            schema.opened = opened;
            return Ok((conn, schema));
        }
        if !arrow {
            bail!("is a directory, not an nsys export");
        }
    } else if !meta.is_file() {
        // Never opened: reading a FIFO would wait for a writer forever.
        bail!("not a regular file (a FIFO, device or socket): give an nsys SQLite export file");
    }
    let mut header = [0u8; 16];
    if meta.is_file() && !arrow {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read: {e}"))?;
        let n = f.read(&mut header).unwrap_or(0);
        if n < 16 || &header != b"SQLite format 3\0" {
            if kind == Input::Trace {
                bail!(
                    "a Perfetto trace, not an nsys SQLite export: open it with `nsys-perfetto \
                     open {}`",
                    path.display()
                );
            }
            // Any name but an SQLite export's: the user may not know what the tool reads.
            if kind != Input::Sqlite {
                bail!(
                    "not an nsys report or export: the tool reads {}",
                    inputs::INPUTS
                );
            }
            bail!("not an SQLite database (expected an nsys SQLite export)");
        }
    }
    let (conn, tables, without_rowid, loaded) = if arrow {
        let all = arrow::Tables::load(path)?;
        let tables = all
            .columns()
            .map(|(t, columns)| (t.to_string(), columns.map(str::to_string).collect()))
            .collect();
        let conn = open_readonly(path)?;
        (
            conn,
            tables,
            Default::default(),
            Some(std::sync::Arc::new(all)),
        )
    } else {
        let conn = open_readonly(path)?;
        let (tables, without_rowid) = read_sqlite_schema(&conn)?;
        (conn, tables, without_rowid, None)
    };
    if !inputs::NSYS_MARKERS.iter().any(|t| tables.contains_key(*t)) {
        let what = if arrow {
            "Arrow file"
        } else {
            "SQLite database"
        };
        bail!("{what} is not an Nsight Systems export (no StringIds, NVTX or CUPTI tables)");
    }
    Ok((
        conn,
        Schema {
            path: path.to_path_buf(),
            tables,
            without_rowid,
            _rewritten: None,
            opened: (!arrow && meta.is_file())
                .then(|| (path.to_path_buf(), arrow::stamp(&meta)))
                .into_iter()
                .collect(),
            loaded,
        },
    ))
}

/// The tables of an SQLite export with their columns, and those declared `WITHOUT ROWID`.
#[allow(clippy::type_complexity)]
fn read_sqlite_schema(
    conn: &Connection,
) -> Result<(
    HashMap<String, Vec<String>>,
    std::collections::HashSet<String>,
)> {
    let mut tables: HashMap<String, Vec<String>> = HashMap::new();
    let mut without_rowid = std::collections::HashSet::new();
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
    {
        let mut stmt = conn
            .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            .map_err(|e| anyhow::anyhow!("damaged SQLite database: {e}"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })
            .map_err(|e| anyhow::anyhow!("damaged SQLite database: {e}"))?;
        for row in rows {
            let (name, sql) = row.map_err(|e| anyhow::anyhow!("damaged SQLite database: {e}"))?;
            // Table options follow the column list: `) WITHOUT ROWID`, `) STRICT, WITHOUT ROWID`.
            let options = sql
                .as_deref()
                .and_then(|s| s.rsplit_once(')'))
                .map(|(_, o)| o.to_ascii_uppercase())
                .unwrap_or_default();
            if options.contains("WITHOUT") && options.contains("ROWID") {
                without_rowid.insert(name);
            }
        }
    }
    Ok((tables, without_rowid))
}

/// Read an integer column that may be NULL or (in damaged rows) of another type.
#[inline]
pub fn int_at(row: &(impl Fetch + ?Sized), idx: usize) -> Option<i64> {
    row.int(idx)
}

pub use query::int_of;

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
fn global_id(n: Option<i64>) -> Option<i64> {
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
fn device(n: Option<i64>) -> Option<i64> {
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

/// A fresh scratch directory in `$TMPDIR` named `{prefix}<pid>-...`, removed on interrupt (and
/// by the next run, should this one be killed), after removing what dead runs left there.
pub fn scratch_dir(prefix: &str) -> Result<tempfile::TempDir> {
    let tmp = std::env::temp_dir();
    // What runs killed with SIGKILL left there.
    nsys_perfetto_model::cleanup::remove_dead_scratch();
    nsys_perfetto_model::cleanup::create(
        || {
            tempfile::Builder::new()
                .prefix(&nsys_perfetto_model::cleanup::prefix(prefix))
                .tempdir_in(&tmp)
        },
        |d| d.path().to_path_buf(),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "cannot create a scratch directory in the temporary folder {} (TMPDIR): {}",
            tmp.display(),
            nsys_perfetto_model::errors::os_error(&e)
        )
    })
}

/// A scratch SQLite database in a private temporary directory (deleted with the `TempDir`),
/// with the export attached read-only as `src`: where derived tables (flow links, the NVTX
/// projection) are computed with bounded memory.
pub fn scratch_db(
    schema: &Schema,
    prefix: &str,
    file: &str,
) -> Result<(tempfile::TempDir, PathBuf, Connection)> {
    let dir = scratch_dir(prefix)?;
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
    if inputs::classify(&schema.path).is_arrow() {
        // The export's tables answer to any database's name, `src` too (see
        // `arrow::register`); the empty database only makes `src` a name.
        conn.execute_batch("ATTACH DATABASE ':memory:' AS src")?;
        arrow::register(&conn, &schema.path)?;
    } else {
        conn.execute(
            "ATTACH DATABASE ?1 AS src",
            [sqlite_uri(&schema.path, read_params(&schema.path))],
        )?;
    }
    Ok((dir, path, conn))
}

/// Call stacks of the rows of a table (CUDA_CALLCHAINS, OSRT_CALLCHAINS by `callchainId`),
/// innermost frame first, one symbol a line (`?` for a symbol missing from StringIds). A
/// profile repeats a few hundred stacks over many calls, so each is looked up once and kept,
/// up to `Callchains::CACHED` of them (a correlated subquery per row costs many times the
/// reading of the table itself).
pub struct Callchains<'c> {
    stmt: Option<rusqlite::Statement<'c>>,
    cache: HashMap<i64, Option<std::rc::Rc<str>>, nsys_perfetto_model::model::FastHash>,
}

impl<'c> Callchains<'c> {
    const CACHED: usize = 1 << 14;

    /// What the reader selects for [`Callchains::get`]: the row's `callchainId`, or `NULL` when
    /// the export has no stacks for `table`.
    pub fn column(schema: &Schema, table: &str, chains: &str) -> String {
        if schema.has_column(table, "callchainId")
            && schema.has_columns(chains, &["id", "symbol", "stackDepth"])
        {
            "t.callchainId".to_string()
        } else {
            "NULL".to_string()
        }
    }

    pub fn new(conn: &'c Connection, schema: &Schema, table: &str, chains: &str) -> Result<Self> {
        let stmt = if Self::column(schema, table, chains) == "NULL" {
            None
        } else if schema.has_columns("StringIds", &["id", "value"]) {
            Some(conn.prepare(&format!(
                "SELECT group_concat(coalesce(s.value, '?'), char(10)) FROM (SELECT symbol FROM {chains} \
                 WHERE id = ?1 ORDER BY stackDepth) cc LEFT JOIN StringIds s ON s.id = cc.symbol"
            ))?)
        } else {
            // No string table: every frame is a dangling id.
            Some(conn.prepare(&format!(
                "SELECT group_concat('?', char(10)) FROM (SELECT symbol FROM {chains} \
                 WHERE id = ?1 ORDER BY stackDepth)"
            ))?)
        };
        Ok(Callchains {
            stmt,
            cache: HashMap::default(),
        })
    }

    /// The stack of the row whose [`Callchains::column`] is column `idx` of `r`.
    pub fn get(
        &mut self,
        r: &(impl Fetch + ?Sized),
        idx: usize,
    ) -> Result<Option<std::rc::Rc<str>>> {
        let Some(stmt) = self.stmt.as_mut() else {
            return Ok(None);
        };
        let lookup = |stmt: &mut rusqlite::Statement<'_>, v: rusqlite::types::Value| {
            stmt.query_row([v], |row| {
                Ok(text_at(row, 0).map(|t| std::rc::Rc::<str>::from(t.as_ref())))
            })
        };
        match r.fetch(idx) {
            rusqlite::types::ValueRef::Null => Ok(None),
            rusqlite::types::ValueRef::Integer(id) => {
                if let Some(c) = self.cache.get(&id) {
                    return Ok(c.clone());
                }
                let c = lookup(stmt, rusqlite::types::Value::Integer(id))?;
                if self.cache.len() >= Self::CACHED {
                    self.cache.clear();
                }
                self.cache.insert(id, c.clone());
                Ok(c)
            }
            // A damaged id: compared as SQLite would, not cached.
            rusqlite::types::ValueRef::Real(v) => {
                Ok(lookup(stmt, rusqlite::types::Value::Real(v))?)
            }
            rusqlite::types::ValueRef::Text(v) => Ok(lookup(
                stmt,
                rusqlite::types::Value::Text(String::from_utf8_lossy(v).into_owned()),
            )?),
            rusqlite::types::ValueRef::Blob(v) => {
                Ok(lookup(stmt, rusqlite::types::Value::Blob(v.to_vec()))?)
            }
        }
    }
}
