//! Flow arrows from each CUDA API call to the GPU rows it launched.
//!
//! A GPU row and its launch share `correlationId` within one process (ids repeat across
//! processes). Each linked GPU row's flow id is derived from its own identity ([`flow_id`]), so
//! ids are unique across processes and tables. SQLite computes the links once into a scratch
//! database (memory stays bounded however long the profile):
//! - `api_first(pkey, corr) -> (src, rid, start)`: the launching call of each (process,
//!   correlation id); should an export repeat one, the first row wins.
//! - `gpu_link(asrc, arid, src, rid)`: for each launching call, every GPU row it launched, in
//!   primary-key order, so the API reader merges it with its own rowid-ordered scan.
//!
//! The GPU reader looks its rows up in `api_first`; the API reader merges `gpu_link`.

use crate::nsys::{self, DRIVER, KERNEL, MEMCPY, MEMSET, RUNTIME, Schema};
use crate::select::{EventType, Selection};
use anyhow::Result;
use rusqlite::Connection;
use std::path::PathBuf;

/// The schema name the scratch database is attached under.
pub const FLOWS_DB: &str = "flows";

pub struct FlowDb {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl FlowDb {
    /// Attach the link tables, read-only, to a reader's connection.
    pub fn attach(&self, conn: &Connection) -> Result<()> {
        let uri = nsys::sqlite_uri(&self.path, "mode=ro");
        conn.execute(&format!("ATTACH DATABASE ?1 AS {FLOWS_DB}"), [uri])?;
        Ok(())
    }
}

/// The flow id of GPU row `rid` of GPU table number `src` (0 kernel, 1 memcpy, 2 memset).
pub fn flow_id(src: i64, rid: i64) -> u64 {
    (rid as u64) << 2 | (src as u64 & 3)
}

/// (src number, table) of the GPU tables with what linking needs.
pub fn gpu_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [(0, KERNEL), (1, MEMCPY), (2, MEMSET)]
        .into_iter()
        .filter(|(_, t)| {
            schema.has_columns(
                t,
                &[
                    "start",
                    "end",
                    "correlationId",
                    "globalPid",
                    "deviceId",
                    "streamId",
                ],
            )
        })
        // Flow ids are built from rowids: a table without one draws no arrows.
        .filter(|(_, t)| schema.rowid(t).is_some())
        .collect()
}

pub fn api_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [
        (crate::nsys::api::SRC_RUNTIME, RUNTIME),
        (crate::nsys::api::SRC_DRIVER, DRIVER),
    ]
    .into_iter()
    .filter(|(_, t)| schema.has_columns(t, &["start", "end", "correlationId", "globalTid"]))
    .filter(|(_, t)| schema.rowid(t).is_some())
    .collect()
}

/// SQL that is true for the rows of a table its reader converts (rather than counts as skipped):
/// integer (or real) times, end not before start, and the `ids` the reader needs.
/// Only those rows are linked: an arrow to a row that is not written would dangle.
pub fn converted_row_sql(alias: &str, ids: &[&str]) -> String {
    let num = |c: &str| format!("typeof({alias}.\"{c}\") IN ('integer', 'real')");
    let mut parts = vec![
        num("start"),
        num("end"),
        format!("CAST({alias}.\"end\" AS INTEGER) >= CAST({alias}.start AS INTEGER)"),
        format!(
            "CAST({alias}.\"end\" AS INTEGER) <= {}",
            crate::nsys::MAX_TIME
        ),
    ];
    for c in ids {
        parts.push(num(c));
        // The ranges the readers accept (see `nsys::tid_at`, `nsys::device_at`).
        let max = match *c {
            "globalTid" => crate::nsys::MAX_GLOBAL_ID - 1,
            "deviceId" => u32::MAX as i64,
            _ => continue,
        };
        parts.push(format!(
            "CAST({alias}.\"{c}\" AS INTEGER) BETWEEN 0 AND {max}"
        ));
    }
    parts.join(" AND ")
}

/// A GPU row links to its launch only when it starts after the launching call starts: an arrow
/// backwards in time is rejected by Perfetto's importer.
pub fn links(gpu_start: i64, launch_start: Option<i64>) -> bool {
    launch_start.is_some_and(|a| gpu_start > a)
}

/// Build the link tables, or `None` when the export has no GPU rows or no API calls to link.
pub fn prepare(schema: &Schema, sel: &Selection) -> Result<Option<FlowDb>> {
    // Only selected rows link: an arrow never points at a slice that is not written.
    let gpu: Vec<_> = gpu_tables(schema)
        .into_iter()
        .filter(|(s, _)| {
            sel.wants([EventType::Kernel, EventType::Memcpy, EventType::Memset][*s as usize])
        })
        .collect();
    let api = if sel.wants(EventType::CudaApi) {
        api_tables(schema)
    } else {
        Vec::new()
    };
    if gpu.is_empty() || api.is_empty() {
        return Ok(None);
    }
    let (dir, path, conn) = nsys::scratch_db(schema, "nsys-perfetto-", "flows.sqlite")?;

    conn.execute_batch(
        "CREATE TABLE api_first(pkey INTEGER, corr INTEGER, src INTEGER, rid INTEGER, start INTEGER, \
           PRIMARY KEY (pkey, corr)) WITHOUT ROWID;
         CREATE TABLE gpu_link(asrc INTEGER, arid INTEGER, src INTEGER, rid INTEGER, \
           PRIMARY KEY (asrc, arid, src, rid)) WITHOUT ROWID;",
    )?;
    for (s, t) in &api {
        conn.execute_batch(&format!(
            "INSERT OR IGNORE INTO api_first SELECT globalTid >> 24, correlationId, {s}, {}, \
             CAST(start AS INTEGER) FROM src.\"{t}\" t WHERE correlationId IS NOT NULL AND {} AND {}",
            schema.rowid_of(t, "t"),
            converted_row_sql("t", &["globalTid"]),
            sel.sql("t", true, Some("globalTid"), None)
        ))?;
    }
    for (s, t) in &gpu {
        conn.execute_batch(&format!(
            "INSERT INTO gpu_link SELECT a.src, a.rid, {s}, {} FROM src.\"{t}\" g \
             JOIN api_first a ON a.pkey = g.globalPid >> 24 AND a.corr = g.correlationId \
             WHERE CAST(g.start AS INTEGER) > a.start AND {} AND {}",
            schema.rowid_of(t, "g"),
            converted_row_sql("g", &["deviceId", "streamId"]),
            sel.sql(
                "g",
                true,
                Some("globalPid"),
                schema.has_column(t, "deviceId").then_some("deviceId")
            )
        ))?;
    }
    drop(conn);
    Ok(Some(FlowDb { _dir: dir, path }))
}
