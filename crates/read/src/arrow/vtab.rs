//! The SQLite virtual table of one table: its plans (`rowid = ?`, sorted equality, ordered
//! scans) and its cursor.

use super::column::Column;
use super::files::Place;
use super::load::{ALL, Behind, Table};
use super::walk::{Walk, unread};
use rusqlite::ffi;
use rusqlite::types::ValueRef;
use rusqlite::vtab::{
    Context, Filters, IndexConstraintOp, IndexFlags, IndexInfo, VTab, VTabConnection, VTabCursor,
};
use std::borrow::Cow;
use std::cell::Cell;
use std::ffi::{CStr, CString, c_int};
use std::sync::Arc;

/// The virtual table: one `.arrow` file of the export.
#[repr(C)]
pub(super) struct ArrowTable {
    /// SQLite's part; must come first.
    pub(super) base: ffi::sqlite3_vtab,
    pub(super) table: Arc<Table>,
}

/// `xFilter`'s plans: a scan, the row of a rowid, or (`SORTED_EQ + c`) the rows whose column `c`,
/// which the rows are sorted by, equals a value.
pub(super) const SCAN: c_int = 0;
pub(super) const BY_ROWID: c_int = 1;
pub(super) const SORTED_EQ: c_int = 2;

/// A cursor's lookups of a value's rows that are read by a walk from the first row's batch (a
/// Parquet table's batches decoded there): more are read from the columns at hand.
const LOOKUPS_WALKED: u32 = 8;

unsafe impl<'vtab> VTab<'vtab> for ArrowTable {
    /// Where the table lies.
    type Aux = Place;
    type Cursor = Cursor<'vtab>;

    fn connect(
        _db: &mut VTabConnection,
        place: Option<&Place>,
        _module: &[u8],
        _database: &[u8],
        _table: &[u8],
        _args: &[&[u8]],
    ) -> rusqlite::Result<(Cow<'static, CStr>, ArrowTable)> {
        let module_error = |m: String| rusqlite::Error::ModuleError(m);
        let place = place.ok_or_else(|| module_error("an Arrow table without its file".into()))?;
        let table = Table::shared(place).map_err(|e| module_error(format!("{place}: {e:#}")))?;
        // The key is declared as the SQLite export declares it (readers check for it).
        let columns: Vec<String> = table
            .columns
            .iter()
            .enumerate()
            .map(|(i, (n, t))| {
                let key = if table.key == Some(i) {
                    " PRIMARY KEY"
                } else {
                    ""
                };
                format!("{} {t}{key}", crate::query::quote_ident(n))
            })
            .collect();
        let sql = CString::new(format!("CREATE TABLE x({})", columns.join(", ")))
            .map_err(|_| module_error("a column name holds a NUL character".into()))?;
        Ok((
            Cow::Owned(sql),
            ArrowTable {
                base: ffi::sqlite3_vtab::default(),
                table,
            },
        ))
    }

    fn best_index(&self, info: &mut IndexInfo) -> rusqlite::Result<bool> {
        let t = &self.table;
        let sorted_by = |cols: &[c_int]| t.sorted_by(cols).map_err(|e| module_error(t, e));
        // The columns the statement reads, for a scan's walk to decode only those.
        info.set_idx_str(&info.col_used().to_string());
        let is_key = |c: c_int| c < 0 || t.key.is_some_and(|k| k as c_int == c);
        let mut by_rowid = None;
        let mut sorted_eq = None;
        for (i, c) in info.constraints().enumerate() {
            if !c.is_usable() || c.operator() != IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_EQ {
                continue;
            }
            if is_key(c.column()) {
                by_rowid = Some(i);
                break;
            }
            if sorted_eq.is_none() && c.column() >= 0 && sorted_by(&[c.column()])? {
                sorted_eq = Some((i, c.column()));
            }
        }
        let order: Vec<(c_int, bool)> = info
            .order_bys()
            .map(|o| (o.column(), o.is_order_by_desc()))
            .collect();
        let cols: Vec<c_int> = order.iter().map(|o| o.0).collect();
        let ascending = order.iter().all(|o| !o.1);
        if let Some((i, c)) = sorted_eq.filter(|_| by_rowid.is_none()) {
            let mut usage = info.constraint_usage(i);
            usage.set_argv_index(1);
            usage.set_omit(true);
            info.set_idx_num(SORTED_EQ + c);
            info.set_estimated_cost(((t.rows + 2) as f64).log2() + 10.0);
            info.set_estimated_rows(10);
            // Rows of one value of `c` keep the table's order.
            let mut rest = cols.clone();
            rest.retain(|&o| o != c);
            if !order.is_empty()
                && ascending
                && (rest.is_empty() || sorted_by(&[&[c][..], &rest[..]].concat())?)
            {
                info.set_order_by_consumed(true);
            }
        } else if let Some(i) = by_rowid {
            let mut usage = info.constraint_usage(i);
            usage.set_argv_index(1);
            usage.set_omit(true);
            info.set_idx_num(BY_ROWID);
            info.set_estimated_cost(1.0);
            info.set_estimated_rows(1);
            info.set_idx_flags(IndexFlags::SQLITE_INDEX_SCAN_UNIQUE);
            info.set_order_by_consumed(true);
        } else {
            info.set_idx_num(SCAN);
            info.set_estimated_cost(t.rows as f64 + 1.0);
            info.set_estimated_rows(t.rows as i64);
            if !order.is_empty()
                && ascending
                && (cols.iter().all(|&c| is_key(c)) || sorted_by(&cols)?)
            {
                info.set_order_by_consumed(true);
            }
        }
        Ok(true)
    }

    fn open(&'vtab mut self) -> rusqlite::Result<Cursor<'vtab>> {
        Ok(Cursor {
            base: ffi::sqlite3_vtab_cursor::default(),
            table: &self.table,
            row: 0,
            end: 0,
            batch: 0,
            in_batch: 0,
            cols: Vec::new(),
            used: Vec::new(),
            walk: None,
            scans: 0,
            lookups: 0,
            reads: vec![Cell::new(0); self.table.columns.len()],
            behind: Behind::default(),
        })
    }
}

/// A scan of a table, or the one row a rowid names.
#[repr(C)]
pub(super) struct Cursor<'vtab> {
    /// SQLite's part; must come first.
    pub(super) base: ffi::sqlite3_vtab_cursor,
    pub(super) table: &'vtab Table,
    /// The current row of the table, and the row to stop at.
    pub(super) row: usize,
    pub(super) end: usize,
    /// The current row as a batch and a row in it.
    pub(super) batch: usize,
    pub(super) in_batch: usize,
    /// The current batch's columns (those the statement reads: `used`).
    pub(super) cols: Vec<Column>,
    pub(super) used: Vec<Cell<u8>>,
    /// A scan's walk over the batches; `None` for the rows of a rowid or a value, read from
    /// the table's columns at hand (see [`Table::at_hand`]).
    pub(super) walk: Option<Walk>,
    /// How many scans of the whole table, and of a value's rows, the cursor began.
    pub(super) scans: u32,
    pub(super) lookups: u32,
    /// The columns SQLite has read, and what of them is given back (see [`Table::give_back`]).
    pub(super) reads: Vec<Cell<u8>>,
    pub(super) behind: Behind,
}

/// `e`, what went wrong reading `table`, as SQLite's error of a virtual table, naming the
/// table's file.
fn module_error(table: &Table, e: anyhow::Error) -> rusqlite::Error {
    rusqlite::Error::ModuleError(format!("{}: {e:#}", table.source.place))
}

impl Cursor<'_> {
    /// Move to row `row` of the table.
    pub(super) fn seek(&mut self, row: usize) -> rusqlite::Result<()> {
        self.row = row;
        (self.batch, self.in_batch) = self.table.locate(row);
        self.cols.clear();
        self.read_batch()
    }

    /// Read the columns of the current batch, where it holds the current row.
    pub(super) fn read_batch(&mut self) -> rusqlite::Result<()> {
        if self.row >= self.end {
            return Ok(());
        }
        let t = self.table;
        let cols = match &mut self.walk {
            Some(walk) => walk.to(t, self.batch),
            None => (0..t.columns.len())
                .map(|c| match self.used[c].get() {
                    0 => Ok(unread()),
                    _ => Ok(t.at_hand(c)?[self.batch].clone()),
                })
                .collect::<Result<Vec<Column>, anyhow::Error>>()
                .map(Some),
        };
        self.cols = cols.map_err(|e| module_error(t, e))?.unwrap_or_default();
        Ok(())
    }
}

unsafe impl VTabCursor for Cursor<'_> {
    fn filter(
        &mut self,
        plan: c_int,
        used: Option<&str>,
        args: &Filters<'_>,
    ) -> rusqlite::Result<()> {
        // SQLite's mask of the columns used: a bit a column, the last for all from it on;
        // the key is read for the rowid.
        let used = used.and_then(|u| u.parse::<u64>().ok()).unwrap_or(u64::MAX);
        let t = self.table;
        let cols = (0..t.columns.len()).filter(|&c| used & (1 << c.min(63)) != 0);
        self.used = t.reading(cols.map(|c| c as c_int).chain([-1]));
        if plan >= SORTED_EQ {
            let col = (plan - SORTED_EQ) as usize;
            let value = match args.iter().next() {
                Some(ValueRef::Integer(v)) => Some(v),
                Some(ValueRef::Real(f)) if f.fract() == 0.0 => Some(f as i64),
                _ => None,
            };
            let (first, end) = match value {
                Some(v) => {
                    (self.table.equal_range(col, v)).map_err(|e| module_error(self.table, e))?
                }
                None => (0, 0),
            };
            // The rows of a value are read from the batch of the first on, but where the
            // cursor looks values up again and again (a join's inner loop): from the
            // columns at hand.
            self.lookups += 1;
            self.walk = (self.lookups <= LOOKUPS_WALKED)
                .then(|| Walk::from_batch(&self.used, self.table.locate(first).0));
            self.end = end;
            self.seek(first)
        } else if plan == BY_ROWID {
            let row = match args.iter().next() {
                Some(ValueRef::Integer(id)) => self.table.find(id),
                Some(ValueRef::Real(f)) if f.fract() == 0.0 => self.table.find(f as i64),
                _ => Ok(None),
            };
            self.walk = None;
            match row.map_err(|e| module_error(self.table, e))? {
                Some(r) => {
                    self.end = r + 1;
                    self.seek(r)
                }
                None => {
                    self.end = 0;
                    self.seek(0)
                }
            }
        } else {
            // A table scanned again and again (the inner loop of a join) is read from its
            // columns at hand: a Parquet table's decoded once, not each time.
            self.scans += 1;
            self.walk = (self.scans == 1).then(|| Walk::new(&self.used));
            self.end = self.table.rows;
            self.seek(0)
        }
    }

    fn next(&mut self) -> rusqlite::Result<()> {
        if self.table.lost() {
            let e = self.table.source.place.changed("truncated");
            return Err(rusqlite::Error::ModuleError(format!("{e:#}")));
        }
        self.row += 1;
        self.in_batch += 1;
        // Only a scan of the whole table leaves pages behind it for good.
        let whole = self.end == self.table.rows;
        let release = whole.then_some((&self.reads[..], &mut self.behind));
        let batch = self.batch;
        self.table
            .step(&mut self.batch, &mut self.in_batch, release);
        if self.batch != batch {
            self.read_batch()?;
        }
        Ok(())
    }

    fn eof(&self) -> bool {
        self.row >= self.end
    }

    fn column(&self, ctx: &mut Context, i: c_int) -> rusqlite::Result<()> {
        if let Some(r) = self.reads.get(i as usize) {
            r.set(ALL);
        }
        let value = self
            .cols
            .get(i as usize)
            .map_or(ValueRef::Null, |c| c.value(self.in_batch));
        ctx.set_result(rusqlite::types::ToSqlOutput::Borrowed(value))
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        if let Some(r) = self.table.key.and_then(|k| self.reads.get(k)) {
            r.set(ALL);
        }
        Ok(self.table.rowid(&self.cols, self.in_batch, self.row))
    }
}
