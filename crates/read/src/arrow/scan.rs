//! A direct scan of a table's typed columns ([`TableScan`]), for readers whose scan needs no
//! SQL, giving back the pages it has read.

use super::column::{CHUNK, Column, Data, Lane};
use super::load::{Behind, Table, place};
use super::walk::Walk;
use anyhow::{Result, anyhow};
use rusqlite::types::ValueRef;
use std::cell::Cell;
use std::ffi::c_int;
use std::path::Path;
use std::sync::Arc;

/// A column of a direct scan, resolved to the table's columns.
pub(super) enum Pick {
    Column(usize),
    Rowid,
    Null,
    Coalesce(Vec<usize>),
    Int(i64),
}

/// A scan (see `nsys::scan`) read straight from a table's columns, without SQLite.
pub struct TableScan {
    pub(super) table: Arc<Table>,
    pub(super) picks: Vec<Pick>,
    /// The picks resolved against batch `batch` (see [`TableScan::resolve`]): a row's values
    /// are read from them without looking the column up again for each value.
    pub(super) slots: Vec<Column>,
    /// Each pick's values as integers ([`Column::number`]) for the rows of the chunk being
    /// read. Most values are read as integers: a typed loop over each column per chunk, then
    /// a load per value, costs less than finding each value's type.
    pub(super) lanes: Vec<Lane>,
    /// Whether each pick's values are integers (or NULL): then fetched from `lanes`.
    pub(super) integral: Vec<bool>,
    /// The columns the picks read, and what of them is given back (see [`Table::give_back`]).
    pub(super) reads: Vec<Cell<u8>>,
    pub(super) behind: Behind,
    /// The walk over the batches, reading the columns in `reads`.
    pub(super) walk: Walk,
    /// The batch being read, and the table's row number of its first row.
    pub(super) batch: usize,
    pub(super) first: usize,
    /// The chunk being read: the batch's row it starts at, its rows, and the current row in
    /// it (`usize::MAX` before the first).
    pub(super) chunk: usize,
    pub(super) rows: usize,
    pub(super) at: usize,
}

impl TableScan {
    /// The direct reading of `cols` of `table` in the export `dir`, in `order`: `None` when the
    /// scan needs SQL (an expression, or an order the rows do not have).
    pub fn open(
        dir: &Path,
        table: &str,
        cols: &[crate::column::Col],
        order: &[crate::column::Col],
    ) -> Result<Option<TableScan>> {
        use crate::column::Col;
        let (place, t) = shared(dir, table)?;
        let index = |n: &str| t.columns.iter().position(|(c, _)| c == n);
        let Some(picks) = picks(&t, cols) else {
            return Ok(None);
        };
        // Storage order is rowid order: a trailing rowid orders nothing more.
        let order = match order.split_last() {
            Some((Col::Rowid, rest)) if !rest.is_empty() => rest,
            _ => order,
        };
        let mut keys = Vec::with_capacity(order.len());
        for o in order {
            keys.push(match o {
                Col::Rowid => -1,
                Col::Column(n) => match index(n) {
                    Some(i) => i as c_int,
                    None => return Ok(None),
                },
                _ => return Ok(None),
            });
        }
        let is_key = |c: c_int| c < 0 || t.key.is_some_and(|k| k as c_int == c);
        if !keys.is_empty()
            && !keys.iter().all(|&c| is_key(c))
            && !t.sorted_by(&keys).map_err(|e| anyhow!("{place}: {e:#}"))?
        {
            return Ok(None);
        }
        let reads = t.reading(picks.iter().flat_map(|p| match p {
            Pick::Column(c) => vec![*c as c_int],
            Pick::Coalesce(cs) => cs.iter().map(|&c| c as c_int).collect(),
            Pick::Rowid => vec![-1],
            Pick::Null | Pick::Int(_) => Vec::new(),
        }));
        Ok(Some(TableScan {
            table: t,
            picks,
            slots: Vec::new(),
            lanes: Vec::new(),
            integral: Vec::new(),
            walk: Walk::new(&reads),
            reads,
            behind: Behind::default(),
            batch: 0,
            first: 0,
            chunk: 0,
            rows: 0,
            at: usize::MAX,
        }))
    }

    /// The next row, `None` after the last (or where the file changed: see
    /// [`TableScan::unchanged`]).
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Option<RowRef<'_>> {
        self.step().then_some(RowRef { scan: self })
    }

    /// Move to the next row: false after the last, or where the table's file lost a page (see
    /// `Table::lost`), looked at as each chunk is read: a reader is given no integer a lost
    /// page read as (a text is read as it is fetched: at most a chunk of them).
    #[inline]
    pub fn step(&mut self) -> bool {
        let at = self.at.wrapping_add(1);
        if at < self.rows {
            self.at = at;
            true
        } else {
            self.advance()
        }
    }

    /// The current row (after [`TableScan::step`] said there is one).
    #[inline]
    pub fn row(&self) -> RowRef<'_> {
        RowRef { scan: self }
    }

    /// After the last row: an error naming the table's file where it changed while it was read
    /// (what the scan gave may not be the file's), or where its rows could not be read.
    pub fn unchanged(&self) -> Result<()> {
        self.table.unchanged()
    }

    /// Move to the next chunk: past the batches read to their end, giving back what is behind
    /// the scan (see [`Table::step`]); false after the last row, or where the table lost a
    /// page, or where the next batch cannot be read (see [`TableScan::unchanged`]).
    #[inline(never)]
    pub(super) fn advance(&mut self) -> bool {
        let (from, mut i) = (self.batch, self.chunk + self.rows);
        let release = Some((&self.reads[..], &mut self.behind));
        self.table.step(&mut self.batch, &mut i, release);
        let Some(&n) = self.table.lengths.get(self.batch) else {
            (self.chunk, self.rows, self.at) = (0, 0, usize::MAX);
            return false;
        };
        if self.batch != from || self.slots.len() != self.picks.len() {
            self.first += self.table.lengths[from..self.batch].iter().sum::<usize>();
            if !self.resolve() {
                (self.chunk, self.rows, self.at) = (0, 0, usize::MAX);
                return false;
            }
        }
        let rows = i..n.min(i + CHUNK);
        if self.lanes.len() != self.slots.len() {
            let empty = Lane {
                some: [false; CHUNK],
                values: [0; CHUNK],
            };
            self.lanes = vec![empty; self.slots.len()];
        }
        for (c, lane) in self.slots.iter().zip(&mut self.lanes) {
            c.numbers(rows.clone(), lane);
        }
        // The chunk's integers are read: none of them is given where a page was lost.
        if self.table.lost() {
            (self.chunk, self.rows, self.at) = (0, 0, usize::MAX);
            return false;
        }
        (self.chunk, self.rows, self.at) = (i, rows.len(), 0);
        true
    }

    /// Resolve the picks against batch `batch`: false where it cannot be read.
    pub(super) fn resolve(&mut self) -> bool {
        let t = &self.table;
        let cols = match self.walk.to(t, self.batch) {
            Ok(Some(cols)) => cols,
            Ok(None) => return false,
            Err(e) => {
                t.failed(e);
                return false;
            }
        };
        let computed = |data| Column { nulls: None, data };
        self.slots = self
            .picks
            .iter()
            .map(|p| match p {
                Pick::Column(c) => cols[*c].clone(),
                // A key has no NULL (see `Table::rises_strictly`).
                Pick::Rowid => match t.key {
                    Some(k) => computed(cols[k].data.clone()),
                    None => computed(Data::Count(self.first as i64 + 1)),
                },
                Pick::Null => computed(Data::Null),
                Pick::Coalesce(cs) => computed(Data::Coalesce(
                    cs.iter().map(|&c| cols[c].clone()).collect(),
                )),
                Pick::Int(n) => computed(Data::Const(*n)),
            })
            .collect();
        self.integral = self.slots.iter().map(Column::integral).collect();
        true
    }
}

/// The table `table` of the export `dir`, loaded (or shared with the scans reading it).
fn shared(dir: &Path, table: &str) -> Result<(super::files::Place, Arc<Table>)> {
    let place = place(dir, table)?;
    let table = Table::shared(&place).map_err(|e| anyhow!("{place}: {e:#}"))?;
    Ok((place, table))
}

/// `cols` resolved to the columns of `t`: `None` where one needs SQL (an expression).
fn picks(t: &Table, cols: &[crate::column::Col]) -> Option<Vec<Pick>> {
    use crate::column::Col;
    let index = |n: &str| t.columns.iter().position(|(c, _)| c == n);
    cols.iter()
        .map(|c| {
            Some(match c {
                Col::Column(n) => index(n).map_or(Pick::Null, Pick::Column),
                Col::Rowid => Pick::Rowid,
                Col::Null => Pick::Null,
                Col::Int(n) => Pick::Int(*n),
                Col::Coalesce(ns) => Pick::Coalesce(ns.iter().filter_map(|n| index(n)).collect()),
                Col::Sql(_) => return None,
            })
        })
        .collect()
}

/// The rows of a table whose key holds a value, found without SQLite: by binary search on the
/// column the rowid is an alias of, or on a column the rows are sorted by (a lookup such as
/// `StringIds` by `id`, or a call stack's frames by `id`).
pub struct KeyScan {
    table: Arc<Table>,
    picks: Vec<Pick>,
    /// The column looked up: the rowid's column, or one the rows are sorted by.
    key: usize,
    /// Whether `key` is the rowid's column (at most one row a value).
    unique: bool,
}

impl KeyScan {
    /// The direct lookup of `cols` of `table` in the export `dir` by the integer column `key`:
    /// `None` where it needs SQL (an expression, or a key the rows are not sorted by).
    pub fn open(
        dir: &Path,
        table: &str,
        cols: &[crate::column::Col],
        key: &str,
    ) -> Result<Option<KeyScan>> {
        let (place, t) = shared(dir, table)?;
        // A Parquet table's rows are decoded as a reader reaches them: its lookups go through
        // SQL, whose virtual table keeps the columns they need at hand.
        if t.parquet.is_some() {
            return Ok(None);
        }
        let Some(key) = t.columns.iter().position(|(c, _)| c == key) else {
            return Ok(None);
        };
        let Some(picks) = picks(&t, cols) else {
            return Ok(None);
        };
        let unique = t.key == Some(key);
        if !unique
            && !t
                .sorted_by(&[key as c_int])
                .map_err(|e| anyhow!("{place}: {e:#}"))?
        {
            return Ok(None);
        }
        Ok(Some(KeyScan {
            table: t,
            picks,
            key,
            unique,
        }))
    }

    /// The table's rows (numbers from 0) whose key is `v`, in storage order; an error naming
    /// the table's file where it lost a page (a truncation: see `Table::lost`).
    pub fn rows(&self, v: i64) -> Result<std::ops::Range<usize>> {
        let (first, end) = if self.unique {
            let row = match self.dense(v) {
                Some(row) => Some(row),
                None => self.table.find(v)?,
            };
            row.map_or((0, 0), |r| (r, r + 1))
        } else {
            self.table.equal_range(self.key, v)?
        };
        if self.table.lost() {
            self.table.unchanged()?;
        }
        Ok(first..end)
    }

    /// The row of key `v` where the keys run without gaps from the first row's (nsys numbers
    /// its strings so): the row `v` is as many rows past the first as its value is past the
    /// first key, checked there (the key rises strictly: no other row holds it).
    fn dense(&self, v: i64) -> Option<usize> {
        let low = self.key_at(0)?;
        let row = usize::try_from(v.checked_sub(low)?).ok()?;
        (self.key_at(row) == Some(v)).then_some(row)
    }

    /// The key of row `row`, read from its batch (an Arrow table's batches are all mapped).
    fn key_at(&self, row: usize) -> Option<i64> {
        let (batch, at) = self.table.locate(row);
        self.table.batches.get(batch)?[self.key].int(at)
    }

    /// Row `row` of the table (one of [`KeyScan::rows`]).
    pub fn row(&self, row: usize) -> KeyRow<'_> {
        let (batch, at) = self.table.locate(row);
        KeyRow {
            scan: self,
            batch,
            at,
            row,
        }
    }
}

/// A row of a [`KeyScan`].
pub struct KeyRow<'s> {
    scan: &'s KeyScan,
    batch: usize,
    at: usize,
    row: usize,
}

impl crate::query::Fetch for KeyRow<'_> {
    fn fetch(&self, k: usize) -> ValueRef<'_> {
        let t = &self.scan.table;
        let Some(cols) = t.batches.get(self.batch) else {
            return ValueRef::Null;
        };
        match self.scan.picks.get(k) {
            Some(Pick::Column(c)) => cols[*c].value(self.at),
            Some(Pick::Rowid) => ValueRef::Integer(t.rowid(cols, self.at, self.row)),
            Some(Pick::Int(n)) => ValueRef::Integer(*n),
            Some(Pick::Coalesce(cs)) => cs
                .iter()
                .map(|&c| cols[c].value(self.at))
                .find(|v| *v != ValueRef::Null)
                .unwrap_or(ValueRef::Null),
            Some(Pick::Null) | None => ValueRef::Null,
        }
    }
}

/// The current row of a [`TableScan`].
pub struct RowRef<'s> {
    pub(super) scan: &'s TableScan,
}

impl crate::query::Fetch for RowRef<'_> {
    #[inline(always)]
    fn fetch(&self, k: usize) -> ValueRef<'_> {
        let s = self.scan;
        match s.integral.get(k) {
            Some(true) => s.lanes[k]
                .get(s.at)
                .map_or(ValueRef::Null, ValueRef::Integer),
            Some(false) => s.slots[k].value(s.chunk + s.at),
            None => ValueRef::Null,
        }
    }

    #[inline(always)]
    fn int(&self, k: usize) -> Option<i64> {
        let s = self.scan;
        s.lanes.get(k).and_then(|l| l.get(s.at))
    }
}
