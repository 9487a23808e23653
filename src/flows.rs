//! Flow arrows from each CUDA API call to the GPU rows it launched.
//!
//! A GPU row and its launch share `correlationId` within one process (ids repeat across
//! processes). The link tables are computed once by SQLite into a scratch database, so memory
//! stays bounded however long the profile: `gpu_flow` gives each linked GPU row its own flow id,
//! and `api_flow` gives each launching call the consecutive range of ids of its GPU rows, so a
//! launch that fans out to N rows gets N arrows.

use crate::nsys::{self, DRIVER, KERNEL, MEMCPY, MEMSET, RUNTIME, Schema};
use anyhow::{Context, Result};
use rusqlite::{Connection, OpenFlags};
use std::path::PathBuf;

/// The schema name the scratch database is attached under.
pub const FLOWS_DB: &str = "flows";

pub struct FlowDb {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// GPU rows linked to a launch.
    pub linked: u64,
    /// GPU rows whose launch was found but which start no later than it: drawing them would
    /// point an arrow backwards in time, which Perfetto's importer rejects.
    pub starts_before_launch: u64,
    /// GPU rows with a correlation id but no API call in their process.
    pub unmatched: u64,
}

impl FlowDb {
    /// Attach the link tables, read-only, to a reader's connection.
    pub fn attach(&self, conn: &Connection) -> Result<()> {
        let uri = nsys::sqlite_uri(&self.path, "mode=ro");
        conn.execute(&format!("ATTACH DATABASE ?1 AS {FLOWS_DB}"), [uri])?;
        Ok(())
    }
}

/// (src number, table) of the GPU tables with what linking needs.
fn gpu_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [(0, KERNEL), (1, MEMCPY), (2, MEMSET)]
        .into_iter()
        .filter(|(_, t)| schema.has_columns(t, &["start", "correlationId", "globalPid"]))
        .collect()
}

fn api_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [
        (crate::nsys::api::SRC_RUNTIME, RUNTIME),
        (crate::nsys::api::SRC_DRIVER, DRIVER),
    ]
    .into_iter()
    .filter(|(_, t)| schema.has_columns(t, &["start", "correlationId", "globalTid"]))
    .collect()
}

/// Build the link tables, or `None` when the export has no GPU rows or no API calls to link.
pub fn prepare(schema: &Schema) -> Result<Option<FlowDb>> {
    let gpu = gpu_tables(schema);
    let api = api_tables(schema);
    if gpu.is_empty() || api.is_empty() {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("nsys-perfetto-")
        .tempdir()
        .context("cannot create a scratch directory")?;
    let path = dir.path().join("flows.sqlite");
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")?;
    nsys::tune(&conn)?;
    let src_uri = nsys::sqlite_uri(&schema.path, "mode=ro&immutable=1");
    conn.execute("ATTACH DATABASE ?1 AS src", [src_uri])?;

    let api_union = api
        .iter()
        .map(|(s, t)| {
            format!(
                "SELECT globalTid >> 24 AS pkey, correlationId AS corr, {s} AS src, rowid AS rid, start \
                 FROM src.\"{t}\" WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let gpu_union = gpu
        .iter()
        .map(|(s, t)| {
            format!(
                "SELECT globalPid >> 24 AS pkey, correlationId AS corr, {s} AS src, rowid AS rid, start \
                 FROM src.\"{t}\" WHERE correlationId IS NOT NULL AND globalPid IS NOT NULL"
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    // One launching call per (process, correlation id): the earliest, should an export repeat one.
    conn.execute_batch(&format!(
        "CREATE TABLE api_first AS SELECT pkey, corr, src, rid, start FROM ( \
           SELECT *, row_number() OVER (PARTITION BY pkey, corr ORDER BY start, src, rid) AS rn \
           FROM ({api_union})) WHERE rn = 1;
         CREATE UNIQUE INDEX api_first_key ON api_first(pkey, corr);
         CREATE TABLE gpu_all AS {gpu_union};
         CREATE TABLE gpu_flow AS SELECT g.src AS src, g.rid AS rid, a.src AS asrc, a.rid AS arid, \
           row_number() OVER (ORDER BY g.pkey, g.corr, g.start, g.src, g.rid) AS flow_id \
           FROM gpu_all g JOIN api_first a ON a.pkey = g.pkey AND a.corr = g.corr \
           WHERE g.start > a.start;
         CREATE INDEX gpu_flow_row ON gpu_flow(src, rid);
         CREATE TABLE api_flow AS SELECT asrc, arid, min(flow_id) AS first, count(*) AS n \
           FROM gpu_flow GROUP BY asrc, arid;
         CREATE INDEX api_flow_row ON api_flow(asrc, arid);"
    ))?;
    let linked: i64 = conn.query_row("SELECT count(*) FROM gpu_flow", [], |r| r.get(0))?;
    let matched: i64 = conn.query_row(
        "SELECT count(*) FROM gpu_all g JOIN api_first a ON a.pkey = g.pkey AND a.corr = g.corr",
        [],
        |r| r.get(0),
    )?;
    let total: i64 = conn.query_row("SELECT count(*) FROM gpu_all", [], |r| r.get(0))?;
    conn.execute_batch("DROP TABLE gpu_all; DROP TABLE api_first;")?;
    drop(conn);
    Ok(Some(FlowDb {
        _dir: dir,
        path,
        linked: linked as u64,
        starts_before_launch: (matched - linked) as u64,
        unmatched: (total - matched) as u64,
    }))
}
