//! Scratch space: a private temporary directory, and an SQLite database in it with the export
//! attached, for derived tables computed with bounded memory.

use crate::connection::read_params;
use crate::connection::sqlite_uri;
use crate::connection::tune;
use crate::schema::Schema;
use anyhow::Result;
use rusqlite::{Connection, OpenFlags};
use std::path::PathBuf;

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
    if crate::inputs::classify(&schema.path).is_columnar() {
        // The export's tables answer to any database's name, `src` too (see
        // `arrow::register`); the empty database only makes `src` a name.
        conn.execute_batch("ATTACH DATABASE ':memory:' AS src")?;
        crate::arrow::register(&conn, &schema.path)?;
    } else {
        conn.execute(
            "ATTACH DATABASE ?1 AS src",
            [sqlite_uri(&schema.path, read_params(&schema.path))],
        )?;
    }
    Ok((dir, path, conn))
}
