//! The SQL fallback: the projection by its definition in SQL joins, for data the sweep does
//! not handle, and its tables read back into streams.

use super::feed::sweep_all;
use super::names::Names;
use super::{
    Counts, KERNEL_NVTX, KernelRecord, NVTX_GPU, Projected, RANGE_SEPARATOR, RangeCols, Span,
    SpanRecord, nvtx_usable,
};
use crate::flows::Launches;
use crate::names::nvtx_type::{PUSH_POP, START_END};
use crate::names::{DRIVER, RUNTIME};
use crate::runs::{Named, NearlySorted, Sorter, Spill};
use crate::schema::Schema;
use anyhow::Result;
use rusqlite::Connection;
use rusqlite::types::ValueRef;
use std::path::PathBuf;
use std::sync::Arc;

impl Projected {
    /// Compute the projection from the launches `crate::flows::prepare` found, or
    /// `None` when the export lacks NVTX ranges (or there are no launches).
    pub fn build(
        conn: &Connection,
        schema: &Schema,
        launches: &Launches,
    ) -> Result<Option<Projected>> {
        if !nvtx_usable(schema) {
            return Ok(None);
        }
        if !launches.unsupported
            && let Some(p) = sweep_all(conn, schema, &launches.sorted)
                .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?
        {
            return Ok(Some(p));
        }
        // Values the sweep does not handle: the SQL definition, read back into streams.
        let tables = SqlTables::build(schema)?;
        Projected::from_tables(&tables).map(Some)
    }

    /// Read tables made by `project_sql` into streams.
    fn from_tables(t: &SqlTables) -> Result<Projected> {
        let conn = Connection::open_with_flags(
            &t.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let mut spill = Spill::default();
        let mut spans = NearlySorted::<SpanRecord>::default();
        let mut st = conn.prepare(&format!(
            "SELECT gpu_start, gpu_end, nvtx_rid, device, gpu_rows, global_tid, event_type, \
             domain, name_text, name_id FROM {NVTX_GPU}"
        ))?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let i = |k| crate::cells::int_at(r, k);
            let (Some(gpu_start), Some(gpu_end), Some(global_tid), Some(device)) =
                (i(0), i(1), i(5), i(3))
            else {
                continue;
            };
            let text = match r.get_ref(8)? {
                ValueRef::Text(b) | ValueRef::Blob(b) => Some(String::from_utf8_lossy(b)),
                _ => None,
            };
            let span = Span {
                gpu_start,
                gpu_end,
                nvtx_rid: i(2).unwrap_or(0),
                device,
                gpu_rows: i(4).unwrap_or(0),
                global_tid,
                event_type: i(6).unwrap_or(PUSH_POP),
                domain: i(7).unwrap_or(0),
                text,
                text_no: None,
                name_id: i(9),
            };
            spans.push(span.record(), &mut spill)?;
        }
        let mut kernels: [Sorter<KernelRecord>; 3] = Default::default();
        let mut st = conn.prepare(&format!("SELECT src, rid, ranges FROM {KERNEL_NVTX}"))?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let (Some(src), Some(rid)) = (crate::cells::int_at(r, 0), crate::cells::int_at(r, 1))
            else {
                continue;
            };
            if let (Some(k), ValueRef::Text(b) | ValueRef::Blob(b)) =
                (kernels.get_mut(src as usize), r.get_ref(2)?)
            {
                k.push(
                    Named {
                        fields: [rid, -1],
                        text: Some(Arc::from(b)),
                    },
                    &mut spill,
                )?;
            }
        }
        let none = Names::default;
        Projected::sorted(spans, none(), kernels, none(), t.counts, spill)
    }
}

/// The tables `project_sql` (or [`Projection::build`]) fills, in a scratch database.
pub(super) struct SqlTables {
    pub(super) dir: tempfile::TempDir,
    pub(super) path: PathBuf,
    pub(super) counts: Counts,
}

impl SqlTables {
    /// Empty tables with the declared types of the original `CREATE TABLE AS` over the join
    /// (readers and `SELECT *` see the same table whichever way it is filled).
    pub(super) fn create(conn: &Connection, cols: &RangeCols) -> rusqlite::Result<()> {
        conn.execute_batch(&format!(
            "CREATE TABLE {NVTX_GPU} AS SELECT r.rowid AS nvtx_rid, r.eventType AS event_type, \
               r.globalTid AS global_tid, coalesce({}, 0) AS domain, CAST(NULL AS INTEGER) AS device, \
               NULL AS gpu_start, NULL AS gpu_end, NULL AS gpu_rows, {} AS name_text, {} AS name_id \
               FROM src.NVTX_EVENTS r LIMIT 0;
             CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
               PRIMARY KEY (src, rid)) WITHOUT ROWID;",
            cols.domain, cols.text, cols.text_id
        ))
    }

    /// The tables by the SQL definition.
    pub(super) fn build(schema: &Schema) -> Result<SqlTables> {
        let gpu: Vec<(i64, &'static str)> = crate::flows::gpu_tables(schema)
            .into_iter()
            .filter(|(_, t)| crate::flows::gpu_projects(schema, t))
            .collect();
        let (dir, path, conn) =
            crate::scratch::scratch_db(schema, "nsys-perfetto-proj-", "projection.sqlite")?;
        let mut sql = String::from(
            "BEGIN;
             CREATE TABLE api_first(pkey INTEGER, corr INTEGER, tid INTEGER, start INTEGER, \
               PRIMARY KEY (pkey, corr)) WITHOUT ROWID;\n",
        );
        // The launching call of each (process, correlation id); should an export repeat one,
        // the first row wins, as for flow arrows.
        for t in [RUNTIME, DRIVER] {
            if crate::flows::api_projects(schema, t) {
                sql += &format!(
                    "INSERT OR IGNORE INTO api_first SELECT globalTid >> 24, correlationId, \
                     globalTid, start FROM src.\"{t}\" WHERE correlationId IS NOT NULL \
                     AND globalTid IS NOT NULL AND start IS NOT NULL;\n"
                );
            }
        }
        let counts = (|| {
            conn.execute_batch(&sql)?;
            project_sql(&conn, &RangeCols::new(schema), &gpu)
        })()
        .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?;
        conn.execute_batch("DROP TABLE api_first; COMMIT; DETACH DATABASE src;")?;
        Ok(SqlTables { dir, path, counts })
    }
}

/// The tables by SQL joins, for data the sweep does not handle: exact, but each launch is
/// visited once per enclosing range.
pub(super) fn project_sql(
    conn: &Connection,
    cols: &RangeCols,
    gpu: &[(i64, &'static str)],
) -> rusqlite::Result<Counts> {
    let mut sql = String::from(
        "CREATE TABLE gpu_link(src INTEGER, rid INTEGER, pkey INTEGER, corr INTEGER, \
           device INTEGER, start INTEGER, \"end\" INTEGER, tid INTEGER, astart INTEGER);
         CREATE TABLE launch_dev(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER, \
           device INTEGER, gmin INTEGER, gmax INTEGER, n INTEGER);
         CREATE TABLE launch(tid INTEGER, start INTEGER, pkey INTEGER, corr INTEGER);
         CREATE TABLE launch_nvtx(pkey INTEGER, corr INTEGER, ranges TEXT, \
           PRIMARY KEY (pkey, corr)) WITHOUT ROWID;\n",
    );
    // Every linked GPU row with its launch.
    for (s, t) in gpu {
        sql += &format!(
            "INSERT INTO gpu_link SELECT {s}, g.rowid, a.pkey, a.corr, g.deviceId, g.start, g.\"end\", \
             a.tid, a.start FROM src.\"{t}\" g \
             JOIN api_first a ON a.pkey = g.globalPid >> 24 AND a.corr = g.correlationId \
             WHERE g.deviceId IS NOT NULL AND g.\"end\" >= g.start \
             AND g.start >= -{max} AND g.\"end\" <= {max};\n",
            max = crate::cells::MAX_TIME
        );
    }
    let RangeCols {
        text,
        text_id,
        domain,
        string_ids,
    } = cols;
    let (name_join, name) = if *string_ids {
        (
            " LEFT JOIN src.StringIds s ON s.id = r.textId",
            format!("coalesce({text}, s.value, '(unnamed range)')"),
        )
    } else {
        ("", format!("coalesce({text}, '(unnamed range)')"))
    };
    sql += &format!(
        "-- One row per launching call and device: the span of its GPU rows there.
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
           WHERE r.eventType IN ({PUSH_POP}, {START_END}) AND r.\"end\" >= r.start \
             AND r.start >= -{max} AND r.\"end\" <= {max} \
           GROUP BY r.rowid, l.device;
         CREATE INDEX nvtx_gpu_start ON {NVTX_GPU}(gpu_start);
         CREATE INDEX nvtx_gpu_rid ON {NVTX_GPU}(nvtx_rid);
         -- For each launch, the enclosing push/pop ranges, outermost first.
         INSERT INTO launch_nvtx SELECT pkey, corr, \
           group_concat(name, '{RANGE_SEPARATOR}' ORDER BY rstart, rend DESC, rrid) \
           FROM (SELECT l.pkey, l.corr, r.start AS rstart, r.\"end\" AS rend, r.rowid AS rrid, \
                 {name} AS name \
                 FROM src.NVTX_EVENTS r CROSS JOIN launch l \
                 ON l.tid = r.globalTid AND l.start BETWEEN r.start AND r.\"end\"{name_join} \
                 WHERE r.eventType = {PUSH_POP} AND r.\"end\" >= r.start \
                   AND r.start >= -{max} AND r.\"end\" <= {max}) \
           GROUP BY pkey, corr;
         CREATE TABLE {KERNEL_NVTX}(src INTEGER NOT NULL, rid INTEGER NOT NULL, ranges TEXT NOT NULL, \
           PRIMARY KEY (src, rid)) WITHOUT ROWID;
         INSERT INTO {KERNEL_NVTX} SELECT g.src, g.rid, n.ranges FROM gpu_link g \
           JOIN launch_nvtx n ON n.pkey = g.pkey AND n.corr = g.corr ORDER BY g.src, g.rid;
         DROP TABLE launch_nvtx; DROP TABLE launch; DROP TABLE launch_dev; DROP TABLE gpu_link;",
        max = crate::cells::MAX_TIME
    );
    conn.execute_batch(&sql)?;
    let count = |sql: &str| -> rusqlite::Result<u64> {
        Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64)
    };
    Ok(Counts {
        range_device_rows: count(&format!("SELECT count(*) FROM {NVTX_GPU}"))?,
        ranges_with_gpu_work: count(&format!("SELECT count(DISTINCT nvtx_rid) FROM {NVTX_GPU}"))?,
        annotated_gpu_rows: count(&format!("SELECT count(*) FROM {KERNEL_NVTX}"))?,
    })
}
