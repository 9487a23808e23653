//! The projection as SQLite tables, for the workflows' SQL (`stats`, `extract`) and the tests.

use super::feed::sweep_all;
use super::names::carried_text;
use super::sql::SqlTables;
use super::{
    KERNEL_NVTX, NVTX_GPU, PROJ_DB, Projected, RangeCols, SRC_KERNEL, SRC_MEMCPY, SRC_MEMSET, Span,
    nvtx_usable,
};
use crate::runs::Named;
use crate::schema::Schema;
use anyhow::Result;
use rusqlite::Connection;
use rusqlite::types::{ToSqlOutput, ValueRef};
use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

/// The projection as SQLite tables in a scratch database deleted on drop (see the module's
/// documentation), for the workflows' SQL.
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

impl Projection {
    /// Compute the tables, or `None` when the export lacks NVTX ranges, GPU rows or API calls.
    pub fn build(schema: &Schema) -> Result<Option<Projection>> {
        if !nvtx_usable(schema) {
            return Ok(None);
        }
        let conn = crate::connection::open_readonly(&schema.path)?;
        let nothing = nsys_perfetto_model::select::Selection {
            types: Default::default(),
            ..Default::default()
        };
        let Some(launches) = crate::flows::prepare(&conn, schema, &nothing, true)?.1 else {
            return Ok(None);
        };
        let projected = if launches.unsupported {
            None
        } else {
            sweep_all(&conn, schema, &launches.sorted)
                .map_err(|e| anyhow::anyhow!("cannot project NVTX onto the GPU: {e}"))?
        };
        let tables = match projected {
            Some(p) => p.into_tables(schema)?,
            None => SqlTables::build(schema)?,
        };
        Ok(Some(Projection {
            _dir: tables.dir,
            path: tables.path,
            range_device_rows: tables.counts.range_device_rows,
            ranges_with_gpu_work: tables.counts.ranges_with_gpu_work,
            annotated_gpu_rows: tables.counts.annotated_gpu_rows,
        }))
    }

    /// Attach the tables, read-only, to a connection as schema [`PROJ_DB`].
    pub fn attach(&self, conn: &Connection) -> Result<()> {
        let uri = crate::connection::sqlite_uri(&self.path, "mode=ro");
        conn.execute(&format!("ATTACH DATABASE ?1 AS {PROJ_DB}"), [uri])?;
        Ok(())
    }

    /// The scratch database file (valid while `self` lives).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Projected {
    /// Write the streams as the tables.
    fn into_tables(self, schema: &Schema) -> Result<SqlTables> {
        let (dir, path, conn) =
            crate::scratch::scratch_db(schema, "nsys-perfetto-proj-", "projection.sqlite")?;
        conn.execute_batch("PRAGMA page_size = 16384;")?;
        SqlTables::create(&conn, &RangeCols::new(schema))?;
        conn.execute_batch("DETACH DATABASE src; BEGIN;")?;
        {
            let mut ranges = Inserter::<Span<'_>>::new(
                &conn,
                &format!(
                    "INSERT INTO {NVTX_GPU}(rowid, nvtx_rid, event_type, global_tid, domain, \
                     device, gpu_start, gpu_end, gpu_rows, name_text, name_id) VALUES "
                ),
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?;
            for span in self.spans()? {
                ranges.push(span?)?;
            }
            ranges.finish()?;
            let mut kernels = Inserter::<(i64, Named<1>)>::new(
                &conn,
                &format!("INSERT INTO {KERNEL_NVTX}(src, rid, ranges) VALUES "),
                "(?, ?, ?)",
            )?;
            for src in [SRC_KERNEL, SRC_MEMCPY, SRC_MEMSET] {
                let mut it = self.kernels[src as usize].iter()?;
                while let Some(k) = it.next_record()? {
                    let (_, text) = carried_text(k.fields[1], k.text.as_deref(), &self.name_lists);
                    kernels.push((
                        src,
                        Named {
                            fields: [k.fields[0]],
                            text: Some(Arc::<[u8]>::from(text.as_bytes())),
                        },
                    ))?;
                }
            }
            kernels.finish()?;
        }
        conn.execute_batch(&format!(
            "CREATE INDEX nvtx_gpu_start ON {NVTX_GPU}(gpu_start);
             CREATE INDEX nvtx_gpu_rid ON {NVTX_GPU}(nvtx_rid);
             COMMIT;"
        ))?;
        Ok(SqlTables {
            dir,
            path,
            counts: self.counts,
        })
    }
}

/// A row for an [`Inserter`].
trait BindRow {
    const COLUMNS: usize;
    /// Bind the row's values to parameters `first..first + COLUMNS`.
    fn bind(&self, st: &mut rusqlite::Statement<'_>, first: usize) -> rusqlite::Result<()>;
}

/// A text or NULL.
fn text_or_null<'a>(t: &'a Option<Cow<'_, str>>) -> ToSqlOutput<'a> {
    ToSqlOutput::Borrowed(
        t.as_deref()
            .map_or(ValueRef::Null, |t| ValueRef::Text(t.as_bytes())),
    )
}

impl BindRow for Span<'_> {
    const COLUMNS: usize = 11;
    fn bind(&self, st: &mut rusqlite::Statement<'_>, i: usize) -> rusqlite::Result<()> {
        st.raw_bind_parameter(i, self.nvtx_rid << 32 | self.device)?;
        st.raw_bind_parameter(i + 1, self.nvtx_rid)?;
        st.raw_bind_parameter(i + 2, self.event_type)?;
        st.raw_bind_parameter(i + 3, self.global_tid)?;
        st.raw_bind_parameter(i + 4, self.domain)?;
        st.raw_bind_parameter(i + 5, self.device)?;
        st.raw_bind_parameter(i + 6, self.gpu_start)?;
        st.raw_bind_parameter(i + 7, self.gpu_end)?;
        st.raw_bind_parameter(i + 8, self.gpu_rows)?;
        st.raw_bind_parameter(i + 9, text_or_null(&self.text))?;
        st.raw_bind_parameter(i + 10, self.name_id)
    }
}

impl BindRow for (i64, Named<1>) {
    const COLUMNS: usize = 3;
    fn bind(&self, st: &mut rusqlite::Statement<'_>, i: usize) -> rusqlite::Result<()> {
        st.raw_bind_parameter(i, self.0)?;
        st.raw_bind_parameter(i + 1, self.1.fields[0])?;
        let text = self.1.text.as_deref().unwrap_or_default();
        st.raw_bind_parameter(i + 2, ToSqlOutput::Borrowed(ValueRef::Text(text)))
    }
}

/// Rows per INSERT statement: a statement per row costs more than its row.
const BATCH: usize = 32;

/// Inserts rows [`BATCH`] at a time with one multi-row `INSERT`.
struct Inserter<'c, R: BindRow> {
    many: rusqlite::Statement<'c>,
    one: rusqlite::Statement<'c>,
    rows: Vec<R>,
}

impl<'c, R: BindRow> Inserter<'c, R> {
    /// `head`: `INSERT INTO table(columns) VALUES `; `row`: a row's values, with a `?` for
    /// each bound one (`R::COLUMNS`).
    pub(super) fn new(conn: &'c Connection, head: &str, row: &str) -> rusqlite::Result<Self> {
        Ok(Inserter {
            many: conn.prepare(&format!("{head}{}", vec![row; BATCH].join(", ")))?,
            one: conn.prepare(&format!("{head}{row}"))?,
            rows: Vec::with_capacity(BATCH),
        })
    }

    pub(super) fn push(&mut self, row: R) -> rusqlite::Result<()> {
        self.rows.push(row);
        if self.rows.len() == BATCH {
            for (i, r) in self.rows.iter().enumerate() {
                r.bind(&mut self.many, 1 + i * R::COLUMNS)?;
            }
            self.many.raw_execute()?;
            self.rows.clear();
        }
        Ok(())
    }

    pub(super) fn finish(&mut self) -> rusqlite::Result<()> {
        for r in self.rows.drain(..) {
            r.bind(&mut self.one, 1)?;
            self.one.raw_execute()?;
        }
        Ok(())
    }
}
