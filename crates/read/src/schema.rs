//! An opened export's tables and columns ([`Schema`]), and the one way to open an export
//! ([`open_schema`]): checked, read as it was opened, its changes while it is read reported.
//! Commands open an export as a [`crate::source::Export`], which opens it here.

use crate::connection::open_readonly;
use crate::inputs::Input;
use anyhow::{Result, bail};
use rusqlite::Connection;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// An opened export: the path and the set of tables with their columns.
#[derive(Debug, Clone)]
pub struct Schema {
    pub path: PathBuf,
    pub(super) tables: HashMap<String, Vec<String>>,
    /// Tables declared `WITHOUT ROWID` (they have no implicit rowid).
    pub(super) without_rowid: std::collections::HashSet<String>,
    /// An Arrow or Parquet export's tables (a directory of `.arrow` or `.parquet` files, or an
    /// `.arrows` file), loaded once for every copy of the schema and its readers; `None` for an
    /// SQLite export.
    pub(super) loaded: Option<std::sync::Arc<crate::arrow::Tables>>,
    /// The file of an SQLite export as it was opened (an Arrow or Parquet export's are in
    /// `loaded`): each reader of an SQLite export opens its own connection, which would read
    /// another file where it was replaced meanwhile.
    pub(super) opened: Vec<(PathBuf, crate::arrow::files::Stamp)>,
}

impl Schema {
    /// Whether the export is nsys' Arrow or Parquet export, read as [`crate::arrow`]'s tables.
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

    /// The column a table's rows are timed by: `start`, else `timestamp`.
    pub fn time_column(&self, table: &str) -> Option<&'static str> {
        ["start", "timestamp"]
            .into_iter()
            .find(|c| self.has_column(table, c))
    }
}

/// Check the file and read its schema. Errors are one line naming the problem; where the
/// export (a file, or a file in its folder) changed meanwhile, the change is the problem (a
/// file truncated while it is read reads as damaged, one removed as missing).
pub fn open_schema(path: &Path) -> Result<(Connection, Schema)> {
    let files = |path: &Path| -> Vec<(PathBuf, crate::arrow::files::Stamp)> {
        let listed = match std::fs::read_dir(path) {
            Ok(dir) => dir.filter_map(|e| Some(e.ok()?.path())).collect(),
            Err(_) => vec![path.to_path_buf()],
        };
        listed
            .into_iter()
            .filter_map(|f| Some((crate::arrow::files::stamp_of(&f)?, f)))
            .map(|(s, f)| (f, s))
            .collect()
    };
    let before = files(path);
    open_schema_as_it_is(path).map_err(|e| first_change(&before, path).unwrap_or(e))
}

/// The error of the first of `files` (the export `export`, or files in it, with their stamps as
/// they were opened) that changed since: the export is named by the caller, a file in it by
/// its name.
pub(super) fn first_change(
    files: &[(PathBuf, crate::arrow::files::Stamp)],
    export: &Path,
) -> Option<anyhow::Error> {
    files.iter().find_map(|(f, s)| {
        let how = crate::arrow::files::change_since(f, *s)?;
        Some(match f == export {
            true => crate::arrow::files::changed(how),
            false => anyhow::anyhow!(
                "{}: {:#}",
                Path::new(f.file_name().unwrap_or_default()).display(),
                crate::arrow::files::changed(how)
            ),
        })
    })
}

/// [`open_schema`], the export taken as it is.
pub(super) fn open_schema_as_it_is(path: &Path) -> Result<(Connection, Schema)> {
    let meta = std::fs::metadata(path).map_err(|e| anyhow::anyhow!("cannot read: {e}"))?;
    let kind = crate::inputs::classify(path);
    let arrow = kind.is_columnar();
    if meta.is_dir() {
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
                    crate::inputs::INPUTS
                );
            }
            bail!("not an SQLite database (expected an nsys SQLite export)");
        }
    }
    let (conn, tables, without_rowid, loaded) = if arrow {
        let all = crate::arrow::Tables::load(path)?;
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
    if !crate::inputs::NSYS_MARKERS
        .iter()
        .any(|t| tables.contains_key(*t))
    {
        let what = match kind {
            Input::ParquetDir => "Parquet export",
            _ if arrow => "Arrow file",
            _ => "SQLite database",
        };
        bail!("{what} is not an Nsight Systems export (no StringIds, NVTX or CUPTI tables)");
    }
    Ok((
        conn,
        Schema {
            path: path.to_path_buf(),
            tables,
            without_rowid,
            opened: (!arrow && meta.is_file())
                .then(|| (path.to_path_buf(), crate::arrow::files::stamp(&meta)))
                .into_iter()
                .collect(),
            loaded,
        },
    ))
}

/// The tables of an SQLite export with their columns, and those declared `WITHOUT ROWID`.
#[allow(clippy::type_complexity)]
pub(super) fn read_sqlite_schema(
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
