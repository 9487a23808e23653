//! nsys' Arrow export (`nsys export --type arrowdir`: one Arrow IPC stream file a table, with the
//! SQLite export's tables and columns, typed; or `--type arrow`: the same streams one after
//! another in one `.arrows` file) read as SQLite virtual tables: every reader and workflow reads
//! it with the very SQL that reads an SQLite export, so both give the same rows.
//!
//! Each table's stream is memory-mapped and decoded in place (Arrow's buffers point into the
//! mapping; nothing is copied), and a virtual table's cursor hands SQLite one value at a time
//! from the typed columns. What SQLite asks of a table that a plain scan cannot answer cheaply
//! is answered here: `rowid = ?` (and `id = ?` where `id` is the key, as in `StringIds`) by a
//! binary search, and `ORDER BY` on columns the rows are already sorted by without a sort.

mod check;
mod column;
pub(crate) mod files;
pub(crate) mod load;
pub(crate) mod scan;
mod vtab;
mod walk;

use anyhow::{Result, anyhow};
use files::places;
use load::{OPENED, Opened, Table, place};
use rusqlite::Connection;
use rusqlite::vtab::Module;
use std::path::Path;
use std::sync::Arc;
use vtab::ArrowTable;

/// What nsys appends to a report's name for its Arrow export's directory.
pub const NSYS_DIR_SUFFIX: &str = "_arwdir";

/// The largest rowid of `table` in the Arrow export `export` (its last key, or its row count
/// where rowids are row numbers), without reading its rows; `None` for an empty table.
pub fn max_rowid(export: &Path, table: &str) -> Result<Option<i64>> {
    Ok(Table::shared(&place(export, table)?)?.last_rowid)
}

/// Every table of an Arrow export, open: each one's schema read and its file stamped at once,
/// the table itself loaded (mapped, decoded, checked) on a reader's first use and held while
/// this is: the connections and scans of a conversion share it (`Table::shared`). A table read
/// is loaded only from the file as it was opened; one changed since, read or not, is an error
/// of [`Tables::unchanged`].
pub struct Tables(Arc<Vec<Opened>>);

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|o| &o.place.table))
            .finish()
    }
}

impl Tables {
    /// Open every table of the export `export` (a directory, or an `.arrows` file). Errors
    /// name the file (and the table, in an `.arrows` file) and the problem in one line.
    pub fn load(export: &Path) -> Result<Tables> {
        let mut tables = Vec::new();
        for place in places(export)? {
            let shown = place.to_string();
            tables.push(Opened::open(place).map_err(|e| anyhow!("{shown}: {e:#}"))?);
        }
        let tables = Arc::new(tables);
        let mut open = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|o| o.strong_count() > 0);
        open.push(Arc::downgrade(&tables));
        Ok(Tables(tables))
    }

    /// An error naming the first table whose file changed since it was opened or loaded (see
    /// `Table::change`): what was read of it may not be the file's.
    pub fn unchanged(&self) -> Result<()> {
        self.0.iter().try_for_each(Opened::unchanged)
    }

    /// Each table's name and column names.
    pub fn columns(&self) -> impl Iterator<Item = (&str, impl Iterator<Item = &str>)> {
        self.0.iter().map(|o| {
            (
                o.place.table.as_str(),
                o.columns.iter().map(|(c, _)| c.as_str()),
            )
        })
    }
}

/// Make every table of the Arrow export `export` readable by its name on `conn`, in any of its
/// databases: each is an eponymous virtual table, declared by SQLite on a statement's first
/// use of it. (A conversion opens a connection a reader; most read a few tables, and most of
/// those with direct scans that need no SQL: declaring every table on every connection would
/// cost more than the reading of many of them.)
pub fn register(conn: &Connection, export: &Path) -> Result<()> {
    const MODULE: Module<ArrowTable> = Module::eponymous_only_module();
    for place in places(export)? {
        conn.create_module(place.table.clone().as_str(), &MODULE, Some(place))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow::files::Place;
    use crate::arrow::scan::TableScan;
    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use rusqlite::types::ValueRef;

    /// A stream of one batch: `name` (text) and `n` (integers, one NULL).
    fn stream() -> Vec<u8> {
        let batch = RecordBatch::try_from_iter([
            (
                "name",
                Arc::new(StringArray::from(vec!["alpha", "beta", "gamma"])) as _,
            ),
            (
                "n",
                Arc::new(Int64Array::from(vec![Some(7), None, Some(9)])) as _,
            ),
        ])
        .unwrap();
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    fn load(bytes: &[u8]) -> Result<Table> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("T.arrow");
        std::fs::write(&path, bytes).unwrap();
        Table::load(&Place {
            file: path,
            bytes: None,
            table: "T".into(),
            walked: None,
        })
    }

    /// `bytes` with the first run of `from` replaced by `to`.
    fn patched(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .expect("pattern in the stream");
        let mut out = bytes.to_vec();
        out[at..at + to.len()].copy_from_slice(to);
        out
    }

    fn le(words: &[i64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn reads_what_was_written() {
        let t = load(&stream()).unwrap();
        assert_eq!(t.rows, 3);
        let names: Vec<_> = (0..3).map(|i| t.batches[0][0].value(i)).collect();
        assert_eq!(
            names,
            [b"alpha" as &[u8], b"beta", b"gamma"].map(ValueRef::Text)
        );
        let n: Vec<_> = (0..3).map(|i| t.batches[0][1].int(i)).collect();
        assert_eq!(n, [Some(7), None, Some(9)]);
    }

    /// What the decoder's own checks caught, now checked after decoding: one error, no panic.
    #[test]
    fn damaged_values_are_errors() {
        let good = stream();
        let offsets: Vec<u8> = [0i32, 5, 9, 14]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let past_end: Vec<u8> = [0i32, 5, 9, 99]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let falling: Vec<u8> = [0i32, 9, 5, 14]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let cases = [
            ("not UTF-8", patched(&good, b"beta", b"\xffeta")),
            (
                "an offset past the bytes",
                patched(&good, &offsets, &past_end),
            ),
            ("falling offsets", patched(&good, &offsets, &falling)),
            // The field node of `n`: 3 rows, 1 NULL (said to be 2, or 0 of 3 rows in a
            // 1-byte bitmap said to be 300 rows).
            (
                "a wrong null count",
                patched(&good, &le(&[3, 1]), &le(&[3, 2])),
            ),
            (
                "rows past the buffers",
                patched(&good, &le(&[3, 1]), &le(&[300, 1])),
            ),
        ];
        for (what, bytes) in cases {
            let e = load(&bytes)
                .err()
                .unwrap_or_else(|| panic!("{what}: loaded"));
            assert!(e.to_string().contains("damaged"), "{what}: {e}");
        }
    }

    /// A direct scan reads what the columns hold, across batches of any size, chunk ends and
    /// NULLs, as integers and as values alike.
    #[test]
    fn a_scan_reads_every_row_as_the_columns_hold_it() {
        use super::super::column::Col;
        use super::super::query::Fetch;
        use arrow_array::{BooleanArray, Float64Array, Int32Array, UInt32Array};
        let sizes = [300usize, 0, 5000, 1];
        let mut out = Vec::new();
        let mut w = None;
        let mut total = 0;
        let mut expected: Vec<[ValueRef<'static>; 6]> = Vec::new();
        for n in sizes {
            let a: Vec<Option<i64>> = (0..n)
                .map(|i| (i % 7 != 3).then_some((total + i) as i64 * 3 - 50))
                .collect();
            let b: Vec<u32> = (0..n).map(|i| u32::MAX - i as u32).collect();
            let c: Vec<Option<bool>> = (0..n).map(|i| (i % 5 != 0).then_some(i % 3 == 0)).collect();
            let d: Vec<f64> = (0..n).map(|i| i as f64 * -1.75).collect();
            let e: Vec<Option<&str>> = (0..n).map(|i| (i % 2 == 0).then_some("x")).collect();
            let f: Vec<Option<i32>> = (0..n)
                .map(|i| (i % 4 == 0).then_some(-(i as i32)))
                .collect();
            for i in 0..n {
                expected.push([
                    a[i].map_or(ValueRef::Null, ValueRef::Integer),
                    ValueRef::Integer(b[i].into()),
                    c[i].map_or(ValueRef::Null, |v| ValueRef::Integer(v.into())),
                    ValueRef::Real(d[i]),
                    e[i].map_or(ValueRef::Null, |_| ValueRef::Text(b"x")),
                    a[i].or(f[i].map(i64::from))
                        .map_or(ValueRef::Null, ValueRef::Integer),
                ]);
            }
            total += n;
            let batch = RecordBatch::try_from_iter([
                ("a", Arc::new(Int64Array::from(a)) as _),
                ("b", Arc::new(UInt32Array::from(b)) as _),
                ("c", Arc::new(BooleanArray::from(c)) as _),
                ("d", Arc::new(Float64Array::from(d)) as _),
                ("e", Arc::new(StringArray::from(e)) as _),
                ("f", Arc::new(Int32Array::from(f)) as _),
            ])
            .unwrap();
            let w = w.get_or_insert_with(|| {
                arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &batch.schema()).unwrap()
            });
            w.write(&batch).unwrap();
        }
        out.extend(w.unwrap().into_inner().unwrap());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("T.arrow"), &out).unwrap();
        let col = |n: &str| Col::Column(n.to_string());
        let cols = [
            col("a"),
            col("b"),
            col("c"),
            col("d"),
            col("e"),
            Col::Coalesce(vec!["a".into(), "f".into()]),
            Col::Rowid,
            Col::Int(5),
            Col::Null,
            col("missing"),
        ];
        let mut scan = TableScan::open(dir.path(), "T", &cols, &[])
            .unwrap()
            .unwrap();
        let mut row = 0;
        while let Some(r) = scan.next() {
            let want = &expected[row];
            for (k, &want) in want.iter().enumerate() {
                assert_eq!(r.fetch(k), want, "row {row}, column {k}");
                let int = match want {
                    ValueRef::Integer(v) => Some(v),
                    ValueRef::Real(v) => Some(v as i64),
                    _ => None,
                };
                assert_eq!(r.int(k), int, "row {row}, column {k}");
            }
            assert_eq!(r.fetch(6), ValueRef::Integer(row as i64 + 1));
            assert_eq!(r.int(6), Some(row as i64 + 1));
            assert_eq!((r.fetch(7), r.int(7)), (ValueRef::Integer(5), Some(5)));
            for k in [8, 9, 10] {
                assert_eq!((r.fetch(k), r.int(k)), (ValueRef::Null, None));
            }
            row += 1;
        }
        assert_eq!(row, total);
        assert!(scan.next().is_none());
    }

    /// Opening an export reads its tables' schemas alone; a table is loaded on first use, and
    /// only from the file its opening stamped: one replaced or removed in between is told as
    /// changed, by its first use and by the check at the end of a run alike.
    #[test]
    fn tables_load_on_first_use_from_the_files_opened() {
        let dir = tempfile::tempdir().unwrap();
        for t in ["A", "B", "C"] {
            std::fs::write(dir.path().join(format!("{t}.arrow")), stream()).unwrap();
        }
        let tables = Tables::load(dir.path()).unwrap();
        let columns: Vec<(&str, Vec<&str>)> =
            tables.columns().map(|(t, c)| (t, c.collect())).collect();
        assert_eq!(
            columns,
            ["A", "B", "C"].map(|t| (t, vec!["name", "n"])).to_vec()
        );
        let is_loaded = |t: &str| {
            tables
                .0
                .iter()
                .any(|o| o.place.table == t && o.table.get().is_some())
        };
        assert!(!is_loaded("A") && !is_loaded("B"));
        let a = Table::shared(&place(dir.path(), "A").unwrap()).unwrap();
        assert_eq!(a.rows, 3);
        assert!(is_loaded("A") && !is_loaded("B"));
        tables.unchanged().unwrap();

        // B replaced (a new file renamed over it) before anything read it.
        let new = dir.path().join("B.new");
        std::fs::write(&new, stream()).unwrap();
        std::fs::rename(&new, dir.path().join("B.arrow")).unwrap();
        let e = Table::shared(&place(dir.path(), "B").unwrap())
            .err()
            .unwrap();
        assert_eq!(
            e.to_string().split(':').next(),
            Some("changed while it was read"),
            "{e}"
        );
        assert!(e.to_string().contains("replaced"), "{e}");
        let e = tables.unchanged().err().unwrap().to_string();
        assert!(
            e.starts_with("B.arrow: changed while it was read: replaced"),
            "{e}"
        );

        // C removed before anything read it.
        std::fs::remove_file(dir.path().join("C.arrow")).unwrap();
        let e = Table::shared(&place(dir.path(), "C").unwrap())
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("changed while it was read: removed"),
            "{e}"
        );
    }

    /// Cut anywhere, the stream fails to load, or loads whole where it is cut between messages
    /// (after the schema: an empty table).
    #[test]
    fn cut_streams_are_errors() {
        let good = stream();
        for len in 0..good.len() {
            if let Ok(t) = load(&good[..len]) {
                assert!(t.rows == 0 || t.rows == 3, "cut at {len}: {} rows", t.rows);
            }
        }
    }
}
