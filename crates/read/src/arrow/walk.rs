//! A reader's walk over a table's batches in order ([`Walk`]), and a Parquet table's rows: the
//! one way the readers reach a table's rows, whichever file holds them. An Arrow stream's
//! batches are decoded in place when its table is loaded; a Parquet file's are decoded as a walk
//! reaches them, only the columns its reader reads (see [`crate::parquet`]), so that a reader
//! holds a batch of the table, not the table.

use super::check::sql_columns;
use super::column::{Column, Data, ascending};
use super::files::{Place, change, change_since, changed, stamp};
use super::load::{Behind, ParquetRows, RELEASE_BYTES, RELEASE_EVERY, Source, Table};
use crate::parquet::{Batches, RowGroups};
use anyhow::{Result, anyhow};
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

/// A column a walk does not read: NULL in every row.
pub(super) fn unread() -> Column {
    Column {
        nulls: None,
        data: Data::Null,
    }
}

/// A walk over a table's batches, in order.
pub(super) struct Walk {
    /// The next batch.
    next: usize,
    /// The columns decoded from a Parquet file (rising).
    columns: Vec<usize>,
    /// The walk's reading of a Parquet file, from its first batch on.
    batches: Option<Batches>,
}

impl Walk {
    /// A walk reading the columns marked in `cols` (see [`Table::reading`]).
    pub(super) fn new(cols: &[Cell<u8>]) -> Walk {
        Walk::from_batch(cols, 0)
    }

    /// [`Walk::new`] from batch `b` on, the batches before it not read.
    pub(super) fn from_batch(cols: &[Cell<u8>], b: usize) -> Walk {
        Walk {
            next: b,
            columns: (0..cols.len()).filter(|&c| cols[c].get() != 0).collect(),
            batches: None,
        }
    }

    /// The columns of batch `b` (at or after the walk's next), those the walk does not read
    /// NULL; `None` past the last. Where the file changed, the change is the error; the caller
    /// names the table (see [`Table::failed`]).
    pub(super) fn to(&mut self, table: &Table, b: usize) -> Result<Option<Vec<Column>>> {
        loop {
            let batch = self.next(table)?;
            if self.next > b || batch.is_none() {
                return Ok(batch);
            }
        }
    }

    /// The next batch's columns (see [`Walk::to`]).
    pub(super) fn next(&mut self, table: &Table) -> Result<Option<Vec<Column>>> {
        let b = self.next;
        let Some(&rows) = table.lengths.get(b) else {
            return Ok(None);
        };
        let batch = match &table.parquet {
            None => table.batches[b].clone(),
            Some(p) => self.read(table, p, rows).map_err(|e| {
                match change_since(&table.source.place.file, table.source.stamp) {
                    Some(how) => changed(how),
                    None => e,
                }
            })?,
        };
        self.next += 1;
        Ok(Some(batch))
    }

    /// The next batch of a Parquet table, of `rows` rows.
    fn read(&mut self, table: &Table, p: &ParquetRows, rows: usize) -> Result<Vec<Column>> {
        let mut cols = vec![unread(); table.columns.len()];
        if self.columns.is_empty() {
            return Ok(cols);
        }
        if self.batches.is_none() {
            let source = &table.source;
            let file =
                std::fs::File::open(&source.place.file).map_err(|e| anyhow!("cannot read: {e}"))?;
            let now = stamp(&file.metadata().map_err(|e| anyhow!("cannot read: {e}"))?);
            if let Some(how) = change(source.stamp, now) {
                return Err(changed(how));
            }
            let columns = self.columns.clone();
            self.batches = Some(Batches::from_batch(file, columns, &p.groups, self.next));
        }
        let reading = self.batches.as_mut().expect("opened above");
        let batch = reading
            .next(&p.groups)?
            .filter(|b| b.num_rows() == rows && b.num_columns() == self.columns.len())
            .ok_or_else(|| {
                crate::parquet::damaged(&"the row groups hold other rows than the footer says")
            })?;
        for (&c, array) in self.columns.iter().zip(batch.columns()) {
            cols[c] = Column::new(array.as_ref())
                .filter(|_| Column::sql_type(array.data_type()) == Some(table.columns[c].1))
                .ok_or_else(|| crate::parquet::damaged(&"a column of another type"))?;
        }
        Ok(cols)
    }
}

impl Drop for Walk {
    /// A walk over a Parquet table freed its batches and footers, many blocks the allocator
    /// would keep for the rest of the conversion: they go back to the system.
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        if self.batches.take().is_some() {
            // SAFETY: malloc_trim only returns free memory of glibc's allocator to the system.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

impl Table {
    /// Load the Parquet table at `place`: its footer read (its layout and schema), and its key
    /// found (see [`Table::key`]); its rows are read by each reader's [`Walk`].
    pub(super) fn load_parquet(place: &Place) -> Result<Table> {
        let file = std::fs::File::open(&place.file).map_err(|e| anyhow!("cannot read: {e}"))?;
        let stamp = stamp(&file.metadata().map_err(|e| anyhow!("cannot read: {e}"))?);
        let (schema, groups) = RowGroups::open(&file)?;
        let lengths = groups.batch_lengths();
        let mut table = Table {
            columns: sql_columns(&schema)?,
            batches: Vec::new(),
            rows: lengths.iter().sum(),
            lengths,
            key: None,
            last_rowid: None,
            sorted: Mutex::default(),
            mapped: 0..0,
            source: Source {
                place: place.clone(),
                stamp,
                mapping: None,
            },
            parquet: Some(ParquetRows {
                groups,
                whole: (0..schema.fields().len())
                    .map(|_| OnceLock::new())
                    .collect(),
            }),
            failure: Mutex::default(),
        };
        table.find_key()?;
        match change_since(&place.file, stamp) {
            Some(how) => Err(changed(how)),
            None => Ok(table),
        }
    }

    /// Column `col` of every batch at hand, for a reader of rows at random (a rowid's row, the
    /// rows of a value of a sorted column): an Arrow stream's as loaded, a Parquet table's
    /// decoded whole, once, only the columns such readers read (a key searched, the columns
    /// of the rows found: `StringIds` and its like).
    pub(super) fn at_hand(&self, col: usize) -> Result<Vec<&Column>> {
        let Some(p) = &self.parquet else {
            return Ok(self.batches.iter().map(|b| &b[col]).collect());
        };
        if p.whole[col].get().is_none() {
            let mask = self.reading([col as c_int]);
            let mut walk = Walk::new(&mask);
            let mut all = Vec::with_capacity(self.lengths.len());
            while let Some(mut batch) = walk.next(self)? {
                all.push(batch.swap_remove(col));
            }
            let _ = p.whole[col].set(all);
        }
        Ok(p.whole[col].get().expect("set above").iter().collect())
    }

    /// Keep `e`, what stopped a reader of the table's rows (see [`Walk::to`]), as the table's
    /// error naming its file, for [`Table::unchanged`] to tell once the reader has stopped.
    pub(super) fn failed(&self, e: anyhow::Error) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.get_or_insert_with(|| format!("{}: {e:#}", self.source.place));
    }
}

/// The readers of a whole column in order: a key's, a sort order's.
impl Table {
    /// Whether column `col`'s values rise strictly (no NULL among them), with the last value:
    /// `None` where they do not.
    pub(super) fn rising_to(&self, col: usize) -> Result<Option<Option<i64>>> {
        let mask = self.reading([col as c_int]);
        let mut behind = Behind::default();
        let mut walk = Walk::new(&mask);
        let mut last = None;
        let rising = 'rows: {
            for (b, n) in self.lengths.iter().enumerate() {
                let Some(batch) = walk.next(self)? else {
                    break;
                };
                let c = &batch[col];
                if let (Data::I64(v), None) = (&c.data, &c.nulls) {
                    for (k, part) in v.chunks(RELEASE_EVERY).enumerate() {
                        if last.zip(part.first()).is_some_and(|(l, f)| l >= *f)
                            || part.windows(2).any(|w| w[0] >= w[1])
                        {
                            break 'rows false;
                        }
                        last = part.last().copied();
                        self.give_back(
                            b,
                            (k + 1) * RELEASE_EVERY,
                            &mask,
                            &mut behind,
                            RELEASE_BYTES,
                        );
                    }
                } else {
                    for i in 0..*n {
                        if i.is_multiple_of(RELEASE_EVERY) {
                            self.give_back(b, i, &mask, &mut behind, RELEASE_BYTES);
                        }
                        let Some(v) = c.int(i) else {
                            break 'rows false;
                        };
                        if last.is_some_and(|l| v <= l) {
                            break 'rows false;
                        }
                        last = Some(v);
                    }
                }
                self.give_back(b, *n, &mask, &mut behind, 0);
            }
            true
        };
        self.give_back_stopped(&mask, &mut behind);
        Ok(rising.then_some(last))
    }

    /// Whether the rows come in ascending order of these columns (SQLite's order: NULL first;
    /// integer columns only).
    pub(super) fn sorted_by(&self, cols: &[c_int]) -> Result<bool> {
        let mut memo = self.sorted.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&s) = memo.get(cols) {
            return Ok(s);
        }
        let integer = |c: c_int| {
            c < 0
                || self
                    .columns
                    .get(c as usize)
                    .is_some_and(|t| t.1 == "INTEGER")
        };
        let sorted = cols.iter().all(|&c| integer(c)) && self.rows_sorted(cols)?;
        memo.insert(cols.to_vec(), sorted);
        Ok(sorted)
    }

    pub(super) fn rows_sorted(&self, cols: &[c_int]) -> Result<bool> {
        // Read a chunk of rows' keys at a time, column by column (each a typed loop), and
        // compare each row's key with the one before (NULL sorts first): as plain integers
        // where no key column of the batch has a NULL (nsys' tables), else as options.
        let mask = self.reading(cols.iter().copied());
        let mut behind = Behind::default();
        let mut walk = Walk::new(&mask);
        let mut plain: Vec<Vec<i64>> = vec![Vec::with_capacity(RELEASE_EVERY); cols.len()];
        let mut keys: Vec<Vec<Option<i64>>> = vec![Vec::with_capacity(RELEASE_EVERY); cols.len()];
        // The key of the last row compared (empty before the first).
        let mut last: Vec<Option<i64>> = Vec::with_capacity(cols.len());
        let mut row = 0;
        let sorted = 'rows: {
            for (b, &n) in self.lengths.iter().enumerate() {
                let Some(batch) = walk.next(self)? else {
                    break;
                };
                let column = |c: c_int| match (c, self.key) {
                    (c, _) if c >= 0 => Some(&batch[c as usize]),
                    (_, Some(key)) => Some(&batch[key]),
                    // Row numbers.
                    (_, None) => None,
                };
                for start in (0..n).step_by(RELEASE_EVERY) {
                    self.give_back(b, start, &mask, &mut behind, RELEASE_BYTES);
                    let rows = start..(start + RELEASE_EVERY).min(n);
                    let numbers = || (row + rows.start..row + rows.end).map(|r| r as i64 + 1);
                    let is_plain = cols.iter().zip(&mut plain).all(|(&c, out)| {
                        out.clear();
                        match column(c) {
                            Some(col) => col.plain_ints(rows.clone(), out),
                            None => {
                                out.extend(numbers());
                                true
                            }
                        }
                    });
                    let first: Vec<Option<i64>>;
                    if is_plain {
                        first = plain.iter().map(|k| k.first().copied()).collect();
                        if !ascending(&plain) {
                            break 'rows false;
                        }
                    } else {
                        for (&c, out) in cols.iter().zip(&mut keys) {
                            out.clear();
                            match column(c) {
                                Some(col) => col.ints(rows.clone(), out),
                                None => out.extend(numbers().map(Some)),
                            }
                        }
                        first = keys.iter().map(|k| k.first().copied().flatten()).collect();
                        for j in 1..keys.first().map_or(0, Vec::len) {
                            let before = keys.iter().map(|k| k[j - 1]);
                            if before.gt(keys.iter().map(|k| k[j])) {
                                break 'rows false;
                            }
                        }
                    }
                    // The chunk's first row against the last row before it.
                    if !last.is_empty() && last > first {
                        break 'rows false;
                    }
                    last.clear();
                    if is_plain {
                        last.extend(plain.iter().map(|k| k.last().copied()));
                    } else {
                        last.extend(keys.iter().map(|k| k.last().copied().flatten()));
                    }
                }
                row += n;
                self.give_back(b, n, &mask, &mut behind, 0);
            }
            true
        };
        self.give_back_stopped(&mask, &mut behind);
        Ok(sorted)
    }
}
