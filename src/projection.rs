//! NVTX projected onto the GPU: which GPU work each NVTX range launched, and which NVTX ranges
//! enclose the launch of each GPU row.
//!
//! A GPU row (kernel, memcpy, memset) is launched by the CUDA API call (runtime or driver) that
//! shares its `correlationId` within one process. That call runs on a CPU thread at some time; an
//! NVTX range on the same thread whose interval contains the call's start encloses the launch.
//!
//! Everything is computed by SQLite into a scratch database attached read-only to the source
//! (like [`crate::flows`]), so memory stays bounded however long the profile. Readers attach the
//! result with [`Projection::attach`] and query two tables under the schema [`PROJ_DB`]:
//!
//! `proj.nvtx_gpu`: one row per (NVTX range, GPU device) for ranges that launched GPU work there.
//!
//! | column       | meaning |
//! |--------------|---------|
//! | `nvtx_rid`   | `rowid` of the range in the export's `NVTX_EVENTS` |
//! | `event_type` | 59 (push/pop: nests per thread) or 60 (start/end: free intervals) |
//! | `global_tid` | the thread the range started on (its `globalTid`) |
//! | `domain`     | the range's `domainId` (0 when unset) |
//! | `device`     | `deviceId` of the GPU rows |
//! | `gpu_start`  | earliest `start` of the GPU rows the range launched on that device (ns) |
//! | `gpu_end`    | latest `end` of those GPU rows (ns) |
//! | `gpu_rows`   | how many GPU rows (kernels + memcpys + memsets) |
//! | `name_text`  | the range's `text` (NULL for registered strings) |
//! | `name_id`    | the range's `textId` into `StringIds` (used when `name_text` is NULL) |
//!
//! Indexed by `gpu_start`, so `SELECT ... FROM proj.nvtx_gpu ORDER BY gpu_start` streams.
//! Because a push/pop range encloses every call its children enclose, a child's GPU span lies
//! within its parent's on each device: the slices nest like the CPU ranges.
//!
//! `proj.kernel_nvtx`: one row per GPU row launched inside at least one push/pop range.
//!
//! | column   | meaning |
//! |----------|---------|
//! | `src`    | 0 kernel, 1 memcpy, 2 memset (the numbering of [`crate::flows`]) |
//! | `rid`    | `rowid` of the GPU row in its table |
//! | `ranges` | names of the push/pop ranges on the launching thread that contain the launching call's start, outermost first, joined with `" > "` |
//!
//! Keyed by `(src, rid)`: readers `LEFT JOIN proj.kernel_nvtx k ON k.src = 0 AND k.rid = t.rowid`.
//!
//! Rules: ranges need an `end` no earlier than their `start` and a `globalTid`; GPU rows need
//! `start`, `end >= start`, `deviceId`, `globalPid` and `correlationId`; a call encloses when
//! `range.start <= call.start <= range.end`. Should an export repeat a (process, correlation id)
//! among its API calls, the first row (runtime before driver) is the launch, as for flow arrows.

use crate::nsys::{self, DRIVER, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, Schema};
use anyhow::{Context, Result};
use rusqlite::{Connection, OpenFlags};
use std::path::PathBuf;

/// The schema name [`Projection::attach`] attaches the scratch database under.
pub const PROJ_DB: &str = "proj";
/// Table: one row per (NVTX range, device) with the span of the GPU work it launched.
pub const NVTX_GPU: &str = "nvtx_gpu";
/// Table: for each GPU row, the push/pop ranges enclosing its launch.
pub const KERNEL_NVTX: &str = "kernel_nvtx";
/// The separator between range names in `kernel_nvtx.ranges`.
pub const RANGE_SEPARATOR: &str = " > ";

/// `src` numbers of the GPU tables, as in [`crate::flows`].
pub const SRC_KERNEL: i64 = 0;
pub const SRC_MEMCPY: i64 = 1;
pub const SRC_MEMSET: i64 = 2;

/// The projection tables of one export, in a scratch database deleted on drop.
pub struct Projection {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Rows of `nvtx_gpu`.
    pub range_device_rows: u64,
    /// Distinct NVTX ranges with at least one `nvtx_gpu` row.
    pub ranges_with_gpu_work: u64,
    /// Rows of `kernel_nvtx`.
    pub annotated_gpu_rows: u64,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("path", &self.path)
            .field("range_device_rows", &self.range_device_rows)
            .field("ranges_with_gpu_work", &self.ranges_with_gpu_work)
            .field("annotated_gpu_rows", &self.annotated_gpu_rows)
            .finish()
    }
}

fn gpu_tables(schema: &Schema) -> Vec<(i64, &'static str)> {
    [
        (SRC_KERNEL, KERNEL),
        (SRC_MEMCPY, MEMCPY),
        (SRC_MEMSET, MEMSET),
    ]
    .into_iter()
    .filter(|(_, t)| {
        schema.has_columns(
            t,
            &["start", "end", "correlationId", "globalPid", "deviceId"],
        )
    })
    .collect()
}

fn api_tables(schema: &Schema) -> Vec<&'static str> {
    [RUNTIME, DRIVER]
        .into_iter()
        .filter(|t| schema.has_columns(t, &["start", "correlationId", "globalTid"]))
        .collect()
}

impl Projection {
    /// Compute the tables, or `None` when the export lacks NVTX ranges, GPU rows or API calls.
    pub fn build(schema: &Schema) -> Result<Option<Projection>> {
        let gpu = gpu_tables(schema);
        let api = api_tables(schema);
        if gpu.is_empty()
            || api.is_empty()
            || !schema.has_columns(NVTX, &["start", "end", "eventType", "globalTid"])
        {
            return Ok(None);
        }
        let dir = tempfile::Builder::new()
            .prefix("nsys-perfetto-proj-")
            .tempdir()
            .context("cannot create a scratch directory")?;
        let path = dir.path().join("projection.sqlite");
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

        // Declared INTEGER columns: the time-range joins below must be able to use the indexes.
        let mut sql = String::from(
            "CREATE TABLE api_first(pkey INTEGER, corr INTEGER, tid INTEGER, start INTEGER, \
               PRIMARY KEY (pkey, corr)) WITHOUT ROWID;
             CREATE TABLE gpu_link(src INTEGER, rid INTEGER, pkey INTEGER, corr INTEGER, \
               device INTEGER, start INTEGER, \"end\" INTEGER, tid INTEGER, astart INTEGER);
             CREATE TABLE launch_dev(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER, \
               device INTEGER, gmin INTEGER, gmax INTEGER, n INTEGER);
             CREATE TABLE launch(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER);
             CREATE TABLE launch_nvtx(pkey INTEGER, corr INTEGER, ranges TEXT, \
               PRIMARY KEY (pkey, corr)) WITHOUT ROWID;\n",
        );
        // The launching call of each (process, correlation id); should an export repeat one, the
        // first row wins, as for flow arrows.
        for t in &api {
            sql += &format!(
                "INSERT OR IGNORE INTO api_first SELECT globalTid >> 24, correlationId, globalTid, start \
                 FROM src.\"{t}\" WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL \
                 AND start IS NOT NULL;\n"
            );
        }
        // Every linked GPU row with its launch.
        for (s, t) in &gpu {
            sql += &format!(
                "INSERT INTO gpu_link SELECT {s}, g.rowid, a.pkey, a.corr, g.deviceId, g.start, g.\"end\", \
                 a.tid, a.start FROM src.\"{t}\" g \
                 JOIN api_first a ON a.pkey = g.globalPid >> 24 AND a.corr = g.correlationId \
                 WHERE g.deviceId IS NOT NULL AND g.\"end\" >= g.start;\n"
            );
        }
        let text = schema.col_of(NVTX, "r", "text");
        let text_id = schema.col_of(NVTX, "r", "textId");
        let domain = schema.col_of(NVTX, "r", "domainId");
        let (name_join, name_expr) = if schema.has_columns("StringIds", &["id", "value"])
            && schema.has_column(NVTX, "textId")
        {
            (
                " LEFT JOIN src.StringIds s ON s.id = r.textId",
                format!("coalesce({text}, s.value, '(unnamed range)')"),
            )
        } else {
            ("", format!("coalesce({text}, '(unnamed range)')"))
        };
        sql += &format!(
            "DROP TABLE api_first;
             -- One row per launching call and device: the span of its GPU rows there.
             INSERT INTO launch_dev SELECT tid, astart, pkey, corr, device, \
               min(start), max(\"end\"), count(*) FROM gpu_link GROUP BY pkey, corr, device;
             CREATE INDEX launch_dev_time ON launch_dev(tid, start);
             INSERT INTO launch SELECT DISTINCT tid, start, pkey, corr FROM launch_dev;
             CREATE INDEX launch_time ON launch(tid, start);
             -- Ranges outer, launches found by an index range scan on (thread, start).
             CREATE TABLE {NVTX_GPU} AS SELECT r.rowid AS nvtx_rid, r.eventType AS event_type, \
               r.globalTid AS global_tid, coalesce({domain}, 0) AS domain, l.device AS device, \
               min(l.gmin) AS gpu_start, max(l.gmax) AS gpu_end, sum(l.n) AS gpu_rows, \
               {text} AS name_text, {text_id} AS name_id \
               FROM src.NVTX_EVENTS r CROSS JOIN launch_dev l \
               ON l.tid = r.globalTid AND l.start BETWEEN r.start AND r.\"end\" \
               WHERE r.eventType IN (59, 60) AND r.\"end\" >= r.start \
               GROUP BY r.rowid, l.device;
             CREATE INDEX nvtx_gpu_start ON {NVTX_GPU}(gpu_start);
             CREATE INDEX nvtx_gpu_rid ON {NVTX_GPU}(nvtx_rid);
             -- For each launch, the enclosing push/pop ranges, outermost first.
             INSERT INTO launch_nvtx SELECT pkey, corr, \
               group_concat(name, '{RANGE_SEPARATOR}' ORDER BY rstart, rend DESC, rrid) \
               FROM (SELECT l.pkey, l.corr, r.start AS rstart, r.\"end\" AS rend, r.rowid AS rrid, \
                     {name_expr} AS name \
                     FROM src.NVTX_EVENTS r CROSS JOIN launch l \
                     ON l.tid = r.globalTid AND l.start BETWEEN r.start AND r.\"end\"{name_join} \
                     WHERE r.eventType = 59 AND r.\"end\" >= r.start) \
               GROUP BY pkey, corr;
             CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
               PRIMARY KEY (src, rid)) WITHOUT ROWID;
             INSERT INTO {KERNEL_NVTX} SELECT g.src, g.rid, n.ranges FROM gpu_link g \
               JOIN launch_nvtx n ON n.pkey = g.pkey AND n.corr = g.corr ORDER BY g.src, g.rid;
             DROP TABLE launch_nvtx; DROP TABLE launch; DROP TABLE launch_dev; DROP TABLE gpu_link;"
        );
        conn.execute_batch(&sql)
            .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?;
        let count = |sql: &str| -> Result<u64> {
            Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64)
        };
        let range_device_rows = count(&format!("SELECT count(*) FROM {NVTX_GPU}"))?;
        let ranges_with_gpu_work =
            count(&format!("SELECT count(DISTINCT nvtx_rid) FROM {NVTX_GPU}"))?;
        let annotated_gpu_rows = count(&format!("SELECT count(*) FROM {KERNEL_NVTX}"))?;
        conn.execute_batch("DETACH DATABASE src;")?;
        drop(conn);
        Ok(Some(Projection {
            _dir: dir,
            path,
            range_device_rows,
            ranges_with_gpu_work,
            annotated_gpu_rows,
        }))
    }

    /// Attach the tables, read-only, to a connection as schema [`PROJ_DB`].
    pub fn attach(&self, conn: &Connection) -> Result<()> {
        let uri = nsys::sqlite_uri(&self.path, "mode=ro");
        conn.execute(&format!("ATTACH DATABASE ?1 AS {PROJ_DB}"), [uri])?;
        Ok(())
    }

    /// The scratch database file (valid while `self` lives).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}
