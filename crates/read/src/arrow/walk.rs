//! A reader's walk over a table's batches in order ([`Walk`]), and a Parquet table's rows: the
//! one way the readers reach a table's rows, whichever file holds them. An Arrow stream's
//! batches are decoded in place when its table is loaded; a Parquet file's are decoded as a walk
//! reaches them, only the columns its reader reads (see [`crate::parquet`]), so that a reader
//! holds a batch of the table, not the table.

use super::check::sql_columns;
use super::column::{Column, Data};
use super::files::{Place, change, change_since, changed, stamp};
use super::load::{Source, Table};
use crate::parquet::{Batches, RowGroups};
use anyhow::{Result, anyhow};
use std::cell::Cell;
use std::sync::{Mutex, OnceLock};

/// A Parquet table's rows (see [`Table::parquet`]).
pub(super) struct ParquetRows {
    pub(super) groups: RowGroups,
    /// Each column of every batch, decoded once a reader needs its rows at random (see
    /// [`Table::at_hand`]).
    pub(super) whole: Vec<OnceLock<Vec<Column>>>,
}

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
        Walk {
            next: 0,
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
            self.batches = Some(Batches::new(file, self.columns.clone()));
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
            let mask = self.reading([col as std::ffi::c_int]);
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
