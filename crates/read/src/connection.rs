//! Opening an export's database: read-only (an Arrow export through its virtual tables), with
//! bounded caches, its integrity checked, and no litter left beside it.

use anyhow::{Context, Result, anyhow, bail};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};

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
    pub(super) created: Option<PathBuf>,
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

/// Open the export read-only (see [`read_params`]). An Arrow or Parquet export is read through
/// an in-memory database where its tables are virtual tables (see [`crate::arrow::register`]).
pub fn open_readonly(path: &Path) -> Result<Connection> {
    if crate::inputs::classify(path).is_columnar() {
        let mut conn = Connection::open_in_memory_with_flags(
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        tune(&mut conn)?;
        crate::arrow::register(&conn, path)?;
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
